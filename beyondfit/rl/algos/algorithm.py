"""What an off-policy algorithm declares: its optimizers, each with the part of the model it trains.

An off-policy loss factory (``sac_loss``, ``td3_loss``, ``dqn_loss`` or yours) returns a list of
:class:`OffPolicyUpdate`, in the order the engine steps them on every minibatch. Each says, in the
one place a reader sees: the loss closure, the part of the model its optimizer trains (an
attribute of the agent, by name), how often it steps, and the slow target copy that follows it::

    [OffPolicyUpdate("critic", critic, trains="critic", target=Target("critic_target", 0.005)),
     OffPolicyUpdate("actor", actor, trains="actor", every=2)]

:func:`engine_updates` turns them into the engine's optimizers, one per update, knowing no
algorithm's part names; the off-policy task (:mod:`beyondfit.tasks.offpolicy`) calls it and reads
nothing else of the algorithm. A part the agent lacks is made by the update's ``build(model)`` and
kept on the model under ``trains`` (so it moves to the device, is checkpointed and is read by the
closures as ``model.NAME``); a :class:`Target` becomes a
:class:`~beyondfit.core.target.SlowCopy` of the part, kept on the model under its own name and
averaged right after each step of the optimizer it follows. Your own algorithm is a factory like
the built-in ones, in your own module (``task.loss._target_=mymod.my_loss``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_learning_rate
from beyondfit.core.target import SlowCopy
from beyondfit.core.update import Update, check_names

if TYPE_CHECKING:
    from beyondfit.rl.algos.auxiliary import Auxiliary

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
        loss: the closure ``loss(model, batch)`` over a :class:`~beyondfit.rl.replay.buffer.
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


def engine_updates(model: nn.Module, declared: Any, optimizers: Any = None,
                   aux: Auxiliary | None = None) -> tuple[list[Update], list[str]]:
    """The engine's :class:`~beyondfit.core.update.Update`s for what a loss factory declared.

    In the declared order, each trains its part of ``model`` with an optimizer the engine builds
    from the ``optimizer`` group under ``optimizers[name]`` (``task.optimizers``), and its target
    copy follows each of its steps. The parts the agent lacks are built first (``build``), then
    the targets, before anything draws random numbers: a target starts equal to its part;
    then ``aux``'s terms join the update that trains the encoder
    (:meth:`~beyondfit.rl.algos.auxiliary.Auxiliary.join`). Returns the updates and the attributes
    added to ``model`` (left out of the saved policy)."""
    declared = _declared(declared)
    own = _own_settings(optimizers, [u.name for u in declared])
    added: list[str] = []
    for u in declared:
        if getattr(model, u.trains, None) is None:
            if u.build is None:
                raise BeyondfitError(
                    f"task.loss's update {u.name!r} trains model.{u.trains}, which the agent "
                    f"({type(model).__name__}) has not: pick the agent it needs (task.agent), "
                    "or give the update a build(model) that makes the part")
            setattr(model, u.trains, u.build(model))
            added.append(u.trains)
    updates = []
    for u in declared:
        part, follow = getattr(model, u.trains), []
        where = f"task.loss's update {u.name!r}"
        if not isinstance(part, nn.Module | nn.Parameter):
            raise BeyondfitError(f"{where} trains model.{u.trains}, which is "
                                 f"{type(part).__name__}, not a module or a parameter (as the "
                                 "agent or the update's build(model) gives it)")
        if u.target is not None:
            if getattr(model, u.target.name, None) is not None:
                raise BeyondfitError(f"{where}: its target {u.target.name!r} is already a part "
                                     "of the agent")
            if isinstance(part, nn.Parameter):
                raise BeyondfitError(f"{where}: model.{u.trains} is a parameter, not a module "
                                     "to copy")
            target = SlowCopy(part, rate=u.target.rate, every=u.target.every)
            setattr(model, u.target.name, target)
            added.append(u.target.name)
            follow = [target.update]
        params = [part] if isinstance(part, nn.Parameter) else part
        updates.append(Update(u.name, u.loss, params=params, every=u.every, after_step=follow,
                              optimizer_options=own.get(u.name)))
    if aux is not None:
        added += aux.join(model, [u.trains for u in declared], updates)
    return check_names(updates), added


def _declared(declared: Any) -> list[OffPolicyUpdate]:
    """``task.loss``'s result as a list of :class:`OffPolicyUpdate`, else one error line (the
    engine's :class:`~beyondfit.core.update.Update` checks each one's name, closure and ratio)."""
    if isinstance(declared, OffPolicyUpdate):
        declared = [declared]
    if not isinstance(declared, Sequence) or isinstance(declared, str) or not declared or not all(
            isinstance(u, OffPolicyUpdate) for u in declared):
        raise BeyondfitError(
            f"task.loss gave {type(declared).__name__}, not a list of OffPolicyUpdate: an "
            "off-policy loss factory returns [OffPolicyUpdate(name, closure, trains=PART, "
            "every=..., target=...), ...] (see beyondfit.rl.algos.algorithm), or pick one with "
            "algo=sac, algo=td3 or algo=dqn")
    return list(declared)


def _own_settings(optimizers: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    """``task.optimizers`` checked: ``{update name: {option: value}}`` for declared updates,
    any ``lr`` by the same rule as ``optimizer.lr``."""
    if optimizers and not isinstance(optimizers, Mapping):
        raise BeyondfitError(f"task.optimizers={optimizers!r} must map update names to "
                             "optimizer settings, e.g. task.optimizers.critic.lr=0.001")
    settings = {}
    for name, options in dict(optimizers or {}).items():
        if name not in names:  # a tuned preset may set one (alpha) for a loss that lacks it
            raise BeyondfitError(f"task.optimizers.{name}: the loss has no {name!r} update; "
                                 f"its updates are {', '.join(names)} (task.optimizers=null "
                                 "drops a preset's settings)")
        if not isinstance(options, Mapping):
            raise BeyondfitError(f"task.optimizers.{name}={options!r} must be a mapping of "
                                 f"optimizer settings, e.g. task.optimizers.{name}.lr=0.001")
        settings[name] = {str(key): value for key, value in options.items()}
        if "lr" in options:
            check_learning_rate(options["lr"], f"task.optimizers.{name}.lr")
    return settings
