"""The best value of one logged metric: what everything that "keeps the best" shares.

Keras' ``MonitorCallback``, as a small object the others hold: early stopping (stop when it
stops improving, restore its weights), the checkpointer's ``best.pt``, a search's objective
(the run's last value, the worst possible one when it diverged) and a ``ReduceLROnPlateau``
scheduler (the value it steps on) all name a metric, a direction and read it from logs here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number, check_option


class Monitor:
    """One metric, the direction in which it improves, and the best value seen so far.

    Args:
        metric: a logged name (``"val_loss"``, ``"val_return"``).
        mode: ``"min"`` (lower is better) or ``"max"``.
        min_delta: an improvement must beat the best by more than this (absolute).
        owner: who monitors, for messages (``"early stopping"``, ``"ReduceLROnPlateau"``).
        key: how the owner's options are named in messages (``"checkpoint."`` gives
            ``checkpoint.mode='avg'``); default ``owner`` and a space.
        fix: what a missing metric's message suggests.
    """

    def __init__(self, metric: str, mode: str = "min", min_delta: float = 0.0, *,
                 owner: str = "monitor", key: str | None = None,
                 fix: str = "monitor one of those") -> None:
        key = f"{owner} " if key is None else key
        if not isinstance(metric, str) or not metric:
            raise BeyondfitError(f"{key}monitor={metric!r}; name a logged metric")
        mode = check_mode(mode, key)  # canonical: "MAX" is "max"
        self.metric = metric
        self.mode = mode
        self.min_delta = float(check_number(f"{key}min_delta", min_delta, at_least=0))
        self.owner = owner
        self.fix = fix
        #: The best value so far (``None``: nothing seen yet).
        self.best: float | None = None

    @property
    def worst(self) -> float:
        """The value nothing can be worse than: ``+inf`` to minimize, ``-inf`` to maximize."""
        return worst_value(self.mode)

    def beats(self, value: float, reference: float | None = None) -> bool:
        """Is ``value`` better than ``reference`` (default: the best so far) by more than
        ``min_delta``? Anything but NaN beats ``None``; NaN never wins."""
        reference = self.best if reference is None else reference
        if value != value:  # NaN
            return False
        if reference is None:
            return True
        if self.mode == "min":
            return value < reference - self.min_delta
        return value > reference + self.min_delta

    def update(self, value: float) -> bool:
        """Record ``value`` as the best if it :meth:`beats` it; returns whether it did."""
        if not self.beats(value):
            return False
        self.best = float(value)
        return True

    def read(self, logs: Mapping[str, float]) -> float:
        """The metric's value in ``logs``; a clear error naming what was logged otherwise."""
        if self.metric not in logs:
            raise BeyondfitError(
                f"{self.owner} monitors {self.metric!r}, which the evaluation does not log (it "
                f"logs: {', '.join(sorted(logs))}); {self.fix}"
            )
        return float(logs[self.metric])

    def last(self, history: Iterable[Mapping[str, float]]) -> float | None:
        """The metric's last logged value in ``history`` rows (``None``: never logged)."""
        for row in reversed(list(history)):
            value = row.get(self.metric)
            if value is not None:
                return float(value)
        return None


def check_mode(mode: str, key: str = "") -> str:
    """``mode`` if it is ``"min"`` or ``"max"``; an error naming ``{key}mode`` otherwise."""
    return check_option("Monitor.mode", mode, f"{key}mode")


def worst_value(mode: str) -> float:
    """``+inf`` when lower is better (``"min"``), ``-inf`` when higher is."""
    return math.inf if mode == "min" else -math.inf
