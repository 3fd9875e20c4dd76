"""Several processes, one run: torchrun's launch environment, DDP and the data shards.

``torchrun --nproc_per_node=N -m beyondfit +task=...`` needs no other change: the engine's
``strategy="auto"`` picks :class:`DDPStrategy` when torchrun started several processes.
"""

from beyondfit.distributed.ddp import DDPStrategy
from beyondfit.distributed.launch import (
    LaunchEnv,
    init_process_group,
    launch_env,
    rank,
    rank_device,
    shutdown,
    world_size,
)
from beyondfit.distributed.model import DistributedModel
from beyondfit.distributed.sharding import ShardedBatches

__all__ = [
    "DDPStrategy",
    "DistributedModel",
    "LaunchEnv",
    "ShardedBatches",
    "init_process_group",
    "launch_env",
    "rank",
    "rank_device",
    "shutdown",
    "world_size",
]
