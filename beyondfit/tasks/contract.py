"""What a task module builds: a model, data and a loss closure — never a loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:
    from beyondfit.core.callbacks import Callback
    from beyondfit.core.engine import Engine

#: An evaluator scores a model without a loss closure (e.g. greedy RL episodes).
Evaluator = Callable[[nn.Module], Mapping[str, float]]


@dataclass
class Task:
    """Everything the command line needs to train one task through the shared engine.

    Attributes:
        model: the module to train.
        loss_fn: the closure ``loss_fn(model, batch)``: a scalar, or a mapping with ``"loss"``.
        train_data: any iterable of batches (a loader, a list, a rollout collector).
        val_data: an iterable of batches scored with ``loss_fn``, or an :data:`Evaluator`.
        eval_every: optimizer steps between evaluations; ``None`` evaluates at each epoch end.
            The ``train.eval_every`` config key, when set, wins over this.
        finish: called once after training with the engine and the run directory; returns the
            report lines to print (baselines, artifacts written) or ``None``.
        callbacks: engine callbacks the task needs besides the command line's own (e.g. the
            RL tasks' schedules over env steps); they run on every rank.
    """

    model: nn.Module
    loss_fn: Callable[[nn.Module, Any], Any]
    train_data: Iterable[Any]
    val_data: Iterable[Any] | Evaluator | None = None
    eval_every: int | None = None
    finish: Callable[[Engine, Path], list[str] | None] | None = None
    callbacks: list[Callback] = field(default_factory=list)
