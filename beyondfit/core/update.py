"""One optimizer of an engine, with everything that belongs to it alone.

An :class:`Update` is a loss closure, the optimizer that minimises it, the parameters that
optimizer owns, how often it steps, its scheduler and its gradient clipping. An engine with
one optimizer has one (built from ``Engine(model, loss_fn, optimizer, ...)``); a GAN, WGAN-GP
or SAC engine has several::

    engine = Engine(model, [
        Update("critic", critic_loss, Adam(model.critic.parameters(), 1e-4)),
        Update("generator", generator_loss, Adam(model.generator.parameters(), 1e-4), every=5),
    ])

The rules the engine follows (see :class:`~beyondfit.core.engine.Engine`):

- **Own gradients.** Each closure's backward reaches its own optimizer's parameters only
  (``backward(inputs=params)``): the generator's loss never leaves gradients in the critic.
- **In order.** Within a micro-batch the updates run in the order given; at the end of an
  accumulation window each steps right after its own backward, so a later closure sees the
  earlier optimizers' new weights (the alternating GAN algorithm, SAC's critic-then-actor).
- **Ratio.** ``every=n`` steps this optimizer in one engine step out of ``n`` (the last of
  each ``n``: after ``n - 1`` steps of the others); its closure is not called otherwise.
- **Names.** Every entry a closure returns is logged as ``NAME/entry`` (``critic/loss``,
  ``generator/loss``, ``critic/grad_norm``, ``generator/lr``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.monitor import Monitor
from beyondfit.core.options import check_number, check_option
from beyondfit.core.schedules import scheduler_for, wants_run_length
from beyondfit.core.state.checks import fail, is_count
from beyondfit.core.state.optimizer import BuiltWith, check_optimizer_entry, implied_lrs

LossFn = Callable[[nn.Module, Any], Any]


class Update:
    """An optimizer with its own loss closure, parameters, step ratio, scheduler and clipping.

    Args:
        name: how its logged values are prefixed (``NAME/loss``); unique within an engine.
        loss_fn: ``loss_fn(model, batch)`` returning a scalar tensor or a mapping with
            ``"loss"``, as for a one-optimizer engine.
        optimizer: an Optimizer over this update's parameters, or a callable
            ``params -> Optimizer`` given ``params`` (Hydra's ``_partial_`` gives one), or
            ``None``: the Engine's ``optimizer`` factory (the command line's ``optimizer``
            group), which also lends its ``scheduler``, ``clip_norm`` and ``clip_value`` to
            an Update that sets none of its own.
        params: a module or an iterable of parameters; needed with an optimizer factory,
            otherwise read from the optimizer.
        every: step this optimizer once every ``every`` engine steps (WGAN-GP's generator:
            ``every=5`` beside a critic stepping every time).
        scheduler: an LR scheduler of this optimizer, or a callable ``optimizer -> scheduler``
            (one with a ``total_steps`` parameter, such as ``beyondfit.core.schedules.cosine``,
            is built when ``fit`` starts, told the run's optimizer steps on this rank's data);
            stepped when this optimizer steps. ``ReduceLROnPlateau`` is stepped after each
            evaluation with the value named by ``monitor`` instead.
        clip_norm: clip this optimizer's gradient norm (pre-clip norm logged as ``grad_norm``).
        clip_value: clamp each of its gradient elements to ``[-clip_value, clip_value]``.
        track_grad_norm: log ``grad_norm`` even without ``clip_norm``.
        monitor: the evaluation value a ``ReduceLROnPlateau`` scheduler follows.
        after_step: callables ``hook(update)`` run right after each of this optimizer's
            steps (after its scheduler and ``zero_grad``), in order: the one place for what
            follows an optimizer, such as a target network's Polyak update. Not run when the
            step was skipped for non-finite values.
        optimizer_options: keywords the optimizer factory is called with besides the
            parameters, this update's own over the shared factory's (``{"lr": 1e-3}``).
    """

    def __init__(
        self,
        name: str,
        loss_fn: LossFn,
        optimizer: Any = None,
        *,
        params: nn.Module | Iterable[nn.Parameter] | None = None,
        every: int = 1,
        scheduler: Any = None,
        clip_norm: float | None = None,
        clip_value: float | None = None,
        track_grad_norm: bool = False,
        monitor: str = "val_loss",
        after_step: Iterable[Callable[[Update], None]] = (),
        optimizer_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str):
            raise BeyondfitError(f"Update name {name!r} must be a string")
        if not callable(loss_fn):
            raise BeyondfitError(
                f"Update {name!r}: loss_fn must be a callable loss_fn(model, batch)"
            )
        self.name = name
        self.loss_fn = loss_fn
        self.every = check_number(f"Update {name!r} every", every, integer=True, at_least=1)
        self.clip_norm = check_option("Update.clip_norm", clip_norm)
        self.clip_value = check_option("Update.clip_value", clip_value)
        self.track_grad_norm = bool(track_grad_norm) or clip_norm is not None
        self.monitor = str(monitor)
        # With a ReduceLROnPlateau scheduler (bind): the value it steps on (it keeps its own
        # best and mode).
        self.tracked: Monitor | None = None
        self.after_step = tuple(after_step)
        for hook in self.after_step:
            if not callable(hook):
                raise BeyondfitError(
                    f"Update {name!r}: after_step holds {type(hook).__name__}, not a callable "
                    "hook(update)"
                )
        self._optimizer_arg = optimizer
        self.optimizer_options = dict(optimizer_options or {})
        self._params_arg = params
        self._scheduler_arg = scheduler
        # Set by bind(): the engine's model is on its device by then.
        self.params: list[nn.Parameter] = []
        self.optimizer: torch.optim.Optimizer = None  # type: ignore[assignment]
        self.scheduler: Any = None
        self._scheduler_state: Any = None  # loaded before a run-length scheduler was built
        self._schedule_steps: int | None = None  # the run length it is (to be) built over
        self._built: BuiltWith | None = None  # what a checkpoint's settings must agree with
        self.steps = 0  # times this optimizer stepped (saved in checkpoints)
        self.prefix = f"{name}/" if name else ""

    def inherit(self, optimizer: Any, scheduler: Any, clip_norm: float | None,
                clip_value: float | None, track_grad_norm: bool) -> None:
        """Take the Engine's settings where this Update has none of its own."""
        self.track_grad_norm = self.track_grad_norm or bool(track_grad_norm)
        if self._optimizer_arg is None:
            self._optimizer_arg = optimizer
        if self._scheduler_arg is None:
            self._scheduler_arg = scheduler
        if self.clip_norm is None and clip_norm is not None:
            self.clip_norm = check_option("Update.clip_norm", clip_norm)
            self.track_grad_norm = True
        if self.clip_value is None:
            self.clip_value = check_option("Update.clip_value", clip_value)

    def bind(self, default_params: list[nn.Parameter] | None) -> None:
        """Build the optimizer and scheduler; ``default_params`` (the model's trainable
        parameters) serve a one-optimizer engine whose factory was given no ``params``."""
        params = self._params_arg
        if isinstance(params, nn.Module):
            params = params.parameters()
        if isinstance(self._optimizer_arg, torch.optim.Optimizer):
            if self.optimizer_options:
                raise BeyondfitError(f"Update {self.name!r}: optimizer_options need an "
                                     "optimizer factory, not a built Optimizer")
            self.optimizer = self._optimizer_arg
            found = [p for g in self.optimizer.param_groups for p in g["params"]]
            self.params = [p for p in found if p.requires_grad]
        elif callable(self._optimizer_arg):  # Hydra's _partial_ is no functools.partial
            if params is None and default_params is None:
                raise BeyondfitError(self._where("builds its optimizer from a factory but has no "
                                                 "params"))
            chosen = default_params if params is None else list(params)
            self.params = [p for p in chosen if p.requires_grad]
            if not self.params:
                raise BeyondfitError(self._where("has no trainable parameters"))
            self.optimizer = self._optimizer_arg(self.params, **self.optimizer_options)
            if not isinstance(self.optimizer, torch.optim.Optimizer):
                raise BeyondfitError(
                    f"the optimizer factory returned {type(self.optimizer).__name__}, not a "
                    "torch Optimizer"
                )
        elif self._optimizer_arg is None:
            raise BeyondfitError(f"Update {self.name!r} has no optimizer: give it one, or give "
                                 "the Engine an optimizer factory the Updates share")
        else:
            raise BeyondfitError(
                "optimizer must be a torch Optimizer or a callable params -> Optimizer, "
                f"got {type(self._optimizer_arg).__name__}"
            )
        if not self.params:
            raise BeyondfitError(self._where("has no parameter with requires_grad=True"))
        self.scheduler = self._own(scheduler_for(self._scheduler_arg, self.optimizer))
        self._built = BuiltWith.of(self.optimizer, self.scheduler, self.needs_run_length)
        if self.plateau:
            self.tracked = Monitor(self.monitor, owner="ReduceLROnPlateau",
                                   fix="set the Update's monitor= to one of them")

    @property
    def needs_run_length(self) -> bool:
        """Is the scheduler a factory waiting for the run's length (:meth:`schedule_over`)?"""
        return self.scheduler is None and wants_run_length(self._scheduler_arg)

    def schedule_over(self, total_steps: int) -> None:
        """Build the scheduler over ``total_steps`` optimizer steps (``fit``, once the data is
        sharded); after a resume it continues from the checkpoint's scheduler state, at the
        learning rate this schedule gives there (the checkpoint's, unless the run was extended
        since: ``resume_extend`` goes on along the longer schedule)."""
        loaded = [{k: v for k, v in group.items() if k != "params"}
                  for group in self.optimizer.param_groups]
        self.scheduler = self._own(self._scheduler_arg(self.optimizer, total_steps=total_steps))
        self._built = BuiltWith.of(self.optimizer, self.scheduler)
        self._schedule_steps = total_steps
        if self._scheduler_state is not None:
            # A scheduler sets its first LR (OneCycle its momentum too) when built: put back
            # the checkpoint's.
            for group, settings in zip(self.optimizer.param_groups, loaded, strict=True):
                group.update(settings)
            self.scheduler.load_state_dict(self._scheduler_state)
            self._scheduler_state = None
            implied = implied_lrs(self.scheduler, self.scheduler.state_dict())
            if implied is not None:
                for group, lr in zip(self.optimizer.param_groups, implied, strict=True):
                    group["lr"] = lr
                self.scheduler._last_lr = list(implied)

    @property
    def plateau(self) -> bool:
        """Is the scheduler a ``ReduceLROnPlateau`` (stepped with a validation value)?"""
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)

    def due(self, global_step: int) -> bool:
        """Does this optimizer step in engine step ``global_step + 1``?"""
        return self.every == 1 or (global_step + 1) % self.every == 0

    def lr(self) -> float:
        """The first parameter group's learning rate (logged as ``lr``)."""
        return float(self.optimizer.param_groups[0]["lr"])

    def grad_norm(self) -> torch.Tensor:
        """The global 2-norm of this optimizer's gradients, on the device, without a sync."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return torch.zeros(())
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))

    def clip(self) -> torch.Tensor | None:
        """Clip by norm and value as configured; returns the pre-clip norm when tracked."""
        norm = None
        if self.track_grad_norm:
            max_norm = self.clip_norm if self.clip_norm is not None else math.inf
            norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        if self.clip_value is not None:
            torch.nn.utils.clip_grad_value_(self.params, self.clip_value)
        return norm

    def take_foreign_gradients(self) -> bool:
        """Drop gradients this optimizer's parameters hold at the start of a window.

        The engine clears them after every step, so any found here came from outside: another
        engine's backward through shared modules, or user code. Returns whether there were any.
        """
        found = False
        for p in self.params:
            if p.grad is not None:
                p.grad = None
                found = True
        return found

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, scheduler and step count, as the user's objects hold them (the compiled
        step lends tensor learning rates to its graphs only while they run), and the run length
        a run-length scheduler was built over."""
        state: dict[str, Any] = {"optimizer": self.optimizer.state_dict(), "steps": self.steps}
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        elif self._scheduler_state is not None:  # loaded, not yet built: kept as it was
            state["scheduler"] = self._scheduler_state
        if self._schedule_steps is not None:
            state["schedule_steps"] = self._schedule_steps
        return state

    def load_state_dict(self, state: dict[str, Any], source: str) -> None:
        """Restore :meth:`state_dict`; another optimizer's state is a clear error, and the
        saved state is checked first, against the settings this Update's optimizer and
        scheduler were built with (:mod:`beyondfit.core.state.optimizer`)."""
        pending = self.needs_run_length
        total = state.get("schedule_steps")
        if total is not None and not is_count(total, 1):
            raise fail("schedule_steps", total, "a whole number of steps >= 1")
        check_optimizer_entry(state, self.optimizer,
                              self._schedule_probe(total) if pending else self._built)
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BeyondfitError(
                f"{source} holds optimizer state that does not fit this optimizer"
                f"{self.describe()} ({exc}); resume with the same optimizer settings"
            ) from None
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        elif pending:
            self._scheduler_state = state.get("scheduler")
            self._schedule_steps = total
        self.steps = int(state.get("steps", 0))

    def _schedule_probe(self, total_steps: int | None) -> BuiltWith | None:
        """For a run-length scheduler not built yet: one built as the run builds it, over the
        run length the checkpoint was written with, on a scratch optimizer of the same kind
        (what its state is checked against); without that length, what the optimizer was
        built with."""
        built = self._built
        if built is None or total_steps is None:
            return built
        probe = built.probe()
        if probe is None:
            return built
        try:
            scheduler = self._scheduler_arg(probe, total_steps=total_steps)
        except Exception:  # a length its own checks refuse: nothing to compare with
            return built
        return BuiltWith.of(probe, scheduler)

    def describe(self) -> str:
        """`` 'NAME'`` for messages (empty for the one optimizer of a plain engine)."""
        return f" {self.name!r}" if self.name else ""

    def _own(self, scheduler: Any) -> Any:
        """``scheduler``, if it steps this Update's optimizer (a scheduler built over another
        would change that one's learning rate and never this one's)."""
        if scheduler is None or getattr(scheduler, "optimizer", self.optimizer) is self.optimizer:
            return scheduler
        who = f"Update {self.name!r}: its scheduler" if self.name else "scheduler="
        mine = f"Update {self.name!r}'s" if self.name else "the engine's"
        raise BeyondfitError(
            f"{who} ({type(scheduler).__name__}) steps another optimizer than {mine}; build it "
            "over that optimizer, or pass a callable optimizer -> scheduler"
        )

    def _where(self, problem: str) -> str:
        if self.name:
            return f"Update {self.name!r} {problem}: give it the parameters it should train"
        return (
            "every parameter of the model has requires_grad=False: nothing to train; "
            "unfreeze at least one parameter"
        )


def build_updates(loss_fn: Any, optimizer: Any, scheduler: Any, clip_norm: Any, clip_value: Any,
             track_grad_norm: bool) -> list[Update]:
    """The engine's optimizers: the Updates given, or one built from ``Engine``'s arguments."""
    if isinstance(loss_fn, Sequence) and loss_fn and all(isinstance(u, Update) for u in loss_fn):
        # The Engine's settings are the Updates' defaults: each builds its own optimizer (and
        # scheduler) from a shared factory; a built one belongs to a single optimizer.
        for what, value in (("optimizer", optimizer), ("scheduler", scheduler)):
            if len(loss_fn) > 1 and value is not None and not _factory(value):
                raise BeyondfitError(
                    f"with a list of Updates, give each Update its own {what}, or the Engine "
                    f"a callable that builds one per Update (got a built {type(value).__name__})"
                )
        for update in loss_fn:
            update.inherit(optimizer, scheduler, clip_norm, clip_value, track_grad_norm)
        return check_names(list(loss_fn))
    if not callable(loss_fn):
        raise BeyondfitError(
            "loss_fn must be a callable loss_fn(model, batch), or a list of Update objects"
        )
    if optimizer is None:
        raise BeyondfitError(
            "no optimizer: pass Engine(model, loss_fn, optimizer), e.g. "
            "torch.optim.Adam(model.parameters(), 1e-3)"
        )
    return [Update("", loss_fn, optimizer, scheduler=scheduler, clip_norm=clip_norm,
                   clip_value=clip_value, track_grad_norm=track_grad_norm)]


def check_names(updates: list[Update]) -> list[Update]:
    """``updates``, if their names are distinct and non-empty (they prefix the logged values)."""
    names = [u.name for u in updates]
    if len(updates) > 1 and (len(set(names)) != len(names) or "" in names):
        raise BeyondfitError(f"Update names {names} must be distinct and non-empty: they prefix "
                             "the logged values (NAME/loss)")
    return updates


def _factory(value: Any) -> bool:
    """Is ``value`` a factory (not a built optimizer or scheduler)?"""
    return callable(value) and not isinstance(value, torch.optim.Optimizer) and not hasattr(
        value, "step")


def check_disjoint(updates: list[Update]) -> None:
    """Refuse a parameter owned by two optimizers: two updates would fight over it."""
    owner: dict[int, str] = {}
    for update in updates:
        for p in update.params:
            other = owner.setdefault(id(p), update.name)
            if other != update.name:
                raise BeyondfitError(
                    f"a parameter is in both optimizers {other!r} and {update.name!r}; give "
                    "each Update its own parameters (a shared trunk belongs to one of them)"
                )


class OnlyUpdate:
    """``engine.loss_fn`` and friends of a one-optimizer engine: its :class:`Update`'s.

    With several optimizers there is no single one: reading it is an error naming them."""

    def __init__(self, attribute: str) -> None:
        self.attribute = attribute

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, engine: Any, owner: type | None = None) -> Any:
        if engine is None:
            return self
        if not engine._single:
            names = ", ".join(repr(u.name) for u in engine.updates)
            raise AttributeError(
                f"this engine has several optimizers ({names}): use "
                f"engine.updates[i].{self.attribute}"
            )
        return getattr(engine.updates[0], self.attribute)

    def __set__(self, engine: Any, value: Any) -> None:
        if not engine._single:
            raise AttributeError(f"set {self.attribute} on an Update of engine.updates")
        setattr(engine.updates[0], self.attribute, value)
