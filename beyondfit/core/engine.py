"""The one step engine: every kind of learning goes through :class:`Engine`.

A *step* here is one optimizer update. With ``accumulate=k`` it takes ``k`` micro-batches,
each one call of the loss closure (:meth:`Engine.train_step`); ``global_step``,
``max_steps``, ``log_every``, ``eval_every`` and schedulers all count optimizer steps, never
micro-batches.

Order inside a step (nanoGPT's, Fabric's): closure under autocast -> loss / k ->
(scaled) backward -> only at the accumulation boundary: unscale -> clip (the pre-clip norm
is logged as ``grad_norm``) -> optimizer step -> scaler update -> scheduler step ->
``zero_grad(set_to_none=True)``. Nothing here knows whether the task is supervised,
self-supervised or reinforcement learning.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from beyondfit.core.callbacks import Callback, overrides
from beyondfit.core.device import move_to_device
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.metrics import MetricTracker
from beyondfit.core.options import check_number
from beyondfit.core.outputs import unpack_output
from beyondfit.core.precision import Precision
from beyondfit.core.seeding import rng_state, set_rng_state
from beyondfit.core.serialization import atomic_save, mismatched_keys, safe_load
from beyondfit.core.state import TrainState
from beyondfit.core.strategy import Strategy, resolve_strategy

log = logging.getLogger(__name__)

LossFn = Callable[[nn.Module, Any], Any]
OptimizerLike = torch.optim.Optimizer | Callable[[list[nn.Parameter]], torch.optim.Optimizer]

_NONFINITE = ("raise", "skip", "ignore")


class _Counter:
    """``engine.global_step`` and friends: a view of the field of ``engine.state``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, engine: Any, owner: type | None = None) -> Any:
        return self if engine is None else getattr(engine.state, self.name)

    def __set__(self, engine: Any, value: Any) -> None:
        setattr(engine.state, self.name, value)


class Engine:
    """Train any model from a loss closure ``loss_fn(model, batch)``.

    Args:
        model: the module to train; moved to ``device`` here.
        loss_fn: returns a scalar loss Tensor, or a Mapping with key ``"loss"`` whose other
            entries (scalar tensors or numbers, or metric objects such as torchmetrics')
            are tracked as per-epoch values under their own names.
        optimizer: an Optimizer, or a callable ``params -> Optimizer`` that is given the
            trainable parameters (``requires_grad=True``) only.
        scheduler: an LR scheduler, or a callable ``optimizer -> scheduler``; stepped once
            per optimizer step.
        clip_norm: clip the global gradient norm to this value (pre-clip norm logged as
            ``grad_norm``).
        clip_value: clamp every gradient element to ``[-clip_value, clip_value]`` (applied
            after norm clipping when both are set).
        accumulate: micro-batches per optimizer step.
        device: ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda[:i]"``, ``"mps"``.
        precision: ``"32"``, ``"bf16"`` (autocast) or ``"16"`` (fp16 autocast + GradScaler).
        compile: ``torch.compile`` the model the closure sees; falls back to eager with a
            warning when the backend cannot compile.
        callbacks: :class:`~beyondfit.core.callbacks.Callback` instances.
        on_nonfinite: ``"raise"`` stops at a NaN/inf loss naming the step and term;
            ``"skip"`` drops that micro-batch and counts it as ``skipped_steps``, stopping
            after ``max_skips`` in a row; ``"ignore"`` does not check (no per-step sync).
        log_every: optimizer steps between ``on_log`` callbacks (the only host syncs).
        track_grad_norm: log ``grad_norm`` even without ``clip_norm``.
        strategy: ``"auto"`` (DDP when torchrun started several processes), ``"none"``,
            ``"ddp"``, or a :class:`~beyondfit.distributed.Strategy` instance. Under DDP
            each rank trains on its shard of the data, gradients are all-reduced at the
            accumulation boundary, logged values are means over all ranks, and callbacks
            with ``rank_zero_only = True`` run on rank 0 only.

    Example:
        >>> engine = Engine(model, loss_fn, torch.optim.Adam(model.parameters(), 1e-3))
        >>> history = engine.fit(train_loader, epochs=3, val_data=val_loader)
    """

    global_step = _Counter()
    epoch = _Counter()
    batch_in_epoch = _Counter()
    skipped_steps = _Counter()
    evaluated_at = _Counter()
    data_exhausted = _Counter()

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        optimizer: OptimizerLike,
        *,
        scheduler: Any = None,
        clip_norm: float | None = None,
        clip_value: float | None = None,
        accumulate: int = 1,
        device: str | torch.device = "auto",
        precision: str | int = "32",
        compile: bool = False,
        callbacks: Iterable[Callback] = (),
        on_nonfinite: str = "raise",
        max_skips: int = 10,
        log_every: int = 50,
        track_grad_norm: bool = False,
        strategy: str | Strategy = "auto",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise BeyondfitError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(loss_fn):
            raise BeyondfitError("loss_fn must be a callable loss_fn(model, batch)")
        check_number("clip_norm", clip_norm, above=0, allow_none=True)
        check_number("clip_value", clip_value, above=0, allow_none=True)
        for name, value in (("accumulate", accumulate), ("log_every", log_every),
                            ("max_skips", max_skips)):
            check_number(name, value, integer=True, at_least=1)
        if on_nonfinite not in _NONFINITE:
            raise BeyondfitError(
                f"on_nonfinite={on_nonfinite!r}; use one of {', '.join(_NONFINITE)}"
            )

        # "auto": DDP when torchrun started several processes (beyondfit.distributed).
        self.strategy = resolve_strategy(strategy)
        self.device = self.strategy.setup_device(device)
        self.model = model.to(self.device)
        self.loss_fn = loss_fn
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if not self.params:
            raise BeyondfitError(
                "every parameter of the model has requires_grad=False: nothing to train; "
                "unfreeze at least one parameter"
            )
        self.optimizer = _build_optimizer(optimizer, self.params)
        self.scheduler = _build_scheduler(scheduler, self.optimizer)
        self.clip_norm = clip_norm
        self.clip_value = clip_value
        self.accumulate = int(accumulate)
        self.on_nonfinite = on_nonfinite
        self.max_skips = int(max_skips)
        self.log_every = int(log_every)
        self.track_grad_norm = bool(track_grad_norm) or clip_norm is not None
        self.precision = Precision(precision, self.device)
        # The one rank-0 rule: writers (metrics files, console, plots, checkpoints) declare
        # rank_zero_only = True and exist on rank 0 only.
        self.callbacks: list[Callback] = [
            cb for cb in callbacks
            if self.strategy.is_main or not getattr(cb, "rank_zero_only", False)
        ]

        # The module the closure is given. Training and evaluation share the forward path
        # (the compiled model when compile=True); training adds the strategy's wrapper (DDP),
        # whose collectives evaluation must not run (ranks score different batch counts).
        self._compile_pending = bool(compile)
        self.eval_model: Any = torch.compile(self.model) if compile else self.model
        self.forward_model: Any = self.strategy.wrap(
            self.model, self.eval_model if compile else None
        )

        # Non-blocking copies only make sense host -> CUDA (and need pinned memory to overlap).
        self._non_blocking = self.device.type == "cuda"
        self.train_metrics = MetricTracker()
        self.val_metrics = MetricTracker()
        # Under DDP, logged values are reduced over all ranks (a collective at compute time).
        self.train_metrics.reducer = self.val_metrics.reducer = self.strategy.metric_reducer()
        # fp16: optimizer steps the GradScaler skipped (inf/NaN gradients), counted per epoch.
        # Likewise counted, not averaged: micro-batches dropped for non-finite values.
        self.train_metrics.totals.update(("overflow_steps", "skipped_steps"))
        self._window_synced = False  # did a backward of this window all-reduce gradients?

        self.state = TrainState()  # the counters; all saved in checkpoints
        self._micro = 0  # micro-batches in the current accumulation window
        self._window_applied = 0  # of those, how many contributed gradients
        self._consecutive_skips = 0
        self.should_stop = False
        self.stopped_by: str | None = None
        # Set (to e.g. "SIGINT") by a callback that must stop *now*: fit then leaves the
        # epoch open (no partial-epoch row, no evaluation), so a checkpoint taken in
        # on_fit_end resumes mid-epoch exactly where the run stopped.
        self.interrupted: str | None = None
        self.history: list[dict[str, float]] = []
        self.last_val: dict[str, float] = {}
        self.train_data: Any = None
        self._pending_data_state: Any = None

    # ------------------------------------------------------------------ the step
    def train_step(self, batch: Any) -> None:
        """One micro-batch: closure, backward, and the optimizer step at the boundary.

        With ``accumulate=k``, every ``k``-th call completes an optimizer step (a "step" of
        ``global_step``). Never waits for the device except for the non-finite check (one
        scalar; set ``on_nonfinite="ignore"`` to remove it).
        """
        if not self.model.training:
            self.model.train()
        batch = move_to_device(batch, self.device, self._non_blocking)
        boundary = self._micro + 1 >= self.accumulate  # this backward completes the window
        # DDP decides in the forward whether the backward all-reduces: both go inside.
        with self.strategy.no_sync(self.forward_model, boundary):
            with self.precision.autocast():
                out = self._call_closure(batch)
            loss, logs = unpack_output(out, training=True)
            self._micro += 1
            # .item() is the one per-step sync (cheapest scalar check there is); "ignore"
            # skips it. Under DDP the ranks agree, so all of them skip or none does.
            if self.on_nonfinite != "ignore" and not self.strategy.all_finite(loss):
                if boundary:  # DDP armed an all-reduce in this forward: complete it
                    self.strategy.skipped_boundary(self.params)
                    self._window_synced = True
                self._nonfinite(loss, logs)
            else:
                self._consecutive_skips = 0
                self._window_applied += 1
                if self.accumulate > 1:
                    loss = loss / self.accumulate
                self.precision.backward(loss)
                self._window_synced = self._window_synced or boundary
                self.train_metrics.update(logs)
        if self._micro >= self.accumulate:
            self._optimizer_step()

    def _call_closure(self, batch: Any) -> Any:
        if not self._compile_pending:
            return self.loss_fn(self.forward_model, batch)
        self._compile_pending = False
        try:
            return self.loss_fn(self.forward_model, batch)
        except BeyondfitError:
            raise
        except Exception as exc:  # the backend (e.g. no C compiler for inductor) failed
            log.warning(
                "torch.compile failed (%s: %s); continuing without compilation",
                type(exc).__name__,
                str(exc).splitlines()[0][:200] if str(exc) else "",
            )
            self.eval_model = self.model
            self.forward_model = self.strategy.wrap(self.model)
            return self.loss_fn(self.forward_model, batch)

    def _optimizer_step(self) -> None:
        applied = self._window_applied
        self._micro = 0
        self._window_applied = 0
        synced, self._window_synced = self._window_synced, False
        if applied == 0:  # every micro-batch of the window was skipped: nothing to apply
            self.optimizer.zero_grad(set_to_none=True)
            return
        if not synced:  # a partial window at the end of the data ran under no_sync
            self.strategy.sync_gradients(self.params)
        overflow = self.precision.unscale(self.optimizer, self.device)  # clip real gradients
        if overflow is not None:
            self.train_metrics.update({"overflow_steps": overflow})
        if self.track_grad_norm:
            max_norm = self.clip_norm if self.clip_norm is not None else math.inf
            norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
            self.train_metrics.update({"grad_norm": norm})
        if self.clip_value is not None:
            torch.nn.utils.clip_grad_value_(self.params, self.clip_value)
        self.precision.step(self.optimizer)  # fp16: skips the update on overflow
        if self.scheduler is not None:
            self.precision.step_scheduler(self.scheduler, self.state.global_step == 0)
        self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1

    def _nonfinite(self, loss: torch.Tensor, logs: Mapping[str, Any]) -> None:
        bad = [
            name
            for name, value in logs.items()
            if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all())
        ] or ["loss"]
        where = (
            f"optimizer step {self.global_step + 1} "
            f"(epoch {self.epoch + 1}, batch {self.batch_in_epoch + 1})"
        )
        if self.on_nonfinite == "raise":
            raise BeyondfitError(
                f"non-finite {', '.join(bad)} at {where}; lower the learning rate, clip "
                "gradients, check the data, or set engine.on_nonfinite=skip"
            )
        self.skipped_steps += 1
        self._consecutive_skips += 1
        self.train_metrics.update({"skipped_steps": 1.0})
        log.warning("skipped a micro-batch with non-finite %s at %s", ", ".join(bad), where)
        if self._consecutive_skips >= self.max_skips:
            raise BeyondfitError(
                f"non-finite {', '.join(bad)} in {self._consecutive_skips} consecutive "
                f"micro-batches, the last at {where}; the run is diverging: lower the "
                "learning rate or check the data"
            )

    # ------------------------------------------------------------------ the loop
    def fit(
        self,
        train_data: Iterable[Any],
        *,
        epochs: int = 1,
        max_steps: int | None = None,
        val_data: Any = None,
        eval_every: int | None = None,
    ) -> list[dict[str, float]]:
        """Train over ``train_data`` for ``epochs`` passes and/or ``max_steps`` optimizer steps.

        Args:
            train_data: any iterable of batches (DataLoader, list, generator, collector).
                If it has ``state_dict``/``load_state_dict`` its position is checkpointed.
            epochs: passes over ``train_data`` (counting epochs already done on resume).
            max_steps: stop after this many optimizer steps in total.
            val_data: an iterable of batches scored by the closure, or a callable
                ``evaluator(model) -> Mapping[str, float]``; logged with the ``val_`` prefix.
            eval_every: optimizer steps between evaluations; ``None`` evaluates at each
                epoch end.

        Returns:
            The history: one dict of floats per epoch (train means, ``val_`` values,
            ``epoch`` and ``step``).
        """
        check_number("epochs", epochs, integer=True, at_least=1)
        check_number("max_steps", max_steps, integer=True, at_least=1, allow_none=True)
        check_number("eval_every", eval_every, integer=True, at_least=1, allow_none=True)
        if not isinstance(train_data, Iterable):
            raise BeyondfitError(
                f"train_data must be an iterable of batches, got {type(train_data).__name__}"
            )
        # Under DDP: this rank's shard (DistributedSampler, TensorBatches.shard, ...).
        train_data = self.strategy.shard_train(train_data)
        self.train_data = train_data
        if self._pending_data_state is not None and hasattr(train_data, "load_state_dict"):
            train_data.load_state_dict(self._pending_data_state)
        self._pending_data_state = None
        self.should_stop = False
        self.stopped_by = None
        self.interrupted = None
        step_hooks = [cb for cb in self.callbacks if overrides(cb, "on_step_end")]
        self._emit("on_fit_start")
        if max_steps is not None and self.global_step >= max_steps:
            self.should_stop = True
        while self.epoch < epochs and not self.should_stop:
            resuming = self.batch_in_epoch > 0
            if not resuming:
                self.train_metrics.reset()
            self._emit("on_epoch_start")
            self.strategy.set_epoch(train_data, self.epoch)  # distributed samplers reshuffle
            batches: Iterable[Any] = train_data
            if resuming and self.data_exhausted:
                # Saved after the data ran out (in the final partial window's step): the
                # data source is already at its next pass; only the epoch's end remains.
                batches = ()
            elif resuming and not hasattr(train_data, "load_state_dict"):
                # A plain iterable cannot seek: skip what the interrupted epoch consumed.
                batches = itertools.islice(train_data, self.batch_in_epoch, None)
            if not resuming:
                self.evaluated_at = -1
            self.data_exhausted = False
            for batch in batches:
                before = self.global_step
                self.train_step(batch)
                self.batch_in_epoch += 1
                if self.global_step == before:
                    continue
                self._after_step(val_data, eval_every, max_steps, step_hooks)
                if self.should_stop:
                    break
            else:
                self.data_exhausted = True
                if self._micro:  # a partial accumulation window at the end of the data
                    before = self.global_step
                    self._optimizer_step()
                    if self.global_step != before:  # a step like any other: logged, counted
                        self._after_step(val_data, eval_every, max_steps, step_hooks)
            if self.interrupted:
                break  # the epoch stays open: resuming continues it mid-way
            if self.batch_in_epoch == 0 and not resuming:
                raise BeyondfitError(
                    "train_data yielded no batches; check the data source and the batch size"
                )
            finished_epoch = not self.should_stop or self._epoch_exhausted()
            logs = self._train_logs()
            if val_data is not None and self.evaluated_at != self.global_step:
                self._run_eval(val_data)  # every history row carries current val_ values
            logs.update(self.last_val)
            logs["epoch"] = float(self.epoch + 1)
            logs["step"] = float(self.global_step)
            if finished_epoch:
                self.epoch += 1
                self.batch_in_epoch = 0
            self.history.append(logs)
            self._emit("on_epoch_end", logs)
        self._emit("on_fit_end", self.history)
        return self.history

    def _after_step(
        self, val_data: Any, eval_every: int | None, max_steps: int | None, step_hooks: list[Any]
    ) -> None:
        """After an optimizer step: log row, evaluation, step budget, then ``on_step_end``."""
        if self.global_step % self.log_every == 0:
            self._emit("on_log", self._train_logs())
        if val_data is not None and eval_every and self.global_step % eval_every == 0:
            self._run_eval(val_data)
            self.evaluated_at = self.global_step
        if max_steps is not None and self.global_step >= max_steps:
            self.should_stop = True
        # Last, so a checkpoint written here includes this step's log rows.
        for callback in step_hooks:
            callback.on_step_end(self)
        # Under DDP a stop on one rank (a signal, a callback) stops every rank here: one
        # small host-side all-reduce per optimizer step, only when there are several ranks.
        if self.strategy.is_distributed:
            self.should_stop, self.interrupted = self.strategy.agree_stop(
                self.should_stop, self.interrupted
            )

    def _train_logs(self) -> dict[str, float]:
        """The tracked means, plus what the training data reports about itself.

        A data source with ``metrics() -> {name: float}`` (a rollout collector: ``env_steps``,
        episode returns) adds those values; names in its ``metric_totals`` are counts, summed
        over ranks under DDP, the others are averaged over ranks.
        """
        logs = self.train_metrics.compute()
        report = getattr(self.train_data, "metrics", None)
        if callable(report):
            totals = getattr(self.train_data, "metric_totals", ())
            logs.update(self.strategy.reduce_report(report(), totals))
        return logs

    def _epoch_exhausted(self) -> bool:
        # Stopped on the last batch of the data? Then the epoch did finish.
        length = _safe_len(self.train_data)
        return length is not None and self.batch_in_epoch >= length

    def _run_eval(self, val_data: Any) -> None:
        self.last_val = self.evaluate(val_data)
        self._emit("on_eval_end", self.last_val)

    def evaluate(self, data: Any) -> dict[str, float]:
        """Score the model under ``model.eval()`` and ``torch.inference_mode()``.

        ``data`` is an iterable of batches given to the same loss closure (no gradients,
        no optimizer), or a callable ``evaluator(model) -> Mapping[str, float]``. Every key
        of the result starts with ``val_``; metric objects are reset before and after, and the
        training state of those the closure also feeds in training is restored after.
        """
        was_training = self.model.training
        self.model.eval()
        # Under DDP (every rank calls evaluate): rank 0's buffers, and each rank scores
        # its share of the batches; compute() then reduces over ranks.
        self.strategy.sync_buffers(self.model)
        # The closure may feed the same metric objects as in training: set their training
        # state aside (a mid-epoch evaluation must neither count training batches nor cut
        # the epoch's running value) and bring it back after. Objects of earlier
        # evaluations start from zero too; only those this evaluation feeds are reported.
        saved = self.train_metrics.set_aside()
        self.val_metrics.reset()
        self.val_metrics.objects.clear()
        try:
            with torch.inference_mode():
                if callable(data) and not isinstance(data, Iterable):
                    with self.precision.autocast():
                        raw = self.strategy.reduce_mapping(data(self.eval_model))
                else:
                    for batch in self.strategy.shard_eval(data):
                        self.test_step(batch)
                    raw = self.val_metrics.compute()
                    if not raw:
                        raise BeyondfitError(
                            "val_data yielded no batches; check the validation split"
                        )
        finally:
            self.val_metrics.reset()
            MetricTracker.bring_back(saved)
            self.model.train(was_training)
        return {(k if k.startswith("val_") else f"val_{k}"): float(v) for k, v in raw.items()}

    def test_step(self, batch: Any) -> None:
        """Score one batch with the closure, as :meth:`train_step` runs it, minus the update:
        the same forward path and autocast, no gradients, into the validation metrics. Call it
        under ``model.eval()`` and ``torch.inference_mode()``, as :meth:`evaluate` does."""
        batch = move_to_device(batch, self.device, self._non_blocking)
        with self.precision.autocast():
            out = self.loss_fn(self.eval_model, batch)
        self.val_metrics.update(unpack_output(out, training=False)[1])

    def _emit(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: weights, optimizer, counters, RNG, data."""
        state: dict[str, Any] = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counters": self.state.state_dict(),
            "last_val": dict(self.last_val),
            "metrics": self.train_metrics.state_dict(),
            "history": [dict(row) for row in self.history],
            "rng": rng_state(),
        }
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self.precision.scaler is not None:
            state["scaler"] = self.precision.state_dict()
        data_state = getattr(self.train_data, "state_dict", None)
        if callable(data_state):
            state["data"] = data_state()
        state["callbacks"] = {
            _callback_key(cb): cb.state_dict()
            for cb in self.callbacks
            if callable(getattr(cb, "state_dict", None))
        }
        return state

    def load_state_dict(self, state: Mapping[str, Any], source: str = "checkpoint") -> None:
        """Restore :meth:`state_dict`; a model mismatch is a clear error listing the keys."""
        problems = mismatched_keys(self.model.state_dict(), state["model"])
        if problems:
            shown = "; ".join(problems[:8])
            if len(problems) > 8:
                shown += f"; and {len(problems) - 8} more"
            raise BeyondfitError(
                f"{source} does not fit this model ({shown}); it was written for a different "
                "task or model shape"
            )
        self.model.load_state_dict(state["model"])
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError) as exc:
            raise BeyondfitError(
                f"{source} holds optimizer state that does not fit this optimizer ({exc}); "
                "resume with the same optimizer settings"
            ) from None
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        if "scaler" in state:
            self.precision.load_state_dict(state["scaler"])
        self.state = TrainState()
        self.state.load_state_dict(state["counters"])
        self.last_val = dict(state.get("last_val", {}))
        self.train_metrics.load_state_dict(state["metrics"], self.device)
        self.history = [dict(row) for row in state.get("history", [])]
        if "rng" in state:
            set_rng_state(state["rng"])
        saved_callbacks = state.get("callbacks", {})
        for cb in self.callbacks:
            key = _callback_key(cb)
            if key in saved_callbacks and callable(getattr(cb, "load_state_dict", None)):
                cb.load_state_dict(saved_callbacks[key])
        self._pending_data_state = state.get("data")
        if self._pending_data_state is not None and hasattr(self.train_data, "load_state_dict"):
            self.train_data.load_state_dict(self._pending_data_state)
            self._pending_data_state = None
        self._micro = 0
        self._window_applied = 0

    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """Write :meth:`state_dict` (plus ``extra``, e.g. the resolved config) atomically."""
        state = self.state_dict()
        if extra:
            state.update(extra)
        return atomic_save(state, path)

    def load(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint written by :meth:`save` (``weights_only=True``); returns it."""
        state = safe_load(path)
        self.load_state_dict(state, source=f"checkpoint {str(path)!r}")
        return state


def _build_optimizer(optimizer: Any, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if callable(optimizer):  # e.g. Hydra's _partial_ (not a functools.partial: don't type-check)
        built = optimizer(params)
        if isinstance(built, torch.optim.Optimizer):
            return built
        raise BeyondfitError(
            f"the optimizer factory returned {type(built).__name__}, not a torch Optimizer"
        )
    raise BeyondfitError(
        f"optimizer must be a torch Optimizer or a callable params -> Optimizer, "
        f"got {type(optimizer).__name__}"
    )


def _build_scheduler(scheduler: Any, optimizer: torch.optim.Optimizer) -> Any:
    if scheduler is None:
        return None
    if hasattr(scheduler, "step") and hasattr(scheduler, "state_dict"):
        return scheduler
    if callable(scheduler):
        return scheduler(optimizer)
    raise BeyondfitError(
        f"scheduler must be an LR scheduler or a callable optimizer -> scheduler, "
        f"got {type(scheduler).__name__}"
    )


def _callback_key(callback: Callback) -> str:
    return getattr(callback, "state_key", type(callback).__name__)


def _safe_len(data: Any) -> int | None:
    try:
        return len(data)
    except TypeError:
        return None
