"""Several processes, one run: torchrun's launch environment, DDP and the data shards.

``torchrun --nproc_per_node=N -m beyondfit +task=...`` needs no other change: the engine's
``strategy="auto"`` picks :class:`DDPStrategy` when torchrun started several processes.

The names below load on first use (:mod:`beyondfit.core.lazy`), so that the torch-free
``beyondfit.distributed.environ`` imports without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from beyondfit.core.lazy import lazy_exports

_LAUNCH = "beyondfit.distributed.launch"
_ENVIRON = "beyondfit.distributed.environ"
_EXPORTS = {
    "DDPStrategy": "beyondfit.distributed.ddp",
    "DistributedModel": "beyondfit.distributed.model",
    "LaunchEnv": _ENVIRON,
    "launch_env": _ENVIRON,
    "init_process_group": _LAUNCH,
    "rank": _LAUNCH,
    "rank_device": _LAUNCH,
    "shutdown": _LAUNCH,
    "world_size": _LAUNCH,
    "ShardedBatches": "beyondfit.distributed.sharding",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from beyondfit.distributed.ddp import DDPStrategy
    from beyondfit.distributed.environ import LaunchEnv, launch_env
    from beyondfit.distributed.launch import (
        init_process_group,
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
