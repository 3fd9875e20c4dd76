"""The optimizer as the compiled step (:mod:`beyondfit.core.compile.compiled`) traces it: its step
without torch's wrappers, whether hooks forbid tracing it, and its step counts on the device
its parameters are on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


def raw_step(optimizer: torch.optim.Optimizer) -> Callable[[torch.optim.Optimizer], Any]:
    """The optimizer's ``step`` without torch's wrappers (profiling hooks, and a grad-mode
    switch that breaks the graph on purpose); the graph runs it under ``no_grad`` itself."""
    step = type(optimizer).step
    while hasattr(step, "__wrapped__"):
        step = step.__wrapped__
    return step


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


def fused_kernel(optimizer: torch.optim.Optimizer) -> bool:
    """Switch ``optimizer`` to torch's fused kernel if it has one for its parameters (device,
    dtype, options); say whether it runs on it. The kernel computes the same update as the
    optimizer's loop, rounded differently, as a compiled step is anyway."""
    groups = optimizer.param_groups
    if type(optimizer) not in FUSED:
        return False
    if not all(group.get("fused") for group in groups):
        try:  # torch's own checks of fused=True (devices, dtypes, differentiable, ...)
            type(optimizer)([{"params": g["params"]} for g in groups],
                            **{**optimizer.defaults, "fused": True, "foreach": None})
        except (RuntimeError, ValueError, TypeError):
            return False
        for group in groups:
            group["fused"] = True
        optimizer._step_supports_amp_scaling = True  # type: ignore[attr-defined]
    return True


def steps_with_kernel(optimizer: torch.optim.Optimizer) -> bool:
    """Does the compiled step run this optimizer's fused kernel after the graph (switching it
    to the kernel), rather than its update inside the graph? From :data:`KERNEL_FROM` values
    on, where torch has a kernel for them."""
    values = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
    return values >= KERNEL_FROM and fused_kernel(optimizer)


def traced_unfused(optimizer: torch.optim.Optimizer) -> list[Any]:
    """Make a fused optimizer traceable: a fused kernel cannot be traced, but its foreach form
    computes the same update, which inductor fuses itself. Returns each group's ``fused`` flag,
    to give back if the step falls back to eager."""
    flags = [group.get("fused") for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        if group.get("fused"):
            group["fused"] = False
    return flags


def kernel_step(optimizer: torch.optim.Optimizer, ok: torch.Tensor | None) -> None:
    """The optimizer's (fused) step, told to skip the update, and uncount the step, where
    ``ok`` is false, as a GradScaler tells it (``found_inf``): no host read."""
    if ok is not None:
        optimizer.found_inf = torch.logical_not(ok).float()  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        optimizer.__dict__.pop("found_inf", None)


def step_counts_on_device(optimizer: torch.optim.Optimizer) -> None:
    """Move each step count to its parameter's device where the step reads it there: a fused
    kernel's, and on a GPU a traced Adam-like optimizer's (torch traces it as ``capturable``).
    The first step ran eagerly and left each count on the host."""
    for group in optimizer.param_groups:
        params = group["params"]
        on_gpu = bool(params) and all(p.is_cuda for p in params)
        if not group.get("fused") and ("capturable" not in group or not on_gpu):
            continue
        if not group.get("fused"):
            group["capturable"] = True
        for p in params:
            state = optimizer.state.get(p, {})
            step = state.get("step")
            if isinstance(step, torch.Tensor) and step.device != p.device:
                state["step"] = step.to(p.device, torch.float32)


def has_step_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Does a step hook (the optimizer's own or a global one) run around ``step``? Then the
    step stays eager: the hooks are Python the graph would skip."""
    from torch.optim import optimizer as module

    found = [getattr(optimizer, "_optimizer_step_pre_hooks", None),
             getattr(optimizer, "_optimizer_step_post_hooks", None),
             getattr(module, "_global_optimizer_pre_hooks", None),
             getattr(module, "_global_optimizer_post_hooks", None)]
    return any(bool(hooks) for hooks in found)


class PinnedLearningRates:
    """Each group's learning rate as a tensor the graph reads, for the length of one graph
    call only (:meth:`during`): a scheduler changes a value, not the graph, while the user,
    the scheduler and every ``state_dict`` only ever see the float they wrote. A tensor left
    in a group leaked into checkpoints (a scheduler's ``_last_lr``) and into user code."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._tensors: list[torch.Tensor] = []
        self._values: list[float] = []  # what each tensor holds, to refill only on change

    @contextmanager
    def during(self, optimizer: torch.optim.Optimizer) -> Iterator[None]:
        """Learning rates as tensors inside the block, the same floats again after it."""
        groups = optimizer.param_groups
        floats = [group["lr"] for group in groups]
        if not self._tensors:  # float64: the same value as the float it stands for
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


def restore_fused(optimizer: torch.optim.Optimizer, fused: list[Any]) -> None:
    """Before an eager step: the ``fused`` flags :func:`traced_unfused` took, given back."""
    for i, group in enumerate(optimizer.param_groups):
        if i < len(fused) and fused[i]:
            group["fused"] = fused[i]
