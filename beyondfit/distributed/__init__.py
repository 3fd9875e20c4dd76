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

if TYPE_CHECKING:  # what type checkers see; "X as X" marks each as re-exported
    from beyondfit.distributed.ddp import DDPStrategy as DDPStrategy
    from beyondfit.distributed.environ import LaunchEnv as LaunchEnv
    from beyondfit.distributed.environ import launch_env as launch_env
    from beyondfit.distributed.launch import init_process_group as init_process_group
    from beyondfit.distributed.launch import rank as rank
    from beyondfit.distributed.launch import rank_device as rank_device
    from beyondfit.distributed.launch import shutdown as shutdown
    from beyondfit.distributed.launch import world_size as world_size
    from beyondfit.distributed.model import DistributedModel as DistributedModel
    from beyondfit.distributed.sharding import ShardedBatches as ShardedBatches

# The public names are the lazy ones: listed once, in _EXPORTS.
__all__ = sorted(_EXPORTS)
