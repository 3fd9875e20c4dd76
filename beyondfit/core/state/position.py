"""Where a run stands, and how the next ``fit`` goes on from there: the one owner of resume.

:class:`TrainState` holds a run's counters. :class:`RunPosition` holds them and what a loaded
checkpoint asks of the next ``fit``, as Keras' ``BackupAndRestore`` does for its loop: the
engine's epoch loop asks it which batches an epoch has and holds no resume branches itself.

A *step* is one engine step (``global_step``): ``accumulate`` micro-batches, after which every
optimizer due in it steps once; a *micro-batch* is one call of the loss closure
(``batch_in_epoch`` counts them).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from beyondfit.core.state.checks import MAX_COUNT, FieldError, fail, is_count


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

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` in place; counters an older checkpoint lacks take their
        default. Checked first: whole numbers in range, an evaluation no later than the step."""
        for name, value in state.items():
            if name == "data_exhausted":
                if not isinstance(value, bool):
                    raise fail(name, value, "true or false")
            elif not is_count(value, -1 if name == "evaluated_at" else 0):
                raise fail(name, value, f"a whole number in [0, {MAX_COUNT}]")
        if state.get("evaluated_at", -1) > state.get("global_step", 0):
            raise fail("evaluated_at", state["evaluated_at"], "at most global_step")
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


class RunPosition:
    """A run's counters, and how the next ``fit`` continues them.

    A fit of a fresh engine trains *more*, as Keras' ``fit`` does: its ``epochs`` and
    ``max_steps`` count from where the engine stands. After :meth:`restored` (a checkpoint
    was loaded) the next fit *finishes the saved run* instead: both count from the run's
    start, the data source continues from its saved position, an interrupted epoch from its
    next batch, and a run the checkpoint recorded as stopped (a stop rule, early stopping)
    trains no more: only its stopped epoch's end is left, when the checkpoint came before it.
    """

    def __init__(self) -> None:
        self.counters = TrainState()
        self.loaded = False  #: the next fit finishes a loaded run (see targets)
        self._stop: str | None = None  # what stopped the loaded run, if anything
        self._data_state: Any = None  # the loaded data position, until the data is known
        #: The next epoch only closes the stopped epoch (set by :meth:`take_stop`).
        self.closing = False
        self._closing_now = False  # the epoch running only closes a stopped one

    def restored(self, stop: Any, data_state: Any, train_data: Any) -> None:
        """A checkpoint was loaded: its recorded stop and data position (loaded into
        ``train_data`` now when that is known, else by the next fit's :meth:`attach`)."""
        self.loaded = True
        self._stop = stop if isinstance(stop, str) else None
        self._data_state = data_state
        self.attach(train_data)

    def extend(self) -> None:
        """Train on past the stop the loaded checkpoint recorded (``resume_extend=true``)."""
        self._stop = None

    def targets(self, epochs: int | None, max_steps: int | None) -> tuple[int | None, int | None]:
        """A fit's ``epochs`` and ``max_steps`` as totals from the run's start (neither
        given: one epoch). A partly done epoch is finished first and counts as one."""
        if epochs is None and max_steps is None:
            epochs = 1
        if not self.loaded:  # "more", counted from where this engine stands
            state = self.counters
            epochs = None if epochs is None else state.epoch + epochs - (
                1 if state.batch_in_epoch else 0)
            max_steps = None if max_steps is None else state.global_step + max_steps
        self.loaded = False
        return epochs, max_steps

    def attach(self, train_data: Any) -> None:
        """Give a loaded data position to the data source that will be trained on."""
        if self._data_state is not None and hasattr(train_data, "load_state_dict"):
            state, self._data_state = self._data_state, None
            train_data.load_state_dict(state)

    def take_stop(self, history: list[dict[str, float]]) -> str | None:
        """At the start of a fit: what stopped the loaded run (it trains no more), or
        ``None``. Sets :attr:`closing` when the stopped epoch's end is still to be logged."""
        stop, self._stop = self._stop, None
        self.closing = stop is not None and not (
            history and history[-1].get("step") == self.counters.global_step)
        return stop

    def epoch_batches(self, train_data: Iterable[Any]) -> Iterable[Any]:
        """The batches the epoch about to run still has: none when it only closes a stopped
        epoch or its data already ran out (the checkpoint came in its last window's step),
        the rest of a plain iterable (which cannot seek) for an interrupted epoch, else all.
        Call :meth:`ran_out` when they have run out."""
        state, closing = self.counters, self.closing
        self.closing, self._closing_now = False, closing
        continuing = state.batch_in_epoch > 0
        if not continuing:
            state.evaluated_at = -1
        exhausted, state.data_exhausted = state.data_exhausted, False
        if closing or (continuing and exhausted):
            return ()
        if continuing and not hasattr(train_data, "load_state_dict"):
            return itertools.islice(train_data, state.batch_in_epoch, None)
        return train_data

    def ran_out(self) -> None:
        """The epoch's batches ran out: its pass over the data has ended (not so for an
        epoch that only closed a stopped one: its data was never read)."""
        self.counters.data_exhausted = not self._closing_now


def check_stop(record: Any, callbacks: Iterable[Any], history: list[dict[str, float]],
               last_val: Mapping[str, float]) -> None:
    """A loaded run's stop record (``stopped_by``) must be one its own logs show: each
    callback is asked (:meth:`~beyondfit.core.callbacks.Callback.explains_stop`) with the last
    evaluation's and the last epoch row's values; one must answer that it wrote the record and
    that it holds. Else the record would end the resumed run as "stopped early" by a rule that
    never fired: :class:`FieldError`, with the reason the record's own kind of callback gave."""
    if record is None:
        return
    if not isinstance(record, str):
        raise fail("stopped_by", record, "a stop record (text) or null")
    rows = [row for row in (last_val, history[-1] if history else None) if row]
    said: list[str] = []
    for callback in callbacks:
        answer = callback.explains_stop(record, rows) if hasattr(
            callback, "explains_stop") else None
        if answer is True:
            return
        if isinstance(answer, str):
            said.append(answer)
    why = said[0] if said else ("no callback of this run wrote it (a stopping callback of "
                                "one's own answers for its records with explains_stop)")
    shown = repr(record) if len(record) <= 80 else repr(record[:77] + "...")
    raise FieldError(f"stopped_by={shown} is not a stop this run's logs show ({why}); resume "
                     "from another checkpoint")
