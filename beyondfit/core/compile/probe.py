"""Which of torch's private features the compiled step relies on this torch has, probed once per
process.

The compiled step (:mod:`beyondfit.core.compile.compiled`) reaches into torch where its public
API stops: inductor's entry point, a dynamo switch, the optimizer's step without its wrappers,
where torch keeps an optimizer's step hooks, inductor's settings and an FX meta key. A torch
release may rename any of them without notice. Each is a :class:`Feature` here, with the part
of the compiled step it serves and a check that asks torch whether it has it (by using it, where
that is cheap, rather than by its name alone). :func:`missing` answers from one probe per
process; the compiled step turns a missing feature's part eager (``eager=True``: the part runs
as the eager engine runs it) or leaves an optimization out (the graph compiles without it), and
says so, with the reason, on the ``compiled:`` line: never a silent change of speed or
behaviour.

Probing costs about a millisecond and a throwaway SGD over one value; it runs at the first
compiled engine of a process, never on import.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: Where torch keeps step hooks: per optimizer (an attribute each) and for every optimizer
#: (in ``torch.optim.optimizer``). Read by
#: :func:`~beyondfit.core.compile.traced_optimizer.step_hooks`, checked by the probe.
OWN_HOOKS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")
GLOBAL_HOOKS = ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")
#: The mark torch's learning-rate schedulers put on the ``step`` they install on an optimizer
#: instance (counting calls, nothing else): any other ``step`` of an instance is the user's.
SCHEDULER_MARK = "_wrapped_by_lr_sched"
#: The FX meta key that has inductor store a node's value in a buffer of its own
#: (:func:`~beyondfit.core.compile.inductor_options.mark_scalars_once`).
REALIZE = "inductor_realize_to_strides"


@dataclass(frozen=True)
class Feature:
    """One private torch feature: what it is in torch's words, the part of the compiled step
    it serves, whether that part runs eagerly without it (else the graph compiles without an
    optimization), and the check (``None``: present; else why it is missing)."""

    name: str
    serves: str
    eager: bool
    check: Callable[[], str | None]


def _source_of(module: str) -> str | None:
    """A torch module's source text, read without importing it (inductor's modules take
    seconds to import; a compiled run imports them at its first graph anyway)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_text(encoding="utf-8")


def _inductor() -> str | None:
    source = _source_of("torch._inductor.compile_fx")
    if source is None:
        return "no torch._inductor.compile_fx"
    if "def compile_fx(" not in source or "config_patches" not in source:
        return "torch._inductor.compile_fx has no compile_fx(..., config_patches=...)"
    return None


def _autograd_in_graph() -> str | None:
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        return "no torch._dynamo.config.trace_autograd_ops"
    return None


def _one_value_sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def _unwrapped_step() -> str | None:
    _one_value_sgd()  # torch wraps a class's step at its first instance
    step = torch.optim.SGD.step
    while hasattr(step, "__wrapped__"):
        step = step.__wrapped__
    if getattr(step, "__qualname__", "") != "SGD.step":
        return ("Optimizer.step's wrappers carry no __wrapped__: the step without them (its "
                "hooks, a graph break) cannot be reached")
    return None


def _hook(*args: Any) -> None:
    pass


def _step_hooks() -> str | None:
    from torch.optim import optimizer as module

    opt = _one_value_sgd()
    where = [(f"Optimizer.{name}", opt, name, register) for name, register in
             zip(OWN_HOOKS, (opt.register_step_pre_hook, opt.register_step_post_hook),
                 strict=True)]
    where += [(f"torch.optim.optimizer.{name}", module, name, register) for name, register in
              zip(GLOBAL_HOOKS, (module.register_optimizer_step_pre_hook,
                                 module.register_optimizer_step_post_hook), strict=True)]
    for label, owner, name, register in where:
        hooks = getattr(owner, name, None)
        if not isinstance(hooks, dict):
            return f"no {label}: a step hook could not be seen"
        handle = register(_hook)
        try:
            if _hook not in hooks.values():
                return f"a step hook registered with torch's API is not in {label}"
        finally:
            handle.remove()
    return None


def _scheduler_mark() -> str | None:
    opt = _one_value_sgd()
    torch.optim.lr_scheduler.StepLR(opt, 1)
    step = opt.__dict__.get("step")
    if step is not None and not hasattr(step, SCHEDULER_MARK):
        return (f"the step a learning-rate scheduler installs carries no {SCHEDULER_MARK}: "
                "it cannot be told from a step of one's own")
    return None


def _realize_key() -> str | None:
    source = _source_of("torch._inductor.graph")
    if source is None:
        return "no torch._inductor.graph"
    if REALIZE not in source:
        return f"inductor's lowering (torch._inductor.graph) reads no FX meta key {REALIZE!r}"
    return None


def _graph_pass() -> str | None:
    try:
        from torch._inductor import config
        from torch._inductor.custom_graph_pass import CustomGraphPass  # noqa: F401
    except ImportError as exc:
        return f"no torch._inductor.custom_graph_pass.CustomGraphPass ({exc})"
    if not hasattr(config, "post_grad_custom_post_pass"):
        return "no torch._inductor.config.post_grad_custom_post_pass"
    return None


def _vector_isa_check() -> str | None:
    source = _source_of("torch._inductor.cpu_vec_isa")
    if source is None:
        return "no torch._inductor.cpu_vec_isa"
    if "def _probe_load(self, output_path: str) -> bool:" not in source:
        return "torch._inductor.cpu_vec_isa.VecISA has no _probe_load(self, output_path)"
    return None


def _inductor_setting(key: str) -> Callable[[], str | None]:
    def check() -> str | None:
        from torch._inductor import config

        return None if hasattr(config, key) else f"no torch._inductor.config.{key}"

    return check


#: What the compiled step relies on, by name (see each ``serves``).
FEATURES = {f.name: f for f in (
    Feature("inductor", "every graph (inductor compiles it)", True, _inductor),
    Feature("autograd_in_graph", "the whole step as one graph (torch.autograd.grad inside "
            "it)", True, _autograd_in_graph),
    Feature("unwrapped_step", "the optimizer's step inside a graph", True, _unwrapped_step),
    Feature("step_hooks", "the optimizer's step inside a graph (the engine must see every "
            "step hook, to step eagerly while there is one)", True, _step_hooks),
    Feature("scheduler_mark", "the step inside a graph for an optimizer with a learning-rate "
            "scheduler", True, _scheduler_mark),
    Feature("realize_key", "each scalar computed once in a CPU graph (Adam's bias "
            "corrections)", False, _realize_key),
    Feature("graph_pass", "each scalar computed once in a CPU graph (Adam's bias "
            "corrections)", False, _graph_pass),
    Feature("fallback_random", "torch's kernels drawing a CPU graph's random numbers", False,
            _inductor_setting("fallback_random")),
    Feature("size_asserts", "a CPU graph's code without size checks", False,
            _inductor_setting("size_asserts")),
    Feature("alignment_asserts", "a CPU graph's code without alignment checks", False,
            _inductor_setting("alignment_asserts")),
    Feature("vector_isa_check", "inductor's check of the CPU's vector instructions, "
            "remembered between processes (a warm compiled run's start)", False,
            _vector_isa_check),
)}  # fmt: skip


@functools.cache
def findings() -> dict[str, str]:
    """The features this torch lacks, each with why: probed once per process."""
    out = {}
    for feature in FEATURES.values():
        try:
            why = feature.check()
        except Exception as exc:  # a check that cannot run: the feature is not there for us
            why = f"the check failed ({type(exc).__name__}: {exc})"
        if why is not None:
            out[feature.name] = why
    return out


def missing(name: str) -> str | None:
    """Why this torch lacks feature ``name`` (a key of :data:`FEATURES`), or ``None``."""
    return findings().get(name)


def reset() -> None:
    """Forget the probe (tests that patch a feature away probe again)."""
    findings.cache_clear()
    fused_skips.cache_clear()


@functools.cache
def fused_skips(kind: type, device_type: str) -> str | None:
    """Does torch's fused kernel of optimizer class ``kind`` on ``device_type`` leave the
    weights and the step count alone when told ``found_inf`` (GradScaler's private protocol,
    which the compiled step uses to skip a non-finite step without a host read)? Tried on one
    value: ``None`` if so, else why not. Once per class and device type."""
    param = torch.ones(1, device=device_type, requires_grad=True)
    try:
        opt = kind([param], lr=0.1, fused=True)
        param.grad = torch.ones_like(param)
        opt.step()  # the state exists
        before = param.detach().clone()
        opt.found_inf = torch.ones((), device=device_type)  # type: ignore[attr-defined]
        opt.step()
    except Exception as exc:
        return f"its fused kernel could not be tried ({type(exc).__name__}: {exc})"
    if not torch.equal(param.detach(), before):
        return "its fused kernel ignores found_inf (a skipped step moved the weights)"
    if "step" in opt.state[param] and float(opt.state[param]["step"]) != 1.0:
        return "its fused kernel ignores found_inf (a skipped step was counted)"
    return None
