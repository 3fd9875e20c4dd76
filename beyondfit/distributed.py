"""Several processes, one run: PyTorch's DistributedDataParallel behind a small strategy object.

``torchrun --nproc_per_node=N -m beyondfit +task=...`` needs no other change: the engine reads
torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and picks :class:`DDPStrategy`;
``engine.strategy=ddp`` forces it (a one-process group when started without torchrun). The engine
never branches on the strategy's kind; it calls a handful of hooks, which are no-ops for
:class:`SingleProcess`:

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
import functools
import inspect
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from beyondfit.device import resolve_device
from beyondfit.errors import BeyondfitError

log = logging.getLogger(__name__)

#: ``engine.strategy`` values.
STRATEGIES = ("auto", "none", "ddp")


# ---------------------------------------------------------------------- the launch environment
@dataclass(frozen=True)
class LaunchEnv:
    """Where this process sits in a torchrun launch."""

    rank: int
    local_rank: int
    world_size: int


def launch_env(environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """torchrun's ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``, or ``None`` outside a launcher."""
    environ = os.environ if environ is None else environ
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    try:
        rank = int(environ["RANK"])
        world = int(environ["WORLD_SIZE"])
        local = int(environ.get("LOCAL_RANK", rank))
    except ValueError:
        raise BeyondfitError(
            f"RANK={environ.get('RANK')!r}, WORLD_SIZE={environ.get('WORLD_SIZE')!r}, "
            f"LOCAL_RANK={environ.get('LOCAL_RANK')!r} are not whole numbers; start the "
            "processes with torchrun, which sets them"
        ) from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise BeyondfitError(
            f"RANK={rank}, WORLD_SIZE={world} do not describe a process group; start the "
            "processes with torchrun, which sets them"
        )
    return LaunchEnv(rank=rank, local_rank=local, world_size=world)


def init_process_group(env: LaunchEnv | None = None, timeout_s: float | None = None) -> None:
    """Join the default process group (no-op when one exists).

    Gloo carries CPU tensors and NCCL CUDA tensors: on a machine with CUDA the group is
    ``cpu:gloo,cuda:nccl``, so a run may use either device, and small host-side messages (the
    config, metric names) travel over Gloo. Without ``env`` (``engine.strategy=ddp`` outside
    torchrun) the group has this one process, over an in-memory store: no port is opened.
    """
    if dist.is_initialized():
        return
    if not dist.is_available():
        raise BeyondfitError(
            "this torch build has no torch.distributed; install a build with it or drop "
            "engine.strategy=ddp"
        )
    cuda = torch.cuda.is_available() and dist.is_nccl_available()
    backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
    timeout = timedelta(seconds=timeout_s) if timeout_s else None
    if env is not None and cuda and env.local_rank < torch.cuda.device_count():
        # NCCL binds a process to the current device: set it before the group exists.
        torch.cuda.set_device(env.local_rank)
    if env is None:
        dist.init_process_group(
            backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
        )
    else:
        dist.init_process_group(
            backend, init_method="env://", rank=env.rank, world_size=env.world_size,
            timeout=timeout,
        )


def shutdown() -> None:
    """Leave the process group (once every rank is done with collectives)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    """This process's rank (0 outside a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Processes in the group (1 outside a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def derive_seed(seed: int, rank: int) -> int:
    """A per-rank seed: ``seed`` itself on rank 0, an unrelated 31-bit seed on the others.

    Rank 0 keeps the run's seed, so a one-process run reproduces a single-process one; the
    others get seeds from NumPy's ``SeedSequence``, which are not ``seed + 1`` neighbours that
    an env offsetting seeds per copy (``seed + i``) would collide with.
    """
    if rank == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed) % 2**32, int(rank)]).generate_state(1)[0] >> 1)


# ---------------------------------------------------------------------- strategies
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
        """The cross-rank reduction a :class:`~beyondfit.metrics.MetricTracker` uses."""
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

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        return obj

    def barrier(self) -> None:
        """Wait for every rank."""


#: The single-process strategy.
SingleProcess = Strategy


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
        self._sharded: dict[int, tuple[Any, Any]] = {}
        self._warned: set[str] = set()
        if self.rank != 0:
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
        ``DistributedSampler`` for map-style DataLoaders, rank-strided batches for sequences."""
        done = self._sharded.get(id(data))
        if done is not None and done[0] is data:  # run() and fit() both ask: shard once
            return done[1]
        out = self._shard_train(data)
        _remember(self._sharded, data, out)
        _remember(self._sharded, out, out)
        return out

    def _shard_train(self, data: Any) -> Any:
        if isinstance(data, ShardedBatches) or _has_distributed_sampler(data):
            return data
        shard = getattr(data, "shard", None)
        if callable(shard):
            out = shard(self.rank, self.world_size)
            return data if out is None else out
        loader = _distributed_loader(data, self.rank, self.world_size, self._shared_seed)
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
            sharded = _strided_loader(data, self.rank, self.world_size)
            if sharded is None:
                sharded = _StridedIterable(data, self.rank, self.world_size)
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


def resolve_strategy(strategy: str | Strategy | None = "auto") -> Strategy:
    """``"auto"`` (DDP under a multi-process torchrun launch), ``"none"`` or ``"ddp"``."""
    if isinstance(strategy, Strategy):
        return strategy
    name = "auto" if strategy is None else str(strategy).strip().lower()
    if name not in STRATEGIES:
        raise BeyondfitError(
            f"engine.strategy={strategy!r}; use auto (DDP when torchrun starts several "
            "processes), none or ddp"
        )
    env = launch_env()
    several = (env is not None and env.world_size > 1) or world_size() > 1
    if name == "none":
        if several:
            count = max(world_size(), env.world_size if env else 1)
            raise BeyondfitError(
                f"engine.strategy=none but this is one of {count} processes started by "
                "torchrun; drop engine.strategy (auto) or start one process with python"
            )
        return Strategy()
    if name == "ddp" or several:
        return DDPStrategy()
    return Strategy()


def rank_device(
    device: str | torch.device, local_rank: int, cuda_available: bool, cuda_count: int
) -> torch.device:
    """The device of the process with ``local_rank`` on its node, for the requested ``device``.

    ``auto`` and ``cuda`` mean ``cuda:LOCAL_RANK`` (the CPU for ``auto`` without CUDA);
    ``cpu`` is the CPU. A fixed ``cuda:N`` other than the process's own, and MPS (no DDP
    backend), are errors that say what to write instead.
    """
    name = str(device).strip().lower()
    if name == "auto":
        name = "cuda" if cuda_available else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("mps"):
        raise BeyondfitError(
            f"device={name!r} cannot be used with DDP (no MPS process-group backend); use "
            "device=cpu, or one process"
        )
    if not name.startswith("cuda"):
        return resolve_device(name)  # raises its own clear error
    if not cuda_available:
        raise BeyondfitError(f"device={name!r} but CUDA is not available here; use device=cpu")
    index = torch.device(name).index
    if index is not None and index != local_rank:
        raise BeyondfitError(
            f"device={name!r} under DDP: each process uses its own GPU, cuda:LOCAL_RANK "
            f"(here cuda:{local_rank}); set device=cuda"
        )
    if local_rank >= cuda_count:
        raise BeyondfitError(
            f"LOCAL_RANK={local_rank} but this node has {cuda_count} CUDA device(s); start at "
            f"most {cuda_count} processes per node (torchrun --nproc_per_node={cuda_count})"
        )
    return torch.device("cuda", local_rank)


def _remember(cache: dict[int, tuple[Any, Any]], data: Any, result: Any, size: int = 8) -> None:
    # Keyed by id, holding the object so the id cannot be reused while cached; bounded, so
    # evaluating many throwaway datasets does not keep them all alive.
    cache.pop(id(data), None)
    cache[id(data)] = (data, result)
    while len(cache) > size:
        del cache[next(iter(cache))]


# ---------------------------------------------------------------------- the wrapped model
class _Dispatch(nn.Module):
    """The module DDP wraps: its forward runs any method of any submodule of the model.

    DDP arms its gradient all-reduce in ``forward``; loss closures also call methods
    (``model.log_prob_entropy(...)``), so those are routed through here too.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.__dict__["target"] = module  # the callable root: module, or torch.compile of it

    def forward(self, path: str, method: str | None, *args: Any, **kwargs: Any) -> Any:
        """Call ``module.<path>`` (or its ``method``) with the arguments."""
        obj = self.target if not path else self.module.get_submodule(path)
        if method is None:
            return obj(*args, **kwargs)
        return getattr(obj, method)(*args, **kwargs)


class DistributedModel:
    """What a loss closure sees under DDP: the model's own interface, synchronised.

    ``model(x)``, ``model.value(x)`` and ``model.actor(x)`` all run through DDP's forward;
    attributes, parameters and ``nn.Module``'s own methods (``parameters()``, ``training``)
    come from the plain module. ``no_sync()`` is DDP's.
    """

    __slots__ = ("_ddp", "_module", "_path")

    def __init__(self, ddp: nn.Module, module: nn.Module, path: str = "") -> None:
        self._ddp = ddp
        self._module = module
        self._path = path

    @property
    def module(self) -> nn.Module:
        """The plain (unwrapped) module."""
        return self._module

    @property
    def ddp(self) -> nn.Module:
        """The ``DistributedDataParallel`` instance."""
        return self._ddp

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync``: accumulate gradients locally (forward and backward inside)."""
        return self._ddp.no_sync()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._ddp(self._path, None, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if isinstance(attr, nn.Module):
            return DistributedModel(self._ddp, attr, f"{self._path}.{name}" if self._path else name)
        if (
            inspect.ismethod(attr)
            and attr.__self__ is self._module
            and (name == "forward" or not hasattr(nn.Module, name))
        ):
            return functools.partial(self._ddp, self._path, None if name == "forward" else name)
        return attr

    def __getitem__(self, index: Any) -> Any:
        item = self._module[index]  # type: ignore[index]
        if isinstance(item, nn.Module) and isinstance(index, int):
            position = index % len(self._module)  # type: ignore[arg-type]
            path = f"{self._path}.{position}" if self._path else str(position)
            return DistributedModel(self._ddp, item, path)
        return item

    def __repr__(self) -> str:
        return f"DistributedModel({self._module!r})"


# ---------------------------------------------------------------------- data
class ShardedBatches(Sequence):
    """Rank ``r`` of ``world`` takes batches ``r, r + world, ...`` of a sequence of batches.

    With ``pad`` (training) every rank gets ``ceil(len / world)`` batches, wrapping around to
    the start, because DDP needs equal step counts; without it (evaluation) the parts are
    disjoint and together exactly the sequence.
    """

    def __init__(self, batches: Sequence[Any], rank: int, world: int, pad: bool) -> None:
        self.batches, self.rank, self.world, self.pad = batches, rank, world, pad
        n = len(batches)
        if pad and n:
            self._indices = [(rank + i * world) % n for i in range(math.ceil(n / world))]
        else:
            self._indices = list(range(rank, n, world))

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.batches[j] for j in self._indices[i]]
        return self.batches[self._indices[i]]

    def __iter__(self) -> Iterator[Any]:
        return (self.batches[j] for j in self._indices)


class _StridedIterable:
    """Every ``world``-th batch of any iterable, starting at ``rank`` (evaluation only)."""

    def __init__(self, data: Iterable[Any], rank: int, world: int) -> None:
        self.data, self.rank, self.world = data, rank, world

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.data):
            if i % self.world == self.rank:
                yield batch


class _StridedBatchSampler:
    """Every ``world``-th batch of indices of a batch sampler: loads only this rank's batches."""

    def __init__(self, batch_sampler: Iterable[list[int]], rank: int, world: int) -> None:
        self.batch_sampler, self.rank, self.world = batch_sampler, rank, world

    def __iter__(self) -> Iterator[list[int]]:
        for i, indices in enumerate(self.batch_sampler):
            if i % self.world == self.rank:
                yield indices

    def __len__(self) -> int:
        n = len(self.batch_sampler)  # type: ignore[arg-type]
        return len(range(self.rank, n, self.world))


def _loader_kwargs(loader: Any) -> dict[str, Any]:
    kwargs = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    return kwargs


def _map_style_loader(data: Any) -> bool:
    from torch.utils.data import DataLoader, IterableDataset

    return isinstance(data, DataLoader) and not isinstance(data.dataset, IterableDataset)


def _has_distributed_sampler(data: Any) -> bool:
    from torch.utils.data import DistributedSampler

    sampler = getattr(data, "sampler", None)
    inner = getattr(getattr(data, "batch_sampler", None), "sampler", None)
    return isinstance(sampler, DistributedSampler) or isinstance(inner, DistributedSampler)


def _distributed_loader(
    data: Any, rank: int, world: int, seed: Callable[[], int]
) -> Any | None:
    """The same DataLoader over a ``DistributedSampler`` (``None`` if ``data`` is not one we
    can rebuild: not map-style, or a custom batch sampler)."""
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

    if not _map_style_loader(data) or data.batch_size is None:
        return None
    if not isinstance(data.sampler, RandomSampler | SequentialSampler):
        return None
    sampler = DistributedSampler(
        data.dataset, num_replicas=world, rank=rank,
        shuffle=isinstance(data.sampler, RandomSampler), seed=seed(), drop_last=data.drop_last,
    )
    return DataLoader(
        data.dataset, batch_size=data.batch_size, sampler=sampler, drop_last=data.drop_last,
        **_loader_kwargs(data),
    )


def _strided_loader(data: Any, rank: int, world: int) -> Any | None:
    """A map-style DataLoader that loads only this rank's batches, in the original batches."""
    from torch.utils.data import DataLoader

    if not _map_style_loader(data):
        return None
    return DataLoader(
        data.dataset, batch_sampler=_StridedBatchSampler(data.batch_sampler, rank, world),
        **_loader_kwargs(data),
    )


# ---------------------------------------------------------------------- one config, one run dir
def share_job(cfg: Any, run_dir: str) -> tuple[Any, str]:
    """On rank 0 of a multi-process launch, send the composed config and run directory to the
    other ranks (waiting in :func:`follow_jobs`); everywhere return what all ranks will use.

    The config is resolved once, here: ``${now:...}`` and ``${hydra:...}`` mean the same on
    every rank (hydra #2070), and only rank 0 ever ran Hydra or made a directory.
    """
    if world_size() == 1:
        return cfg, run_dir
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=True)
    box = [{"cfg": container, "run_dir": str(run_dir)}]
    dist.broadcast_object_list(box, src=0)
    return OmegaConf.create(container), str(run_dir)


def end_jobs() -> None:
    """Rank 0 tells the waiting ranks that there are no more jobs."""
    if world_size() > 1:
        dist.broadcast_object_list([None], src=0)


def follow_jobs(run_job: Callable[[Any, str], Any]) -> int:
    """Non-zero ranks: run each job rank 0 shares, until it says there are none; returns the
    number run. A Hydra multirun under torchrun is a sequence of such jobs."""
    from omegaconf import OmegaConf

    done = 0
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        job = box[0]
        if job is None:
            return done
        run_job(OmegaConf.create(job["cfg"]), job["run_dir"])
        done += 1
