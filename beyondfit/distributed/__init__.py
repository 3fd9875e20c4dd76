"""Several processes, one run: torchrun's launch environment, DDP and the data shards.

``torchrun --nproc_per_node=N -m beyondfit +task=...`` needs no other change: the engine's
``strategy="auto"`` picks :class:`DDPStrategy` when torchrun started several processes.
The names load on first use (:mod:`beyondfit.core.lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from beyondfit.core.lazy import lazy_exports

_STRATEGY = "beyondfit.core.strategy"
_LAUNCH = "beyondfit.distributed.launch"
_EXPORTS = {
    "STRATEGIES": _STRATEGY,
    "SingleProcess": _STRATEGY,
    "Strategy": _STRATEGY,
    "resolve_strategy": _STRATEGY,
    "DDPStrategy": "beyondfit.distributed.ddp",
    "DistributedModel": "beyondfit.distributed.ddp",
    "LaunchEnv": "beyondfit.distributed.environ",
    "launch_env": "beyondfit.distributed.environ",
    "derive_seed": _LAUNCH,
    "init_process_group": _LAUNCH,
    "rank": _LAUNCH,
    "rank_device": _LAUNCH,
    "shutdown": _LAUNCH,
    "world_size": _LAUNCH,
    "ShardedBatches": "beyondfit.distributed.sharding",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from beyondfit.core.strategy import STRATEGIES, SingleProcess, Strategy, resolve_strategy
    from beyondfit.distributed.ddp import DDPStrategy, DistributedModel
    from beyondfit.distributed.environ import LaunchEnv, launch_env
    from beyondfit.distributed.launch import (
        derive_seed,
        init_process_group,
        rank,
        rank_device,
        shutdown,
        world_size,
    )
    from beyondfit.distributed.sharding import ShardedBatches

__all__ = [
    "STRATEGIES",
    "DDPStrategy",
    "DistributedModel",
    "LaunchEnv",
    "ShardedBatches",
    "SingleProcess",
    "Strategy",
    "derive_seed",
    "init_process_group",
    "launch_env",
    "rank",
    "rank_device",
    "resolve_strategy",
    "shutdown",
    "world_size",
]
