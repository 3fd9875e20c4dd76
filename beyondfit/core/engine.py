"""The one step engine: every kind of learning goes through :class:`Engine`.

What it is built from and what it offers; the epoch loop is :mod:`beyondfit.core.loop`, one
micro-batch :mod:`beyondfit.core.step`, where a (resumed) run goes on from
:mod:`beyondfit.core.state.position`, and what a checkpoint holds
:mod:`beyondfit.core.state.engine_state`. A *step* here is one engine step: ``accumulate``
micro-batches (calls of the loss closure),
after which every optimizer due in it steps once. ``global_step``, ``max_steps``,
``log_every``, ``eval_every`` and schedulers count steps, never micro-batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from beyondfit.core import guards
from beyondfit.core.callbacks import Callback
from beyondfit.core.compile.compiled import compile_steps
from beyondfit.core.console import fit_progress
from beyondfit.core.evaluation import Evaluation
from beyondfit.core.forward import ForwardPath
from beyondfit.core.loop import EpochLoop
from beyondfit.core.metrics import MetricTracker
from beyondfit.core.nonfinite import NonFiniteCheck
from beyondfit.core.options import check_option
from beyondfit.core.precision import Precision
from beyondfit.core.schedules import planned_steps
from beyondfit.core.state.engine_state import Checkpointable
from beyondfit.core.state.position import Counter, RunPosition
from beyondfit.core.step import Window
from beyondfit.core.strategy import Strategy, resolve
from beyondfit.core.update import OnlyUpdate, Update, build_updates, check_disjoint

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
            ``scheduler``, ``clip_norm``, ``clip_value`` are then the defaults of the Updates
            that set none of their own (an optimizer or scheduler factory, called per Update).
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
            (:mod:`beyondfit.core.compile.compiled`: close to the eager numbers, not bitwise);
            ``"max"`` adds CUDA graphs on a GPU, to the evaluation closures (a training
            step writes weights in place, which CUDA graphs refuse). What cannot be compiled
            runs eagerly, said once; the graphs built are counted in one line at the end of
            ``fit``.
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
        self.strategy = resolve(strategy)  # names: by the resolver the layer above set
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
            self.strategy, self.device)  # core/compile/compiled.py; under DDP only the forward:
        self.forward = ForwardPath(self.model, self.strategy, self.compile_report is not None
                                   and self.strategy.is_distributed, wrapped=self._single)

        self.train_metrics = MetricTracker()
        # Under DDP, logged values are reduced over all ranks (a collective at compute time).
        reducer = self.train_metrics.reducer = self.strategy.metric_reducer()
        # The counters (all saved in checkpoints) and how the next fit goes on: resume.
        self.position = RunPosition()
        self.state = self.position.counters
        # The step: micro-batches in, optimizer steps out (core/step.py).
        self.window = Window(updates, self.accumulate, self.forward, self.precision,
                             self.strategy, check, self.train_metrics, self.state, self.device,
                             programs)
        self.evaluation = Evaluation(updates, self.forward, self.precision, self.strategy,
                                     self.train_metrics, reducer, self.device, programs)
        self.val_metrics = self.evaluation.metrics
        self.should_stop = False
        self.stopped_by: str | None = None
        # Set (to e.g. "SIGINT") by a callback that must stop *now*: fit then leaves the
        # epoch open (no partial-epoch row, no evaluation), so a checkpoint taken in
        # on_fit_end resumes mid-epoch exactly where the run stopped.
        self.interrupted: str | None = None
        self.history: list[dict[str, float]] = []
        self.last_val: dict[str, float] = {}
        self.train_data: Any = None

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
        guards.fit_arguments(train_data, val_data, self.updates)
        epochs, max_steps = self.position.targets(epochs, max_steps)  # totals from the start
        # Under DDP this rank's shard (the one place data is sharded), then run-length schedulers.
        self.train_data = train_data = self.strategy.shard_train(train_data)
        for update in [u for u in self.updates if u.needs_run_length]:
            update.schedule_over(planned_steps(train_data, epochs, max_steps, self.accumulate))
        self.position.attach(train_data)  # a loaded checkpoint's data position
        try:
            with fit_progress(self.callbacks, verbose, epochs, max_steps, self.strategy.is_main):
                return EpochLoop(self, max_steps, val_data, eval_every).run(train_data, epochs)
        except KeyboardInterrupt:  # a notebook's "interrupt kernel": keep the last whole step
            self.window.abandon()
            raise
        finally:
            if self.compile_report is not None and self.strategy.is_main:  # once per fit
                log.info("%s", self.compile_report.line())

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
