"""How many processes train, and what the engine asks of them: the strategy hooks.

The engine never branches on the kind of launch; it calls a handful of hooks, which are
no-ops here, for one process. :class:`beyondfit.distributed.DDPStrategy` overrides them for
PyTorch's DistributedDataParallel:

- :meth:`~Strategy.setup_device`: ``cuda:LOCAL_RANK`` per process (NCCL), or the CPU (Gloo).
- :meth:`~Strategy.wrap`: the module the loss closure sees during training.
- :meth:`~Strategy.no_sync`: accumulate gradients locally inside an accumulation window.
- :meth:`~Strategy.shard_train` / :meth:`~Strategy.shard_eval`: each rank gets its part of the
  data, every rank the same number of training batches.
- :meth:`~Strategy.metric_reducer` / :meth:`~Strategy.reduce_mapping`: logged values describe
  the whole data. They are collectives: every rank computes at the same points.
- :meth:`~Strategy.all_finite`: ranks agree on skipping a non-finite micro-batch.
- :attr:`~Strategy.is_main`: the one test of "rank 0 only"; the engine drops callbacks whose
  class sets ``rank_zero_only = True`` on the other ranks.
- The collectives everything else needs (Fabric's set): :meth:`~Strategy.all_reduce`,
  :meth:`~Strategy.all_gather`, :meth:`~Strategy.broadcast`, :meth:`~Strategy.barrier` and a
  boolean decision, :meth:`~Strategy.any_rank`. Code with no engine at hand (a collector's
  running statistics, PPO's KL stop, the command line sharing its job) asks
  :func:`~beyondfit.distributed.connector.process_strategy`; which strategy a launch gets is
  chosen there too, above the strategies. No module outside this one and
  :mod:`beyondfit.distributed` calls ``torch.distributed`` (``tests/test_architecture.py``
  holds it).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from beyondfit.core.device import resolve_device

# One stateless, reentrant no-op context for the hot path (no object per step).
_NULL_CONTEXT = contextlib.nullcontext()


class Strategy:
    """One process, one device: every hook is the identity. Base of :class:`DDPStrategy`."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    is_distributed: bool = False

    @property
    def is_main(self) -> bool:
        """True on the process that prints, logs and writes files (rank 0)."""
        return self.rank == 0

    def setup_device(self, device: str | torch.device) -> torch.device:
        """The device this process trains on."""
        return resolve_device(device)

    def wrap(self, model: nn.Module, compiled: nn.Module | None = None) -> Any:
        """The module the loss closure is given (``compiled`` when compilation is on)."""
        return compiled if compiled is not None else model

    def shard_train(self, data: Any) -> Any:
        """This rank's part of the training data."""
        return data

    def shard_eval(self, data: Any) -> Any:
        """This rank's part of the validation data."""
        return data

    def set_epoch(self, data: Any, epoch: int) -> None:
        """Tell distributed samplers which epoch starts (they reshuffle by it)."""

    def no_sync(self, model: Any, boundary: bool) -> contextlib.AbstractContextManager[Any]:
        """The context a micro-batch's forward and backward run in: under DDP, gradients are
        all-reduced only in the backward that completes an accumulation window."""
        return _NULL_CONTEXT

    def all_finite(self, loss: torch.Tensor) -> bool:
        """Is the loss finite (on every rank)? One host sync."""
        return math.isfinite(loss.item())

    def skipped_boundary(self, params: Sequence[nn.Parameter]) -> None:
        """A micro-batch that would have synchronised gradients was skipped."""

    def sync_gradients(self, params: Sequence[nn.Parameter]) -> None:
        """Average gradients that were accumulated without synchronisation."""

    def agree_stop(self, stop: bool, interrupted: str | None) -> tuple[bool, str | None]:
        """The engine's ``should_stop`` and ``interrupted`` as every rank will act on them."""
        return stop, interrupted

    def sync_buffers(self, model: nn.Module) -> None:
        """Make buffers (BatchNorm statistics) equal on every rank before evaluating."""

    def metric_reducer(self) -> Callable[..., Any] | None:
        """The cross-rank reduction a :class:`~beyondfit.core.metrics.MetricTracker` uses."""
        return None

    def reduce_mapping(self, values: Mapping[str, float]) -> dict[str, float]:
        """Means over ranks of an evaluator's results."""
        return dict(values)

    def reduce_report(
        self, values: Mapping[str, float], totals: Iterable[str] = ()
    ) -> dict[str, float]:
        """A data source's own statistics: ``totals`` (counts) summed over ranks, the rest
        averaged over the ranks that reported them."""
        return {name: float(value) for name, value in values.items()}

    # -- the collectives (every rank must call them, in the same order)
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """``tensor`` summed (``"sum"``), averaged (``"mean"``), or its ``"max"``/``"min"``
        over the ranks, as a new tensor."""
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``tensor`` (same shape on all), in rank order."""
        return [tensor]

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any: one decision all ranks act on."""
        return bool(flag)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        return obj

    def barrier(self) -> None:
        """Wait for every rank."""


# ----------------------------------------------------------------------------- strategy names
def strategy_name(strategy: str | None) -> str:
    """A strategy name checked (``"auto"``, ``"none"`` or ``"ddp"``; ``None`` is ``"auto"``):
    the one check of ``Engine.strategy``, whichever resolver is in place."""
    from beyondfit.core.options import check_option

    return "auto" if strategy is None else str(check_option("Engine.strategy", strategy))


def _one_process(strategy: str | Strategy | None) -> Strategy:
    """What the core alone makes of a strategy name: one process. Choosing DDP belongs to
    the layer that knows the launches (:mod:`beyondfit.distributed.connector`), which puts
    its own resolver in place when imported (``from beyondfit import Engine`` imports it)."""
    if isinstance(strategy, Strategy):
        return strategy
    from beyondfit.core.errors import BeyondfitError

    name = strategy_name(strategy)
    several = os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1")
    if name == "ddp" or (name == "auto" and several):
        raise BeyondfitError(
            f"the {name!r} strategy under a launch of several processes needs "
            "beyondfit.distributed: import the engine as `from beyondfit import Engine`, or "
            "pass strategy=beyondfit.distributed.DDPStrategy()")
    return Strategy()


_resolve: Callable[[str | Strategy | None], Strategy] = _one_process


def use_resolver(resolve: Callable[[str | Strategy | None], Strategy]) -> None:
    """Make ``resolve`` the way :class:`~beyondfit.core.engine.Engine` turns a strategy name
    (``"auto"``, ``"none"``, ``"ddp"``) into a strategy: called by the layer above the core
    that knows the launches, never by the core."""
    global _resolve
    _resolve = resolve


def resolve(strategy: str | Strategy | None) -> Strategy:
    """``strategy`` as a :class:`Strategy`: an instance as it is, a name by the resolver in
    place (:func:`use_resolver`; one process until the distributed layer is imported)."""
    return _resolve(strategy)
