"""The debug group, as the README types it: ``+debug=fast`` for every shipped task and a
scaffolded task of the user's own, ``+debug=overfit``, ``+debug=anomaly`` and
``+debug=profile``, plus the Python ways (``detect_anomaly``, ``StepProfiler``).

Times are recorded (``record_property``), never asserted: the machine is shared.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from beyondfit import BeyondfitError, Engine
from beyondfit.cli import debug
from beyondfit.cli.configs import CONF_DIR, available
from beyondfit.core.anomaly import detect_anomaly
from beyondfit.observers.profiler import PHASES, StepProfiler

from kit import cli, mse, sum_data


def timed_cli(*args: str, cwd: Path):
    """``cli(...)`` and the wall and CPU seconds of the child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = cli(*args, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, wall, cpu


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def check_fast_run(done, run_dir: Path) -> None:
    """Two steps, an evaluation in each part, a checkpoint at step 1, a resume from it."""
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "resumed from" in out and "step-00000001.pt" in out
    assert "debug: resumed from the step-1 checkpoint and trained to step 2" in out
    logged = rows(run_dir)
    assert max(r.get("step", 0) for r in logged) == 2
    assert sum(1 for r in logged if r.get("kind") == "val") >= 1
    assert (run_dir / "checkpoints" / "step-00000001.pt").is_file()
    assert not (run_dir / "metrics.csv").exists()  # the logger group is off
    assert not (run_dir / "curves.png").exists()  # and the plots


@pytest.mark.runs("conf/debug/fast.yaml")
@pytest.mark.e2e
@pytest.mark.parametrize("task", available("task"))
def test_debug_fast_runs_every_shipped_task_end_to_end(tmp_path, task, record_property):
    done, wall, cpu = timed_cli(f"+task={task}", "+debug=fast", "hydra.run.dir=run", cwd=tmp_path)
    record_property("wall_s", round(wall, 2))
    record_property("cpu_s", round(cpu, 2))
    check_fast_run(done, tmp_path / "run")


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["supervised", "rl"])
def test_debug_fast_runs_a_scaffolded_task_of_ones_own(tmp_path, kind, record_property):
    made = cli("mine", "--kind", kind, cwd=tmp_path, module="beyondfit.new")
    assert made.returncode == 0, made.stderr
    done, wall, cpu = timed_cli("--config-dir", "conf", "+task=mine", "+debug=fast",
                                "hydra.run.dir=run", cwd=tmp_path)
    record_property("wall_s", round(wall, 2))
    record_property("cpu_s", round(cpu, 2))
    check_fast_run(done, tmp_path / "run")
    if kind == "rl":  # debug.episodes: one greedy episode per evaluation, one to confirm
        assert "over 1 fresh episode (training-time evaluation" in done.stdout, done.stdout
        result = json.loads((tmp_path / "run" / "result.json").read_text())
        assert "1 fresh greedy episode, seed " in result["values_from"], result


def test_debug_episodes_caps_an_rl_tasks_counts_and_leaves_other_tasks_alone():
    rl = OmegaConf.create({"eval_episodes": 20, "confirm_episodes": 0, "hidden": [64]})
    debug.cap_episodes(rl, 1)
    assert (rl.eval_episodes, rl.confirm_episodes) == (1, 0)  # 0 (no confirmation) stays 0
    supervised = OmegaConf.create({"hidden": [64], "epochs": 3})
    debug.cap_episodes(supervised, 1)
    assert supervised == {"hidden": [64], "epochs": 3}
    untouched = OmegaConf.create({"eval_episodes": 20})
    debug.cap_episodes(untouched, None)
    assert untouched.eval_episodes == 20


@pytest.mark.e2e
def test_the_debug_group_lists_its_presets():
    assert available("debug") == ["anomaly", "fast", "overfit", "profile"]
    assert (CONF_DIR / "debug" / "fast.yaml").read_text().startswith("# @package _global_")


@pytest.mark.runs("conf/debug/overfit.yaml")
@pytest.mark.e2e
@pytest.mark.parametrize("task", ["regression", "autoencoder"])
def test_debug_overfit_drives_the_loss_below_1e_3(tmp_path, task):
    done = cli(f"+task={task}", "+debug=overfit", "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "debug: overfitting 1 fixed training batch(es)" in done.stdout + done.stderr
    epochs = [r for r in rows(tmp_path / "run") if r.get("kind") == "epoch"]
    assert len(epochs) == 400  # early stopping is off
    assert epochs[-1]["loss"] < 1e-3, epochs[-1]  # measured: regression ~1e-9, AE ~5e-4
    assert epochs[-1]["loss"] < epochs[0]["loss"] / 100


USER_TASK = '''
import torch
from torch import nn

from beyondfit import Task


def build(seed: int = 0, shift: float = 0.0):
    torch.manual_seed(seed)
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)

    def loss_fn(model, batch):
        a, b = batch
        err = ((model(a) - b) ** 2).mean()
        return torch.log(err - shift)  # shift past the error: the log of a negative

    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    return Task(model=nn.Linear(4, 1), loss_fn=loss_fn, train_data=batches, val_data=batches)
'''


@pytest.mark.runs("conf/debug/anomaly.yaml")
@pytest.mark.e2e
def test_debug_anomaly_names_the_operation_and_the_line_of_a_planted_nan(tmp_path):
    (tmp_path / "nanmod.py").write_text(USER_TASK)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "planted.yaml").write_text(
        "# @package _global_\ntask:\n  _target_: nanmod.build\n  shift: 1000.0\n"
    )
    plain = cli("--config-dir", "conf", "+task=planted", "hydra.run.dir=plain", cwd=tmp_path)
    assert plain.returncode == 2 and "non-finite loss" in plain.stderr  # off by default
    done = cli("--config-dir", "conf", "+task=planted", "+debug=anomaly", "hydra.run.dir=run",
               cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("beyondfit: error: NaN first made by torch.log at ")
    lineno = USER_TASK.splitlines().index(
        "        return torch.log(err - shift)  # shift past the error: the log of a negative") + 1
    assert f"nanmod.py:{lineno} in loss_fn: return torch.log(err - shift)" in line


@pytest.mark.e2e
def test_detect_anomaly_names_the_backward_operation_of_a_nan_gradient():
    def loss_fn(model, batch):
        x, _ = batch
        flat = model(x) * 0  # finite forward; sqrt's infinite slope at 0, times 0, is NaN
        return flat.sqrt().sum()

    model = nn.Linear(8, 1)
    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), 0.1), device="cpu")
    x, y = sum_data(32)
    with pytest.raises(BeyondfitError) as caught, detect_anomaly():
        engine.fit([(x, y)], verbose=False)
    message = str(caught.value)
    assert message.startswith("NaN first made in the backward pass by MulBackward0")
    assert f"{Path(__file__).name}:" in message and "flat = model(x) * 0" in message
    # And off: a plain fit of a healthy closure is untouched by a finished context.
    healthy = Engine(nn.Linear(8, 1), mse, torch.optim.SGD, device="cpu")
    assert healthy.fit([(x, y)], verbose=False)


@pytest.mark.runs("conf/debug/profile.yaml")
@pytest.mark.e2e
def test_debug_profile_writes_a_trace_and_prints_the_table(tmp_path):
    done = cli("+task=regression", "+debug=profile", "hydra.run.dir=run", cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    (trace,) = (tmp_path / "run" / "profile").glob("*.pt.trace.json")
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert "beyondfit.train_step" in names and any(n.startswith("Optimizer.step") for n in names)
    assert "profile: 5 steps, " in out and f"trace {trace}" in out
    for phase in PHASES:
        assert f"  {phase}  " in out


@pytest.mark.e2e
def test_step_profiler_from_python_accounts_for_each_phase(tmp_path):
    x, y = sum_data(256)
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 256, 16)]
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    profiler = StepProfiler(tmp_path / "prof", steps=4)
    engine = Engine(model, mse, torch.optim.Adam(model.parameters(), 1e-3), device="cpu",
                    callbacks=[profiler])
    engine.fit(batches, val_data=batches[:2], eval_every=3, verbose=False)
    assert profiler.trace is not None and profiler.trace.is_file()
    assert list(profiler.table) == list(PHASES)
    assert profiler.table["closure and backward"] > 0 and profiler.table["optimizer"] > 0
    assert profiler.table["evaluation"] > 0  # step 3 of the recorded 2-5 evaluates
    # Nothing stays wrapped after the window: the engine's own methods again.
    assert "train_step" not in vars(engine) and "evaluate" not in vars(engine)
    assert all(not u.optimizer._optimizer_step_pre_hooks for u in engine.updates)


@pytest.mark.e2e
def test_a_profile_window_longer_than_the_run_reports_what_it_saw(tmp_path, caplog):
    x, y = sum_data(64)
    profiler = StepProfiler(tmp_path / "prof", steps=50)
    engine = Engine(nn.Linear(8, 1), mse, torch.optim.SGD, device="cpu", callbacks=[profiler])
    with caplog.at_level("INFO", logger="beyondfit"):
        engine.fit([(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)], verbose=False)
    assert "profile: 3 steps" in caplog.text  # 4 steps, 1 of them the warm-up
