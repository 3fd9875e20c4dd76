"""The non-finite check: what a NaN or infinite loss or gradient does to a run.

``"raise"`` stops at once, naming the step and the term; ``"skip"`` drops that micro-batch
(or that optimizer's update), counts it in ``skipped_steps`` and stops after ``max_skips`` in
a row; ``"ignore"`` never looks (no host sync per step).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.metrics import MetricTracker
from beyondfit.core.options import check_option
from beyondfit.core.state.position import TrainState

log = logging.getLogger("beyondfit.core.engine")



class NonFiniteCheck:
    """The policy for non-finite values and its one piece of state, the skips in a row.

    Args:
        mode: ``"raise"``, ``"skip"`` or ``"ignore"``.
        max_skips: consecutive skips after which the run is declared diverging.
    """

    def __init__(self, mode: str, max_skips: int) -> None:
        self.mode = check_option("Engine.on_nonfinite", mode)
        self.enabled = mode != "ignore"  # read in the hot path: an attribute, not a call
        self.max_skips = check_option("Engine.max_skips", max_skips)
        self.consecutive = 0  # skips in a row; a kept micro-batch sets it back to 0

    def failed(self, name: str, logs: Mapping[str, Any], what: str, state: TrainState,
               metrics: MetricTracker) -> None:
        """A non-finite value in optimizer ``name``'s ``what`` (``"micro-batch"``, ``"step"``
        or ``"optimizer step"``): raise, or count the skip."""
        where = (
            f"optimizer step {state.global_step + 1} "
            f"(epoch {state.epoch + 1}, batch {state.batch_in_epoch + 1})"
        )
        prefix = f"{name}/" if name else ""
        bad = ["gradients"] if what == "optimizer step" else bad_terms(logs)
        terms = ", ".join(prefix + term for term in bad)
        if self.mode == "raise":
            hint = (
                "; the loss was finite: look for sqrt or log at 0, or division by a tiny value"
                if what == "optimizer step" else ""
            )
            raise BeyondfitError(
                f"non-finite {terms} at {where}{hint}; lower the learning rate, clip "
                "gradients, check the data, or set on_nonfinite='skip'"
            )
        state.skipped_steps += 1
        self.consecutive += 1
        metrics.update({"skipped_steps": 1.0})
        log.warning("skipped a %s with non-finite %s at %s", what, terms, where)
        if self.consecutive >= self.max_skips:
            raise BeyondfitError(
                f"non-finite {terms} in {self.consecutive} consecutive "
                f"micro-batches, the last at {where}; the run is diverging: lower the "
                "learning rate or check the data"
            )


def bad_terms(logs: Mapping[str, Any]) -> list[str]:
    """The names of the non-finite tensors among a closure's entries (``["loss"]`` if none)."""
    return [
        name
        for name, value in logs.items()
        if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all())
    ] or ["loss"]
