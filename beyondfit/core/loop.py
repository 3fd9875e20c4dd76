"""The epoch loop of :meth:`Engine.fit <beyondfit.core.engine.Engine.fit>`, as straight-line
code: epochs of steps; after each step its log row, evaluation, step budget and
``on_step_end``; after each epoch its row of the history.

It holds no resume branches: which batches an epoch still has, and whether a loaded run had
stopped, are the run position's to say (:mod:`beyondfit.core.state.position`); one micro-batch is
the window's (:mod:`beyondfit.core.step`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import overrides
from beyondfit.core.errors import BeyondfitError, no_train_batches
from beyondfit.core.evaluation import EvaluationInterrupted

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine


class EpochLoop:
    """One ``fit``: ``engine`` trained on to ``epochs`` and ``max_steps`` (totals from the
    run's start), evaluated on ``val_data`` every ``eval_every`` steps or at epoch ends."""

    def __init__(self, engine: Engine, max_steps: int | None, val_data: Any,
                 eval_every: int | None) -> None:
        self.engine = engine
        self.max_steps = max_steps
        self.val_data = val_data
        self.eval_every = eval_every
        # Only the callbacks that have a per-step hook are called per step.
        self.step_hooks = [cb for cb in engine.callbacks if overrides(cb, "on_step_end")]

    def run(self, train_data: Any, epochs: int | None) -> list[dict[str, float]]:
        """Train until ``epochs``, ``max_steps`` or a stop; returns the engine's history."""
        engine, state, position = self.engine, self.engine.state, self.engine.position
        engine.should_stop, engine.stopped_by, engine.interrupted = False, None, None
        self.emit("on_fit_start")
        if self.max_steps is not None and state.global_step >= self.max_steps:
            engine.should_stop = True
        stopped = position.take_stop(engine.history)  # a loaded run that had stopped
        if stopped is not None:
            engine.should_stop, engine.stopped_by = True, stopped
        one_shot = isinstance(train_data, Iterator)  # a generator: one pass only
        first_epoch = state.epoch
        while ((epochs is None or state.epoch < epochs)
               and (not engine.should_stop or position.closing)):
            continuing = state.batch_in_epoch > 0  # an interrupted epoch, resumed
            if not continuing:
                engine.train_metrics.reset()
            self.emit("on_epoch_start")
            engine.strategy.set_epoch(train_data, state.epoch)  # distributed samplers reshuffle
            for batch in position.epoch_batches(train_data):
                before = state.global_step
                engine.train_step(batch)  # (a subclass or a test may wrap it)
                state.batch_in_epoch += 1
                if state.global_step == before:
                    continue
                self.after_step()
                if engine.should_stop:
                    break
            else:
                position.ran_out()
                if engine.window.micro and engine.window.close():  # cut short by the data's end
                    self.after_step()
            if engine.interrupted:
                break  # the epoch stays open: resuming continues it mid-way
            if state.batch_in_epoch == 0 and not continuing:
                done = state.epoch - first_epoch
                raise BeyondfitError(no_train_batches(train_data, one_shot, done))
            self.end_epoch(finished=not engine.should_stop or self.data_ran_out())
        self.emit("on_fit_end", engine.history)
        return engine.history

    def after_step(self) -> None:
        """After a step: log row, evaluation, step budget, then ``on_step_end``."""
        engine = self.engine
        step = engine.state.global_step
        if step % engine.log_every == 0:
            self.emit("on_log", train_logs(engine, interval=True))
        if self.val_data is not None and self.eval_every and step % self.eval_every == 0:
            self.evaluate()
            engine.state.evaluated_at = step
        if self.max_steps is not None and step >= self.max_steps:
            engine.should_stop = True
        # Last, so a checkpoint written here includes this step's log rows.
        for callback in self.step_hooks:
            callback.on_step_end(engine)
        # Under DDP a stop on one rank (a signal, a callback) stops every rank here: one
        # small host-side all-reduce per step, only when there are several ranks.
        if engine.strategy.is_distributed:
            engine.should_stop, engine.interrupted = engine.strategy.agree_stop(
                engine.should_stop, engine.interrupted)

    def end_epoch(self, finished: bool) -> None:
        """The epoch's row: train means, then current ``val_`` values (evaluated now unless
        this step was), ``epoch`` and ``step``. A ``finished`` epoch is counted done."""
        engine, state = self.engine, self.engine.state
        logs = train_logs(engine)
        if self.val_data is not None and state.evaluated_at != state.global_step:
            self.evaluate()  # every history row carries current val_ values
            if engine.interrupted:
                return  # stopped in that evaluation: the epoch stays open
        logs.update(engine.last_val)
        logs["epoch"] = float(state.epoch + 1)
        logs["step"] = float(state.global_step)
        if finished:
            state.epoch += 1
            state.batch_in_epoch = 0
        engine.history.append(logs)
        self.emit("on_epoch_end", logs)

    def data_ran_out(self) -> bool:
        """Stopped on the data's last batch: the epoch is done."""
        try:
            return self.engine.state.batch_in_epoch >= len(self.engine.train_data)
        except TypeError:
            return False

    def evaluate(self) -> None:
        """Score ``val_data``, step the plateau schedulers on it, then ``on_eval_end``. A stop
        signal during it (:class:`EvaluationInterrupted`, a confirming evaluation's in
        ``on_eval_end`` included) ends it unscored: the run stops as after a step, its epoch
        left open, and a resume evaluates again."""
        engine = self.engine
        try:
            values = engine.evaluate(self.val_data)
            for update in engine.updates:
                if update.plateau:
                    update.scheduler.step(update.tracked.read(values))  # type: ignore[union-attr]
            engine.last_val = values
            self.emit("on_eval_end", engine.last_val)
        except EvaluationInterrupted:
            engine.should_stop = True
            engine.interrupted = engine.interrupted or "interrupted"

    def emit(self, hook: str, *args: Any) -> None:
        """Call ``hook`` of every callback, in order, with the engine."""
        for callback in self.engine.callbacks:
            getattr(callback, hook)(self.engine, *args)


def train_logs(engine: Engine, interval: bool = False) -> dict[str, float]:
    """The tracked means (the epoch's; with ``interval``, since the last log row: what a log
    row describes), each optimizer's learning rate, and what the training data reports
    about itself: a data source's ``metrics() -> {name: float}`` (a collector's ``env_steps``,
    episode returns since the last row); under DDP the names in its ``metric_totals`` are
    summed over ranks, the others averaged."""
    logs = engine.train_metrics.compute(interval=interval)
    for update in engine.updates:
        logs[update.prefix + "lr"] = update.lr()
    report = getattr(engine.train_data, "metrics", None)
    if callable(report):
        totals = getattr(engine.train_data, "metric_totals", ())
        logs.update(engine.strategy.reduce_report(report(), totals))
    return logs
