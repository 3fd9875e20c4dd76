"""What a checkpoint restores: the run's counters (:class:`TrainState`, one ``state_dict``)
and the engine's whole state (:class:`Checkpointable`).

A *step* is one engine step (``global_step``): ``accumulate`` micro-batches, after which every
optimizer due in it steps once; a *micro-batch* is one call of the loss closure
(``batch_in_epoch`` counts them).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from beyondfit.core.callbacks import state_key
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.seeding import rng_state, set_rng_state
from beyondfit.core.serialization import atomic_save, check_state_fits, safe_load
from beyondfit.core.state_checks import check_checkpoint_fields


@dataclass
class TrainState:
    """Counters of a run, all saved in checkpoints.

    Attributes:
        global_step: optimizer steps applied.
        epoch: completed passes over the training data.
        batch_in_epoch: micro-batches consumed in the current epoch.
        skipped_steps: micro-batches dropped for non-finite values.
        evaluated_at: optimizer step of this epoch's last evaluation (-1: none yet).
        data_exhausted: this epoch's pass over the data has ended (only its end remains).
    """

    global_step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    skipped_steps: int = 0
    evaluated_at: int = -1
    data_exhausted: bool = False

    def state_dict(self) -> dict[str, Any]:
        """The counters as plain values."""
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` in place; counters an older checkpoint lacks take their
        default."""
        for field in fields(self):
            value = state.get(field.name, field.default)
            setattr(self, field.name, type(field.default)(value))


class Counter:
    """``engine.global_step`` and friends: a view of the field of ``engine.state``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, engine: Any, owner: type | None = None) -> Any:
        return self if engine is None else getattr(engine.state, self.name)

    def __set__(self, engine: Any, value: Any) -> None:
        setattr(engine.state, self.name, value)


class Checkpointable:
    """What an :class:`~beyondfit.core.engine.Engine` saves and restores: a base class of the
    engine, relying on the attributes it sets up (model, updates, counters, metrics, RNG,
    the data position and the callbacks' own states)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: weights, optimizers, counters, RNG, data."""
        state: dict[str, Any] = {
            "model": self.model.state_dict(),
            "updates": {u.name: u.state_dict() for u in self.updates},
            "counters": self.state.state_dict(),
            "last_val": dict(self.last_val),
            "stopped_by": self.stopped_by,  # a stop rule or early stopping ended the run
            "metrics": self.train_metrics.state_dict(),
            "history": [dict(row) for row in self.history],
            "rng": rng_state(),
        }
        if self.precision.scaler is not None:
            state["scaler"] = self.precision.state_dict()
        data_state = getattr(self.train_data, "state_dict", None)
        if callable(data_state):
            state["data"] = data_state()
        state["callbacks"] = {
            state_key(cb): cb.state_dict()
            for cb in self.callbacks
            if callable(getattr(cb, "state_dict", None))
        }
        return state

    #: The stop a loaded checkpoint recorded (``stopped_by``), until the next fit takes it.
    resumed_stop: str | None = None

    def take_resumed_stop(self) -> bool:
        """At the start of a fit: a checkpoint saved after a stop (a stop rule, early stopping)
        trains no more. Sets ``should_stop``/``stopped_by``; True when the stopped epoch's end
        is still to be logged (the checkpoint came before it)."""
        stopped, self.resumed_stop = self.resumed_stop, None
        if stopped is None:
            return False
        end_only = not (self.history and self.history[-1].get("step") == self.state.global_step)
        self.should_stop, self.stopped_by = True, stopped
        return end_only

    def load_state_dict(self, state: Mapping[str, Any], source: str = "checkpoint") -> None:
        """Restore :meth:`state_dict`, whole or not at all.

        The fields are checked first (a model or optimizer mismatch, a counter out of range);
        then every part loads its own entry, and each part's ``load_state_dict`` checks its own
        invariants. Any failure, in any part, puts back what was there before and is one
        :class:`BeyondfitError` naming the ``source`` and the field: a stateful object of one's
        own (a callback, a data source) gets this without being registered anywhere.
        """
        check_state_fits(state, self.model, {u.name: u.optimizer for u in self.updates}, source)
        check_checkpoint_fields(state, self, source)  # types, ranges, shapes, finiteness
        data = getattr(self.train_data, "load_state_dict", None)
        if callable(data) and state.get("data") is None:
            raise BeyondfitError(f"{source} cannot be restored: data: missing, but this run's "
                                 f"training data ({type(self.train_data).__name__}) keeps its "
                                 "position in checkpoints; resume from a checkpoint of this run")
        before = copy.deepcopy(self.state_dict())  # tensors cloned: a load writes in place
        pending = self._pending_data_state
        try:
            self._restore(state, source)
        except _PartError as failed:
            try:
                self._restore(before, source)
            finally:
                self._pending_data_state = pending
            raise BeyondfitError(f"{source} cannot be restored, nothing was changed: "
                                 f"{failed.field}: {failed.reason}") from None
        self.window.reset()
        self._resumed = True

    def _restore(self, state: Mapping[str, Any], source: str) -> None:
        """Load every part's entry of ``state``; a failing part raises :class:`_PartError`."""
        with _part("model"):
            self.model.load_state_dict(state["model"])
        saved = state["updates"]
        for update in self.updates:
            with _part(f"updates[{update.name!r}]"):
                update.load_state_dict(saved[update.name], source)
        if "scaler" in state:
            with _part("scaler"):
                self.precision.load_state_dict(state["scaler"])
        self.state.load_state_dict(state["counters"])  # in place: the window holds it
        self.last_val = dict(state.get("last_val", {}))
        stopped = state.get("stopped_by")
        # The next fit trains no more (see Engine._fit); resume_extend clears it.
        self.resumed_stop = stopped if isinstance(stopped, str) else None
        with _part("metrics"):
            self.train_metrics.load_state_dict(state["metrics"], self.device)
        self.history = [dict(row) for row in state.get("history", [])]
        if "rng" in state:
            set_rng_state(state["rng"])
        saved_callbacks = state.get("callbacks", {})
        for cb in self.callbacks:
            key = state_key(cb)
            if key in saved_callbacks and callable(getattr(cb, "load_state_dict", None)):
                with _part(f"callbacks.{key}"):
                    cb.load_state_dict(saved_callbacks[key])
        self._pending_data_state = state.get("data")
        if self._pending_data_state is not None and hasattr(self.train_data, "load_state_dict"):
            with _part("data"):
                self.train_data.load_state_dict(self._pending_data_state)
            self._pending_data_state = None

    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """Write :meth:`state_dict` (plus ``extra``, e.g. the resolved config) atomically."""
        state = self.state_dict()
        if extra:
            state.update(extra)
        return atomic_save(state, path)

    def load(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint written by :meth:`save` (``weights_only=True``); returns it.

        The next :meth:`fit` then finishes the saved run (its ``epochs`` count from the
        run's start)."""
        state = safe_load(path)
        self.load_state_dict(state, source=f"checkpoint {str(path)!r}")
        return state


class _PartError(Exception):
    """A part of the engine refused its checkpoint entry (``field``: which, ``reason``: why)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field, self.reason = field, reason


@contextmanager
def _part(field: str) -> Iterator[None]:
    """Name the checkpoint field whose load failed, with the first line of the reason."""
    try:
        yield
    except Exception as exc:  # any part's own check, or what a bad entry made it raise
        text = str(exc).strip().splitlines()
        reason = text[0] if text else type(exc).__name__
        if not isinstance(exc, BeyondfitError):
            reason = f"{type(exc).__name__}: {reason}"
        raise _PartError(field, reason) from None
