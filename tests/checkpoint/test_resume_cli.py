"""Process-level: kill -9 / Ctrl-C a command-line training run at random points, resume it
each time, and end bitwise equal to an uninterrupted run, with every metrics row exactly once.

Each step of the child process is slowed by a few milliseconds (a wrapper patches
``Engine.train_step`` with a sleep; the numbers are untouched) so that kills land inside training
rather than in the seconds of start-up. The points are random: the seed is printed on
failure (set BEYONDFIT_TEST_SEED to replay one).
"""

from __future__ import annotations

import random
import shlex
import signal
from pathlib import Path

import pytest
import torch

from beyondfit.checkpoint import step_checkpoints
from beyondfit.core.state.serialization import safe_load

from kit import QUIET, SEED, cli, launch, rows, stop_at

TASKS = {
    # task: (overrides, optimizer steps in the whole run)
    "regression": (["+task=regression", "train.epochs=4", "checkpoint.every=3"], 48),
    "autoencoder": (["+task=autoencoder", "train.epochs=2", "checkpoint.every=4",
                     "task.hidden=[32]"], 46),
}
def reference_run(task: str, tmp_path: Path) -> Path:
    """The uninterrupted run, in this process (same code path as the CLI's)."""
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR, run

    ref_dir = tmp_path / "reference"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*TASKS[task][0], *QUIET])
    run(cfg, ref_dir)
    return ref_dir


def assert_same_end(run_dir: Path, ref_dir: Path, steps: int, context: str) -> None:
    final = f"step-{steps:08d}.pt"
    got = safe_load(run_dir / "checkpoints" / final)
    expected = safe_load(ref_dir / "checkpoints" / final)
    for key, value in expected["model"].items():
        assert torch.equal(got["model"][key], value), f"{key} differs ({context})"
    assert got["counters"] == expected["counters"], context
    got_rows, expected_rows = rows(run_dir, timeless=True), rows(ref_dir, timeless=True)
    assert got_rows == expected_rows, context
    train_steps = [r["step"] for r in got_rows if r["kind"] == "train"]
    assert train_steps == list(range(1, steps + 1)), context  # no gap, no duplicate
    epochs = [r["epoch"] for r in got_rows if r["kind"] == "epoch"]
    assert epochs == list(range(1, len(epochs) + 1)), context


def interrupted_runs(task: str, tmp_path: Path, signals: list[int]) -> Path:
    """Start the run, stop it with each of ``signals`` at random steps (resuming in between),
    then let the last resume finish. Returns the run directory."""
    rng = random.Random(f"{SEED}-{task}")
    overrides, steps = TASKS[task]
    run_dir = tmp_path / "run"
    args = [*overrides, *QUIET, f"hydra.run.dir={run_dir}"]
    # One random step in each of len(signals) equal stretches: distinct, in order, and
    # never so close to the end that the run could finish before the signal.
    first, last = 4, steps - 12
    width = (last - first) // len(signals)
    points = [first + i * width + rng.randrange(width) for i in range(len(signals))]
    resume_args: list[str] | None = None
    for signum, point in zip(signals, points):
        proc, log = launch(args if resume_args is None else resume_args, tmp_path)
        stop_at(proc, log, run_dir, point, signum, rng, resumed=resume_args is not None)
        _, stderr = proc.communicate(timeout=600)
        context = f"seed {SEED}, {signal.Signals(signum).name} at step {point}"
        if signum == signal.SIGKILL:
            assert proc.returncode == -signal.SIGKILL, f"{context}: {stderr}"
        else:
            code = {signal.SIGINT: 130, signal.SIGTERM: 143}[signum]
            assert proc.returncode == code, f"{context}: {stderr}"
            assert "checkpoint written:" in stderr, stderr
            command = stderr.split("resume with: ", 1)[1].strip().splitlines()[0]
            assert command.startswith("python -m beyondfit ") and f"resume={run_dir}" in command
            assert step_checkpoints(run_dir / "checkpoints")
        resume_args = [*overrides, *QUIET, f"resume={run_dir}"]
        if signum != signal.SIGKILL:
            resume_args = shlex.split(command)[3:]  # exactly what the message said to run
    done = cli(*(resume_args or args), cwd=tmp_path)  # not slowed, not signalled
    assert done.returncode == 0, done.stderr
    return run_dir


@pytest.mark.e2e
def test_kill9_then_ctrl_c_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    ref_dir = reference_run("regression", tmp_path)
    run_dir = interrupted_runs("regression", tmp_path, [signal.SIGKILL, signal.SIGINT])
    assert_same_end(run_dir, ref_dir, TASKS["regression"][1], f"seed {SEED}")
    # The resumed runs continued in the same directory; Hydra kept the first run's record.
    assert (run_dir / ".hydra" / "overrides.yaml").read_text().count("resume=") == 0
    assert "resume=" in (run_dir / ".hydra" / "resume" / "overrides.yaml").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("task", ["regression", "autoencoder"])
def test_many_random_kills_then_resume_equals_uninterrupted(tmp_path: Path, task: str) -> None:
    if not (Path(__file__).resolve().parents[2] / "conf" / "task" / f"{task}.yaml").exists():
        pytest.fail(f"conf/task/{task}.yaml is missing")
    ref_dir = reference_run(task, tmp_path)
    kills = [signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGKILL]
    run_dir = interrupted_runs(task, tmp_path, kills)
    assert_same_end(run_dir, ref_dir, TASKS[task][1], f"seed {SEED}, {task}")


@pytest.mark.e2e
@pytest.mark.slow  # inductor builds the step's C++ kernels: tens of seconds cold
def test_a_compiled_run_with_a_schedule_resumes_from_its_own_checkpoints(tmp_path: Path
                                                                        ) -> None:
    # The adversarial trial's command: the cosine schedule's state held the compiled step's
    # tensor learning rate, and the run's own checkpoints were refused on resume.
    base = ["+task=regression", "engine.compile=true", *QUIET, "checkpoint.every=5",
            f"hydra.run.dir={tmp_path / 'c29'}"]
    first = cli(*base, "train.epochs=2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = cli(*base, "train.epochs=4", f"resume={tmp_path / 'c29'}", "resume_extend=true",
                cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert rows(tmp_path / "c29")[-1]["step"] == 48


@pytest.mark.e2e
# ---------------------------------------------------------------- user errors, one line each
def test_cli_refuses_a_malicious_checkpoint_in_one_line(tmp_path: Path) -> None:
    base = ["+task=regression", "train.epochs=1", *QUIET]
    class MakesFile:
        def __reduce__(self) -> tuple:
            return (open, (str(tmp_path / "pwned"), "w"))

    evil = tmp_path / "evil" / "checkpoints" / "step-00000001.pt"
    evil.parent.mkdir(parents=True)
    torch.save({"model": MakesFile()}, evil)
    refused = cli(*base, f"resume={tmp_path / 'evil'}", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith("beyondfit: error: checkpoint") and "refused" in refused.stderr
    assert refused.stderr.strip().count("\n") == 0
    assert not (tmp_path / "pwned").exists()


# A task of one's own whose closure feeds a torchmetrics object in training and evaluation.
METERED = '''
import torch
from torchmetrics.regression import MeanAbsoluteError
from beyondfit import TensorBatches
from beyondfit import Task


def build(seed: int = 0) -> Task:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(640, 4, generator=g)
    y = x.sum(1, keepdim=True) + 0.3 * torch.randn(640, 1, generator=g)
    model = torch.nn.Linear(4, 1)
    mae = MeanAbsoluteError()

    def loss_fn(model, batch):
        inputs, target = batch
        pred = model(inputs)
        mae.update(pred.detach(), target)
        return {"loss": torch.nn.functional.mse_loss(pred, target), "mae": mae}

    return Task(model=model, loss_fn=loss_fn,
                train_data=TensorBatches(x[:512], y[:512], batch_size=16, seed=seed),
                val_data=[(x[512:], y[512:])])
'''


@pytest.mark.e2e
def test_kill9_mid_epoch_resumes_a_torchmetrics_objects_rows_byte_for_byte(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torchmetrics")
    (tmp_path / "metered.py").write_text(METERED)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "metered.yaml").write_text(
        "_target_: metered.build\nseed: ${seed}\n")
    args = ["--config-dir", str(tmp_path / "conf"), "+task=metered", "train.epochs=2",
            "checkpoint.every=3", "checkpoint.monitor=null", *QUIET]  # 32 steps an epoch
    ref_dir, run_dir = tmp_path / "reference", tmp_path / "run"
    done = cli(*args, f"hydra.run.dir={ref_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rng = random.Random(f"{SEED}-metered")
    point = rng.randrange(7, 27)  # inside the first epoch, after a checkpoint
    proc, log = launch([*args, f"hydra.run.dir={run_dir}"], tmp_path)
    stop_at(proc, log, run_dir, point, signal.SIGKILL, rng, resumed=False)
    proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL
    done = cli(*args, f"resume={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = (run_dir / "metrics.jsonl").read_bytes()
    expected = (ref_dir / "metrics.jsonl").read_bytes()
    assert b'"mae"' in expected and b'"val_mae"' in expected
    assert got == expected, f"seed {SEED}, kill -9 at step {point}"


@pytest.mark.e2e
def test_a_checkpoint_of_other_model_settings_names_them_and_resumes_with_them(
    tmp_path: Path,
) -> None:
    """A run started before a task's defaults changed (issue 47: classification became an
    ensemble) is refused in one line that names the task settings that differ and the
    overrides that rebuild its model; with them it resumes."""
    first = tmp_path / "first"
    old = ["task.members=1", "task.bins=32", "task.dropout=0.0"]
    started = cli("+task=classification", *old, "train.epochs=2", "checkpoint.every=20",
                  *QUIET, f"hydra.run.dir={first}")
    assert started.returncode == 0, started.stderr
    checkpoint = first / "checkpoints" / "step-00000020.pt"
    refused = cli("+task=classification", "train.epochs=3", f"resume={checkpoint}", *QUIET,
                  f"hydra.run.dir={tmp_path / 'second'}")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "task.members: 1 -> 8" in refused.stderr
    assert "(e.g. task.bins=32 task.dropout=0.0 task.members=1)" in refused.stderr
    resumed = cli("+task=classification", *old, "train.epochs=3", f"resume={checkpoint}",
                  *QUIET, f"hydra.run.dir={tmp_path / 'second'}")
    assert resumed.returncode == 0, resumed.stderr


def test_the_settings_hint_names_keys_newer_than_the_checkpoint() -> None:
    from beyondfit.checkpoint.resume import model_settings_hint

    saved = {"task": {"bins": 32, "hidden": [64, 64]}}
    current = {"task": {"bins": "auto", "hidden": [64, 64], "members": 8}}
    hint = model_settings_hint(saved, current)
    assert "(task.bins: 32 -> 'auto'; task.members: '<absent>' -> 8)" in hint
    assert "(e.g. task.bins=32)" in hint and "task.members did not exist when it ran" in hint
    assert model_settings_hint(None, current) == "" and model_settings_hint(saved, saved) == ""
