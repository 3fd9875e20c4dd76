"""Hooks around the loop: the engine calls them, they never reach into the step.

A callback overrides any of the ``on_*`` methods. Per-step hooks are called only on
callbacks that define them, so an unused hook costs nothing on the hot path.
"""

from __future__ import annotations

import operator
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from beyondfit.core.errors import BeyondfitError

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine


class Callback:
    """Base class: every hook is a no-op. ``logs`` are plain floats, already synchronised.

    Under DDP every rank runs the callbacks with the same ``logs`` (reduced over ranks), so
    decisions such as stop rules agree; callbacks that write (files, console, plots) set
    ``rank_zero_only = True`` and run on rank 0 alone.
    """

    #: Run on rank 0 only when several processes train together (writers, printers).
    rank_zero_only: bool = False

    def on_fit_start(self, engine: Engine) -> None:
        """Training is about to start (or resume)."""

    def on_epoch_start(self, engine: Engine) -> None:
        """A pass over the training data begins."""

    def on_step_end(self, engine: Engine) -> None:
        """An optimizer step was applied (``engine.global_step`` already counts it)."""

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Every ``log_every`` optimizer steps: running means of the current epoch."""

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """An evaluation finished; ``logs`` keys start with ``val_``."""

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """A pass over the training data ended; ``logs`` is this epoch's history row."""

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Training ended (finished, stopped by a rule, or reached ``max_steps``)."""

    def explains_stop(self, record: str, rows: Sequence[Mapping[str, float]]) -> bool | str | None:
        """Asked on resume about a loaded run's stop record (``engine.stopped_by``), with the
        run's last logged rows (the last evaluation's, the last epoch's): ``True`` when this
        callback wrote ``record`` and its state or the rows show it holds, a reason (text)
        when the record is of this callback's kind but does not hold, ``None`` when it is
        not this callback's. A callback of one's own that stops runs answers for its
        records, or a resume refuses them as it refuses a forged one."""
        return None


class Stopwatch(Callback):
    """Seconds spent training, from each ``on_fit_start`` to its ``on_fit_end``, summed over
    fits: what run summaries call training time, apart from start-up and reports. Put it
    first among the callbacks, so that it counts the others' start and not their end."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._since: float | None = None

    def on_fit_start(self, engine: Engine) -> None:
        """Start the clock."""
        self._since = time.perf_counter()

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Stop the clock."""
        if self._since is not None:
            self.seconds += time.perf_counter() - self._since
            self._since = None


def overrides(callback: Callback, hook: str) -> bool:
    """True when ``callback`` defines ``hook`` itself rather than inheriting the no-op."""
    return getattr(type(callback), hook, None) is not getattr(Callback, hook)


_COMPARISONS = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}
_RULE = re.compile(r"^\s*([A-Za-z_][\w/.-]*)\s*(>=|<=|==|>|<)\s*([-+0-9.eE]+|inf|-inf)\s*$")


class StopRule(Callback):
    """Stop training once a logged metric satisfies a comparison, e.g. ``"val_loss<=0.1"``.

    The rule is checked after every evaluation and at every epoch end; the step that
    satisfied it is the last one. ``engine.stopped_by`` records the rule and the value. A
    rule naming a metric the run does not log is an error at the first evaluation (``val_``
    names) or the first epoch end, not a rule that silently never fires.
    """

    #: How to write a rule on the command line: Hydra's grammar reads ``<``, ``=`` and quotes
    #: itself, so the whole override goes in single quotes and the rule in double quotes.
    EXAMPLE = "'train.stop=\"val_loss<=0.1\"'"

    def __init__(self, rule: str) -> None:
        match = _RULE.match(str(rule))
        if not match:
            raise BeyondfitError(
                f"stop rule {rule!r} is not of the form METRIC OP NUMBER with OP one of "
                f">=, <=, >, <, == (on the command line: {self.EXAMPLE})"
            )
        self.metric, self.op, value = match.groups()
        self.value = float(value)
        self.rule = f"{self.metric}{self.op}{value}"

    def holds(self, logs: Mapping[str, float]) -> bool:
        """Whether ``logs`` satisfy the rule (``False`` when they lack its metric)."""
        value = logs.get(self.metric)
        return value is not None and bool(_COMPARISONS[self.op](value, self.value))

    def _check(self, engine: Engine, logs: Mapping[str, float]) -> None:
        if self.holds(logs):
            engine.should_stop = True
            engine.stopped_by = f"{self.rule} ({self.metric}={logs[self.metric]:.4g})"

    def _require(self, logs: Mapping[str, float]) -> None:
        if self.metric in logs:
            return
        logged = ", ".join(sorted(k for k in logs if k not in ("epoch", "step"))) or "nothing"
        raise BeyondfitError(
            f"stop rule {self.rule!r} names {self.metric!r}, which this run does not log "
            f"(logged: {logged}); name one of those, e.g. {self.EXAMPLE}"
        )

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Check the rule against the evaluation's ``val_`` logs."""
        if self.metric.startswith("val_"):
            self._require(logs)
        self._check(engine, logs)

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Check the rule against the epoch's logs (train and validation)."""
        self._require(logs)
        self._check(engine, logs)

    def explains_stop(self, record: str, rows: Sequence[Mapping[str, float]]) -> bool | str | None:
        """The record this rule writes for a logged value that satisfies it."""
        values = [(row, row[self.metric]) for row in rows if self.metric in row]
        for row, value in values:
            if self.holds(row) and record == f"{self.rule} ({self.metric}={value:.4g})":
                return True
        if not record.startswith(f"{self.rule} ("):
            return None
        if not values:
            return f"no {self.metric} was logged yet"
        row, value = values[0]
        return (f"the logged {self.metric} is {value:.4g}" if self.holds(row) else
                f"the logged {self.metric}={value:.4g} does not satisfy {self.rule}")


def state_key(callback: Callback) -> str:
    """The name a callback's state is saved under in a checkpoint's ``callbacks``: its
    ``state_key`` attribute, else its class name."""
    return getattr(callback, "state_key", type(callback).__name__)
