"""Several processes, one run: torchrun's launch environment, DDP and the data shards.

``torchrun --nproc_per_node=N -m beyondfit +task=...`` needs no other change: the engine's
``strategy="auto"`` picks :class:`DDPStrategy` when torchrun started several processes.
"""

from beyondfit.core.strategy import STRATEGIES, SingleProcess, Strategy, resolve_strategy
from beyondfit.distributed.ddp import DDPStrategy, DistributedModel
from beyondfit.distributed.launch import (
    LaunchEnv,
    derive_seed,
    init_process_group,
    launch_env,
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
