"""What a checkpoint holds of an engine, and its restore: whole or not at all
(:class:`Checkpointable`). Where the run goes on from is :mod:`beyondfit.core.state.position`'s."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from beyondfit.core.callbacks import state_key
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.seeding import rng_state, set_rng_state
from beyondfit.core.state.checks import FieldError, fail, is_real
from beyondfit.core.state.position import check_stop
from beyondfit.core.state.serialization import (
    atomic_save,
    check_state_fits,
    is_plain_extra_state,
    nonfinite_entries,
    safe_load,
)


class Checkpointable:
    """What an :class:`~beyondfit.core.engine.Engine` saves and restores: a base class of the
    engine, relying on the attributes it sets up (model, updates, counters, metrics, RNG,
    the data position and the callbacks' own states)."""

    def state_dict(self, data: bool = True) -> dict[str, Any]:
        """Everything needed to continue exactly: weights, optimizers, counters, RNG, data
        (``data=False``: all but the training data's own state, a replay buffer's contents
        say, for a file that keeps the model rather than the run's position)."""
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
        if data and callable(data_state):
            state["data"] = data_state()
        state["callbacks"] = {
            state_key(cb): cb.state_dict()
            for cb in self.callbacks
            if callable(getattr(cb, "state_dict", None))
        }
        return state

    def load_state_dict(self, state: Mapping[str, Any], source: str = "checkpoint") -> None:
        """Restore :meth:`state_dict`, whole or not at all.

        Its keys and optimizer kinds are checked first (another model, another optimizer);
        then every part loads its own entry, and each part's ``load_state_dict`` checks its own
        invariants (types, ranges, shapes, finiteness: a checksum proves integrity, not who
        wrote the file). Any failure, in any part, puts back what was there before and is one
        :class:`BeyondfitError` naming the ``source`` and the field: a stateful object of one's
        own (a callback, a data source) gets this without being registered anywhere.
        """
        check_state_fits(state, self.model, {u.name: u.optimizer for u in self.updates}, source)
        data = getattr(self.train_data, "load_state_dict", None)
        if callable(data) and state.get("data") is None:
            raise BeyondfitError(f"{source} cannot be restored: data: missing, but this run's "
                                 f"training data ({type(self.train_data).__name__}) keeps its "
                                 "position in checkpoints; resume from a checkpoint of this run")
        before = copy.deepcopy(self.state_dict())  # tensors cloned: a load writes in place
        position = copy.copy(self.position.__dict__)
        try:
            self._restore(state, source)
        except _PartError as failed:
            try:
                self._restore(before, source)
            except _PartError as own:  # this engine's own state fails a check (NaN weights)
                raise BeyondfitError(
                    f"{source} cannot be restored: {failed.field}: {failed.reason}; and this "
                    f"engine's own state could not be put back ({own.field}: {own.reason}): "
                    "build the engine again") from None
            finally:
                self.position.__dict__.update(position)
            raise BeyondfitError(f"{source} cannot be restored, nothing was changed: "
                                 f"{failed.field}: {failed.reason}") from None
        self.window.reset()

    def _restore(self, state: Mapping[str, Any], source: str) -> None:
        """Load every part's entry of ``state``; a failing part raises :class:`_PartError`."""
        with _part("model"):
            check_weights(state["model"], self.model)
            self.model.load_state_dict(state["model"])
        saved = state["updates"]
        for update in self.updates:
            with _part(f"updates[{update.name!r}]"):
                update.load_state_dict(saved[update.name], source)
        if "scaler" in state:
            with _part("scaler"):
                self.precision.load_state_dict(state["scaler"])
        with _part("counters"):
            self.state.load_state_dict(state["counters"])  # in place: the window holds it
        with _part("history"):
            self.last_val = log_row(state.get("last_val", {}), "last_val")
            history = state.get("history", [])
            if not isinstance(history, list):
                raise fail("history", history, "a list of rows")
            self.history = [log_row(row, f"row {i}") for i, row in enumerate(history)]
        with _part("metrics"):
            self.train_metrics.load_state_dict(state["metrics"], self.device)
        if "rng" in state:
            with _part("rng"):
                set_rng_state(state["rng"])
        saved_callbacks = state.get("callbacks", {})
        if not isinstance(saved_callbacks, Mapping):
            raise _PartError("callbacks", "not a mapping")
        for cb in self.callbacks:
            key = state_key(cb)
            if key in saved_callbacks and callable(getattr(cb, "load_state_dict", None)):
                with _part(f"callbacks.{key}"):
                    cb.load_state_dict(saved_callbacks[key])
        with _part("stopped_by"):  # after the callbacks and logs it must agree with
            check_stop(state.get("stopped_by"), self.callbacks, self.history, self.last_val)
        with _part("data"):  # the next fit goes on from here (core/state/position.py)
            self.position.restored(state.get("stopped_by"), state.get("data"), self.train_data)

    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None,
             data: bool = True) -> Path:
        """Write :meth:`state_dict` (plus ``extra``, e.g. the resolved config) atomically;
        ``data=False`` leaves the training data's state out (see :meth:`state_dict`)."""
        state = self.state_dict(data=data)
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


def check_weights(weights: Mapping[str, Any], model: Any) -> None:
    """Every entry a tensor (or a module's plain extra state), every parameter finite."""
    for name, value in weights.items():
        if not isinstance(value, torch.Tensor) and not is_plain_extra_state(name, value):
            raise fail(name, type(value).__name__, "a tensor")
    params = [name for name, _ in model.named_parameters()]
    bad = nonfinite_entries((n, weights[n]) for n in params if n in weights)
    if bad:
        raise FieldError(f"{', '.join(bad)} holds values that are not finite (NaN or inf)")


def log_row(row: Any, field: str) -> dict[str, float]:
    """A history row or ``last_val``: names to numbers."""
    if not isinstance(row, Mapping) or not all(
            isinstance(k, str) and is_real(v) for k, v in row.items()):
        raise fail(field, row, "a mapping of names to numbers")
    return dict(row)


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
