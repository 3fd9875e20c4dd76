"""Compiled functions whose compilations are counted, and the report of what was compiled.

:class:`CountedCompile` is ``torch.compile`` with inductor behind a counter, so that a run
can say at its end how many graphs it built and how many times it recompiled
(:class:`CompileReport`); the compiled step (:mod:`beyondfit.core.compile.compiled`) builds its
graphs with it.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from typing import Any

import torch

from beyondfit.core.compile.inductor_options import patches
from beyondfit.core.logs import count
from beyondfit.core.options import check_option

log = logging.getLogger("beyondfit.core.engine")


def compile_mode(value: Any) -> str | None:
    """``compile=`` as a mode: ``None`` (eager), ``"default"`` or ``"max"`` (CUDA graphs too,
    on a GPU)."""
    choice = check_option("Engine.compile", False if value is None else value)
    if choice is False:
        return None
    return "max" if choice == "max" else "default"


class CompileReport:
    """What compiling did in one engine: graphs built, recompiles, parts left eager and why.

    A *graph* is one compilation by the backend at a compiled function's first call (a
    closure with graph breaks gives several); a *recompile* is a compilation at a later call
    (a new batch shape, a guard that failed). Parts left eager are reported once each, as a
    warning when they happen and in :meth:`line`.
    """

    def __init__(self) -> None:
        self.graphs = 0
        self.recompiles = 0
        self.eager: dict[str, str] = {}  # part -> reason

    def left_eager(self, part: str, reason: str) -> None:
        """Record (and warn once about) a part that runs eagerly."""
        if part in self.eager:
            return
        self.eager[part] = reason
        log.warning("compile: %s runs eagerly (%s)", part, reason)

    def line(self) -> str:
        """``compiled: N graphs, M recompiles, K parts left eager (...)``."""
        parts = f"{count(len(self.eager), 'part')} left eager"
        if self.eager:
            parts += " (" + "; ".join(f"{k}: {v}" for k, v in self.eager.items()) + ")"
        return (f"compiled: {count(self.graphs, 'graph')}, "
                f"{count(self.recompiles, 'recompile')}, {parts}")


class CountedCompile:
    """A function compiled by ``torch.compile`` whose backend compilations are counted.

    The function gets a code object of its own: torch caches compiled code per code object,
    so two engines (or two optimizers) sharing one function's code would share, and soon
    exhaust, one cache.
    """

    _serial = 0

    def __init__(self, fn: Callable[..., Any], report: CompileReport, cuda_graphs: bool,
                 fullgraph: bool, autograd: bool = False) -> None:
        CountedCompile._serial += 1
        func = getattr(fn, "__func__", fn)  # a bound method: its function, bound again below
        code = func.__code__.replace(co_name=f"{func.__name__}_{CountedCompile._serial}")
        own: Any = types.FunctionType(code, func.__globals__, code.co_name, func.__defaults__,
                                      func.__closure__)
        if func is not fn:
            own = types.MethodType(own, fn.__self__)
        self.report = report
        self.called = False
        self.fn = torch.compile(own, backend=self._backend(cuda_graphs), fullgraph=fullgraph)
        config = torch._dynamo.config
        if autograd and hasattr(config, "trace_autograd_ops"):
            # torch.autograd.grad inside the graph (a torch without the switch breaks the
            # graph there, and the caller falls back).
            self.fn = config.patch(trace_autograd_ops=True)(self.fn)

    def _backend(self, cuda_graphs: bool) -> Any:
        def counting_inductor(gm: Any, example_inputs: Any) -> Any:
            if self.called:
                self.report.recompiles += 1
            else:
                self.report.graphs += 1
            return inductor(gm, example_inputs, patches(example_inputs, cuda_graphs))

        return counting_inductor

    def __call__(self, *args: Any) -> Any:
        out = self.fn(*args)
        self.called = True
        return out


def inductor(gm: Any, example_inputs: Any, patches: dict[str, Any] | None) -> Any:
    """Compile one traced graph with inductor (``patches``: its config for this graph)."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, config_patches=patches)


def reason(exc: BaseException) -> str:
    """An exception in one short line: its type and its message's first line (for a backend
    failure, of the exception inside it)."""
    exc = getattr(exc, "inner_exception", None) or exc
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__
