"""The optimizer as the compiled step (:mod:`beyondfit.core.compile.compiled`) runs it: a private
twin of the user's optimizer that the graphs step (:class:`Twin`), its step without torch's
wrappers, the hooks that keep it eager (:func:`step_hooks`), torch's fused kernel after the
graph, and step counts on the device its parameters are on.

The user's optimizer is never edited: what the compiled step switches (the fused or foreach
form, ``capturable``, ``found_inf``, a learning rate as a tensor during a graph call) it
switches on the twin, which shares the user's parameters and state (moments, step counts: the
same tensors, not copies) but has param groups of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.optim import optimizer as optim_module

from beyondfit.core.compile.probe import (
    GLOBAL_HOOKS,
    OWN_HOOKS,
    SCHEDULER_MARK,
    fused_skips,
    missing,
)


def raw_step(optimizer: torch.optim.Optimizer) -> Callable[[torch.optim.Optimizer], Any] | None:
    """The optimizer's ``step`` without torch's wrappers (its hooks and profiling, and a
    grad-mode switch that breaks the graph on purpose); the graph runs it under ``no_grad``
    itself. ``None`` where it cannot be reached for certain: this torch does not mark its
    wrappers (probe ``unwrapped_step``), or the class's step is wrapped by something that
    does not say what it wraps."""
    if missing("unwrapped_step"):
        return None
    step = type(optimizer).step
    while hasattr(step, "__wrapped__"):
        step = step.__wrapped__
    where = getattr(step, "__qualname__", "").split(".")  # a class's own: CLASS.step
    return step if len(where) > 1 and where[-1] == "step" and where[-2] != "<locals>" else None


def why_never_traced(optimizer: torch.optim.Optimizer) -> str | None:
    """Why this optimizer's step can never run inside a graph on this torch (its part then
    runs eagerly), or ``None``."""
    for feature in ("unwrapped_step", "step_hooks"):
        why = missing(feature)
        if why:
            return f"this torch: {why}"
    if raw_step(optimizer) is None:
        return (f"{type(optimizer).__name__}.step is wrapped by something that does not say "
                "what it wraps (no __wrapped__): the graph would run the wrapper's Python")
    return None


def step_hooks(optimizer: torch.optim.Optimizer) -> str | None:
    """Why the optimizer must step eagerly now, or ``None``: a step hook is registered (its
    own or a global one, which only an eager ``step()`` runs), its ``step`` is replaced on the
    instance, or the engine cannot see for certain (fail closed). Read before every compiled
    step (a few dict lookups), so a hook registered between two ``fit`` calls, or inside one,
    is seen at the next step."""
    own = optimizer.__dict__
    for name in OWN_HOOKS:
        hooks = own.get(name)
        if not isinstance(hooks, dict):
            return f"its step hooks cannot be seen (it has no {name})"
        if hooks:
            return "it has a step hook"
    for name in GLOBAL_HOOKS:
        hooks = getattr(optim_module, name, None)
        if not isinstance(hooks, dict):
            return f"global step hooks cannot be seen (torch.optim.optimizer has no {name})"
        if hooks:
            return "a global optimizer step hook is registered"
    step = own.get("step")
    if step is not None and not hasattr(step, SCHEDULER_MARK):  # not a scheduler's counter
        why = missing("scheduler_mark")  # (or this torch's counters are unmarked)
        return f"its step is replaced on the instance{f' ({why})' if why else ''}"
    return None


class Twin:
    """The optimizer the graphs step: a second instance of the user's optimizer's class with
    the same attributes and the same ``state`` object, and param groups of its own whose
    settings follow the user's before every step (:meth:`follow`), then the compiled step's
    own switches (:meth:`switch`). A ``load_state_dict`` or ``add_param_group`` on the user's
    optimizer makes a new twin."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.user = optimizer
        self.switches: dict[str, Any] = {}
        self.optimizer = self._copy()

    def _copy(self) -> torch.optim.Optimizer:
        user = self.user
        twin = object.__new__(type(user))
        twin.__dict__.update(user.__dict__)  # state, hooks' dicts, a subclass's attributes
        twin.__dict__.pop("step", None)  # a step replaced on the instance is the user's
        twin.defaults = dict(user.defaults)
        twin.param_groups = [dict(group) for group in user.param_groups]
        return twin

    def switch(self, **settings: Any) -> None:
        """Settings of the twin's groups that the user's do not override (a key a group lacks
        is left out)."""
        self.switches.update(settings)
        self.follow()

    def follow(self) -> torch.optim.Optimizer:
        """The twin, its groups' settings those of the user's groups (a scheduler's learning
        rate, a loaded state's), then the switches."""
        user, twin = self.user, self.optimizer
        if twin.state is not user.state or len(twin.param_groups) != len(user.param_groups):
            self.optimizer = twin = self._copy()
        for mine, theirs in zip(twin.param_groups, user.param_groups, strict=True):
            mine.update(theirs)
            for key, value in self.switches.items():
                if key in mine:
                    mine[key] = value
        return twin


#: From this many trained values on, an optimizer with a fused kernel in torch steps with it,
#: after the graph, instead of inside it (where inductor fuses the update with the clipping
#: and the masked commit, and no ``optimizer.step()`` call from Python costs ~120 us). Since
#: a CPU graph computes Adam's bias corrections once
#: (:func:`~beyondfit.core.compile.inductor_options.mark_scalars_once`), the graph is as fast or
#: faster up to millions of values; measured per step on a CPU, in the graph against the kernel, x
#: the
#: raw loop: Adam on a 670k-value MLP 0.79x against 0.81x, on 1.9M values 0.76x against 0.78x,
#: on 5.8M 0.74x against 0.75x; SGD with momentum on 670k 0.76x against 0.79x, on 5.8M 0.75x
#: against 0.73x. (Before that pass the kernel won from ~2^18 values on.)
KERNEL_FROM = 1 << 21

#: The optimizers whose fused kernel the compiled step may switch to (exact types: a subclass
#: may change what ``step`` does).
FUSED = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad)


def kernel_for(optimizer: torch.optim.Optimizer) -> tuple[bool, str | None]:
    """Does the compiled step run this optimizer's fused kernel after the graph, rather than
    its update inside the graph? From :data:`KERNEL_FROM` values on, where torch has a kernel
    for its parameters (device, dtype, options) that skips a step it is told ``found_inf``
    (probed). Returns that, and why not where the kernel would have been taken but for the
    probe. The kernel computes the same update as the optimizer's loop, rounded differently,
    as a compiled step is anyway."""
    groups = optimizer.param_groups
    params = [p for group in groups for p in group["params"]]
    if sum(p.numel() for p in params) < KERNEL_FROM or type(optimizer) not in FUSED:
        return False, None
    try:  # torch's own checks of fused=True (devices, dtypes, differentiable, ...)
        type(optimizer)([{"params": g["params"]} for g in groups],
                        **{**optimizer.defaults, "fused": True, "foreach": None})
    except (RuntimeError, ValueError, TypeError):
        return False, None
    why = fused_skips(type(optimizer), params[0].device.type)
    if why:
        return False, f"{type(optimizer).__name__}: {why}"
    return True, None


def kernel_step(optimizer: torch.optim.Optimizer, step: Callable[..., Any],
                ok: torch.Tensor | None) -> None:
    """The twin's (fused) step, told to skip the update, and uncount the step, where ``ok`` is
    false, as a GradScaler tells it (``found_inf``): no host read. ``step``: its raw step
    (:func:`raw_step`): the hooks, which keep the step eager whenever there is one, are not
    the twin's to run."""
    if ok is not None:
        optimizer.found_inf = torch.logical_not(ok).float()  # type: ignore[attr-defined]
    try:
        with torch.no_grad():
            step(optimizer)
    finally:
        optimizer.__dict__.pop("found_inf", None)


def step_counts_on_device(twin: Twin) -> None:
    """Move each step count to its parameter's device where the step reads it there: a fused
    kernel's, and on a GPU a traced Adam-like optimizer's (torch traces it as ``capturable``,
    which the twin is switched to). The first step ran eagerly and left each count on the host.
    The state is the user's: on a GPU its counts stay on the device (an eager step reads them
    there too); on a CPU nothing moves."""
    optimizer = twin.optimizer
    for group in optimizer.param_groups:
        params = group["params"]
        on_gpu = bool(params) and all(p.is_cuda for p in params)
        if not group.get("fused") and ("capturable" not in group or not on_gpu):
            continue
        if not group.get("fused"):
            twin.switch(capturable=True)
        for p in params:
            state = optimizer.state.get(p, {})
            step = state.get("step")
            if isinstance(step, torch.Tensor) and step.device != p.device:
                state["step"] = step.to(p.device, torch.float32)


class PinnedLearningRates:
    """Each group's learning rate as a tensor the graph reads, for the length of one graph
    call only (:meth:`during`): a scheduler changes a value, not the graph, while the user,
    the scheduler and every ``state_dict`` only ever see the float they wrote. A tensor left
    in a group leaked into checkpoints (a scheduler's ``_last_lr``) and into user code; the
    graphs step the twin, whose groups no one else reads, and the tensors still go back."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._tensors: list[torch.Tensor] = []
        self._values: list[float] = []  # what each tensor holds, to refill only on change

    @contextmanager
    def during(self, optimizer: torch.optim.Optimizer) -> Iterator[None]:
        """Learning rates as tensors inside the block, the same floats again after it."""
        groups = optimizer.param_groups
        floats = [group["lr"] for group in groups]
        if len(self._tensors) != len(floats):  # float64: the same value as the float
            self._tensors = [torch.tensor(float(lr), dtype=torch.float64, device=self.device)
                             for lr in floats]
            self._values = [float(lr) for lr in floats]
        for i, (group, lr) in enumerate(zip(groups, floats, strict=True)):
            if float(lr) != self._values[i]:
                self._tensors[i].fill_(float(lr))
                self._values[i] = float(lr)
            group["lr"] = self._tensors[i]
        try:
            yield
        finally:
            for group, lr in zip(groups, floats, strict=True):
                group["lr"] = lr
