"""The compiled step: ``Engine(..., compile=True)`` runs each optimizer's update as one graph.

For every :class:`~beyondfit.core.update.Update`, :class:`CompiledUpdate` traces, with
``torch.compile``, what the eager window (:mod:`beyondfit.core.step`) does for it::

    whole graph (one micro-batch per step):
        closure under autocast -> gradients (torch.autograd.grad, into this optimizer's
        parameters only) -> clip by norm and value -> non-finite flag -> optimizer step ->
        target networks' Polyak or hard update, the step and the targets kept only where
        the flag says finite (a masked commit: ``where(ok, new, old)`` over the parameters,
        the optimizer's state and the targets, which inductor fuses into the step's kernels)

    split (accumulation, DDP, or a closure that cannot be traced whole):
        the closure compiled where it can be (graph breaks around what cannot be traced, a
        metric object's ``update``) -> eager backward -> the same graph from the rescale on

An optimizer training many values (:data:`~beyondfit.core.compile.traced_optimizer.KERNEL_FROM`)
with a fused kernel in torch runs that kernel after the graph instead, told the flag as a GradScaler
tells it. A non-finite step thus never changes a weight, a moment or a target; the host reads
the flag after the graph (as the eager step reads its one scalar) only to raise or count the
skip. Outside the graphs, by design: which optimizers are due (``every=``), that one read, the
scheduler, logging, ``after_step`` hooks other than a :class:`~beyondfit.core.target.SlowCopy`.
The learning rate is a tensor in the graph (a scheduler changes a value, not the graph): only
a new batch shape recompiles (a short last batch: once).

Numerics: a compiled run is close to the eager one, not bitwise (inductor fuses and reorders
floating-point operations). The eager path (``compile=False``) is untouched by all this.

Each optimizer's first step runs eagerly (the closure's output checked, the optimizer's state
created). What cannot be compiled runs eagerly, with one warning naming the part and why.

The graphs step a private twin of the user's optimizer (:class:`~beyondfit.core.compile.
traced_optimizer.Twin`: its class, parameters and state, param groups of its own), so the
user's optimizer, its ``state_dict`` and a checkpoint never see the switches the graph needs.
A step hook (the optimizer's own or a global one, registered before ``fit`` or between two)
makes each step eager while it is registered: the eager step runs it as an uncompiled run
does; an optimizer whose hooks cannot be seen for certain steps eagerly always. What this torch
lacks of the private features all this relies on (:mod:`~beyondfit.core.compile.probe`) turns
the part it serves eager, or leaves its optimization out, and the ``compiled:`` line says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from beyondfit.core.compile.graphs import CompileReport, CountedCompile, compile_mode, log, reason
from beyondfit.core.compile.probe import FEATURES, missing
from beyondfit.core.compile.traced_optimizer import (
    PinnedLearningRates,
    Twin,
    kernel_for,
    kernel_step,
    raw_step,
    step_counts_on_device,
    step_hooks,
    why_never_traced,
)
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.precision import Precision
from beyondfit.core.target import SlowCopy
from beyondfit.core.update import Update


def compile_steps(compile: Any, updates: list[Update], model: nn.Module, precision: Precision,
                  check: bool, accumulate: int, strategy: Any, device: torch.device
                  ) -> tuple[CompileReport | None, list[CompiledUpdate | None]]:
    """The engine's compiled steps for ``Engine(compile=...)``, one per update (``None``:
    eager), and their report (``None`` when not compiling)."""
    programs: list[CompiledUpdate | None] = [None] * len(updates)
    mode = compile_mode(compile)
    if mode is None:
        return None, programs
    report = CompileReport()
    why = missing("inductor")
    if why:
        report.left_eager("every graph", f"this torch: {why}")
        return report, programs
    if device.type == "cpu":  # what a CPU graph does without what this torch lacks
        for name in ("realize_key", "graph_pass", "fallback_random", "size_asserts",
                     "alignment_asserts", "vector_isa_check"):
            why = missing(name)
            if why:
                report.left_out(FEATURES[name].serves, f"this torch: {why}")
    if strategy.is_distributed:  # the all-reduce lives in autograd hooks, outside graphs
        report.left_eager("the step", "under DDP only the model's forward is compiled")
        return report, programs
    cuda_graphs = mode == "max" and device.type == "cuda"
    if mode == "max":
        said = ("CUDA graphs for evaluation only; the training steps compile as with compile=True "
                "(they write weights in place, which CUDA graphs refuse)" if cuda_graphs else
                f"CUDA graphs need a CUDA device; compiling without them on {device.type}")
        log.warning("compile='max': %s", said)
    return report, [CompiledUpdate(u, model, precision, check, accumulate == 1, report,
                                   cuda_graphs, device) for u in updates]


class _NotWhole(Exception):
    """Raised while tracing: this update cannot be one graph (the split path runs)."""


def _slow_copy_of(hook: Any) -> SlowCopy | None:
    """The :class:`SlowCopy` whose ``update`` ``hook`` is, else ``None`` (a Python hook)."""
    owner = getattr(hook, "__self__", None)
    if isinstance(owner, SlowCopy) and getattr(hook, "__func__", None) is SlowCopy.update:
        return owner
    return None


class CompiledUpdate:
    """One optimizer's compiled step (see the module's docstring).

    Args:
        update: the optimizer with its closure, parameters, clipping and hooks.
        model: the engine's (unwrapped) module: the closure is called with it.
        precision: autocast for the closure; fp16's GradScaler keeps the step eager.
        check: is the non-finite check on (``on_nonfinite`` other than ``"ignore"``)?
        whole: may the update run as one graph (one micro-batch per step, one process)?
        report: where compilations and eager parts are counted.
        cuda_graphs: the evaluation closure in CUDA graphs (``compile="max"`` on a GPU), never
            a training graph (it writes weights in place: CUDA graphs refuse, torch 2.11 crashed).
        device: the engine's device.
    """

    def __init__(self, update: Update, model: nn.Module, precision: Precision, check: bool,
                 whole: bool, report: CompileReport, cuda_graphs: bool, device: torch.device
                 ) -> None:  # fmt: skip
        self.update, self.model, self.precision, self.check = update, model, precision, check
        self.report, self.cuda_graphs, self.device = report, cuda_graphs, device
        self.label = f"optimizer {update.name!r}" if update.name else "the optimizer"
        self.ready = False  # after this optimizer's first (eager) step
        self.targets = [(copy, torch.zeros((), device=device))
                        for copy in map(_slow_copy_of, update.after_step) if copy is not None]
        self.python_hooks = [h for h in update.after_step if _slow_copy_of(h) is None]
        self._weights = [0.0] * len(self.targets)
        self._zero = torch.zeros((), device=device)  # a blend that leaves a target as it is
        self._lrs = PinnedLearningRates(device)
        self.kernel = False  # the step is the optimizer's fused kernel, after the graph
        self.twin: Twin | None = None  # what the graphs step (the user's is never edited)
        self._raw_step: Any = None  # its class's step, without torch's wrappers
        self._grads: list[torch.Tensor] = []
        self._written: list[torch.Tensor] = []
        self._state: Any = None  # the optimizer state _written was read from
        self._whole: CountedCompile | None = None
        self._closure: Any = None  # the split path's closure (compiled, or the user's)
        self._apply: CountedCompile | None = None
        self._pending: list[torch.Tensor] = []  # the target networks' blends of this step
        self._eval: Any = None
        self.steps_compiled = True
        never = why_never_traced(update.optimizer)
        if precision.scaler is not None:
            report.left_eager(f"{self.label}'s step", "fp16's GradScaler steps on the host")
            self.steps_compiled = False
        elif never:
            report.left_eager(f"{self.label}'s step", never)
            self.steps_compiled = False
        self.whole = whole and self.steps_compiled
        why = missing("autograd_in_graph")
        if self.whole and why:
            report.left_eager(f"{self.label}'s whole step",
                              f"this torch: {why}; the closure is compiled, its backward runs "
                              "eagerly")
            self.whole = False
        if self.python_hooks:
            names = ", ".join(getattr(h, "__qualname__", type(h).__name__)
                              for h in self.python_hooks)
            report.left_eager(f"{self.label}'s after_step hooks {names}",
                              "not a SlowCopy update")

    # ------------------------------------------------------------------ when they run
    def warm_up(self) -> None:
        """After the first eager step of this optimizer: its state exists; build the graphs."""
        if self.ready:
            return
        self.ready = True
        self._grads = [torch.zeros_like(p) for p in self.update.params]
        if self.steps_compiled:
            self.twin = Twin(self.update.optimizer)
            self._raw_step = raw_step(self.update.optimizer)  # (why_never_traced: not None)
            self.kernel, why = kernel_for(self.update.optimizer)
            if why:
                self.report.left_out(f"{self.label}'s fused kernel after the graph",
                                     f"{why}; its update runs inside the graph")
            # The kernel's form, or one the graph traces (a fused kernel cannot be traced;
            # its foreach form computes the same update, which inductor fuses itself).
            self.twin.switch(**({"fused": True, "foreach": None} if self.kernel else
                                {"fused": False}))
            step_counts_on_device(self.twin)
        for copy, _ in self.targets:
            copy._tensors()  # its (target, source) lists, cached before tracing
        graph = lambda fn, **kw: CountedCompile(fn, self.report,  # noqa: E731
                                                cuda_graphs=False, **kw)
        if self.whole:
            self._whole = graph(self._whole_step, fullgraph=True, autograd=True)
        if self.steps_compiled:
            self._apply = graph(self._apply_step, fullgraph=True)
        self._closure = graph(self._call_closure, fullgraph=False)

    def run_whole(self, batch: Any) -> tuple[torch.Tensor, Mapping[str, Any], Any, Any] | None:
        """The whole update on one micro-batch: ``(loss, logs, grad_norm, ok)``, then
        :meth:`commit` or :meth:`discard`; ``None`` when it cannot be compiled (the caller
        then runs the split path for this batch)."""
        if self._whole is None or self._hooked():
            return None
        self._pending = self._follow_weights()
        self._before_graph()
        self._lend_grads()
        try:
            with self._lrs_pinned():
                result = self._whole(batch, self._pending)
        except BeyondfitError:
            raise
        except Exception as exc:  # a closure that cannot be traced whole, a backend failure
            self._whole = None
            self.discard()
            self.report.left_eager(f"{self.label}'s whole step",
                                   f"{reason(exc)}; the closure is compiled with graph "
                                   "breaks, its backward runs eagerly")
            return None
        if self.kernel:
            self._kernel_step(result[3])
        return result

    def closure(self, model: Any, batch: Any) -> Any:
        """The split path's closure call: compiled where it can be."""
        if self._closure is None:
            return self.update.loss_fn(model, batch)
        try:
            return self._closure(model, batch)
        except BeyondfitError:
            raise
        except Exception as exc:
            if self._closure.called:
                raise
            self._closure = None
            self.report.left_eager(f"{self.label}'s closure", reason(exc))
            return self.update.loss_fn(model, batch)

    def apply(self, factor: float, loss: torch.Tensor | None) -> tuple[Any, Any] | None:
        """Rescale, clip and check the gradients in ``.grad`` as one graph: ``(grad_norm,
        ok)``, then :meth:`commit` or :meth:`discard`; ``None`` when this part runs
        eagerly."""
        if self._apply is None or self._hooked():
            return None
        self._pending = self._follow_weights()
        self._before_graph()
        scale = torch.full((), factor, device=self.device)
        pending = loss.detach() if loss is not None else torch.zeros((), device=self.device)
        try:
            with self._lrs_pinned():
                result = self._apply(scale, pending, self._pending)
        except BeyondfitError:
            raise
        except Exception as exc:
            if self._apply.called:
                raise
            self._apply = None
            self.undo_weights()
            self.report.left_eager(f"{self.label}'s step", reason(exc))
            return None
        if self.kernel:
            self._kernel_step(result[1])
        return result

    def commit(self) -> None:
        """After a step the host found finite: the graph applied it; drop the gradients."""
        self._take_back_grads()

    def discard(self) -> None:
        """After a step that is not applied (the graph kept the old values): drop its
        gradients and uncount its target-network call."""
        self.undo_weights()
        self._take_back_grads()

    def eval_closure(self, model: Any, batch: Any) -> Any:
        """The closure in evaluation, compiled (graph breaks allowed) on its own cache."""
        if self._eval is None:
            self._eval = CountedCompile(self._call_closure, self.report,
                                        cuda_graphs=self.cuda_graphs, fullgraph=False)
        if self._eval is False:
            return self.update.loss_fn(model, batch)
        try:
            return self._eval(model, batch)
        except BeyondfitError:
            raise
        except Exception as exc:
            if self._eval.called:
                raise
            self._eval = False
            self.report.left_eager(f"{self.label}'s closure in evaluation", reason(exc))
            return self.update.loss_fn(model, batch)

    def after_step(self) -> None:
        """The hooks that stay in Python, after a step the graph made."""
        for hook in self.python_hooks:
            hook(self.update)

    # ------------------------------------------------------------------ what is traced
    def _call_closure(self, model: Any, batch: Any) -> Any:
        return self.update.loss_fn(model, batch)

    def _whole_step(self, batch: Any, weights: list[torch.Tensor]) -> Any:
        update = self.update
        with self.precision.autocast():
            out = update.loss_fn(self.model, batch)
        loss = (out if isinstance(out, torch.Tensor) else out["loss"]).reshape(())
        # Into this optimizer's parameters only, as the eager step's backward(inputs=...).
        grads = list(torch.autograd.grad(loss, update.params, allow_unused=True))
        if any(g is None for g in grads):
            raise _NotWhole("a parameter of this optimizer gets no gradient from its closure")
        with torch.no_grad():
            loss = loss.detach()
            logs = {"loss": loss} if isinstance(out, torch.Tensor) else {
                k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
            norm, ok = self._clip_and_check(grads, loss)
            torch._foreach_copy_([p.grad for p in update.params], grads)
            if not self.kernel:
                self._step_graph(weights, ok)
        return loss, logs, norm, ok

    def _apply_step(self, scale: torch.Tensor, loss: torch.Tensor,
                    weights: list[torch.Tensor]) -> Any:
        with torch.no_grad():
            grads = [p.grad for p in self.update.params]
            torch._foreach_mul_(grads, scale)
            norm, ok = self._clip_and_check(grads, loss)
            if not self.kernel:
                self._step_graph(weights, ok)
        return norm, ok

    def _clip_and_check(self, grads: list[torch.Tensor], loss: torch.Tensor) -> Any:
        # clip_grad_norm_ and clip_grad_value_'s arithmetic, over this list of gradients.
        update, norm = self.update, None
        if update.track_grad_norm or self.check:
            total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            if update.track_grad_norm:
                norm = total
            if update.clip_norm is not None:
                coef = torch.clamp(update.clip_norm / (total + 1e-6), max=1.0)
                torch._foreach_mul_(grads, coef)
        if update.clip_value is not None:
            torch._foreach_clamp_min_(grads, -update.clip_value)
            torch._foreach_clamp_max_(grads, update.clip_value)
        ok = torch.isfinite(total + loss) if self.check else None
        return norm, ok

    def _step_graph(self, weights: list[torch.Tensor], ok: torch.Tensor | None) -> None:
        # The optimizer's step over the gradients in .grad, then the target networks; with
        # the check on, every tensor the step writes keeps its old value unless ``ok``.
        optimizer, step = self.twin.optimizer, self._raw_step
        with torch.no_grad():
            if ok is None:
                step(optimizer)
                self._follow(weights)
                return
            written = self._written
            before = [t.clone() for t in written]
            step(optimizer)
            for tensor, old in zip(written, before, strict=True):
                tensor.copy_(torch.where(ok, tensor, old))
            self._follow(self._masked(weights, ok))

    def _kernel_step(self, ok: torch.Tensor | None) -> None:
        # After the graph: the fused kernel, then the target networks, each skipping a step
        # the flag says is non-finite. No host read.
        kernel_step(self.twin.optimizer, self._raw_step, ok)
        with torch.no_grad():
            self._follow(self._pending if ok is None else self._masked(self._pending, ok))

    def _masked(self, weights: list[torch.Tensor], ok: torch.Tensor) -> list[torch.Tensor]:
        # Each target network's blend, 0 (no change) on a step the flag says is non-finite.
        return [torch.where(ok, w, self._zero) for w in weights]

    def _hooked(self) -> bool:
        # A step hook, or one the engine cannot rule out: this step runs eagerly (the
        # caller's eager path calls optimizer.step(), which runs the hooks as eager does).
        why = step_hooks(self.update.optimizer)
        if why is None:
            return False
        self.report.left_eager(f"{self.label}'s step", f"{why}; it steps eagerly while so")
        return True

    def _before_graph(self) -> None:
        # The twin takes the user's settings; what a load_state_dict replaced is read again:
        # the tensors the masked commit keeps (the optimizer's state is new).
        optimizer = self.update.optimizer
        self.twin.follow()
        if optimizer.state is not self._state:
            self._state = optimizer.state
            step_counts_on_device(self.twin)
            self._written = list(self.update.params) + [
                value for p in self.update.params for value in self._state.get(p, {}).values()
                if isinstance(value, torch.Tensor)]

    def _follow(self, weights: list[torch.Tensor]) -> None:
        # After the step, as its after_step hook would.
        for (copy, _), weight in zip(self.targets, weights, strict=True):
            copy.follow(weight)

    # ------------------------------------------------------------------ host-side plumbing
    def _follow_weights(self) -> list[torch.Tensor]:
        # Each target network's blend for this step (its rate, or 0 when not due) as a
        # device tensor the graph reads: refilled only when it changes.
        out = []
        for i, (copy, tensor) in enumerate(self.targets):
            weight = copy.advance()
            if weight != self._weights[i]:
                tensor.fill_(weight)
                self._weights[i] = weight
            out.append(tensor)
        return out

    def undo_weights(self) -> None:
        """Uncount this step's target-network call: the step was not applied (or runs
        eagerly, which counts it again)."""
        for copy, _ in self.targets:
            copy.calls -= 1

    def _lrs_pinned(self) -> AbstractContextManager[None]:
        # The fused kernel after the graph reads the floats; the graph's own step a tensor.
        return nullcontext() if self.kernel else self._lrs.during(self.twin.optimizer)

    def _lend_grads(self) -> None:
        # The graph writes the gradients into these buffers for the optimizer to read;
        # outside the step .grad is None, as after the eager step's zero_grad.
        for p, grad in zip(self.update.params, self._grads, strict=True):
            p.grad = grad

    def _take_back_grads(self) -> None:  # zero_grad(set_to_none=True), without its wrappers
        for p in self.update.params:
            p.grad = None
