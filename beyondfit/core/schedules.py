"""Learning-rate schedules that need to know the run's length, stepped once per optimizer step."""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError


def cosine(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int = 0,
    min_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up for ``warmup_steps``, then cosine decay to ``min_ratio`` x the base LR.

    Decaying to (near) zero is what lets a noisy mini-batch optimizer settle into the
    minimum instead of rattling around it at the end of training.
    """
    if total_steps < 1:
        raise BeyondfitError(f"cosine schedule needs total_steps >= 1, got {total_steps}")
    if not 0 <= warmup_steps < total_steps:
        raise BeyondfitError(
            f"scheduler.warmup_steps={warmup_steps} must be >= 0 and below the run's "
            f"{total_steps} optimizer steps"
        )

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def scheduler_for(scheduler: Any, optimizer: torch.optim.Optimizer) -> Any:
    """``scheduler`` over ``optimizer``: as given when built, a factory called (``None`` while
    it waits for the run's length: :func:`wants_run_length`)."""
    if scheduler is None:
        return None
    if hasattr(scheduler, "step") and hasattr(scheduler, "state_dict"):
        return scheduler
    if callable(scheduler):
        return None if wants_run_length(scheduler) else scheduler(optimizer)
    raise BeyondfitError(
        f"scheduler must be an LR scheduler or a callable optimizer -> scheduler, "
        f"got {type(scheduler).__name__}"
    )


def wants_run_length(scheduler: Any) -> bool:
    """Is ``scheduler`` a factory with a ``total_steps`` parameter (built by ``fit``)?"""
    if not callable(scheduler) or hasattr(scheduler, "step"):
        return False
    try:
        return "total_steps" in inspect.signature(scheduler).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def planned_steps(data: Any, epochs: int | None, max_steps: int | None, accumulate: int) -> int:
    """The optimizer steps a ``fit`` will take: ``max_steps``, or whole epochs of ``data``."""
    if max_steps is not None:
        return int(max_steps)
    try:
        per_epoch = -(-len(data) // accumulate)
    except TypeError:
        raise BeyondfitError(
            "the scheduler needs the run's length: the training data has no len(), so pass "
            "max_steps=N"
        ) from None
    return per_epoch * int(epochs or 1)
