"""curves.png: which panels, which points, and a real PNG at the end of a run."""

from __future__ import annotations

import json
import struct
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

from kit import task_config, wait_for_file

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
    assert wait_for_file(tmp_path / "curves.png")  # drawn in a separate process
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
