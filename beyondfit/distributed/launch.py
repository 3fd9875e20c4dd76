"""Where this process sits in a torchrun launch, and joining its process group."""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from beyondfit.core.device import resolve_device
from beyondfit.core.errors import BeyondfitError
from beyondfit.distributed.environ import LaunchEnv, launch_env

__all__ = [
    "LaunchEnv",
    "init_process_group",
    "launch_env",
    "rank",
    "rank_device",
    "shutdown",
    "world_size",
]


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
    """Leave the process group (once every rank is done with collectives).

    First a short pause without the GIL: a Gloo worker thread frees a finished collective's
    tensors under the GIL, and the group's destructor (when the group goes, or later with the
    last DDP model that holds it) joins those threads while holding the GIL, so a worker still
    waiting for it then deadlocks the process. Seen at the end of in-process DDP tests (the
    destructor in ``std::thread::join``, a ``pt_gloo_runloop`` thread in ``~AsyncWork`` waiting
    for the GIL); a run's last collective would race the same way.
    """
    if dist.is_available() and dist.is_initialized():
        time.sleep(0.05)
        dist.destroy_process_group()


def rank() -> int:
    """This process's rank (0 outside a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Processes in the group (1 outside a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


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
