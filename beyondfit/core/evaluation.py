"""Evaluation: the training closures scored without gradients, or an evaluator callable."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from beyondfit.core.compile.compiled import CompiledUpdate
from beyondfit.core.device import move_to_device
from beyondfit.core.errors import BeyondfitError, no_val_batches
from beyondfit.core.forward import ForwardPath
from beyondfit.core.guards import scores
from beyondfit.core.metrics import MetricTracker
from beyondfit.core.outputs import unpack_output
from beyondfit.core.precision import Precision
from beyondfit.core.strategy import Strategy
from beyondfit.core.update import Update


class EvaluationInterrupted(BaseException):
    """A stop signal came during an evaluation (``GracefulInterrupt`` raises it then, from its
    handler): the evaluation ends where it is, unscored, and the run stops as it does after a
    step, saving what it has. An evaluation changes no training state, so nothing is lost. A
    ``BaseException``, as ``KeyboardInterrupt`` is: code that reports an env's or a user's
    errors (``except Exception``) lets it through."""


class Evaluation:
    """What :meth:`Engine.evaluate <beyondfit.core.engine.Engine.evaluate>` does.

    It shares the engine's closures, forward path, autocast and device, and writes into its
    own :class:`MetricTracker` (``val_metrics``), setting the training one aside meanwhile.
    """

    def __init__(self, updates: Sequence[Update], forward: ForwardPath, precision: Precision,
                 strategy: Strategy, train_metrics: MetricTracker, reducer: Any,
                 device: torch.device, programs: Sequence[CompiledUpdate | None] = ()) -> None:
        self.updates = updates
        # compile=True: each closure compiled for evaluation (its own graphs).
        self.closures = [p.eval_closure if p is not None else u.loss_fn
                         for u, p in zip(updates, list(programs) or [None] * len(updates),
                                         strict=True)]
        self.forward = forward
        self.precision = precision
        self.strategy = strategy
        self.train_metrics = train_metrics
        self.metrics = MetricTracker()
        #: An evaluation is in progress (what a stop signal's handler asks).
        self.running = False
        # Under DDP, the values are reduced over all ranks (a collective at compute time).
        self.metrics.reducer = reducer
        self.device = device
        self.non_blocking = device.type == "cuda"

    def run(self, data: Any) -> dict[str, float]:
        """Score ``data`` (batches, or ``evaluator(model) -> Mapping``): ``val_`` values."""
        model = self.forward.model
        was_training = model.training
        model.eval()
        # Under DDP (every rank calls evaluate): rank 0's buffers, and each rank scores
        # its share of the batches; compute() then reduces over ranks.
        self.strategy.sync_buffers(model)
        # The closure may feed the same metric objects as in training: set their training
        # state aside (a mid-epoch evaluation must neither count training batches nor cut
        # the epoch's running value) and bring it back after. Objects of earlier
        # evaluations start from zero too; only those this evaluation feeds are reported.
        saved = self.train_metrics.set_aside()
        self.metrics.reset()
        self.metrics.objects.clear()
        self.running = True
        try:
            with torch.inference_mode():
                if callable(data) and not isinstance(data, Iterable):
                    with self.precision.autocast():
                        raw = self.strategy.reduce_mapping(scores(data(self.forward.eval_model)))
                else:
                    for batch in self.strategy.shard_eval(data):
                        self.step(batch)
                    raw = self.metrics.compute()
                    if not raw:
                        raise BeyondfitError(no_val_batches(data))
        finally:
            self.running = False
            self.metrics.reset()
            MetricTracker.bring_back(saved)
            model.train(was_training)
        return {(k if k.startswith("val_") else f"val_{k}"): float(v) for k, v in raw.items()}

    def step(self, batch: Any) -> None:
        """One batch through every closure, no gradients, into :attr:`metrics`."""
        batch = move_to_device(batch, self.device, self.non_blocking)
        for update, closure in zip(self.updates, self.closures, strict=True):
            with self.precision.autocast():
                out = closure(self.forward.eval_model, batch)
            logs = unpack_output(out, training=False)[1]
            self.metrics.update({update.prefix + k: v for k, v in logs.items()})
