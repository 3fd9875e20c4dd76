"""Early stopping on a logged metric, with the best weights restored at the end.

Keras' ``EarlyStopping(restore_best_weights=True)``, as a :class:`~beyondfit.Callback`:
after every evaluation it compares the monitored value with the best so far; after
``patience`` evaluations without an improvement larger than ``min_delta`` it stops the run,
and when training ends (stopped or not) it loads the weights of the best evaluation back
into the model. Its state (best value, counter, best weights) is saved in checkpoints, so a
resumed run stops and restores exactly as the uninterrupted one would.

Example (the Python API)::

    stopper = EarlyStopping("val_loss", patience=10)
    engine = Engine(model, loss_fn, optimizer, callbacks=[stopper])
    engine.fit(train, epochs=500, val_data=val)   # ends early; model holds the best weights
    stopper.best, stopper.best_epoch, engine.last_val  # the restored model's val_ logs
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from beyondfit.core.callbacks import Callback
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.monitor import Monitor
from beyondfit.core.options import check_number
from beyondfit.core.state.checks import FieldError, check_fields, is_real

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine


class EarlyStopping(Callback):
    """Stop when ``monitor`` stops improving; optionally restore the best weights.

    Args:
        monitor: a logged name, normally a ``val_`` one (``"val_loss"``, ``"val_accuracy"``).
        mode: ``"min"`` (lower is better) or ``"max"``.
        patience: evaluations without improvement before stopping.
        min_delta: an improvement must beat the best by more than this (absolute).
        restore_best_weights: at the end of training, load the weights (parameters and
            buffers) of the best evaluation into the model and put that evaluation's logs in
            ``engine.last_val``. Not done when the run was interrupted (it will resume).
        start_from: evaluations to ignore at the start (a warm-up that should not count).
        start_logs: the validation logs of the weights training starts from, when the
            caller knows them (e.g. a model initialised at a baseline's solution); they must
            hold ``monitor``. Those weights then count as the best (epoch 0) until an
            evaluation beats them, so a run that never does ends with them restored.
            ``None``: the first evaluation sets the best.

    After training, ``best`` is the best value, ``best_epoch``/``best_step`` when it was
    reached (epochs done and optimizer steps at that evaluation), ``stopped`` whether this
    callback ended the run and ``restored`` whether the best weights were loaded back.
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        mode: str = "min",
        patience: int = 10,
        min_delta: float = 0.0,
        restore_best_weights: bool = True,
        start_from: int = 0,
        start_logs: Mapping[str, float] | None = None,
    ) -> None:
        self.tracked = Monitor(monitor, mode, min_delta, owner="early stopping")
        check_number("early stopping patience", patience, integer=True, at_least=1)
        check_number("early stopping start_from", start_from, integer=True, at_least=0)
        if start_logs is not None and monitor not in start_logs:
            raise BeyondfitError(
                f"early stopping start_logs {dict(start_logs)} lack the monitored {monitor!r}"
            )
        self.monitor = monitor
        self.mode = self.tracked.mode  # canonical
        self.patience = int(patience)
        self.min_delta = self.tracked.min_delta
        self.restore_best_weights = bool(restore_best_weights)
        self.start_from = int(start_from)
        self.start_logs = None if start_logs is None else {
            str(k): float(v) for k, v in start_logs.items()
        }
        self.tracked.best = self.tracked.worst  # any finite value beats it
        self.best_epoch = 0
        self.best_step = 0
        self.best_logs: dict[str, float] = {}
        self.wait = 0
        self.seen = 0  # evaluations so far
        self.stopped = False
        self.restored = False
        self._best_weights: dict[str, torch.Tensor] | None = None

    @property
    def best(self) -> float:
        """The best monitored value so far (``+inf``/``-inf`` before any)."""
        return self.tracked.best  # type: ignore[return-value]

    @best.setter
    def best(self, value: float) -> None:
        self.tracked.best = float(value)

    def on_fit_start(self, engine: Engine) -> None:
        """A new ``fit`` call: nothing restored yet; the starting weights may be the best.

        After a ``fit`` this callback stopped, another ``fit`` gets ``patience`` evaluations
        again (the best so far still counts); a resumed run keeps its count.
        """
        if self.stopped:
            self.wait = 0
        self.stopped = False
        self.restored = False
        fresh = engine.global_step == 0 and self.seen == 0  # the weights it starts from
        start = self.start_logs
        if fresh and start is not None and self.tracked.update(start[self.monitor]):
            self.best_logs = dict(start)
            if self.restore_best_weights:
                self._best_weights = self._copy_weights(engine)

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Compare this evaluation's value with the best; keep the weights or count a miss."""
        value = self.tracked.read(logs)
        self.seen += 1
        if self.seen <= self.start_from:
            return
        if math.isfinite(value) and self.tracked.update(value):
            self.best_epoch = engine.epoch + (1 if engine.data_exhausted else 0)
            self.best_step = engine.global_step
            self.best_logs = dict(logs)
            self.wait = 0
            if self.restore_best_weights:
                self._best_weights = self._copy_weights(engine)
            return
        self.wait += 1
        if self.wait >= self.patience:
            engine.should_stop = True
            self.stopped = True
            engine.stopped_by = (
                f"{self.monitor} did not improve for {self.patience} evaluations "
                f"(best {self.best:.4g} at epoch {self.best_epoch})"
            )

    def explains_stop(self, record: str, rows: Sequence[Mapping[str, float]]) -> bool | str | None:
        """The record this callback writes once its restored count of evaluations without
        improvement reached its patience."""
        if self.wait >= self.patience and record == (
                f"{self.monitor} did not improve for {self.patience} evaluations "
                f"(best {self.best:.4g} at epoch {self.best_epoch})"):
            return True
        if not record.startswith(f"{self.monitor} did not improve"):
            return None
        return (f"early stopping counted {self.wait} of its {self.patience} evaluations "
                f"without improvement, best {self.best:.4g}")

    @staticmethod
    def _copy_weights(engine: Engine) -> dict[str, torch.Tensor]:
        # A copy on the model's device: one per improvement, none per step.
        return {k: v.detach().clone() for k, v in engine.model.state_dict().items()}

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Load the best weights back (unless interrupted: the run continues later)."""
        if engine.interrupted or not self.restore_best_weights or self._best_weights is None:
            return
        engine.model.load_state_dict(self._best_weights)
        engine.last_val = dict(self.best_logs)
        self.restored = True

    def final_report(self, engine: Engine) -> dict[str, Any] | None:
        """For the run's final record: whose weights the model ends with (``None``: the last)."""
        if not self.restored:
            return None
        whose = (
            "the starting weights (no evaluation beat them)" if self.best_epoch == 0
            else f"restored best weights of epoch {self.best_epoch}, step {self.best_step}"
        )
        return {
            "values_from": whose,
            "early_stopping": {
                "monitor": self.monitor, "mode": self.mode, "best": self.best,
                "best_epoch": self.best_epoch, "best_step": self.best_step,
                "stopped": self.stopped,
            },
        }

    def state_dict(self) -> dict[str, Any]:
        """Best value, counters and best weights: what a resumed run needs to decide alike."""
        return {
            "best": self.best,
            "best_epoch": self.best_epoch,
            "best_step": self.best_step,
            "best_logs": dict(self.best_logs),
            "wait": self.wait,
            "seen": self.seen,
            "best_weights": self._best_weights,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict` (checked first: its types and ranges)."""
        check_fields(state, {"best": "real", "best_epoch": "count", "best_step": "count",
                             "wait": "count", "seen": "count"})
        logs, weights = state.get("best_logs", {}), state.get("best_weights")
        if not isinstance(logs, Mapping) or not all(is_real(v) for v in logs.values()):
            raise FieldError("best_logs is not a mapping of names to numbers")
        if weights is not None and not (isinstance(weights, Mapping) and all(
                isinstance(v, torch.Tensor) for v in weights.values())):
            raise FieldError("best_weights is not a mapping of names to tensors")
        self.best = float(state["best"])
        self.best_epoch = int(state["best_epoch"])
        self.best_step = int(state["best_step"])
        self.best_logs = {str(k): float(v) for k, v in dict(state["best_logs"]).items()}
        self.wait = int(state["wait"])
        self.seen = int(state["seen"])
        weights = state.get("best_weights")
        self._best_weights = dict(weights) if weights is not None else None
