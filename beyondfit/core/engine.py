"""The one step engine: every kind of learning goes through :class:`Engine`.

The loop: epochs, evaluation, callbacks, state; one micro-batch is :mod:`beyondfit.core.step`.
A *step* here is one engine step: ``accumulate`` micro-batches (calls of the loss closure),
after which every optimizer due in it steps once. ``global_step``, ``max_steps``,
``log_every``, ``eval_every`` and schedulers count steps, never micro-batches.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from beyondfit.core import guards
from beyondfit.core.callbacks import Callback, overrides
from beyondfit.core.checks import NonFiniteCheck
from beyondfit.core.compiled import compile_steps
from beyondfit.core.console import ConsoleLogger, ProgressBar, progress_callback
from beyondfit.core.errors import BeyondfitError, no_train_batches
from beyondfit.core.evaluation import Evaluation
from beyondfit.core.forward import ForwardPath
from beyondfit.core.logs import visible_logs
from beyondfit.core.metrics import MetricTracker
from beyondfit.core.options import check_option
from beyondfit.core.precision import Precision
from beyondfit.core.state import Checkpointable, Counter, TrainState
from beyondfit.core.step import Window
from beyondfit.core.strategy import Strategy, resolve_strategy
from beyondfit.core.update import OnlyUpdate, Update, build_updates, check_disjoint, planned_steps

log = logging.getLogger(__name__)

LossFn = Callable[[nn.Module, Any], Any]
OptimizerLike = torch.optim.Optimizer | Callable[[list[nn.Parameter]], torch.optim.Optimizer]

class Engine(Checkpointable):
    """Train any model from a loss closure ``loss_fn(model, batch)``.

    Args:
        model: the module to train; moved to ``device`` here.
        loss_fn: returns a scalar loss Tensor, or a Mapping with key ``"loss"`` whose other
            entries (scalar tensors or numbers, or metric objects such as torchmetrics')
            are tracked as per-epoch values under their own names. Or a list of
            :class:`~beyondfit.core.update.Update` (several optimizers, each with its own
            loss, parameters, step ratio, scheduler and clipping); ``optimizer``,
            ``scheduler``, ``clip_norm``, ``clip_value`` then belong to each Update.
        optimizer: an Optimizer, or a callable ``params -> Optimizer`` that is given the
            trainable parameters (``requires_grad=True``) only.
        scheduler: an LR scheduler, or a callable ``optimizer -> scheduler``; stepped once
            per step (``ReduceLROnPlateau``: after each evaluation, with ``val_loss``).
        clip_norm: clip the global gradient norm to this (pre-clip norm: ``grad_norm``).
        clip_value: clamp every gradient element to ``[-clip_value, clip_value]`` (after
            norm clipping when both are set).
        accumulate: micro-batches per step. A window cut short (by the end of the data or
            skipped micro-batches) averages the micro-batches it had.
        device: ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda[:i]"``, ``"mps"``.
        precision: ``"32"``, ``"bf16"`` (autocast) or ``"16"`` (fp16 autocast + GradScaler).
        compile: ``True`` compiles each optimizer's whole step and the evaluation closures
            (:mod:`beyondfit.core.compiled`: close to the eager numbers, not bitwise);
            ``"max"`` adds CUDA graphs on a GPU. What cannot be compiled runs eagerly, said
            once; the graphs built are counted in one line at the end of ``fit``.
        callbacks: :class:`~beyondfit.core.callbacks.Callback` instances.
        on_nonfinite: ``"raise"`` stops at a NaN/inf loss, or NaN/inf gradients from a finite
            loss, naming the step and term; ``"skip"`` drops that micro-batch (or that step's
            update) and counts it as ``skipped_steps``, stopping after ``max_skips`` in a row;
            ``"ignore"`` does not check (no per-step sync).
        log_every: steps between ``on_log`` callbacks (the only host syncs).
        track_grad_norm: log ``grad_norm`` even without ``clip_norm``.
        strategy: ``"auto"`` (DDP when torchrun started several processes), ``"none"``,
            ``"ddp"``, or a :class:`~beyondfit.core.strategy.Strategy` instance. Under DDP
            each rank trains on its shard of the data, gradients are all-reduced at the
            accumulation boundary, logged values are means over all ranks, and callbacks
            with ``rank_zero_only = True`` run on rank 0 only.

    Example:
        >>> engine = Engine(model, loss_fn, torch.optim.Adam(model.parameters(), 1e-3))
        >>> history = engine.fit(train_loader, epochs=3, val_data=val_loader)
    """

    global_step = Counter()
    epoch = Counter()
    batch_in_epoch = Counter()
    skipped_steps = Counter()
    evaluated_at = Counter()
    data_exhausted = Counter()
    loss_fn = OnlyUpdate("loss_fn")
    optimizer = OnlyUpdate("optimizer")
    scheduler = OnlyUpdate("scheduler")
    clip_norm = OnlyUpdate("clip_norm")
    clip_value = OnlyUpdate("clip_value")

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn | Sequence[Update],
        optimizer: OptimizerLike | None = None,
        *,
        scheduler: Any = None,
        clip_norm: float | None = None,
        clip_value: float | None = None,
        accumulate: int = 1,
        device: str | torch.device = "auto",
        precision: str | int = "32",
        compile: bool | str = False,
        callbacks: Iterable[Callback] = (),
        on_nonfinite: str = "raise",
        max_skips: int = 10,
        log_every: int = 50,
        track_grad_norm: bool = False,
        strategy: str | Strategy = "auto",
    ) -> None:
        guards.model(model)  # a module, without meta tensors
        check_option("Engine.accumulate", accumulate)
        check_option("Engine.log_every", log_every)
        check = NonFiniteCheck(on_nonfinite, max_skips)
        updates = build_updates(
            loss_fn, optimizer, scheduler, clip_norm, clip_value, track_grad_norm
        )

        # "auto": DDP when torchrun started several processes (beyondfit.distributed).
        self.strategy = resolve_strategy(strategy)
        self.device = self.strategy.setup_device(device)
        self.model = model.to(self.device)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        for update in updates:  # a factory without params trains the model, if it is alone
            update.bind(trainable if len(updates) == 1 else None)
        check_disjoint(updates)
        guards.optimizers(self.model, updates)  # each holds some of the model's parameters
        self.updates: list[Update] = updates
        self._single = len(updates) == 1
        self.accumulate = int(accumulate)
        self.log_every = int(log_every)
        self.precision = Precision(precision, self.device)
        # The one rank-0 rule: writers (metrics files, console, plots, checkpoints) declare
        # rank_zero_only = True and exist on rank 0 only.
        self.callbacks: list[Callback] = []
        for callback in callbacks:
            self.add_callback(callback)
        self.compile_report, programs = compile_steps(
            compile, updates, self.model, self.precision, check.enabled, self.accumulate,
            self.strategy, self.device)  # core/compiled.py; under DDP only the forward:
        self.forward = ForwardPath(self.model, self.strategy, self.compile_report is not None
                                   and self.strategy.is_distributed, wrapped=self._single)

        self.train_metrics = MetricTracker()
        # Under DDP, logged values are reduced over all ranks (a collective at compute time).
        reducer = self.train_metrics.reducer = self.strategy.metric_reducer()
        self.state = TrainState()  # the counters; all saved in checkpoints
        # The step: micro-batches in, optimizer steps out (core/step.py).
        self.window = Window(updates, self.accumulate, self.forward, self.precision,
                             self.strategy, check, self.train_metrics, self.state, self.device,
                             programs)
        self.evaluation = Evaluation(updates, self.forward, self.precision, self.strategy,
                                     self.train_metrics, reducer, self.device, programs)
        self.val_metrics = self.evaluation.metrics
        self._resumed = False  # the next fit continues a loaded run (its totals count)
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

    @property
    def forward_model(self) -> Any:
        """The module training closures are given (wrapped by the strategy)."""
        return self.forward.train_model

    def train_step(self, batch: Any) -> bool:
        """One training micro-batch (:meth:`beyondfit.core.step.Window.feed`): closures and
        backwards, and every due optimizer's step when it completes an accumulation window.

        Returns whether an engine step (``global_step``) completed."""
        return self.window.feed(batch)

    def add_callback(self, callback: Callback) -> None:
        """Add a callback (dropped on ranks other than 0 when it is ``rank_zero_only``)."""
        if self.strategy.is_main or not getattr(callback, "rank_zero_only", False):
            self.callbacks.append(callback)

    # ------------------------------------------------------------------ the loop
    @guards.not_reentrant
    def fit(
        self,
        train_data: Iterable[Any],
        *,
        epochs: int | None = None,
        max_steps: int | None = None,
        val_data: Any = None,
        eval_every: int | None = None,
        verbose: bool | str = "auto",
    ) -> list[dict[str, float]]:
        """Train over ``train_data`` for ``epochs`` passes and/or ``max_steps`` steps.

        Each call trains ``epochs`` more epochs (a partly done epoch is finished first and
        counts as one) and ``max_steps`` more steps, as Keras' ``fit`` does; the first call
        after :meth:`load` (a resume) finishes the saved run instead, counting both from the
        run's start. ``max_steps`` alone trains until that many steps, over as many epochs
        as it takes; neither given: one epoch.

        Args:
            train_data: any re-iterable of batches (DataLoader, list, collector). If it
                has ``state_dict``/``load_state_dict`` its position is checkpointed.
            epochs: passes over ``train_data``.
            max_steps: stop after this many steps.
            val_data: an iterable of batches scored by the closure, or a callable
                ``evaluator(model) -> Mapping[str, float]``; logged with the ``val_`` prefix.
            eval_every: steps between evaluations; ``None`` evaluates at each epoch end.
            verbose: show progress as Keras' ``verbose=1`` does (a bar in a terminal, one
                line per epoch elsewhere) unless a callback already does; ``False``: silent.

        Returns the history: one dict of floats per epoch (train means, ``lr``, ``val_``
        values, ``epoch``, ``step``). A KeyboardInterrupt leaves the last whole step's state.
        """
        check_option("fit.epochs", epochs)
        check_option("fit.max_steps", max_steps)
        check_option("fit.eval_every", eval_every)
        if not isinstance(train_data, Iterable):
            raise BeyondfitError("train_data must be an iterable of batches, got "
                                 f"{type(train_data).__name__}")
        if epochs is None and max_steps is None:
            epochs = 1
        if not self._resumed:  # "more", counted from where this engine stands
            epochs = None if epochs is None else self.state.epoch + epochs - (
                1 if self.state.batch_in_epoch else 0)
            max_steps = None if max_steps is None else self.state.global_step + max_steps
        self._resumed = False
        plateau = [u for u in self.updates if u.plateau]
        if plateau and val_data is None:
            raise BeyondfitError(
                "a ReduceLROnPlateau scheduler steps on a validation value: pass val_data, "
                "or use a scheduler that follows the step count"
            )
        # Under DDP this rank's shard (the one place data is sharded), then run-length schedulers.
        self.train_data = train_data = self.strategy.shard_train(train_data)
        for update in [u for u in self.updates if u.needs_run_length]:
            update.schedule_over(planned_steps(train_data, epochs, max_steps, self.accumulate))
        if self._pending_data_state is not None and hasattr(train_data, "load_state_dict"):
            train_data.load_state_dict(self._pending_data_state)
        self._pending_data_state = None
        shows = any(isinstance(cb, ConsoleLogger) for cb in self.callbacks)
        added = None
        if verbose and not shows and self.strategy.is_main:
            added = progress_callback(epochs, bar=verbose if verbose == "auto" else True,
                                      max_steps=max_steps)
            self.callbacks.append(added)
        try:
            with visible_logs() if added is not None else contextlib.nullcontext():
                return self._fit(train_data, epochs, max_steps, val_data, eval_every)
        except KeyboardInterrupt:  # a notebook's "interrupt kernel": keep the last whole step
            self.window.abandon()
            for bar in [c for c in self.callbacks if isinstance(c, ProgressBar)]:
                bar.close()
            raise
        finally:
            if added is not None:
                self.callbacks.remove(added)
            if self.compile_report is not None and self.strategy.is_main:  # once per fit
                log.info("%s", self.compile_report.line())

    def _fit(self, train_data: Any, epochs: int | None, max_steps: int | None, val_data: Any,
             eval_every: int | None) -> list[dict[str, float]]:
        state = self.state
        self.should_stop = False
        self.stopped_by = None
        self.interrupted = None
        step_hooks = [cb for cb in self.callbacks if overrides(cb, "on_step_end")]
        self._emit("on_fit_start")
        if max_steps is not None and state.global_step >= max_steps:
            self.should_stop = True
        end_only = self.take_resumed_stop()  # saved after a stop: only its epoch's end left
        one_shot = isinstance(train_data, Iterator)  # a generator: one pass only
        first_epoch = state.epoch
        while (epochs is None or state.epoch < epochs) and (not self.should_stop or end_only):
            resuming = state.batch_in_epoch > 0
            if not resuming:
                self.train_metrics.reset()
            self._emit("on_epoch_start")
            self.strategy.set_epoch(train_data, state.epoch)  # distributed samplers reshuffle
            batches: Iterable[Any] = train_data
            if end_only or (resuming and state.data_exhausted):
                # Saved after the data ran out (in the final partial window's step): the
                # data source is already at its next pass; only the epoch's end remains.
                batches = ()
            elif resuming and not hasattr(train_data, "load_state_dict"):
                # A plain iterable cannot seek: skip what the interrupted epoch consumed.
                batches = itertools.islice(train_data, state.batch_in_epoch, None)
            if not resuming:
                state.evaluated_at = -1
            state.data_exhausted = False
            for batch in batches:
                before = state.global_step
                self.train_step(batch)  # (a subclass or a test may wrap it)
                state.batch_in_epoch += 1
                if state.global_step == before:
                    continue
                self._after_step(val_data, eval_every, max_steps, step_hooks)
                if self.should_stop:
                    break
            else:
                state.data_exhausted = state.data_exhausted or not end_only
                if self.window.micro and self.window.close():  # cut short by the data's end
                    self._after_step(val_data, eval_every, max_steps, step_hooks)
            if self.interrupted:
                break  # the epoch stays open: resuming continues it mid-way
            if state.batch_in_epoch == 0 and not resuming:
                done = state.epoch - first_epoch
                raise BeyondfitError(no_train_batches(train_data, one_shot, done))
            finished_epoch = not self.should_stop or self._epoch_exhausted()
            logs = self._train_logs()
            if val_data is not None and state.evaluated_at != state.global_step:
                self._run_eval(val_data)  # every history row carries current val_ values
            logs.update(self.last_val)
            logs["epoch"] = float(state.epoch + 1)
            logs["step"] = float(state.global_step)
            if finished_epoch:
                state.epoch += 1
                state.batch_in_epoch = 0
            self.history.append(logs)
            self._emit("on_epoch_end", logs)
            end_only = False
        self._emit("on_fit_end", self.history)
        return self.history

    def _after_step(self, val_data: Any, eval_every: int | None, max_steps: int | None,
                    step_hooks: list[Any]) -> None:
        """After a step: log row, evaluation, step budget, then ``on_step_end``."""
        step = self.state.global_step
        if step % self.log_every == 0:
            self._emit("on_log", self._train_logs())
        if val_data is not None and eval_every and step % eval_every == 0:
            self._run_eval(val_data)
            self.state.evaluated_at = step
        if max_steps is not None and step >= max_steps:
            self.should_stop = True
        # Last, so a checkpoint written here includes this step's log rows.
        for callback in step_hooks:
            callback.on_step_end(self)
        # Under DDP a stop on one rank (a signal, a callback) stops every rank here: one
        # small host-side all-reduce per step, only when there are several ranks.
        if self.strategy.is_distributed:
            self.should_stop, self.interrupted = self.strategy.agree_stop(self.should_stop,
                                                                          self.interrupted)

    def _train_logs(self) -> dict[str, float]:
        """The tracked means, each optimizer's learning rate, and what the training data
        reports about itself: a data source's ``metrics() -> {name: float}`` (a collector's
        ``env_steps``, episode returns); under DDP the names in its ``metric_totals`` are
        summed over ranks, the others averaged."""
        logs = self.train_metrics.compute()
        for update in self.updates:
            logs[update.prefix + "lr"] = update.lr()
        report = getattr(self.train_data, "metrics", None)
        if callable(report):
            totals = getattr(self.train_data, "metric_totals", ())
            logs.update(self.strategy.reduce_report(report(), totals))
        return logs

    def _epoch_exhausted(self) -> bool:  # stopped on the data's last batch: epoch done
        try:
            return self.state.batch_in_epoch >= len(self.train_data)
        except TypeError:
            return False

    def _run_eval(self, val_data: Any) -> None:
        self.last_val = self.evaluate(val_data)
        for update in self.updates:
            if update.plateau:
                update.scheduler.step(update.tracked.read(self.last_val))  # type: ignore[union-attr]
        self._emit("on_eval_end", self.last_val)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, data: Any) -> dict[str, float]:
        """Score the model under ``model.eval()`` and ``torch.inference_mode()``.

        ``data`` is an iterable of batches given to the same loss closure (no gradients,
        no optimizer), or a callable ``evaluator(model) -> Mapping[str, float]``. Every key
        of the result starts with ``val_``; metric objects are reset before and after, and the
        training state of those the closure also feeds in training is restored after.
        """
        return self.evaluation.run(data)

    def test_step(self, batch: Any) -> None:
        """Score one batch as :meth:`train_step` runs it, minus the update, into
        ``val_metrics``; call it under ``model.eval()`` and ``torch.inference_mode()``."""
        self.evaluation.step(batch)

    def _emit(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)
