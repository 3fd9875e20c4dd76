"""The optimizer as the compiled step (:mod:`beyondfit.core.compiled`) traces it: its step
without torch's wrappers, whether hooks forbid tracing it, and its step counts on the device
its parameters are on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def raw_step(optimizer: torch.optim.Optimizer) -> Callable[[torch.optim.Optimizer], Any]:
    """The optimizer's ``step`` without torch's wrappers (profiling hooks, and a grad-mode
    switch that breaks the graph on purpose); the graph runs it under ``no_grad`` itself."""
    step = type(optimizer).step
    while hasattr(step, "__wrapped__"):
        step = step.__wrapped__
    return step


def step_counts_on_device(optimizer: torch.optim.Optimizer) -> None:
    """On a GPU, torch traces Adam-like optimizers as ``capturable`` (the step count a device
    tensor), but the first step ran eagerly and left each count on the host: move them to
    their parameters' device, so that the graph, and its masked commit, read one device."""
    for group in optimizer.param_groups:
        params = group["params"]
        if "capturable" not in group or not params or not all(p.is_cuda for p in params):
            continue
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
