"""The step half of the engine: a micro-batch in, gradients out; a finished window, updates.

Order inside an engine step (nanoGPT's, Fabric's), for each optimizer (:class:`Update`) due in
this step, in the order given:

    closure under autocast -> loss / k -> (scaled) backward into its own parameters
    -> only at the end of the accumulation window: all-reduce (DDP) -> unscale
    -> rescale a short window -> clip (pre-clip norm logged) -> non-finite gradient check
    -> optimizer step -> scheduler step -> zero_grad(set_to_none=True)
    -> the update's after_step hooks

A *step* (``global_step``) is one accumulation window: ``accumulate`` micro-batches, in which
every due optimizer steps once. Nothing here knows whether the task is supervised,
self-supervised or reinforcement learning.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import torch

from beyondfit.core.device import move_to_device
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.outputs import unpack_output
from beyondfit.core.update import Update

log = logging.getLogger("beyondfit.core.engine")

_NULL_CONTEXT = contextlib.nullcontext()


class TrainingStep:
    """What :class:`~beyondfit.core.engine.Engine` does with one training micro-batch.

    A base class of the engine, kept apart so that the loop (``engine.py``) and the step
    (here) each read in one sitting; it relies on the attributes the engine sets up.
    """

    def train_step(self: Any, batch: Any) -> None:
        """One micro-batch: closures, backwards, and the optimizer steps at the window's end.

        With ``accumulate=k``, every ``k``-th call completes an engine step (``global_step``).
        Never waits for the device except for the non-finite checks (one scalar for the loss,
        one for the gradients at the window's end; ``on_nonfinite="ignore"`` removes both).
        """
        if not self.model.training:
            self.model.train()
        batch = move_to_device(batch, self.device, self._non_blocking)
        if self._micro == 0:  # a new window: which optimizers step in it
            self._start_window()
        self._micro += 1
        boundary = self._micro >= self.accumulate  # this micro-batch completes the window
        for update in self._due:
            self._backward(update, batch, boundary)
            if boundary:
                self._apply(update)
        if boundary:
            self._end_window()

    def _start_window(self: Any) -> None:
        step = self.state.global_step
        self._due = self.updates if self._single else [u for u in self.updates if u.due(step)]
        self._stepped = 0
        for update in self._due:
            if update.take_foreign_gradients() and not self._warned_foreign:
                self._warned_foreign = True
                log.warning(
                    "parameters of optimizer%s held gradients from outside this engine (another "
                    "engine's backward through shared modules, or user code); they were "
                    "dropped, as the standard algorithm does. Train networks that share a "
                    "graph in one Engine with an Update per optimizer",
                    update._for(),
                )

    def _backward(self: Any, update: Update, batch: Any, boundary: bool) -> None:
        """Closure and backward of one optimizer for one micro-batch."""
        # DDP decides in the forward whether the backward all-reduces: both go inside.
        single = self._single
        with self.strategy.no_sync(self.forward_model, boundary) if single else _NULL_CONTEXT:
            with self.precision.autocast():
                out = self._call_closure(update, batch)
            loss, logs = unpack_output(out, training=True)
            # The last micro-batch of a window has its loss checked together with the
            # gradients, after the backward: one host sync per step. Earlier ones (and fp16,
            # whose scaler owns the gradient check) are checked here, before their backward.
            # Under DDP the ranks agree, so all of them skip or none does.
            checks = self.on_nonfinite != "ignore"
            defer = checks and boundary and self.precision.scaler is None
            if checks and not defer and not self.strategy.all_finite(loss):
                if boundary and single:  # DDP armed an all-reduce in this forward
                    self.strategy.skipped_boundary(update.params)
                    update.window_synced = True
                self._nonfinite(update, logs, "micro-batch", _bad_terms(logs))
                return
            update.window_applied += 1
            if defer:
                update.pending = (loss, logs)
            if self.accumulate > 1:
                loss = loss / self.accumulate
            # Several optimizers: each loss reaches its own parameters only (no leak).
            self.precision.backward(loss, None if single else update.params)
            update.window_synced = update.window_synced or (boundary and single)
            if not defer:
                self._consecutive_skips = 0
                self.train_metrics.update(_prefixed(logs, update.prefix))

    def _call_closure(self: Any, update: Update, batch: Any) -> Any:
        if not self._compile_pending:
            return update.loss_fn(self.forward_model, batch)
        self._compile_pending = False
        try:
            return update.loss_fn(self.forward_model, batch)
        except BeyondfitError:
            raise
        except Exception as exc:  # the backend (e.g. no C compiler for inductor) failed
            log.warning(
                "torch.compile failed (%s: %s); continuing without compilation",
                type(exc).__name__,
                str(exc).splitlines()[0][:200] if str(exc) else "",
            )
            self.eval_model = self.model
            self.forward_model = self.strategy.wrap(self.model) if self._single else self.model
            return update.loss_fn(self.forward_model, batch)

    def _apply(self: Any, update: Update) -> None:
        """The end of a window for one optimizer: sync, unscale, clip, check, step."""
        applied, update.window_applied = update.window_applied, 0
        synced, update.window_synced = update.window_synced, False
        if applied == 0:  # every micro-batch of the window was skipped: nothing to apply
            update.optimizer.zero_grad(set_to_none=True)
            return
        if not synced:  # several optimizers, or a short window that ran under no_sync
            self.strategy.sync_gradients(update.params)
        overflow = self.precision.unscale(update.optimizer, self.device)  # real units from here
        if overflow is not None:
            self.train_metrics.update({update.prefix + "overflow_steps": overflow})
        if applied != self.accumulate:
            # A short window (the end of the data, skipped micro-batches) is the mean over the
            # micro-batches it had, not a sum divided by the full window length.
            grads = [p.grad for p in update.params if p.grad is not None]
            torch._foreach_mul_(grads, self.accumulate / applied)
        norm = update.clip()
        pending, update.pending = update.pending, None
        # A finite loss can have non-finite gradients (sqrt or log at 0): never apply them.
        # One sync checks the gradients (their norm, which clipping computes anyway) and the
        # window's last loss together. Under fp16 the GradScaler skips such steps itself.
        if self.on_nonfinite != "ignore" and self.precision.scaler is None:
            value = norm if norm is not None else update.grad_norm()
            if pending is not None:  # (autograd records the add: cheaper than a detach)
                value = value + pending[0]
            if not self.strategy.all_finite(value):
                update.optimizer.zero_grad(set_to_none=True)
                if pending is not None and not bool(torch.isfinite(pending[0].detach())):
                    self._nonfinite(update, pending[1], "step", _bad_terms(pending[1]))
                else:
                    self._nonfinite(update, {}, "optimizer step", ["gradients"])
                return
        if pending is not None:
            self._consecutive_skips = 0
            self.train_metrics.update(_prefixed(pending[1], update.prefix))
        if norm is not None:
            self.train_metrics.update({update.prefix + "grad_norm": norm})
        self.precision.step(update.optimizer)  # fp16: skips the update on overflow
        if update.scheduler is not None and not update.plateau:
            self.precision.step_scheduler(update.scheduler, update.steps == 0)
        update.optimizer.zero_grad(set_to_none=True)
        update.steps += 1
        for hook in update.after_step:  # e.g. a target network following this optimizer
            hook(update)
        self._stepped += 1

    def _end_window(self: Any) -> None:
        self._micro = 0
        if self._stepped:
            self.precision.update()  # one scale update per window, after every optimizer
            self.state.global_step += 1

    def _nonfinite(
        self: Any, update: Update, logs: Mapping[str, Any], what: str, bad: list[str]
    ) -> None:
        where = (
            f"optimizer step {self.state.global_step + 1} "
            f"(epoch {self.state.epoch + 1}, batch {self.state.batch_in_epoch + 1})"
        )
        terms = ", ".join(update.prefix + name for name in bad)
        if self.on_nonfinite == "raise":
            hint = (
                "; the loss was finite: look for sqrt or log at 0, or division by a tiny value"
                if what == "optimizer step" else ""
            )
            raise BeyondfitError(
                f"non-finite {terms} at {where}{hint}; lower the learning rate, clip "
                "gradients, check the data, or set engine.on_nonfinite=skip"
            )
        self.state.skipped_steps += 1
        self._consecutive_skips += 1
        self.train_metrics.update({"skipped_steps": 1.0})
        log.warning("skipped a %s with non-finite %s at %s", what, terms, where)
        if self._consecutive_skips >= self.max_skips:
            raise BeyondfitError(
                f"non-finite {terms} in {self._consecutive_skips} consecutive "
                f"micro-batches, the last at {where}; the run is diverging: lower the "
                "learning rate or check the data"
            )


def _bad_terms(logs: Mapping[str, Any]) -> list[str]:
    return [
        name
        for name, value in logs.items()
        if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all())
    ] or ["loss"]


def _prefixed(logs: Mapping[str, Any], prefix: str) -> Mapping[str, Any]:
    # One optimizer: its names as returned (no dict built per step); several: NAME/entry.
    return {prefix + k: v for k, v in logs.items()} if prefix else logs
