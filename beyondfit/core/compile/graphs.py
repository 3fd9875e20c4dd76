"""Compiled functions whose compilations are counted, and the report of what was compiled.

:class:`CountedCompile` is ``torch.compile`` with inductor behind a counter, so that a run
can say at its end how many graphs it built and how many times it recompiled
(:class:`CompileReport`); the compiled step (:mod:`beyondfit.core.compile.compiled`) builds its
graphs with it.

While one of these functions runs (and compiles), what torch's compiler would print (dynamo's
and inductor's log warnings, Python warnings from torch while a graph is compiled: several
lines each, about its own internals) goes to the function's report instead, which says what
matters once, in one line of ours: a graph break and where, a function recompiled up to
torch's limit (and so left eager) and the value that changed.
"""

from __future__ import annotations

import logging
import re
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from beyondfit.core.compile.inductor_options import patches
from beyondfit.core.compile.products import VALUE, write_out_products
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
    """What compiling did in one engine: graphs built, recompiles, parts left eager and why,
    optimizations left out and why.

    A *graph* is one compilation by the backend at a compiled function's first call (a
    closure with graph breaks gives several); a *recompile* is a compilation at a later call
    (a new batch shape, a guard that failed). Parts left eager, and optimizations the graphs
    compile without (a feature this torch lacks: :mod:`~beyondfit.core.compile.probe`), are
    reported once each, as a warning when they happen and in :meth:`line`.
    """

    def __init__(self) -> None:
        self.graphs = 0
        self.recompiles = 0
        self.eager: dict[str, str] = {}  # part -> reason
        self.without: dict[str, str] = {}  # optimization left out -> reason
        self._heard: list[tuple[str, str, str]] = []  # what torch's compiler said, not yet told
        self._said: set[str] = set()

    def left_eager(self, part: str, reason: str) -> None:
        """Record (and warn once about) a part that runs eagerly."""
        if part in self.eager:
            return
        self.eager[part] = reason
        log.warning("compile: %s runs eagerly (%s)", part, reason)

    def left_out(self, what: str, reason: str) -> None:
        """Record (and warn once about) an optimization the graphs compile without."""
        if what in self.without:
            return
        self.without[what] = reason
        log.warning("compile: compiling without %s (%s)", what, reason)

    def heard(self, kind: str, where: str, said: str) -> None:
        """Keep what torch's compiler said (``kind``: ``limit``, ``break`` or ``other``) at
        ``where`` (the user's line, else the traced function's) until :meth:`say_heard`."""
        self._heard.append((kind, where, said))

    def take_heard(self) -> list[tuple[str, str, str]]:
        """What torch said since the last call (and forget it)."""
        heard, self._heard = self._heard, []
        return heard

    def say_heard(self, keep: str = "") -> list[tuple[str, str, str]]:
        """Each thing torch's compiler said, once per kind and place, as one warning line;
        those of kind ``keep`` are returned unsaid (and counted as said)."""
        kept = []
        for kind, where, said in self.take_heard():
            key = "anomaly" if _ANOMALY in where else f"{kind}@{where}"
            if key in self._said:
                continue
            self._said.add(key)
            if kind == keep:
                kept.append((kind, where, said))
            else:
                log.warning("compile: %s", _ours(kind, where, said))
        return kept

    def line(self) -> str:
        """``compiled: N graphs, M recompiles, K parts left eager (...)``, then ``; without
        ...`` for each optimization left out."""
        parts = f"{count(len(self.eager), 'part')} left eager"
        if self.eager:
            parts += " (" + "; ".join(f"{k}: {v}" for k, v in self.eager.items()) + ")"
        for what, reason in self.without.items():
            parts += f"; without {what} ({reason})"
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
        _listen()  # torch's compiler is imported by now, its loggers made

    def _backend(self, cuda_graphs: bool) -> Any:
        def counting_inductor(gm: Any, example_inputs: Any) -> Any:
            if self.called:
                self.report.recompiles += 1
            else:
                self.report.graphs += 1
            _, unreadable = write_out_products(gm)  # before autograd: the backward follows
            if unreadable:
                self.report.left_out("batched products written out for a CPU graph",
                                     f"this torch: dynamo's nodes carry no {VALUE!r}")
            with warnings.catch_warnings(record=True) as caught:  # the filters still apply
                compiled = inductor(gm, example_inputs, patches(example_inputs, cuda_graphs))
            for said in caught:  # torch's own to the report; anyone else's as they were
                if _TORCH in str(said.filename):
                    self.report.heard("other", "", str(said.message))
                else:
                    warnings.warn_explicit(said.message, said.category, said.filename,
                                           said.lineno)
            return compiled

        return counting_inductor

    def __call__(self, *args: Any) -> Any:
        _LISTENERS.append(self.report)
        try:
            out = self.fn(*args)
        except Exception as exc:
            # A recompile limit that ended in this exception (fullgraph) is the reason the
            # caller gives for going eager (:func:`reason`); the rest is said here.
            exc._beyondfit_heard = self.report.say_heard(keep="limit")  # type: ignore[attr-defined]
            raise
        finally:
            _LISTENERS.pop()
        self.called = True
        self.report.say_heard()
        return out


def inductor(gm: Any, example_inputs: Any, patches: dict[str, Any] | None) -> Any:
    """Compile one traced graph with inductor (``patches``: its config for this graph)."""
    from torch._inductor.compile_fx import compile_fx

    from beyondfit.core.compile.vector_isa import remember_loads

    remember_loads()

    return compile_fx(gm, example_inputs, config_patches=patches)


def reason(exc: BaseException) -> str:
    """An exception in one short line: its type and its message's first line (for a backend
    failure, of the exception inside it); for a function recompiled up to torch's limit
    (``fullgraph`` makes that an exception), what torch said about it, in our words."""
    for kind, where, said in getattr(exc, "_beyondfit_heard", ()):
        if kind == "limit":
            return _ours(kind, where, said, short=True)
    exc = getattr(exc, "inner_exception", None) or exc
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


# ---------------------------------------------------------------- what torch's compiler says
#: The reports listening now: the innermost running CountedCompile's last.
_LISTENERS: list[CompileReport] = []
_TORCH = str(Path(torch.__file__).resolve().parent)
_PACKAGE = str(Path(__file__).resolve().parents[2])
_ANOMALY = "anomaly.py"  # debug.anomaly's per-operation check (core/anomaly.py)


class _Divert(logging.Filter):
    """On the handlers of torch's loggers: while a CountedCompile runs, a warning they would
    print goes to its report (records below WARNING, asked for with TORCH_LOGS, pass)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _LISTENERS or record.levelno < logging.WARNING:
            return True
        try:
            _LISTENERS[-1].heard(*_read(record.getMessage()))
        except Exception:  # never lose the run over a message we could not read
            return True
        return False


_DIVERT = _Divert()


def _listen() -> None:
    """Put :data:`_DIVERT` on every handler of torch's loggers (each has its own, printing to
    stderr, and does not propagate); again for each compiled function, as torch may set its
    logging up anew (``torch._logging.set_logs``)."""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and (name == "torch" or name.startswith("torch.")):
            for handler in logger.handlers:
                if _DIVERT not in handler.filters:
                    handler.addFilter(_DIVERT)


def _read(message: str) -> tuple[str, str, str]:
    """``(kind, where, said)`` of one of torch's compiler warnings: a function recompiled up to
    the limit, a graph break, or anything else (its first line)."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', message)
    user = [f for f in frames if not f[0].startswith(_TORCH)]
    own = [f for f in user if not f[0].startswith(_PACKAGE)]
    frame = (own or user or [None])[-1]
    where = f"{Path(frame[0]).name}:{frame[1]} in {frame[2]}" if frame else ""
    limit = re.search(r"hit config\.(?:recompile|cache_size)_limit \((\d+)\)", message)
    if limit:
        function = re.search(r"function: '([^']+)' \(([^)]+)\)", message)
        if not where and function:
            where = f"{Path(function.group(2)).name} in {function.group(1)}"
        last = re.search(r"last reason: (?:\d+/\d+: )?([^\n#]*)", message)
        guard = " ".join(last.group(1).split()) if last else ""
        return "limit", where, f"{limit.group(1)}|{guard}"
    if "Graph break" in message:
        what = re.search(r"Graph break (?:from|due to|in) `?([^`,\n]+)`?", message)
        return "break", where, what.group(1).strip() if what else "a graph break"
    first = message.strip().splitlines()[0] if message.strip() else ""
    return "other", where, first[:200]


def _ours(kind: str, where: str, said: str, short: bool = False) -> str:
    """One line, in our words, for what torch's compiler said (see :func:`_read`); ``short``:
    as the reason a part runs eagerly."""
    at = f" at {where}" if where else ""
    if _ANOMALY in where:
        return ("debug.anomaly checks every operation on the host, which breaks the graphs "
                "and recompiles them: the compiled step runs mostly eagerly, with no gain; "
                "debug NaNs with engine.compile=false")
    if kind == "limit":
        times, _, guard = said.partition("|")
        because = f" ({guard})" if guard else ""
        why = (f"a value changed{at}{because}; keep a Python number that changes between "
               "steps (a counter, a schedule) in a tensor")
        if short:
            return f"recompiled {times} times, torch's limit: {why}"
        return f"torch recompiled {times} times, its limit, and runs eagerly from now on: {why}"
    if kind == "break":
        return (f"torch breaks the graph{at} ({said}): the code around it runs eagerly "
                "between graphs")
    return f"torch says{at}: {said}"
