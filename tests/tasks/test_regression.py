"""The regression task and the command line around it, including every kind of bad input."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from beyondfit import BeyondfitError
from beyondfit.cli.run import run
from beyondfit.data import load_table
from beyondfit.tasks import regression
from beyondfit.tasks.regression import least_squares_r2
from beyondfit.tasks.supervised import auto_batch_size, auto_hidden

from kit import cli, one_line_exit_2, task_config

config = partial(task_config, "regression")  # this file's task, composed as the CLI does


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    return path


@pytest.mark.e2e
# ---------------------------------------------------------------- end to end
def test_default_regression_run_beats_least_squares_minus_margin(tmp_path: Path) -> None:
    result = cli("+task=regression", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "validation R2" in x)
    model_r2 = float(line.split("model ")[1].split()[0])
    ols_r2 = float(line.split("least squares ")[1].split()[0])
    assert model_r2 >= ols_r2 - 0.02
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if r["kind"] == "epoch"]
    # Early stopping ends the 300-epoch budget once val_loss stops improving for 10 epochs.
    assert [r["epoch"] for r in epochs] == list(range(1, len(epochs) + 1))
    assert 10 < len(epochs) < 300
    assert "early stopping: stopped early; best val_loss" in result.stdout
    best = min(r["val_loss"] for r in epochs)
    restored = next(r for r in epochs if r["val_loss"] == best)
    assert model_r2 == pytest.approx(restored["val_r2"], abs=1e-4)  # the best epoch's weights
    assert {"loss", "val_loss", "val_r2"} <= set(epochs[-1])
    assert (tmp_path / ".hydra" / "config.yaml").is_file()
    saved = json.loads((tmp_path / "preprocessing.json").read_text())
    assert saved["inputs"] == [f"x{i}" for i in range(10)] and len(saved["target_mean"]) == 1


def test_auto_sizes_follow_the_table() -> None:
    assert auto_hidden("auto", 300) == [64, 64] and auto_hidden("auto", 4000) == [128, 128]
    assert auto_hidden("auto", 50_000) == [256, 256] and auto_hidden(32, 10) == [32]
    assert auto_batch_size("auto", 300) == 32 and auto_batch_size("auto", 4000) == 128
    assert auto_batch_size("auto", 10**6) == 256 and auto_batch_size(7, 10) == 7
    with pytest.raises(BeyondfitError, match=r"task\.hidden='big'; give 'auto' or a list"):
        auto_hidden("big", 10)
    with pytest.raises(BeyondfitError, match=r"task\.batch_size=0"):
        auto_batch_size(0, 10)


def test_training_starts_at_least_squares_and_can_run_every_epoch(tmp_path: Path) -> None:
    task = regression.build(seed=0)
    stopper = task.callbacks[0]
    x_val, y_val = task.val_data[0]
    ols = least_squares_r2(*task.train_data.tensors, x_val, y_val)
    assert stopper.start_logs["val_r2"] == pytest.approx(ols, abs=1e-4)
    assert not regression.build(seed=0, early_stopping=None).callbacks
    history = run(config("task.early_stopping=null", "train.epochs=3", "plots=false"), tmp_path)
    assert len(history) == 3


@pytest.mark.e2e
def test_user_csv_and_npz_files_train(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.05 * rng.normal(size=120)
    rows = [["a", "b", "c", "price"]] + [[*map(str, xi), str(yi)] for xi, yi in zip(x, y)]
    csv_path = write_csv(tmp_path / "table.csv", rows)
    cfg = config(f"task.data.path={csv_path}", "task.data.target=price", "train.epochs=60",
                 "optimizer.lr=0.03")
    history = run(cfg, tmp_path / "csv_run")
    assert history[-1]["val_r2"] > 0.9

    np.savez(tmp_path / "table.npz", x=x, y=y)
    cfg = config(f"task.data.path={tmp_path / 'table.npz'}", "train.epochs=2")
    assert len(run(cfg, tmp_path / "npz_run")) == 2


@pytest.mark.e2e
# ---------------------------------------------------------------- bad input: CLI one-liners
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no task given; pick one with +task=NAME"),
        (["+task=nosuchtask"], "unknown task 'nosuchtask'"),
        (["+task=regression", "optimizer=nosuchopt"], "unknown optimizer 'nosuchopt'"),
        (["+task=regression", "optimizer.lr=-0.1"], "optimizer.lr=-0.1"),
        (["+task=regression", "task.data.path=/no/such/file.csv"], "does not exist"),
        (["+task=regression", "nosuchkey=1"], "nosuchkey"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path
) -> None:
    result = cli(*args, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("override", "message"),
    [("optimizer.lr=0", "optimizer.lr=0"), ("engine.clip_norm=-1", "clip_norm=-1"),
     ("device=cuda:7", "device="), ("+engine.nosuch=1", "unknown key .engine.nosuch."),
     ("train.stop=val_loss", "stop rule")],
)
def test_bad_config_values_are_clear(override: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(BeyondfitError, match=message):
        run(config(override, "train.epochs=1"), tmp_path)


@pytest.mark.e2e
def test_cli_reports_bad_data_file_in_one_line(tmp_path: Path) -> None:
    bad = write_csv(tmp_path / "bad.csv", [["a", "y"], ["1", "2"], ["nan", "3"], ["2", "4"]])
    result = cli("+task=regression", f"task.data.path={bad}", "task.data.target=y",
                 "task.data.missing=refuse", f"hydra.run.dir={tmp_path / 'run'}")
    # A 3-row table also warns that its one validation row is noise (a line before the error).
    one_line_exit_2(result, "missing value in column 'a' at line 3", lines=2)


# ---------------------------------------------------------------- bad input: data files
def test_missing_target_column(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", [["a", "b"], ["1", "2"]])
    with pytest.raises(BeyondfitError, match="target column 'price' is not in"):
        load_table(path, "price")


def test_csv_without_target_option(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", [["a", "b"], ["1", "2"]])
    with pytest.raises(BeyondfitError, match=r"task\.data\.target=COLUMN"):
        load_table(path, None)


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "is empty"), ("a,y\n", "no data rows"), ("a,y\n1,x\n", r"column 'y' holds text"),
     ("a,y\n1,inf\n2,3\n", "an infinity"), ("a,y\n1\n", "has 1 fields")],
)
def test_bad_csv_contents(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(BeyondfitError, match=message):
        load_table(path, "y")


def test_bad_npz_contents(tmp_path: Path) -> None:
    np.savez(tmp_path / "nox.npz", features=np.ones((3, 2)))
    with pytest.raises(BeyondfitError, match="lacks array"):
        load_table(tmp_path / "nox.npz")
    np.savez(tmp_path / "empty.npz", x=np.ones((0, 2)), y=np.ones((0,)))
    with pytest.raises(BeyondfitError, match="empty"):
        load_table(tmp_path / "empty.npz")
    np.savez(tmp_path / "nan.npz", x=np.array([[1.0], [np.nan]]), y=np.ones(2))
    with pytest.raises(BeyondfitError, match="missing value in column 'x0' at row 2"):
        load_table(tmp_path / "nan.npz")
    (tmp_path / "data.parquet").write_text("x")
    with pytest.raises(BeyondfitError, match="suffix"):
        load_table(tmp_path / "data.parquet")


def test_bad_optimizer_option_is_clear(tmp_path: Path) -> None:
    cfg = config("+optimizer.betas=[2.0,0.9]", "train.epochs=1")
    with pytest.raises(BeyondfitError, match="optimizer options are invalid"):
        run(cfg, tmp_path)


def test_bad_task_option_is_clear(tmp_path: Path) -> None:
    cfg = config("+task.nosuch=1")
    with pytest.raises(BeyondfitError, match="nosuch"):
        run(cfg, tmp_path)


@pytest.mark.e2e
def test_multirun_without_sweep_dir_writes_one_dir_per_job(tmp_path: Path) -> None:
    # The default sweep dir must resolve in multirun mode (no HydraConfig exists yet there).
    result = cli("-m", "+task=regression", "seed=0,1", "train.epochs=1", "plots=false",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sweep = tmp_path / "multirun" / "regression"
    jobs = sorted(p.parent.name for p in sweep.glob("*/*/metrics.jsonl"))
    assert jobs == ["0", "1"]


@pytest.mark.parametrize("hidden", [[], [16]])
def test_the_r2_closure_follows_the_model_and_batch_to_their_device(hidden):
    """The closure's validation variance is the task's own tensor: on the engine's device it
    must follow the batch. bench/gpu_check.sh found every CUDA regression run failing on it
    (an H200, 2026-12-04); the meta device stands in for CUDA here."""
    task = regression.build(seed=0, hidden=hidden)
    ((x, y),) = task.val_data
    model = task.model.to("meta").eval()
    out = task.loss_fn(model, (x.to("meta"), y.to("meta")))
    assert out["r2"].device.type == "meta" and out["loss"].device.type == "meta"
