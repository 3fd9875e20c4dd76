"""What an :class:`~beyondfit.core.update.Update`'s saved state must be before its optimizer
and scheduler load it: torch's ``load_state_dict`` takes moments of the wrong shape, NaN moments,
a string or negative learning rate, ``maximize=True`` or a scheduler's ``gamma`` from the file
without a word (it replaces the optimizer's settings with the file's), and the run fails or
silently trains with something else later.

So an entry is checked against what the run built (:class:`BuiltWith`): every setting of each
parameter group equal to the optimizer's own (``betas``, ``eps``, ``weight_decay``,
``maximize``, ``momentum``, ...), the learning rate a finite number > 0 and the one the
scheduler's state stands for, and the scheduler's settings, ``base_lrs``, ``last_epoch`` and
``_last_lr`` those of the scheduler this run configured."""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from beyondfit.core.state.checks import FieldError, fail, is_count, is_real
from beyondfit.core.state.serialization import SCHEDULER_GROUP_KEYS, nonfinite_entries

#: Optimizer state entries that have their parameter's shape (torch's optimizers).
PARAM_SHAPED = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer",
                          "square_avg", "acc_delta", "grad_avg", "sum", "ax", "prev", "exp_inf"})

#: Group keys that choose how a step is computed, not what it computes: they may differ
#: between the run's optimizer and its checkpoint (the compiled step switches ``fused`` and
#: ``capturable``), but must be flags.
IMPLEMENTATION = frozenset({"foreach", "fused", "capturable", "differentiable"})

#: Scheduler state entries that move as training goes on (the rest are its settings).
PROGRESS = frozenset({"last_epoch", "_step_count", "_last_lr", "_is_initial",
                      "_get_lr_called_within_step", "verbose", "best", "num_bad_epochs",
                      "cooldown_counter"})

#: Schedulers whose learning rate is a function of ``last_epoch`` and ``base_lrs`` that
#: torch computes in closed form (their steps multiply, which rounds to within ~1e-14 of it).
CLOSED_FORM = (torch.optim.lr_scheduler.StepLR, torch.optim.lr_scheduler.MultiStepLR,
               torch.optim.lr_scheduler.ExponentialLR, torch.optim.lr_scheduler.ConstantLR,
               torch.optim.lr_scheduler.LinearLR, torch.optim.lr_scheduler.PolynomialLR,
               torch.optim.lr_scheduler.CosineAnnealingLR)

PLATEAU = torch.optim.lr_scheduler.ReduceLROnPlateau


@dataclass
class BuiltWith:
    """What a run built an Update's optimizer and scheduler with: what its checkpoint must
    agree with.

    Attributes:
        optimizer: the optimizer's class (its constructor must accept the saved settings).
        groups: each parameter group's settings as built, without its parameters (with the
            keys a scheduler adds, ``initial_lr`` and OneCycle's bounds, where one was built).
        scheduled: a scheduler is configured (built, or waiting for the run's length).
        scheduler: a scheduler built as the run builds it, or ``None`` when it cannot be
            built yet (a run-length schedule of a checkpoint that does not say its length).
        scheduler_state: that scheduler's ``state_dict`` when it was built.
        offset: its ``last_epoch`` minus the optimizer's step count (0 unless a user's
            scheduler had stepped before the engine took it).
        devices: a parameter's device and dtype per group (to try the constructor on).
    """

    optimizer: type
    groups: list[dict[str, Any]]
    scheduled: bool = False
    scheduler: Any = None
    scheduler_state: Mapping[str, Any] | None = None
    offset: int = 0
    devices: list[tuple[torch.device, torch.dtype]] = field(default_factory=list)

    @classmethod
    def of(cls, optimizer: torch.optim.Optimizer, scheduler: Any = None,
           scheduled: bool = False) -> BuiltWith:
        """Record ``optimizer`` and ``scheduler`` as they are now, just built."""
        groups = [copy.deepcopy({k: v for k, v in g.items() if k != "params"})
                  for g in optimizer.param_groups]
        devices = [(g["params"][0].device, g["params"][0].dtype) if g["params"]
                   else (torch.device("cpu"), torch.float32) for g in optimizer.param_groups]
        state = copy.deepcopy(scheduler.state_dict()) if scheduler is not None else None
        offset = state.get("last_epoch", 0) if state and not isinstance(scheduler, PLATEAU) else 0
        return cls(type(optimizer), groups, scheduled or scheduler is not None, scheduler,
                   state, offset if is_count(offset) else 0, devices)

    def with_scheduler(self, scheduler: Any) -> BuiltWith:
        """The same optimizer, with ``scheduler`` just built over it (``last_epoch`` 0)."""
        return BuiltWith(self.optimizer, self.groups, True, scheduler,
                         copy.deepcopy(scheduler.state_dict()), 0, self.devices)

    def probe(self) -> torch.optim.Optimizer | None:
        """An optimizer of the same class and settings over one scratch parameter per group
        (what a schedule factory is tried on), or ``None`` if its constructor cannot tell."""
        groups = []
        for settings, (device, dtype) in zip(self.groups, self.devices, strict=True):
            kept = {k: v for k, v in settings.items()
                    if k not in SCHEDULER_GROUP_KEYS and k != "param_names"}
            groups.append({"params": [torch.zeros(1, device=device, dtype=dtype,
                                                  requires_grad=True)], **kept})
        try:
            return self.optimizer(groups)
        except Exception:  # a user's optimizer with arguments of its own: not ours to try
            return None


def check_optimizer_entry(entry: Mapping[str, Any], optimizer: torch.optim.Optimizer,
                          built: BuiltWith | None = None) -> None:
    """Raise :class:`FieldError` naming the first field of an Update's saved ``entry``
    (step count, the optimizer's groups and per-parameter state, the scheduler's) that
    ``optimizer`` must not load: a wrong type, a shape other than its parameter's, a value
    that is not finite; with ``built``, a setting other than the run's, a learning rate that
    is not > 0 or not what the scheduler's state says, a scheduler state of another one."""
    if not is_count(entry.get("steps", 0)):
        raise fail("steps", entry.get("steps"), "a whole number of steps")
    saved = entry["optimizer"]
    groups, saved_groups = optimizer.param_groups, saved["param_groups"]
    index: dict[Any, torch.Tensor] = {}
    for g, (group, old) in enumerate(zip(groups, saved_groups)):
        index.update(zip(old["params"], group["params"]))
        for key, mine in group.items():
            if key == "params" or key not in old:
                continue
            value = old[key]
            where = f"param_groups[{g}].{key}"
            if isinstance(mine, bool):
                if not isinstance(value, bool):
                    raise fail(where, value, "true or false")
            elif is_real(mine) and not (is_real(value) or isinstance(value, torch.Tensor)):
                raise fail(where, value, "a number")
            elif is_real(mine) and is_real(value) and not math.isfinite(value):
                raise fail(where, value, "a finite number")
            elif isinstance(mine, tuple) and not (
                    isinstance(value, tuple | list) and len(value) == len(mine)
                    and all(is_real(v) and math.isfinite(v) for v in value)):
                raise fail(where, value, f"{len(mine)} finite numbers")
    per_param = saved.get("state", {})
    if not isinstance(per_param, Mapping):
        raise fail("state", per_param, "a mapping")
    tensors = []
    for key, entries in per_param.items():
        param = index.get(key)
        if param is None or not isinstance(entries, Mapping):
            raise fail(f"state[{key!r}]", entries, "the state of one of its parameters")
        for name, value in entries.items():
            where = f"state[{key!r}].{name}"
            if isinstance(value, torch.Tensor):
                if name in PARAM_SHAPED and value.shape != param.shape:
                    raise fail(where, tuple(value.shape),
                                f"the parameter's shape {tuple(param.shape)}")
                tensors.append((where, value))
            elif not (value is None or isinstance(value, bool) or is_real(value)):
                raise fail(where, value, "a tensor or a number")
    bad = nonfinite_entries(tensors)
    if bad:
        raise FieldError(f"{', '.join(bad)} holds values that are not finite (NaN or inf)")
    scheduler = entry.get("scheduler")
    if scheduler is not None:
        if not isinstance(scheduler, Mapping) or not is_count(scheduler.get("last_epoch", 0), -1):
            raise fail("scheduler", scheduler, "a scheduler state")
        last_lr = scheduler.get("_last_lr", [])
        if not isinstance(last_lr, list) or not all(is_real(v) for v in last_lr):
            raise fail("scheduler._last_lr", last_lr, "a list of numbers")
    if built is not None:
        check_settings(saved_groups, built)
        check_schedule(entry, saved_groups, built)


# ---------------------------------------------------------------------- the optimizer's settings
def check_settings(saved_groups: Sequence[Mapping[str, Any]], built: BuiltWith) -> None:
    """Each saved group's settings against the run's optimizer: equal, its learning rate a
    finite number > 0, and all of them what the optimizer's own constructor accepts."""
    name = built.optimizer.__name__
    for g, (old, mine) in enumerate(zip(saved_groups, built.groups, strict=True)):
        lr = number(old.get("lr"))
        if lr is None or not math.isfinite(lr) or lr < 0 or (
                lr == 0 and not built.scheduled and number(mine.get("lr")) != 0):
            raise fail(f"param_groups[{g}].lr", old.get("lr"), "a learning rate (a finite "
                       "number > 0); resume from another checkpoint")
        cycled = _cycled_momentum(old)
        for key, value in old.items():
            where = f"param_groups[{g}].{key}"
            if key in ("params", "param_names", "lr") or key not in mine:
                continue  # (a setting only the file has: another optimizer, refused before)
            if key in IMPLEMENTATION:
                if not (value is None or isinstance(value, bool)):
                    raise fail(where, value, "true, false or null")
            elif key == cycled:  # OneCycle and Cyclic move it between two bounds
                _check_cycled(where, value, old, mine[key])
            elif not same(value, mine[key]):
                raise FieldError(
                    f"{where}={short(value)} but this run's {name} was built with "
                    f"{short(mine[key])}; resume with the optimizer settings the checkpoint was "
                    "written with, or from another checkpoint")
        _check_constructor(g, old, built)


def _cycled_momentum(group: Mapping[str, Any]) -> str | None:
    """The group key a momentum-cycling scheduler moves (``momentum`` or ``betas``), if any."""
    if "base_momentum" not in group or "max_momentum" not in group:
        return None
    return "betas" if "betas" in group else "momentum"


def _check_cycled(where: str, value: Any, group: Mapping[str, Any], mine: Any) -> None:
    low, high = number(group["base_momentum"]), number(group["max_momentum"])
    moved = number(value[0] if isinstance(value, tuple | list) and value else value)
    if isinstance(mine, tuple | list) and not (
            isinstance(value, tuple | list) and same(list(value)[1:], list(mine)[1:])):
        raise fail(where, value, f"{short(mine)} but for its first value")
    if low is None or high is None or moved is None or not (
            min(low, high) <= moved <= max(low, high)):
        raise fail(where, value, "between the scheduler's base_momentum and max_momentum")


def _check_constructor(g: int, group: Mapping[str, Any], built: BuiltWith) -> None:
    """The optimizer's own constructor given the saved settings (the run's ones pass it):
    e.g. ``fused`` with ``differentiable``, which only its first step would refuse."""
    try:
        parameters = inspect.signature(built.optimizer.__init__).parameters
    except (TypeError, ValueError):
        return
    mine = built.groups[g]
    keys = [k for k in mine if k in parameters and k != "params"]
    device, dtype = built.devices[g] if g < len(built.devices) else ("cpu", torch.float32)

    def construct(settings: Mapping[str, Any]) -> None:
        param = torch.zeros(1, device=device, dtype=dtype, requires_grad=True)
        built.optimizer([param], **{k: settings[k] for k in keys if k in settings})

    try:
        construct(mine)
    except Exception:
        return  # its constructor needs more than its groups say: it cannot tell
    try:
        construct(group)
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FieldError(f"param_groups[{g}] holds settings {built.optimizer.__name__} refuses "
                         f"({reason}); resume from another checkpoint") from None


# ---------------------------------------------------------------------- the scheduler's state
def check_schedule(entry: Mapping[str, Any], saved_groups: Sequence[Mapping[str, Any]],
                   built: BuiltWith) -> None:
    """The saved scheduler state against the run's scheduler: present, its settings the same,
    ``_last_lr`` the groups' learning rates, ``base_lrs`` the groups' ``initial_lr``,
    ``last_epoch`` the optimizer's step count, and each learning rate the one the schedule
    gives at ``last_epoch`` (a plateau's between its floor and its starting value)."""
    state = entry.get("scheduler")
    if not built.scheduled:
        return  # a schedule this run does not have is not loaded (its learning rate is)
    kind = type(built.scheduler).__name__ if built.scheduler is not None else "scheduler"
    lrs = [number(g.get("lr")) for g in saved_groups]
    if state is None:
        if entry.get("steps", 0) == 0 and all(  # saved before its first step: not built yet
                lr == number(g.get("initial_lr", g.get("lr")))
                for lr, g in zip(lrs, built.groups, strict=True)):
            return
        raise FieldError(f"scheduler: missing, but this run's learning rate follows a {kind}; "
                         "resume with the scheduler the checkpoint was written with")
    last_lr = state.get("_last_lr")
    if last_lr is not None:
        if len(last_lr) != len(lrs):
            raise fail("scheduler._last_lr", last_lr, f"{len(lrs)} learning rates")
        for g, (lr, said) in enumerate(zip(lrs, last_lr, strict=True)):
            if lr != number(said):
                raise fail(f"scheduler._last_lr[{g}]", said,
                           f"param_groups[{g}].lr={short(lr)} as the scheduler sets both")
    reference = built.scheduler_state
    if reference is not None:
        for key, value in state.items():
            if key in PROGRESS:
                continue
            if key not in reference:
                raise fail(f"scheduler.{key}", value, f"a setting of this run's {kind}")
            if not same_settings(value, reference[key]):
                raise FieldError(
                    f"scheduler.{key}={short(value)} but this run's {kind} was built with "
                    f"{short(reference[key])}; resume with the scheduler settings the "
                    "checkpoint was written with, or from another checkpoint")
    base_lrs = state.get("base_lrs")
    if base_lrs is not None:
        for g, (group, base) in enumerate(zip(saved_groups, base_lrs, strict=False)):
            if "initial_lr" in group and number(group["initial_lr"]) != number(base):
                raise fail(f"param_groups[{g}].initial_lr", group["initial_lr"],
                           f"scheduler.base_lrs[{g}]={short(base)}")
    plateau = isinstance(built.scheduler, PLATEAU)
    if plateau:
        _check_plateau(state, lrs, built)
        return
    steps, last = entry.get("steps"), state.get("last_epoch")
    if steps is not None and last is not None and last != steps + built.offset:
        raise fail("scheduler.last_epoch", last,
                   f"{steps + built.offset}, the scheduler steps with the optimizer ({steps} "
                   "steps)")
    implied = implied_lrs(built.scheduler, state)
    for g, (lr, want) in enumerate(zip(lrs, implied or [], strict=False)):
        if lr is not None and not math.isclose(lr, want, rel_tol=1e-6, abs_tol=1e-12):
            raise fail(f"param_groups[{g}].lr", lr,
                       f"{want:.6g}, what this run's {kind} gives at step {last}")


def _check_plateau(state: Mapping[str, Any], lrs: Sequence[float | None],
                   built: BuiltWith) -> None:
    """A ReduceLROnPlateau's learning rate only falls, from the configured one to its floor."""
    for name, low in (("num_bad_epochs", 0), ("cooldown_counter", 0), ("last_epoch", -1)):
        if name in state and not is_count(state[name], low):
            raise fail(f"scheduler.{name}", state[name], "a whole number >= 0")
    if "best" in state and not is_real(state["best"]):
        raise fail("scheduler.best", state["best"], "a number")
    floors = (built.scheduler_state or {}).get("min_lrs", [])
    for g, (lr, group) in enumerate(zip(lrs, built.groups, strict=False)):
        start = number(group.get("lr"))
        floor = number(floors[g]) if g < len(floors) else 0.0
        if lr is None or start is None or floor is None:
            continue
        if not min(floor, start) * (1 - 1e-9) <= lr <= start * (1 + 1e-9):
            raise fail(f"param_groups[{g}].lr", lr, f"between the plateau's floor {floor:.6g} "
                       f"and the configured {start:.6g}")


def implied_lrs(scheduler: Any, state: Mapping[str, Any]) -> list[float] | None:
    """The learning rates ``scheduler``'s kind gives at the saved ``state``'s ``last_epoch``
    from its ``base_lrs``: a LambdaLR's ``base * lambda(epoch)``, a closed form where torch has
    one; ``None`` for the others (their rate depends on its own past)."""
    epoch, bases = state.get("last_epoch"), state.get("base_lrs")
    if scheduler is None or not is_count(epoch) or not isinstance(bases, list):
        return None
    try:
        if type(scheduler) is torch.optim.lr_scheduler.LambdaLR:
            return [float(base) * float(fn(epoch))
                    for base, fn in zip(bases, scheduler.lr_lambdas, strict=True)]
        if type(scheduler) in CLOSED_FORM:
            view = copy.copy(scheduler)  # its settings, the saved position
            view.last_epoch, view.base_lrs = epoch, list(bases)
            return [float(v) for v in view._get_closed_form_lr()]
    except Exception:  # a user's lambda that cannot say: nothing to compare with
        return None
    return None


# ---------------------------------------------------------------------- comparing values
def number(value: Any) -> float | None:
    """A real number or a one-element tensor as a float; ``None`` for anything else."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return float(value) if is_real(value) else None


def same(a: Any, b: Any) -> bool:
    """Equal settings: numbers by value (a tensor's too), sequences element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, tuple | list) or isinstance(b, tuple | list):
        return (isinstance(a, tuple | list) and isinstance(b, tuple | list)
                and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True)))
    x, y = number(a), number(b)
    if x is not None or y is not None:
        return x is not None and y is not None and x == y
    return type(a) is type(b) and a == b


def same_settings(a: Any, b: Any) -> bool:
    """:func:`same`, looking into nested scheduler states (SequentialLR's) past their progress."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys = (set(a) | set(b)) - PROGRESS
        return all(k in a and k in b and same_settings(a[k], b[k]) for k in keys)
    if isinstance(a, list) and isinstance(b, list) and any(isinstance(x, Mapping) for x in a):
        return len(a) == len(b) and all(same_settings(x, y) for x, y in zip(a, b, strict=True))
    return same(a, b)


def short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
