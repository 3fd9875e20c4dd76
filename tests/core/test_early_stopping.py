"""EarlyStopping: stops after `patience` evaluations without improvement, restores the best
weights (Keras' restore_best_weights), survives a checkpoint and resume, and stays out of
the way of an interrupted run.

The "model" is one weight that every optimizer step raises by exactly 1 (SGD, lr 1, loss
``-w``); the validation loss is ``|w - 3|``. So the best evaluation is known in advance.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError, Callback, EarlyStopping, Engine


class Walker(nn.Module):
    """One weight, starting at 0."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.register_buffer("seen", torch.zeros(()))  # a buffer is restored as well

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen += 1
        return self.w * batch


def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Training: -w (each SGD step adds 1). Evaluation: |w - 3|, and w - 3 as 'gap'."""
    if model.training:
        return -model(batch).sum()
    w = model(batch).sum()
    return {"loss": (w - 3).abs(), "gap": w - 3}


def engine(*callbacks: Callback) -> Engine:
    model = Walker()
    return Engine(model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0),
                  device="cpu", callbacks=callbacks)


ONE_STEP = [torch.ones(1)]  # an epoch is one optimizer step
VAL = [torch.ones(1)]


def test_stops_after_patience_and_restores_the_best_weights() -> None:
    stopper = EarlyStopping("val_loss", patience=2)
    e = engine(stopper)
    history = e.fit(ONE_STEP, epochs=50, val_data=VAL)
    # val_loss per epoch: 2, 1, 0 (best, w=3), 1, 2 -> two misses: stop after epoch 5.
    assert [row["val_loss"] for row in history] == [2.0, 1.0, 0.0, 1.0, 2.0]
    assert stopper.stopped and stopper.restored
    assert (stopper.best, stopper.best_epoch, stopper.best_step) == (0.0, 3, 3)
    assert e.model.w.item() == 3.0 and e.model.seen.item() == 3.0  # buffer too
    assert e.last_val == {"val_loss": 0.0, "val_gap": 0.0}  # the restored model's logs
    assert e.stopped_by == "val_loss did not improve for 2 evaluations (best 0 at epoch 3)"


def test_another_fit_after_a_stop_gets_patience_again() -> None:
    stopper = EarlyStopping("val_loss", patience=2)
    e = engine(stopper)
    e.fit(ONE_STEP, epochs=50, val_data=VAL)  # stops after epoch 5, restores w = 3
    e.fit(ONE_STEP, epochs=50, val_data=VAL)  # w = 4, 5: two misses again, back to w = 3
    assert len(e.history) == 7 and stopper.stopped and e.model.w.item() == 3.0


def test_mode_max_min_delta_and_no_restore() -> None:
    # val_gap = w - 3 rises by 1 per epoch: never stops with min_delta < 1 ...
    rising = EarlyStopping("val_gap", mode="max", patience=1, min_delta=0.5)
    e = engine(rising)
    e.fit(ONE_STEP, epochs=6, val_data=VAL)
    assert not rising.stopped and rising.restored and rising.best == 3.0
    # ... and stops at once when an improvement must exceed 1; without restoring.
    kept = EarlyStopping("val_gap", mode="max", patience=1, min_delta=1.0,
                         restore_best_weights=False)
    e = engine(kept)
    e.fit(ONE_STEP, epochs=6, val_data=VAL)
    assert kept.stopped and not kept.restored and len(e.history) == 2
    assert e.model.w.item() == 2.0


def test_start_logs_keep_the_starting_weights_when_no_epoch_beats_them() -> None:
    stopper = EarlyStopping("val_loss", patience=3, start_logs={"val_loss": -1.0, "val_gap": 7})
    e = engine(stopper)
    e.fit(ONE_STEP, epochs=20, val_data=VAL)
    assert stopper.stopped and stopper.restored and stopper.best_epoch == 0
    assert e.model.w.item() == 0.0 and e.last_val == {"val_loss": -1.0, "val_gap": 7.0}


def test_bad_options_and_unlogged_monitor_are_clear() -> None:
    with pytest.raises(BeyondfitError, match="mode='down'"):
        EarlyStopping(mode="down")
    with pytest.raises(BeyondfitError, match="patience=0"):
        EarlyStopping(patience=0)
    with pytest.raises(BeyondfitError, match="lack the monitored 'val_loss'"):
        EarlyStopping(start_logs={"val_r2": 0.5})
    e = engine(EarlyStopping("val_accuracy"))
    with pytest.raises(BeyondfitError, match=r"monitors 'val_accuracy'.*logs: val_gap, val_loss"):
        e.fit(ONE_STEP, epochs=2, val_data=VAL)


class InterruptAt(Callback):
    """Stops the run the way a signal does (engine.interrupted) after a given step."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, engine: Engine) -> None:
        if engine.global_step == self.step:
            engine.interrupted = "test"
            engine.should_stop = True


def test_an_interrupted_run_is_not_restored_and_resumes_to_the_same_end(tmp_path: Path) -> None:
    whole = EarlyStopping("val_loss", patience=2)
    reference = engine(whole)
    reference.fit(ONE_STEP, epochs=50, val_data=VAL)

    first = EarlyStopping("val_loss", patience=2)
    e = engine(first, InterruptAt(4))
    e.fit(ONE_STEP, epochs=50, val_data=VAL)
    assert not first.restored and e.model.w.item() == 4.0  # left as it was: it will resume
    e.save(tmp_path / "ckpt.pt")

    second = EarlyStopping("val_loss", patience=2)
    resumed = engine(second)
    resumed.load(tmp_path / "ckpt.pt")
    resumed.fit(ONE_STEP, epochs=50, val_data=VAL)
    assert second.stopped and second.restored and resumed.epoch == reference.epoch
    assert resumed.model.w.item() == reference.model.w.item() == 3.0
    assert (second.best_epoch, second.wait) == (whole.best_epoch, whole.wait)
