"""The task contract: what a task builder returns. A model, data and a loss closure — never a loop.

A *task builder* is any function that returns a :class:`Task`; the command line calls the one a
task config names (``task._target_: mymod.build``) with the other keys of ``task`` as keyword
arguments, and trains what it returns through the one engine, with every feature of the command
line (sweeps, checkpoints and ``resume=``, logs, plots, ``python -m beyondfit.compare``). The
built-in tasks (:mod:`beyondfit.tasks.regression`, :mod:`~beyondfit.tasks.autoencoder`,
:mod:`~beyondfit.tasks.policy_gradient`) are builders like any other: nothing private.

A minimal one, in ``mymod.py`` beside ``conf/task/mine.yaml``::

    import torch
    from beyondfit import Task, TensorBatches

    def build(seed: int = 0, hidden: int = 32, batch_size: int = 64) -> Task:
        x = torch.randn(512, 3, generator=torch.Generator().manual_seed(seed))
        y = x.sum(1, keepdim=True)
        model = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(hidden, 1))

        def loss_fn(model, batch):
            features, target = batch
            return torch.nn.functional.mse_loss(model(features), target)

        return Task(model=model, loss_fn=loss_fn,
                    train_data=TensorBatches(x[:400], y[:400], batch_size=batch_size, seed=seed),
                    val_data=[(x[400:], y[400:])])

Run it with ``python -m beyondfit --config-dir conf +task=mine`` (``python -m beyondfit.new NAME``
writes such a starting point).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.update import Update

if TYPE_CHECKING:
    from beyondfit.core.callbacks import Callback
    from beyondfit.core.engine import Engine

#: An evaluator scores a model without a loss closure (e.g. greedy RL episodes):
#: ``evaluator(model) -> {"val_return": ..., ...}``; the names it returns are logged as they are.
Evaluator = Callable[[nn.Module], Mapping[str, float]]


@dataclass
class Task:
    """Everything the command line needs to train one task through the shared engine.

    The engine moves ``model`` to the device, builds the optimizer (``optimizer`` config group)
    over its trainable parameters, and calls ``loss_fn(model, batch)`` for every batch of
    ``train_data``; evaluation calls it under ``model.eval()`` and ``torch.inference_mode`` for
    every batch of ``val_data`` and logs its terms with a ``val_`` prefix.

    Attributes:
        model: the ``torch.nn.Module`` to train (its state is what checkpoints save).
        loss_fn: the closure ``loss_fn(model, batch)``: a scalar tensor, or a mapping with
            ``"loss"`` (differentiated) and other scalars (logged as per-epoch means). Use the
            ``model`` argument, not a captured one: the engine may have wrapped it (DDP, compile).
            Or a list of :class:`~beyondfit.core.update.Update`: several optimizers (SAC's
            critic, actor and temperature); one without an optimizer of its own is built by
            the command line from the ``optimizer`` group.
        train_data: any iterable of batches, iterated once per epoch (``train.epochs``): a
            list, a ``DataLoader``, :class:`~beyondfit.TensorBatches`, a rollout collector.
            Batches may be tensors or any nesting of tuples, lists, dicts or dataclasses of them.
            With ``len()``, schedulers and progress bars know the run's length. With
            ``state_dict()``/``load_state_dict()`` (as ``TensorBatches`` has), ``resume=``
            continues mid-epoch exactly.
        val_data: an iterable of batches scored with ``loss_fn`` (``val_loss`` ...), or an
            :data:`Evaluator` called with the model; ``None``: no evaluation.
        eval_every: optimizer steps between evaluations; ``None`` evaluates at each epoch end.
            The ``train.eval_every`` config key, when set, wins over this.
        finish: called once after training (on rank 0) with the engine and the run directory;
            it may save artifacts there and returns the report lines to print (baselines,
            where things were written) or ``None``. Close what the task opened (envs) here.
        callbacks: engine callbacks the task needs besides the command line's own (early
            stopping, the RL tasks' schedules over env steps); they run on every rank, before
            the checkpointer, so a final checkpoint holds what they leave (restored weights).
        refit_data: batches of the training and validation rows together, or ``None``. When
            given and early stopping (among ``callbacks``) chose a best epoch, the command line
            then trains the model again from its initial weights on these, for that many
            epochs, with the run's optimizer, scheduler and engine settings
            (:mod:`beyondfit.cli.refit`): the run ends with that model, saved as
            ``RUN_DIR/refit.pt``. The validation rows chose the epoch count and then train
            too, so a small table loses no rows to validation.
    """

    model: nn.Module
    loss_fn: Callable[[nn.Module, Any], Any] | list[Update]
    train_data: Iterable[Any]
    val_data: Iterable[Any] | Evaluator | None = None
    eval_every: int | None = None
    finish: Callable[[Engine, Path], list[str] | None] | None = None
    callbacks: list[Callback] = field(default_factory=list)
    refit_data: Iterable[Any] | None = None

    def check(self, what: str = "the Task's") -> None:
        """Raise :class:`BeyondfitError` naming the first field of the wrong kind.

        ``what`` starts the message, e.g. ``"task._target_='mymod.build' returned a Task whose"``.
        """
        problems = [
            ("model", isinstance(self.model, nn.Module), "a torch.nn.Module"),
            ("loss_fn", callable(self.loss_fn) or _updates(self.loss_fn),
             "a function loss_fn(model, batch) or a list of Update"),
            ("train_data", _iterable(self.train_data), "an iterable of batches"),
            ("val_data", self.val_data is None or callable(self.val_data)
             or _iterable(self.val_data), "an iterable of batches, an evaluator or None"),
            ("eval_every", self.eval_every is None or (isinstance(self.eval_every, int)
             and not isinstance(self.eval_every, bool) and self.eval_every > 0),
             "a positive number of optimizer steps or None"),
            ("finish", self.finish is None or callable(self.finish),
             "a function finish(engine, run_dir) or None"),
            ("refit_data", self.refit_data is None or _iterable(self.refit_data),
             "an iterable of batches or None"),
        ]
        for name, ok, wanted in problems:
            if not ok:
                value = getattr(self, name)
                raise BeyondfitError(f"{what} {name} is {type(value).__name__}, not {wanted}")
        if self.refit_data is not None and _updates(self.loss_fn):
            # Each Update keeps the optimizer it built over the first model's parameters.
            raise BeyondfitError(f"{what} refit_data is given with a list of Update as loss_fn; "
                                 "a refit trains a loss_fn(model, batch) function only: give one, "
                                 "or refit_data=None")


def _updates(loss_fn: Any) -> bool:
    return isinstance(loss_fn, list | tuple) and bool(loss_fn) and all(
        isinstance(u, Update) for u in loss_fn)


def _iterable(value: Any) -> bool:
    # Without calling iter(): a DataLoader would start its worker processes.
    if isinstance(value, str | bytes):
        return False
    return hasattr(type(value), "__iter__") or hasattr(type(value), "__getitem__")
