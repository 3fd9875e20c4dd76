"""What an off-policy algorithm declares: its optimizers, each with the part of the model it trains.

An off-policy loss factory (``sac_loss``, ``td3_loss``, ``dqn_loss`` or yours) returns a list of
:class:`OffPolicyUpdate`, in the order the engine steps them on every minibatch. Each says, in the
one place a reader sees: the loss closure, the part of the model its optimizer trains (an
attribute of the agent, by name), how often it steps, and the slow target copy that follows it::

    [OffPolicyUpdate("critic", critic, trains="critic", target=Target("critic_target", 0.005)),
     OffPolicyUpdate("actor", actor, trains="actor", every=2)]

The off-policy task (:mod:`beyondfit.tasks.offpolicy`) reads nothing else: it knows no
algorithm's part names. A part the agent lacks is made by the update's ``build(model)`` and
kept on the model under ``trains`` (so it moves to the device, is checkpointed and is read by the
closures as ``model.NAME``); a :class:`Target` becomes a
:class:`~beyondfit.core.target.SlowCopy` of the part, kept on the model under its own name and
averaged right after each step of the optimizer it follows. Your own algorithm is a factory like
the built-in ones, in your own module (``task.loss._target_=mymod.my_loss``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.target import SlowCopy

#: A loss closure: ``loss(model, batch) -> scalar tensor or {"loss": ..., logged values}``.
Closure = Callable[[nn.Module, Any], Any]


@dataclass(frozen=True)
class Target:
    """A slow copy of an update's part: ``copy <- (1 - rate) copy + rate part`` on one of
    every ``every`` steps of that update's optimizer (``rate=1.0``: a hard copy, DQN's).

    Attributes:
        name: the model attribute the copy is kept under (``model.critic_target``).
        rate: the Polyak coefficient ``tau`` in ``(0, 1]``.
        every: average once every ``every`` optimizer steps.
    """

    name: str
    rate: float = 0.005
    every: int = 1


@dataclass(frozen=True)
class OffPolicyUpdate:
    """One optimizer of an off-policy algorithm.

    Attributes:
        name: the update's name: its logged values are ``NAME/loss``, ...; its own optimizer
            settings are ``task.optimizers.NAME``.
        loss: the closure ``loss(model, batch)`` over a :class:`~beyondfit.rl.replay.
            ReplayBatch`; its backward reaches this update's part only.
        trains: the model attribute whose parameters this optimizer trains: a module
            (``"critic"``) or a single parameter (``"log_alpha"``).
        every: step once every ``every`` minibatches (TD3's delayed actor: 2).
        target: the slow copy that follows this optimizer's steps, or ``None``.
        build: ``build(model) -> module or parameter``, the part when the agent has none
            by the name ``trains`` (a part the package never heard of); ``None``: the agent
            must have it.
    """

    name: str
    loss: Closure
    trains: str
    every: int = 1
    target: Target | None = None
    build: Callable[[nn.Module], nn.Module | nn.Parameter] | None = None


def check_updates(updates: Any) -> list[OffPolicyUpdate]:
    """``task.loss``'s result as a list of :class:`OffPolicyUpdate`, else one error line (the
    engine's :class:`~beyondfit.core.update.Update` checks each one's name, closure and ratio)."""
    if isinstance(updates, OffPolicyUpdate):
        updates = [updates]
    if not isinstance(updates, Sequence) or isinstance(updates, str) or not updates or not all(
            isinstance(u, OffPolicyUpdate) for u in updates):
        raise BeyondfitError(
            f"task.loss gave {type(updates).__name__}, not a list of OffPolicyUpdate: an "
            "off-policy loss factory returns [OffPolicyUpdate(name, closure, trains=PART, "
            "every=..., target=...), ...] (see beyondfit.rl.algorithm), or pick one with "
            "algo=sac, algo=td3 or algo=dqn"
        )
    return list(updates)


def attach_parts(model: nn.Module, updates: Sequence[OffPolicyUpdate]) -> list[str]:
    """Give ``model`` what ``updates`` declare: each missing part (``build``), then each target
    copy. Returns the names of the attributes added (left out of the saved policy)."""
    added: list[str] = []
    for update in updates:
        if getattr(model, update.trains, None) is None:
            if update.build is None:
                raise BeyondfitError(
                    f"task.loss's update {update.name!r} trains model.{update.trains}, which "
                    f"the agent ({type(model).__name__}) has not: pick the agent it needs "
                    "(task.agent), or give the update a build(model) that makes the part"
                )
            setattr(model, update.trains, update.build(model))
            added.append(update.trains)
    for update in updates:
        if update.target is None:
            continue
        name, part = update.target.name, trained_params(model, update)
        if getattr(model, name, None) is not None:
            raise BeyondfitError(f"task.loss's update {update.name!r}: its target {name!r} is "
                                 "already a part of the agent")
        if not isinstance(part, nn.Module):
            raise BeyondfitError(f"task.loss's update {update.name!r}: model.{update.trains} is "
                                 "a parameter, not a module to copy")
        setattr(model, name, SlowCopy(part, rate=update.target.rate, every=update.target.every))
        added.append(name)
    return added


def trained_params(model: nn.Module, update: OffPolicyUpdate) -> nn.Module | list[nn.Parameter]:
    """What ``update``'s optimizer trains: its part's parameters (a module, or ``[param]``)."""
    part = getattr(model, update.trains, None)
    if isinstance(part, nn.Parameter):
        return [part]
    if isinstance(part, nn.Module):
        return part
    raise BeyondfitError(f"task.loss's update {update.name!r} trains model.{update.trains}, "
                         f"which is {type(part).__name__}, not a module or a parameter (as the "
                         "agent or the update's build(model) gives it)")
