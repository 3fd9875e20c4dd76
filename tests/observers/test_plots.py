"""curves.png: which panels, which points, and a real PNG at the end of a run, on disk when
the run's command returns however the run ended."""

from __future__ import annotations

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
from torch import nn

from beyondfit import BeyondfitError, Engine, MetricsFile, TensorBatches
from beyondfit.cli.run import output_callbacks, run
from beyondfit.observers.plots import (
    CurvesPlot,
    panels,
    plot_run,
    read_metrics,
    require_matplotlib,
    series,
)

from kit import ROOT, WRAPPER, task_config

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
