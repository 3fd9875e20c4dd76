"""curves.png: which panels, which points, and a real PNG at the end of a run, on disk when
the run's command returns however the run ended."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import signal
import struct
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch
from packaging.utils import canonicalize_name
from torch import nn

from beyondfit import BeyondfitError, Engine, MetricsFile, TensorBatches
from beyondfit.cli.run import output_callbacks, run
from beyondfit.observers import plots
from beyondfit.observers.plots import (
    CurvesPlot,
    curves_figure,
    panels,
    plot_run,
    read_metrics,
    require_matplotlib,
    series,
    target_return,
)

from kit import ROOT, WRAPPER, cli, task_config

config = partial(task_config, "regression")  # this file's task, composed as the CLI does

pytest.importorskip("matplotlib")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header, after checking its signature and IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    assert data.rstrip(b"\x00")[-8:-4] == b"IEND"  # written completely
    return struct.unpack(">II", data[16:24])


def write_rows(run_dir: Path, rows: list[dict]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


@pytest.mark.e2e
def test_a_regression_run_ends_with_a_valid_curves_png(tmp_path: Path) -> None:
    run(config("train.epochs=3", "progress.bar=false"), tmp_path)
    assert (tmp_path / "curves.png").is_file()  # drawn before run() returns
    width, height = png_size(tmp_path / "curves.png")
    # Two panels (loss; validation R²) at 100 dpi: sensible for a README or a glance.
    assert (width, height) == (840, 320)
    assert 5_000 < (tmp_path / "curves.png").stat().st_size < 300_000
    assert not (tmp_path / "curves.png.tmp").exists()


def test_supervised_panels_and_points() -> None:
    rows = [
        {"kind": "train", "epoch": 1, "step": 2, "loss": 3.0},
        {"kind": "val", "epoch": 1, "step": 4, "val_loss": 2.5, "val_r2": 0.1},
        {"kind": "epoch", "epoch": 1, "step": 4, "loss": 2.0, "val_loss": 2.5, "val_r2": 0.1},
        {"kind": "val", "epoch": 2, "step": 8, "val_loss": 1.5, "val_r2": 0.4},
        {"kind": "epoch", "epoch": 2, "step": 8, "loss": 1.0, "val_loss": 1.5, "val_r2": 0.4},
    ]
    assert panels(rows) == {"loss": ["loss", "val_loss"], "validation metrics": ["val_r2"]}
    # Two epochs or more: the training curve is one point per epoch, as Keras shows it.
    assert series(rows, "loss") == ([4.0, 8.0], [2.0, 1.0])
    assert series(rows, "val_loss") == ([4.0, 8.0], [2.5, 1.5])


def test_rl_panels_show_episode_and_evaluation_returns(tmp_path: Path) -> None:
    rows = [
        {"kind": "train", "epoch": 1, "step": 16, "loss": 1.0, "episode_return": 20.0},
        {"kind": "train", "epoch": 1, "step": 32, "loss": 0.8},  # no episode ended: no value
        {"kind": "val", "epoch": 1, "step": 32, "val_return": 50.0, "val_length": 50.0},
        {"kind": "train", "epoch": 1, "step": 48, "loss": 0.7, "episode_return": 80.0},
        {"kind": "epoch", "epoch": 1, "step": 50, "loss": 0.7, "val_return": 50.0},
    ]
    chosen = panels(rows)
    assert chosen == {"loss": ["loss"], "return": ["episode_return", "val_return"]}
    # One long epoch: the training curve comes from the log-interval rows.
    assert series(rows, "loss") == ([16.0, 32.0, 48.0, 50.0], [1.0, 0.8, 0.7, 0.7])
    assert series(rows, "episode_return") == ([16.0, 48.0], [20.0, 80.0])
    width, height = png_size(plot_run(write_rows(tmp_path, rows)))
    assert (width, height) == (840, 320)


# ------------------------------------------------------------- a plain install draws them
def base_install() -> set[str]:
    """The distributions ``pip install -e .`` brings: pyproject's dependencies and theirs,
    without extras (as installed here)."""
    tomllib = pytest.importorskip("tomllib")
    requirements = pytest.importorskip("packaging.requirements")
    todo = [requirements.Requirement(r).name for r in
            tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    seen: set[str] = set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            needs = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in needs:
            need = requirements.Requirement(line)
            if need.marker is None or need.marker.evaluate({"extra": ""}):
                todo.append(need.name)
    return seen


#: ``python -m beyondfit ARGS`` as a plain install would run it: the modules of every installed
#: distribution outside the base install (PLAIN_BLOCKED) are not found, as if not installed.
PLAIN = """
import importlib.machinery, json, os, runpy, sys
BLOCKED = frozenset(json.loads(os.environ["PLAIN_BLOCKED"]))
class Plain:
    def __init__(self, finder):
        self.finder = finder
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return self.finder.find_spec(name, path, target)
    def __getattr__(self, attr):
        return getattr(self.finder, attr)
keep = (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter)
sys.meta_path[:] = [f if f in keep else Plain(f) for f in sys.meta_path]
sys.argv = ["beyondfit", *sys.argv[1:]]
runpy.run_module("beyondfit", run_name="__main__", alter_sys=True)
"""


def test_matplotlib_is_in_the_base_install() -> None:
    assert "matplotlib" in base_install()  # pip install -e . draws curves.png


@pytest.mark.e2e
def test_a_plain_install_run_of_cartpole_leaves_curves_png(tmp_path: Path) -> None:
    """README's first command, ``pip install -e . && python -m beyondfit +task=cartpole``
    (with a small budget), in an interpreter that finds no module outside the base install."""
    base = base_install()
    # torch reads optree's installed version (importlib.metadata, torch.utils._pytree) and then
    # imports it in its compiler; this probe hides modules, not metadata, so optree stays
    # visible (a real plain install has neither, and torch then never imports it).
    probed_by_metadata = {"optree"}
    blocked = sorted(top for top, dists in importlib.metadata.packages_distributions().items()
                     if top != "beyondfit" and top not in probed_by_metadata
                     and not any(canonicalize_name(d) in base for d in dists))
    assert "wandb" in blocked or importlib.util.find_spec("wandb") is None  # the probe works
    env = {**os.environ, "PLAIN_BLOCKED": json.dumps(blocked)}
    done = cli("+task=cartpole", "task.total_env_steps=2048", "task.eval_every_env_steps=1024",
               "task.eval_episodes=2", "task.confirm_episodes=2", "hydra.run.dir=run",
               cwd=tmp_path, env=env, exe=(sys.executable, "-c", PLAIN))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "skipped" not in done.stdout + done.stderr
    png_size(tmp_path / "run" / "curves.png")


@pytest.mark.e2e
@pytest.mark.parametrize("exe", [("-c", "import beyondfit"), ("-m", "beyondfit", "--help")])
def test_neither_import_nor_help_imports_matplotlib(tmp_path: Path, exe: tuple[str, ...]) -> None:
    done = cli(cwd=tmp_path, exe=(sys.executable, "-X", "importtime", *exe))
    assert done.returncode == 0, done.stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and line.count("|") == 2}
    assert "beyondfit" in names and not any(n.split(".")[0] == "matplotlib" for n in names)


# ------------------------------------------------- RL: env steps, the target, every term
def offpolicy_rows() -> list[dict]:
    """A DQN-like run with a loss of one's own: 8 random env steps, then 4 env steps a step,
    logged every 2 steps; an evaluation at step 5; the (one) epoch's row at its end."""
    rows: list[dict] = []
    for step in (2, 4, 6, 8):
        rows.append({"kind": "train", "epoch": 1, "step": step, "q/td": 1.0 / step,
                     "q/cql": 0.5 + step, "aux/recon": 2.0 * step, "q/q": 3.0,
                     "q/lr": 1e-3, "q/grad_norm": 0.7, "env_steps": 8.0 + 4 * step,
                     "episode_return": 10.0 * step, "episode_length": 10.0 * step,
                     "episode_return_100": 9.0})
        if step == 4:
            rows.append({"kind": "val", "epoch": 1, "step": 5, "val_return": 33.0,
                         "val_length": 33.0})
    rows.append({"kind": "epoch", "epoch": 1, "step": 8, "q/td": 0.2, "q/cql": 4.0,
                 "aux/recon": 9.0, "q/q": 3.0, "env_steps": 40.0, "val_return": 33.0})
    return rows


def lines(ax) -> dict[str, tuple[list[float], list[float]]]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.get_lines()}


def test_rl_curves_are_drawn_against_env_steps_with_the_target_and_every_term() -> None:
    fig = curves_figure(offpolicy_rows(), target=475.0)
    axes = fig.get_axes()
    # One panel per term of the loss, in the order logged; none for the optimizer's lr and
    # grad_norm or the collector's episode statistics.
    assert [ax.get_title() for ax in axes] == ["return", "q/td", "q/cql", "aux/recon", "q/q"]
    assert {ax.get_xlabel() for ax in axes} == {"env steps"}
    returns = lines(axes[0])
    assert returns["episode_return"] == ([16.0, 24.0, 32.0, 40.0], [20.0, 40.0, 60.0, 80.0])
    # The evaluation after step 5: the env steps logged by then (step 4's), never more.
    assert returns["val_return"] == ([24.0], [33.0])
    assert returns["target 475"][1] == [475.0, 475.0]  # axhline: from x=0 to x=1 of the axes
    # The interval rows' values; the epoch row (a whole-run mean) is no point of the curve.
    assert lines(axes[1])["q/td"] == ([16.0, 24.0, 32.0, 40.0], [0.5, 0.25, 1 / 6, 0.125])
    assert lines(axes[3])["aux/recon"][0] == [16.0, 24.0, 32.0, 40.0]
    assert fig.get_size_inches()[0] == pytest.approx(4 * 4.2)  # four panels a row, two rows
    assert fig.get_size_inches()[1] == pytest.approx(2 * 3.2)

    no_target = curves_figure(offpolicy_rows(), target=None).get_axes()[0]
    assert sorted(lines(no_target)) == ["episode_return", "val_return"]


def test_the_steps_of_one_rollout_are_one_point_at_its_env_steps() -> None:
    # PPO: 512 env steps a rollout, 30 optimizer steps over it, a row every 16 steps.
    rows = [{"kind": "train", "epoch": 1, "step": s, "loss": float(s), "env_steps": e}
            for s, e in ((16, 512.0), (32, 1024.0), (48, 1024.0), (64, 1536.0))]
    rows.append({"kind": "val", "epoch": 1, "step": 60, "val_return": 50.0})  # after 2 rollouts
    (loss, ret) = curves_figure(rows).get_axes()
    assert lines(loss)["loss"] == ([512.0, 1024.0, 1536.0], [16.0, 48.0, 64.0])
    assert lines(ret)["val_return"] == ([1024.0], [50.0])


def test_supervised_curves_keep_the_optimizer_step_and_their_panels() -> None:
    rows = [{"kind": "train", "epoch": 1, "step": 2, "loss": 3.0, "lr": 0.1, "mae": 1.0},
            {"kind": "val", "epoch": 1, "step": 4, "val_loss": 2.5, "val_mae": 0.9,
             "val_r2": 0.1},
            {"kind": "epoch", "epoch": 1, "step": 4, "loss": 2.0, "mae": 0.8}]
    axes = curves_figure(rows).get_axes()
    # A logged term's panel holds its validation twin; the lr is no term.
    assert [ax.get_title() for ax in axes] == ["loss", "mae", "validation metrics"]
    assert sorted(lines(axes[1])) == ["mae", "val_mae"]
    assert {ax.get_xlabel() for ax in axes} == {"optimizer step"}
    # What compare shows is unchanged: the loss, the return and the validation metrics.
    assert panels(rows) == {"loss": ["loss", "val_loss"],
                            "validation metrics": ["val_mae", "val_r2"]}


def test_the_target_line_is_the_runs_target_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list = []
    monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.append(fig) or Path(path))
    run = write_rows(tmp_path / "run", offpolicy_rows())
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text(
        "seed: 0\ntask:\n  env: CartPole-v1\n  target_return: 475\n"
        "train:\n  stop: val_return>=${task.target_return}\n")
    assert target_return(run) == 475.0
    plot_run(run)
    assert "target 475" in lines(drawn[-1].get_axes()[0])
    # A resumed run's newest config wins; null (Pendulum) is no line; a run without a config
    # reads its result.json; neither: none.
    (run / ".hydra" / "resume").mkdir()
    (run / ".hydra" / "resume" / "config.yaml").write_text("task:\n  target_return: null\n")
    assert target_return(run) is None
    plot_run(run)
    assert sorted(lines(drawn[-1].get_axes()[0])) == ["episode_return", "val_return"]
    bare = write_rows(tmp_path / "bare", offpolicy_rows())
    assert target_return(bare) is None
    (bare / "result.json").write_text('{"target": 200.5}')
    assert target_return(bare) == 200.5
    plot_run(bare)
    assert "target 200.5" in lines(drawn[-1].get_axes()[0])
    (bare / "result.json").write_text('{"target": true}')
    assert target_return(bare) is None


def test_a_loss_of_many_terms_draws_its_first_sixteen_panels() -> None:
    rows = [{"kind": "train", "epoch": 1, "step": 1, **{f"t{i}": float(i) for i in range(40)}}]
    axes = curves_figure(rows).get_axes()
    assert [ax.get_title() for ax in axes] == [f"t{i}" for i in range(16)]


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    write_rows(tmp_path, [{"kind": "train", "epoch": 1, "step": 1, "loss": 1.0}])
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "train", "ep')  # a run killed mid-write
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 1


def test_nothing_to_plot_and_no_metrics_file_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(BeyondfitError, match="no metrics file"):
        plot_run(tmp_path)
    write_rows(tmp_path, [{"kind": "train", "epoch": 1, "step": 1}])
    with pytest.raises(BeyondfitError, match="no logged values to plot"):
        plot_run(tmp_path)


def test_callback_draws_at_fit_end_through_the_api(tmp_path: Path) -> None:
    model = nn.Linear(2, 1)
    x = torch.randn(16, 2)
    plot = CurvesPlot(tmp_path, title="api")
    engine = Engine(
        model, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(),
        torch.optim.SGD(model.parameters(), lr=0.1), device="cpu",
        callbacks=[MetricsFile(tmp_path / "metrics.jsonl"), plot],
    )  # fmt: skip
    engine.fit(TensorBatches(x, x[:, :1], batch_size=4), epochs=2)
    assert plot.path == tmp_path / "curves.png"
    png_size(plot.path)


def test_plots_setting_is_checked_and_matplotlib_is_optional(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beyondfit.cli.schema import check_config

    with pytest.raises(BeyondfitError, match=r"plots='sometimes'; use auto, true or false"):
        check_config(config("plots=sometimes"))  # with the config, before any builder
    assert not any(
        isinstance(c, CurvesPlot) for c in output_callbacks(config("plots=false"), tmp_path)
    )

    monkeypatch.setattr("beyondfit.observers.plots.has_matplotlib", lambda: False)
    # auto: quietly no plot; true: a clear error before any training.
    assert not any(isinstance(c, CurvesPlot) for c in output_callbacks(config(), tmp_path))
    with pytest.raises(BeyondfitError, match=r"pip install \"beyondfit\[plots\]\".*plots=false"):
        output_callbacks(config("plots=true"), tmp_path)
    with pytest.raises(BeyondfitError, match="plotting needs matplotlib"):
        require_matplotlib()


def test_a_drawing_that_fails_is_one_warning_line_not_a_failed_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write_rows(tmp_path, [{"kind": "train", "epoch": 1, "step": 1, "loss": 1.0}])

    def full_disk(fig: object, path: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("beyondfit.observers.plots.save_png", full_disk)
    plot = CurvesPlot(tmp_path)
    with caplog.at_level("WARNING", logger="beyondfit"):
        plot.on_fit_end(None, [])  # no exception: training is over, its files stay good
    assert [r.getMessage() for r in caplog.records] == [
        "curves.png not written: OSError: [Errno 28] No space left on device"
    ]
    assert plot.path is None and not (tmp_path / "curves.png").exists()


# ------------------------------------------- the command line: curves.png when it returns
def command(*args: str, cwd: Path, exe: tuple[str, ...] = (sys.executable, "-m", "beyondfit"),
            step_delay: float = 0.0) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``python -m beyondfit ARGS`` with its output in files, not pipes: waiting for it is
    waiting for the process alone (reading pipes to their end would also wait for any process
    it left behind that holds them)."""
    out = cwd / f"out-{time.monotonic_ns()}.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "STEP_DELAY": str(step_delay)}  # read by kit.WRAPPER, which slows each step
    with out.open("wb") as f:
        proc = subprocess.Popen([*exe, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=f, stderr=subprocess.STDOUT)
    return proc, out


@pytest.mark.e2e
def test_curves_png_is_on_disk_when_the_command_returns(tmp_path: Path) -> None:
    proc, out = command("+task=regression", "train.epochs=2", "hydra.run.dir=run", cwd=tmp_path)
    code = proc.wait(timeout=600)
    written = (tmp_path / "run" / "curves.png").is_file()  # at once: no waiting, no retry
    text = out.read_text()
    assert code == 0, text[-2000:]
    assert written, text[-2000:]
    png_size(tmp_path / "run" / "curves.png")
    assert f"learning curves in {tmp_path / 'run' / 'curves.png'}" in text
    assert "background" not in text and not (tmp_path / "run" / "curves.png.tmp").exists()


@pytest.mark.e2e
def test_each_job_of_a_multirun_that_stops_early_has_its_curves_when_it_returns(
    tmp_path: Path,
) -> None:
    proc, out = command("-m", "+task=regression", "seed=0,1", "train.epochs=40",
                        "task.early_stopping.patience=1", "hydra.sweep.dir=sweep", cwd=tmp_path)
    code = proc.wait(timeout=600)
    written = [(tmp_path / "sweep" / job / "curves.png").is_file() for job in ("0", "1")]
    text = out.read_text()
    assert code == 0, text[-2000:]
    assert text.count("stopped early: val_loss did not improve") == 2, text[-2000:]
    assert written == [True, True], text[-2000:]


@pytest.mark.e2e
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_run_stopped_by_a_signal_has_its_curves_when_the_command_returns(
    tmp_path: Path, signum: int, status: int
) -> None:
    """Ctrl-C and SIGTERM take the same path: finish the step, checkpoint, on_fit_end."""
    run_dir = tmp_path / "run"
    proc, out = command("+task=regression", "train.epochs=300", "task.early_stopping=null",
                        "device=cpu", "engine.log_every=1", f"hydra.run.dir={run_dir}",
                        cwd=tmp_path, exe=(sys.executable, "-c", WRAPPER), step_delay=0.02)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 3):
        assert proc.poll() is None, out.read_text()[-2000:]
        assert time.monotonic() < deadline, "the run logged nothing"
        time.sleep(0.01)
    proc.send_signal(signum)
    code = proc.wait(timeout=300)
    written = (run_dir / "curves.png").is_file()
    text = out.read_text()
    assert code == status, text[-2000:]
    assert "resume with:" in text and written, text[-2000:]
