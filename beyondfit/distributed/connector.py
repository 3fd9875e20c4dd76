"""Choosing the strategy, above the strategies (what Fabric's ``connector.py`` does).

:class:`~beyondfit.core.strategy.Strategy` (one process) and
:class:`~beyondfit.distributed.ddp.DDPStrategy` know nothing of each other's choice: an
engine's ``strategy=`` is resolved here, from the launch (torchrun's environment, or a
process group already started), and code with no engine at hand asks
:func:`process_strategy` for the collectives of its launch.
"""

from __future__ import annotations

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.strategy import Strategy, strategy_name, use_resolver

#: The single-process strategy.
_SINGLE = Strategy()


def process_strategy() -> Strategy:
    """The strategy of this process's launch, for code that has no engine at hand: DDP's
    collectives when ``torch.distributed`` runs several ranks, the single-process identities
    otherwise (then without importing ``torch.distributed``)."""
    from beyondfit.distributed.launch import world_size

    if world_size() == 1:
        return _SINGLE
    from beyondfit.distributed.ddp import DDPStrategy

    return DDPStrategy.for_process()


def resolve_strategy(strategy: str | Strategy | None = "auto") -> Strategy:
    """``"auto"`` (DDP under a multi-process torchrun launch), ``"none"`` or ``"ddp"``; a
    :class:`Strategy` instance is used as it is."""
    if isinstance(strategy, Strategy):
        return strategy
    name = strategy_name(strategy)
    from beyondfit.distributed.launch import launch_env, world_size

    env = launch_env()
    several = (env is not None and env.world_size > 1) or world_size() > 1
    if name == "none":
        if several:
            count = max(world_size(), env.world_size if env else 1)
            raise BeyondfitError(
                f"strategy='none' but this is one of {count} processes started by "
                "torchrun; use strategy='auto' or start one process with python"
            )
        return Strategy()
    if name == "ddp" or several:
        from beyondfit.distributed.ddp import DDPStrategy

        return DDPStrategy()
    return Strategy()


# The engine resolves strategy names through this layer, which knows the launches (the core
# alone knows one process): in place from the first import of this module on.
use_resolver(resolve_strategy)
