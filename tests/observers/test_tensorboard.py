"""TensorBoard logger: event files read back with tensorboard's own reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from beyondfit import BeyondfitError
from beyondfit.cli.run import CONF_DIR, output_callbacks
from beyondfit.observers.tensorboard import TensorBoardLogger, flatten, summary_writer_class

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kit import line_batches, line_engine


def read_events(log_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return events


@pytest.mark.e2e
def test_cli_run_with_tensorboard_logger_writes_readable_scalars(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "beyondfit", "+task=regression", "train.epochs=3",
            "engine.log_every=5", "+logger=tensorboard", f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    events = read_events(tmp_path / "tensorboard")
    scalars = set(events.Tags()["scalars"])
    assert {"loss", "val_loss", "val_r2", "lr"} <= scalars
    # The same numbers, at the same optimizer steps, as the metrics file's evaluation rows.
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    val_rows = [r for r in rows if r["kind"] == "val"]
    logged = [(e.step, e.value) for e in events.Scalars("val_loss")]
    assert [s for s, _ in logged] == [r["step"] for r in val_rows] == [12, 24, 36]
    assert [v for _, v in logged] == pytest.approx([r["val_loss"] for r in val_rows], rel=1e-6)
    train_steps = [e.step for e in events.Scalars("loss")]
    assert train_steps == sorted(set(train_steps))  # one point per step, in order
    assert {5, 10, 12, 36} <= set(train_steps)  # log intervals and epoch ends
    hparams = events.PluginTagToContent("hparams")
    assert "_hparams_/session_start_info" in hparams
    assert b"optimizer.lr" in hparams["_hparams_/session_start_info"]
    assert events.Tags()["tensors"] == ["config/text_summary"]
    assert (tmp_path / "metrics.csv").is_file()  # +logger= adds to the default csv logger


@pytest.mark.e2e
def test_an_rl_runs_scalars_are_indexed_by_env_steps(tmp_path: Path) -> None:
    """Issue 58: PPO and DQN curves line up only against env steps, their x-axis everywhere
    (TensorBoard here, W&B and MLflow through the same step, curves.png too)."""
    result = subprocess.run(
        [
            sys.executable, "-m", "beyondfit", "+task=cartpole", "algo=dqn",
            "task.total_env_steps=1500", "task.eval_every_env_steps=500", "task.eval_episodes=2",
            "task.confirm_episodes=2", "engine.log_every=100", "plots=false",
            "+logger=tensorboard", f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    events = read_events(tmp_path / "tensorboard")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    logged = [e.step for e in events.Scalars("q/loss")]
    assert logged[:len(train)] == [int(r["env_steps"]) for r in train]
    assert logged[0] > train[0]["step"]  # env steps, not optimizer steps
    assert next(e.step for e in events.Scalars("val_return")) >= 500


def test_epoch_means_are_written_when_no_log_interval_falls_in_an_epoch(tmp_path: Path) -> None:
    engine = line_engine([TensorBoardLogger(tmp_path, hparams={"lr": 0.1, "hidden": [4, 4]})])
    history = engine.fit(line_batches(), epochs=3)
    events = read_events(tmp_path)
    loss = events.Scalars("loss")
    assert [e.step for e in loss] == [3, 6, 9]
    assert [e.value for e in loss] == pytest.approx([row["loss"] for row in history], rel=1e-6)
    assert [e.value for e in events.Scalars("lr")] == pytest.approx([0.1] * 3)


def test_resumed_run_purges_events_after_its_step(tmp_path: Path) -> None:
    first = line_engine([TensorBoardLogger(tmp_path)], log_every=1)
    first.fit(line_batches(), epochs=2)  # steps 1..6
    state = first.state_dict()
    # Resume from step 3 (as from a checkpoint written at the end of epoch 1).
    again = line_engine([TensorBoardLogger(tmp_path)], log_every=1)
    state["counters"].update(global_step=3, epoch=1, batch_in_epoch=0)
    again.load_state_dict(state)
    again.fit(line_batches(), epochs=2)
    steps = [e.step for e in read_events(tmp_path).Scalars("loss")]
    assert steps == sorted(set(steps)) == [1, 2, 3, 4, 5, 6]


def test_missing_tensorboard_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(BeyondfitError, match=r"pip install \"beyondfit\[tensorboard\]\""):
        summary_writer_class()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("config", overrides=["+task=regression", "logger=[tensorboard]"])
    with pytest.raises(BeyondfitError, match="logger=tensorboard needs the tensorboard package"):
        output_callbacks(cfg, Path("unused"))


def test_bad_flush_interval_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(BeyondfitError, match=r"logger\.tensorboard\.flush_secs=0"):
        TensorBoardLogger(tmp_path, flush_secs=0)


def test_flatten_gives_dotted_hyperparameter_names() -> None:
    flat = flatten({"optimizer": {"lr": 0.1, "betas": [0.9, 0.99]}, "seed": 3})
    assert flat == {"optimizer.lr": 0.1, "optimizer.betas": [0.9, 0.99], "seed": 3}
