"""Where this process sits in a torchrun launch, and joining its process group."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from beyondfit.core.device import resolve_device
from beyondfit.core.errors import BeyondfitError


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
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if world > 1 and k not in environ]
    if missing:  # set by hand, not by torchrun: the group could never meet
        raise BeyondfitError(
            f"WORLD_SIZE={world} and RANK={rank} are set but {' and '.join(missing)} not: start "
            f"the processes with torchrun (torchrun --nproc_per_node={world} -m beyondfit ...), "
            "which sets them all, or unset WORLD_SIZE and RANK for one process"
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
