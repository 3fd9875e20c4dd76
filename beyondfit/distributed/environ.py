"""Where this process sits in a torchrun launch, read from the environment (no torch import:
the command line asks before it has loaded torch)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

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
