"""One engine step, read top to bottom: an accumulation window of micro-batches.

For each optimizer (:class:`~beyondfit.core.update.Update`) due in the window, in the order
given::

    feed(batch), every micro-batch:  closure under autocast -> loss / k -> backward
    at the window's end (_apply):    sync (DDP) -> unscale -> rescale a short window -> clip
                                     -> non-finite check -> optimizer step -> scheduler
                                     -> zero_grad -> the update's after_step hooks

A *step* (``global_step``) is one window: ``accumulate`` micro-batches, after which every due
optimizer has stepped once. :meth:`Window.close` ends a window the data cut short. Precision
(:class:`~beyondfit.core.precision.Precision`) and distribution
(:class:`~beyondfit.core.strategy.Strategy`) are objects the window calls; nothing here
branches on a dtype or a launch, nor knows whether the task is supervised or RL.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from beyondfit.core.compile.compiled import CompiledUpdate
from beyondfit.core.device import move_to_device
from beyondfit.core.forward import ForwardPath
from beyondfit.core.metrics import MetricTracker
from beyondfit.core.nonfinite import NonFiniteCheck
from beyondfit.core.outputs import unpack_output
from beyondfit.core.precision import Precision
from beyondfit.core.state.position import TrainState
from beyondfit.core.strategy import Strategy
from beyondfit.core.update import Update

log = logging.getLogger("beyondfit.core.engine")

_NULL_CONTEXT = contextlib.nullcontext()


class Slot:
    """One update's part of the current window (never saved: checkpoints fall between
    windows)."""

    __slots__ = ("applied", "pending", "program", "synced", "update")

    def __init__(self, update: Update, program: CompiledUpdate | None) -> None:
        self.update = update
        self.program = program  # compile=True: this update's compiled step
        self.applied = 0  # micro-batches whose gradients were kept
        self.synced = False  # did a backward of this window all-reduce the gradients?
        # The window's last loss and logs, checked together with the gradients.
        self.pending: tuple[torch.Tensor, Mapping[str, Any]] | None = None


class Window:
    """The accumulation window: ``accumulate`` micro-batches in, one engine step out.

    It owns the micro-batch count, the updates due in this window and each one's
    applied/synced/pending state. :meth:`feed` runs one micro-batch, :meth:`close` ends a
    window cut short; both return whether an engine step completed.
    """

    def __init__(self, updates: Sequence[Update], accumulate: int, forward: ForwardPath,
                 precision: Precision, strategy: Strategy, check: NonFiniteCheck,
                 metrics: MetricTracker, state: TrainState, device: torch.device,
                 programs: Sequence[CompiledUpdate | None] = ()) -> None:
        programs = list(programs) or [None] * len(updates)
        self.slots = [Slot(u, c) for u, c in zip(updates, programs, strict=True)]
        self.single = len(self.slots) == 1  # one optimizer trains through the DDP wrapper
        self.accumulate = accumulate
        self.forward = forward
        self.precision = precision
        self.strategy = strategy
        self.check = check
        self.metrics = metrics
        # Counted per epoch, not averaged: steps the fp16 GradScaler skipped (overflow), and
        # micro-batches or updates dropped for non-finite values.
        metrics.totals.add("skipped_steps")
        metrics.totals.update(u.prefix + "overflow_steps" for u in updates)
        self.state = state
        self.device = device
        # Non-blocking copies only make sense host -> CUDA (and need pinned memory to overlap).
        self.non_blocking = device.type == "cuda"
        self.micro = 0  # micro-batches fed into this window
        self.due: list[Slot] = self.slots  # the updates stepping in it
        self.stepped = 0  # of those, how many stepped
        self._warned_foreign = False

    def feed(self, batch: Any) -> bool:
        """One micro-batch: every due closure and backward; at the window's end, the updates.

        Never waits for the device except for the non-finite checks (one scalar for the loss,
        one for the gradients at the window's end; ``on_nonfinite="ignore"`` removes both).
        """
        if not self.forward.model.training:
            self.forward.model.train()
        batch = move_to_device(batch, self.device, self.non_blocking)
        if self.micro == 0:
            self._open()
        self.micro += 1
        boundary = self.micro >= self.accumulate  # this micro-batch completes the window
        for slot in self.due:
            if boundary and self.micro == 1 and self._whole(slot, batch):
                continue  # compiled: closure, backward and step in one graph
            self._backward(slot, batch, boundary)
            if boundary:  # right after its own backward: later closures see the new weights
                self._apply(slot)
        return boundary and self._end()

    def close(self) -> bool:
        """End a window the data cut short: the due updates apply the micro-batches they had
        (their mean); a step like any other."""
        if not self.micro:
            return False
        for slot in self.due:
            self._apply(slot)
        return self._end()

    def reset(self) -> None:
        """Forget a window in progress (a checkpoint was loaded)."""
        self.micro = 0
        for slot in self.slots:
            slot.applied, slot.synced, slot.pending = 0, False, None
            if slot.program is not None and slot.update.steps:
                # A loaded optimizer that has stepped has its state: its next step runs
                # compiled, as it did in the run that saved it (an eager step there would
                # differ from the compiled one in the last bits, and the resume would not be
                # bitwise the uninterrupted run).
                slot.program.warm_up()

    # ---------------------------------------------------------------- the window's parts
    def _open(self) -> None:
        step = self.state.global_step
        self.due = self.slots if self.single else [s for s in self.slots if s.update.due(step)]
        self.stepped = 0
        for slot in self.due:
            if slot.update.take_foreign_gradients() and not self._warned_foreign:
                self._warned_foreign = True
                log.warning(
                    "parameters of optimizer%s held gradients from outside this engine (another "
                    "engine's backward through shared modules, or user code); they were "
                    "dropped, as the standard algorithm does. Train networks that share a "
                    "graph in one Engine with an Update per optimizer",
                    slot.update.describe(),
                )

    def _backward(self, slot: Slot, batch: Any, boundary: bool) -> None:
        """Closure and backward of one optimizer for one micro-batch."""
        update, single, check = slot.update, self.single, self.check
        # DDP decides in the forward whether the backward all-reduces: both go inside.
        with self.strategy.no_sync(self.forward.train_model, boundary) if single else _NULL_CONTEXT:
            with self.precision.autocast():
                if slot.program is not None and slot.program.ready:
                    out = slot.program.closure(self.forward.train_model, batch)
                elif self.forward.compile_pending:
                    out = self.forward.first_call(update.loss_fn, batch)
                else:
                    out = update.loss_fn(self.forward.train_model, batch)
            loss, logs = unpack_output(out, training=True)
            # The last micro-batch of a window has its loss checked together with the
            # gradients, after the backward: one host sync per step. Earlier ones (and fp16,
            # whose scaler owns the gradient check) are checked here, before their backward.
            # Under DDP the ranks agree, so all of them skip or none does.
            defer = check.enabled and boundary and not self.precision.checks_gradients
            if check.enabled and not defer and not self.strategy.all_finite(loss):
                if boundary and single:  # DDP armed an all-reduce in this forward
                    self.strategy.skipped_boundary(update.params)
                    slot.synced = True
                check.failed(update.name, logs, "micro-batch", self.state, self.metrics)
                return
            slot.applied += 1
            if defer:
                slot.pending = (loss, logs)
            if self.accumulate > 1:
                loss = loss / self.accumulate
            # Several optimizers: each loss reaches its own parameters only (no leak).
            self.precision.backward(loss, None if single else update.params)
            slot.synced = slot.synced or (boundary and single)
            if not defer:
                check.consecutive = 0
                self.metrics.update(_prefixed(logs, update.prefix))

    def _apply(self, slot: Slot) -> None:
        """The end of a window for one optimizer: sync, unscale, clip, check, step."""
        update, metrics = slot.update, self.metrics
        applied, slot.applied = slot.applied, 0
        synced, slot.synced = slot.synced, False
        pending, slot.pending = slot.pending, None
        if applied == 0:  # every micro-batch of the window was skipped: nothing to apply
            update.optimizer.zero_grad(set_to_none=True)
            return
        if not synced:  # several optimizers, or a short window that ran under no_sync
            self.strategy.sync_gradients(update.params)
        program = slot.program
        if program is not None and program.ready:
            compiled = program.apply(self.accumulate / applied,
                                     pending[0] if pending else None)
            if compiled is not None:  # rescale, clip, check and step were one graph
                self._finish(slot, *compiled, pending)
                return
        overflow = self.precision.unscale(update.optimizer, self.device)  # real units from here
        if overflow is not None:
            metrics.update({update.prefix + "overflow_steps": overflow})
        if applied != self.accumulate:
            # A short window (the end of the data, skipped micro-batches) is the mean over the
            # micro-batches it had, not a sum divided by the full window length.
            grads = [p.grad for p in update.params if p.grad is not None]
            torch._foreach_mul_(grads, self.accumulate / applied)
        norm = update.clip()
        # A finite loss can have non-finite gradients (sqrt or log at 0): never apply them.
        # One sync checks the gradients (their norm, which clipping computes anyway) and the
        # window's last loss together. Under fp16 the GradScaler skips such steps itself.
        if self.check.enabled and not self.precision.checks_gradients:
            value = norm if norm is not None else update.grad_norm()
            if pending is not None:  # (autograd records the add: cheaper than a detach)
                value = value + pending[0]
            if not self.strategy.all_finite(value):
                update.optimizer.zero_grad(set_to_none=True)
                self._refuse(update, pending)
                return
        self._log(update, norm, pending)
        self.precision.step(update.optimizer)  # fp16: skips the update on overflow
        if update.scheduler is not None and not update.plateau:
            self.precision.step_scheduler(update.scheduler, update.steps == 0)
        update.optimizer.zero_grad(set_to_none=True)
        update.steps += 1
        for hook in update.after_step:  # e.g. a target network following this optimizer
            hook(update)
        self.stepped += 1
        if program is not None:
            program.warm_up()  # its state exists now: the next steps run compiled

    # ---------------------------------------------------------------- the compiled step
    def _whole(self, slot: Slot, batch: Any) -> bool:
        """One micro-batch per step, compiled: the whole update as one graph. False when
        this update has no such graph (the split path then runs)."""
        program = slot.program
        if program is None or not program.ready or not program.whole:
            return False
        result = program.run_whole(batch)
        if result is None:
            return False
        loss, logs, norm, ok = result
        self._finish(slot, norm, ok, (loss, logs))
        return True

    def _finish(self, slot: Slot, norm: Any, ok: Any,
                pending: tuple[torch.Tensor, Mapping[str, Any]] | None) -> None:
        """What follows a compiled update on the host: the non-finite verdict (one read of a
        flag, the eager step's one sync), then the step (its own graph when the check is on),
        the logs, the scheduler, the hooks that stay in Python."""
        update, program = slot.update, slot.program
        if ok is not None and not bool(ok):
            program.discard()  # (it drops the gradients: no zero_grad needed)
            self._refuse(update, pending)
            return
        self._log(update, norm, pending)
        program.commit()  # the optimizer step and target networks if not in the graph;
        if update.scheduler is not None and not update.plateau:  # gradients dropped
            self.precision.step_scheduler(update.scheduler, update.steps == 0)
        update.steps += 1
        program.after_step()
        self.stepped += 1

    def _refuse(self, update: Update,
                pending: tuple[torch.Tensor, Mapping[str, Any]] | None) -> None:
        # A step with non-finite values: name the loss's terms if the loss is the culprit.
        bad_loss = pending is not None and not bool(torch.isfinite(pending[0].detach()))
        self.check.failed(update.name, pending[1] if bad_loss else {},
                          "step" if bad_loss else "optimizer step", self.state, self.metrics)

    def _log(self, update: Update, norm: Any,
             pending: tuple[torch.Tensor, Mapping[str, Any]] | None) -> None:
        # A step that applies: its deferred logs and its gradient norm.
        if pending is not None:
            self.check.consecutive = 0
            self.metrics.update(_prefixed(pending[1], update.prefix))
        if norm is not None:
            self.metrics.update({update.prefix + "grad_norm": norm})

    def abandon(self) -> None:
        """Forget a window cut short by a KeyboardInterrupt inside it: its gradients and
        counts, so that the engine holds its last whole step and a later ``fit`` continues
        from there."""
        for slot in self.slots:
            slot.update.optimizer.zero_grad(set_to_none=True)
        self.reset()

    def _end(self) -> bool:
        self.micro = 0
        if not self.stepped:
            return False
        self.precision.update()  # one scale update per window, after every optimizer
        self.state.global_step += 1
        return True


def _prefixed(logs: Mapping[str, Any], prefix: str) -> Mapping[str, Any]:
    # One optimizer: its names as returned (no dict built per step); several: NAME/entry.
    return {prefix + k: v for k, v in logs.items()} if prefix else logs
