"""Learning-rate schedules that need to know the run's length, stepped once per optimizer step."""

from __future__ import annotations

import math

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
