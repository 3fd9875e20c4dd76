"""Several processes, one run: PyTorch's DistributedDataParallel behind a small strategy object.

``torchrun --nproc_per_node=N -m beyondfit +task=...`` needs no other change: the engine reads
torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and picks :class:`DDPStrategy`;
``engine.strategy=ddp`` forces it (a one-process group when started without torchrun). The engine
never branches on the strategy's kind; it calls a handful of hooks, which are no-ops for
the single-process :class:`Strategy`:

- :meth:`~Strategy.setup_device`: ``cuda:LOCAL_RANK`` per process (NCCL), or the CPU (Gloo).
- :meth:`~Strategy.wrap`: the module the loss closure sees. Under DDP every call of the model
  *and of its methods* (``model.value(obs)``) runs through DDP's forward, which is what arms
  the gradient all-reduce; ``engine.model`` stays the plain module that checkpoints save.
- :meth:`~Strategy.shard_train` / :meth:`~Strategy.shard_eval`: each rank gets its part of the
  data, every rank the same number of training batches (else DDP waits forever).
- :meth:`~Strategy.metric_reducer` / :meth:`~Strategy.reduce_mapping`: logged values describe
  the whole data. They are collectives: every rank computes at the same points (the engine's
  log intervals, epoch ends and evaluations), never one rank alone (Lightning #20223, #21264).
- :meth:`~Strategy.all_finite`: ranks agree on skipping a non-finite micro-batch, so they never
  disagree on whether to run a backward.

Only rank 0 writes: callbacks whose class sets ``rank_zero_only = True`` (metrics files,
console lines, checkpoints, plots) are dropped on the other ranks, and the command line lets
rank 0 alone compose the Hydra config and run directory, then sends both to the others
(:func:`share_job` / :func:`follow_jobs`): non-zero ranks never create Hydra output dirs.

A *global* batch under DDP is ``batch_size x world_size``; the learning rate is not rescaled.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from beyondfit.core.strategy import Strategy
from beyondfit.distributed.launch import init_process_group, launch_env, rank_device
from beyondfit.distributed.model import DistributedModel, _Dispatch
from beyondfit.distributed.sharding import (
    ShardedBatches,
    StridedIterable,
    distributed_loader,
    has_distributed_sampler,
    strided_loader,
)

log = logging.getLogger(__name__)


class DDPStrategy(Strategy):
    """DistributedDataParallel over the default process group (joined here if needed).

    Args:
        find_unused_parameters: let DDP tolerate parameters the loss does not use in a
            step (costs a graph traversal per step; needed only for such models).
        timeout_s: collective timeout when this strategy creates the group.

    Example:
        >>> # torchrun --nproc_per_node=2 train.py, with in train.py:
        >>> engine = Engine(model, loss_fn, opt, strategy="ddp")   # or "auto"
    """

    is_distributed = True

    def __init__(self, find_unused_parameters: bool = False, timeout_s: float | None = None):
        env = launch_env()
        init_process_group(env, timeout_s)
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.local_rank = env.local_rank if env is not None else 0
        self.find_unused_parameters = bool(find_unused_parameters)
        self.device = torch.device("cpu")
        # Small host-side flags travel over Gloo when the group has it (NCCL needs CUDA).
        gloo = "gloo" in str(dist.get_backend()).lower()
        self._host = torch.device("cpu") if gloo else torch.device("cuda", self.local_rank)
        self._wrapped: dict[int, tuple[nn.Module, _Dispatch, Any]] = {}
        self._eval_cache: dict[int, tuple[Any, Any]] = {}
        self._warned: set[str] = set()
        if not self.is_main:
            # Rank 0 speaks for the run; the others only warn.
            logging.getLogger("beyondfit").setLevel(logging.WARNING)

    # -- device
    def setup_device(self, device: str | torch.device) -> torch.device:
        """``cuda:LOCAL_RANK`` for ``auto``/``cuda`` when CUDA exists, else the CPU."""
        self.device = rank_device(
            device, self.local_rank, torch.cuda.is_available(), torch.cuda.device_count()
        )
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        return self.device

    # -- the model
    def wrap(self, model: nn.Module, compiled: nn.Module | None = None) -> Any:
        """DDP around ``model`` (built once per model); calls go to ``compiled`` if given."""
        from torch.nn.parallel import DistributedDataParallel

        entry = self._wrapped.get(id(model))
        if entry is None or entry[0] is not model:
            dispatch = _Dispatch(model)
            ids = [self.device.index] if self.device.type == "cuda" else None
            ddp = DistributedDataParallel(
                dispatch, device_ids=ids, find_unused_parameters=self.find_unused_parameters
            )
            entry = (model, dispatch, DistributedModel(ddp, model))
            self._wrapped[id(model)] = entry
        entry[1].target = compiled if compiled is not None else model
        return entry[2]

    # -- data
    def shard_train(self, data: Any) -> Any:
        """Disjoint, equally long parts: ``shard(rank, world)`` if the data has it, a
        ``DistributedSampler`` for map-style DataLoaders, rank-strided batches for sequences.

        Idempotent: a shard is returned as it is (``fit``, the one caller, shards what it is
        given, and a second ``fit`` may be given the same data), so a ``shard`` method must be
        too: called again with the same rank and world size it changes nothing.
        """
        if isinstance(data, ShardedBatches) or has_distributed_sampler(data):
            return data
        shard = getattr(data, "shard", None)
        if callable(shard):
            out = shard(self.rank, self.world_size)
            return data if out is None else out
        loader = distributed_loader(data, self.rank, self.world_size, self._shared_seed)
        if loader is not None:
            return loader
        if isinstance(data, Sequence):
            return ShardedBatches(data, self.rank, self.world_size, pad=True)
        self._warn_once(
            type(data).__name__,
            f"train_data of type {type(data).__name__} cannot be split across ranks: every "
            "rank trains on the same batches. Give it a shard(rank, world_size) method, or use "
            "a map-style DataLoader, a list or TensorBatches",
        )
        return data

    def shard_eval(self, data: Any) -> Any:
        """Rank ``r`` scores batches ``r, r + W, ...``: together exactly the batches a single
        process would score, so the reduced metrics match it."""
        cached = self._eval_cache.get(id(data))
        if cached is not None and cached[0] is data:
            return cached[1]
        if isinstance(data, Sequence):
            sharded: Any = ShardedBatches(data, self.rank, self.world_size, pad=False)
        else:
            sharded = strided_loader(data, self.rank, self.world_size)
            if sharded is None:
                sharded = StridedIterable(data, self.rank, self.world_size)
        _remember(self._eval_cache, data, sharded)
        return sharded

    def set_epoch(self, data: Any, epoch: int) -> None:
        """``set_epoch`` on the data, its sampler or its batch sampler's sampler."""
        for holder in (data, getattr(data, "sampler", None),
                       getattr(getattr(data, "batch_sampler", None), "sampler", None)):
            set_epoch = getattr(holder, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
                return

    def _shared_seed(self) -> int:
        # DistributedSampler needs the same shuffling seed on every rank: take rank 0's.
        return int(self.broadcast(torch.initial_seed() % 2**31))

    # -- the step
    def no_sync(self, model: Any, boundary: bool) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync`` inside an accumulation window; the window's last backward
        all-reduces. DDP decides in the forward, so forward and backward run inside."""
        return contextlib.nullcontext() if boundary else model.no_sync()

    def all_finite(self, loss: torch.Tensor) -> bool:
        """All ranks skip a micro-batch together, or none does: one tiny all-reduce."""
        flag = torch.isfinite(loss.detach()).to(torch.float32).reshape(1)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def skipped_boundary(self, params: Sequence[nn.Parameter]) -> None:
        """A synchronising forward ran but its loss is dropped: DDP still expects a backward.

        A zero-valued loss over every trainable parameter completes the reduction (and
        averages what the window accumulated) without changing any gradient.
        """
        torch.stack([p.sum() for p in params]).sum().mul(0.0).backward()

    def sync_gradients(self, params: Sequence[nn.Parameter]) -> None:
        """All-reduce (mean) gradients of a window that ended without a synchronising step
        (a partial accumulation window at the end of the data)."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat.div_(self.world_size)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def agree_stop(self, stop: bool, interrupted: str | None) -> tuple[bool, str | None]:
        """One rank stopping (a signal, a callback) stops all at the same step, the same way:
        a rank leaving the loop alone would leave the others waiting in a collective."""
        # A host tensor over Gloo where the group has it: no wait on the GPU's queue.
        flag = torch.tensor([2.0 if interrupted else 1.0 if stop else 0.0], device=self._host)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        agreed = int(flag.item())
        if agreed == 2 and not interrupted:
            interrupted = "a signal on another rank"
        return agreed > 0, interrupted

    def sync_buffers(self, model: nn.Module) -> None:
        """Broadcast rank 0's buffers: every rank evaluates the model rank 0 checkpoints."""
        for buffer in model.buffers():
            dist.broadcast(buffer.data, src=0)

    # -- metrics
    def metric_reducer(self) -> Callable[..., Any]:
        """Sums and counts of every rank added up, then divided: the mean over all batches."""
        return self._reduce_metrics

    def _reduce_metrics(
        self,
        sums: Mapping[str, torch.Tensor],
        counts: Mapping[str, int],
        totals: set[str],
        objects: Mapping[str, bool],
    ) -> tuple[dict[str, float], list[str]]:
        # Ranks may hold different names (an episode metric seen on one rank only): agree on
        # the union first, so every rank runs the same collectives in the same order.
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, (sorted(sums), dict(objects)))
        names = sorted(set().union(*(set(g[0]) for g in gathered)))
        present = set.intersection(*(set(g[1]) for g in gathered)) if gathered else set()
        active = sorted(n for n in present if any(g[1].get(n) for g in gathered))
        means: dict[str, float] = {}
        if names:
            zero = torch.zeros((), device=self.device)
            values = torch.stack(
                [sums[n].to(self.device, torch.float32).reshape(()) if n in sums else zero
                 for n in names]
            )
            weights = torch.tensor(
                [float(counts.get(n, 0)) for n in names], device=self.device
            )
            packed = torch.cat([values, weights])
            dist.all_reduce(packed)
            total, count = packed[: len(names)], packed[len(names) :]
            for name, s, c in zip(names, total.tolist(), count.tolist(), strict=True):
                if c > 0:
                    # Totals (counts of events) are the same on every rank: report one rank's.
                    means[name] = s / self.world_size if name in totals else s / c
        return means, active

    def reduce_mapping(self, values: Mapping[str, float]) -> dict[str, float]:
        """Means over the ranks that reported each key (an evaluator's results)."""
        return self.reduce_report(values)

    def reduce_report(
        self, values: Mapping[str, float], totals: Iterable[str] = ()
    ) -> dict[str, float]:
        """Sums over ranks for ``totals`` (counts such as ``env_steps``), means over the ranks
        that reported them for the rest. Host values: one small Gloo exchange."""
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, {k: float(v) for k, v in values.items()})
        totals = set(totals)
        out = {}
        for name in sorted(set().union(*(set(g) for g in gathered))):
            got = [g[name] for g in gathered if name in g]
            out[name] = math.fsum(got) if name in totals else math.fsum(got) / len(got)
        return out

    # -- the collectives
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """``tensor`` summed, averaged, or its max/min over the ranks, as a new tensor."""
        out = tensor.clone()
        dist.all_reduce(out, op=getattr(dist.ReduceOp, _REDUCE_OPS[op]))
        return out / self.world_size if op == "mean" else out

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``tensor``, in rank order (so every rank gets the same bits)."""
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return parts

    def any_rank(self, flag: bool) -> bool:
        """True everywhere when true on one rank (a host flag over Gloo where it can)."""
        box = torch.tensor([1.0 if flag else 0.0], device=self._host)
        dist.all_reduce(box, op=dist.ReduceOp.MAX)
        return bool(box.item())

    @classmethod
    def for_process(cls) -> DDPStrategy:
        """One strategy per process group, for code with no engine at hand (see
        :func:`~beyondfit.distributed.connector.process_strategy`)."""
        group = dist.group.WORLD
        cached = _PROCESS.get("strategy")
        if cached is None or _PROCESS.get("group") is not group:
            cached = cls()
            _PROCESS.update(strategy=cached, group=group)
        return cached  # type: ignore[return-value]

    # -- plumbing
    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (any picklable value) on every rank."""
        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait for every rank."""
        dist.barrier()

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned and self.is_main:
            self._warned.add(key)
            log.warning("%s", message)


_PROCESS: dict[str, Any] = {}  # DDPStrategy.for_process: the group's strategy
_REDUCE_OPS = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}


def _remember(cache: dict[int, tuple[Any, Any]], data: Any, result: Any, size: int = 8) -> None:
    # Keyed by id, holding the object so the id cannot be reused while cached; bounded, so
    # evaluating many throwaway datasets does not keep them all alive.
    cache.pop(id(data), None)
    cache[id(data)] = (data, result)
    while len(cache) > size:
        del cache[next(iter(cache))]
