"""PPO's optional early stop of its epochs once the policy has moved a target KL away.

CleanRL's ``target_kl``: after each epoch over a rollout, if the approximate KL divergence
between the collecting policy and the current one exceeds the target, the rollout's remaining
epochs are skipped and the next rollout is collected. Here the KL is the mean of the per-
minibatch estimates over the epoch (CleanRL looks at the epoch's last minibatch only: the mean
is the same quantity, less noisy).

The loss closure records each minibatch's estimate (a device tensor, no host sync); the collector
asks :meth:`TargetKL.__call__` once per epoch, which reads it back (one sync per epoch) and, under
several ranks, averages it over the ranks first (the process's strategy), so that every rank stops
after the same epoch (data-parallel ranks must take the same number of optimizer steps).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from beyondfit.core.options import check_number
from beyondfit.core.state.checks import fail, is_count, is_real
from beyondfit.distributed.connector import process_strategy


class TargetKL:
    """Early-stop monitor: ``record(kl)`` per minibatch, ``monitor()`` -> stop? per epoch.

    Args:
        target: the approximate KL above which the rollout's remaining epochs are skipped
            (CleanRL suggests 0.01-0.05; SB3 stops at 1.5x its ``target_kl``).
    """

    def __init__(self, target: float) -> None:
        check_number("target_kl", target, above=0,
                     example="target_kl=0.02 (or null for no early stop)")
        self.target = float(target)
        self._sum: torch.Tensor | None = None
        self._count = 0
        self.last: float | None = None  # the epoch mean that was last compared

    def record(self, kl: torch.Tensor) -> None:
        """Add one minibatch's approximate KL (a detached scalar tensor; no host sync)."""
        self._sum = kl.detach() if self._sum is None else self._sum + kl.detach()
        self._count += 1

    def __call__(self) -> bool:
        """Did the epoch just finished move the policy past the target? Restarts the mean."""
        if self._sum is None:
            return False
        mean = process_strategy().all_reduce(self._sum.double() / self._count, "mean")
        self._sum, self._count = None, 0
        self.last = float(mean)
        return self.last > self.target

    def state_dict(self) -> dict[str, Any]:
        """The epoch's KL so far (a checkpoint taken mid-epoch resumes the same mean)."""
        return {"sum": None if self._sum is None else self._sum.cpu(), "count": self._count,
                "last": self.last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, checked first (one line naming the entry)."""
        total, count, last = state.get("sum"), state.get("count"), state.get("last")
        if not is_count(count) or (total is None) != (count == 0):
            raise fail("stop_epochs.count", count, "the minibatches recorded this epoch")
        if total is not None and not (isinstance(total, torch.Tensor) and total.numel() == 1
                                      and bool(torch.isfinite(total).all())):
            raise fail("stop_epochs.sum", total, "a finite scalar tensor")
        if last is not None and not (is_real(last) and math.isfinite(last)):
            raise fail("stop_epochs.last", last, "a finite number or null")
        self._sum, self._count, self.last = total, int(count), last
