"""Refit: once early stopping has chosen how long to train, train again on every row.

Early stopping holds rows out to choose the epoch count; on a small table those rows are a
fifth of what the model could learn from (issue 47's generated tables: 768 of 960 rows left to
train on). A task that gives :attr:`~beyondfit.Task.refit_data` (the training and validation
rows together) gets, after the run, the model trained again from the very initial weights it
started from, on all of them, for the epochs early stopping chose, with the run's optimizer,
scheduler and engine settings: AutoGluon's ``refit_full``, and what scikit-learn's estimators
do by not holding rows out at all. The run then ends with that model.

What it does not change: the checkpoints are the chosen run's (``resume=`` works on them as
ever), and the validation figures the run prints and records are the chosen epoch's, on rows
the refit model has since trained on (they chose the epoch count; its own score on unseen rows
is what ``bench/tabular.py`` measures). The refit writes ``RUN_DIR/refit.pt`` (an engine
checkpoint: its ``"model"`` entry holds the weights) before ``result.json``, so a run killed
during the refit has no result and ``resume=RUN_DIR`` refits again, to the same weights: the
refit depends on nothing but the finished run and the seed.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig

from beyondfit.cli.builders import build_engine
from beyondfit.core.early_stopping import EarlyStopping

if TYPE_CHECKING:
    from beyondfit.tasks.contract import Task

log = logging.getLogger("beyondfit")

#: The refit model's file in the run directory.
REFIT_FILE = "refit.pt"


def initial_weights(task: Task) -> dict[str, torch.Tensor] | None:
    """A copy of the task's model weights as built (before any training or resume), when the
    task asks for a refit; ``None`` otherwise (nothing kept)."""
    if task.refit_data is None:
        return None
    return {k: v.detach().clone() for k, v in task.model.state_dict().items()}


def chosen_epochs(callbacks: Sequence[Any]) -> int | None:
    """The epoch count early stopping chose: the best epoch of the task's
    :class:`~beyondfit.EarlyStopping` whose weights it restored; ``None`` when none chose one
    (no early stopping, or no epoch beat the starting weights)."""
    for callback in callbacks:
        if isinstance(callback, EarlyStopping) and callback.restored and callback.best_epoch > 0:
            return int(callback.best_epoch)
    return None


def refit(
    task: Task, cfg: DictConfig, run_dir: Path, initial: Mapping[str, torch.Tensor] | None,
    world_size: int = 1,
) -> dict[str, Any] | None:
    """Train ``task.model`` again from ``initial`` on ``task.refit_data`` for the epochs early
    stopping chose, and leave those weights in ``task.model``.

    Returns what the run's record adds (``{"refit": {...}}``), or ``None`` when the task asks
    for no refit. When nothing chose an epoch count, or under several processes, the model
    stays the chosen run's and a line says why.
    """
    if task.refit_data is None or initial is None:
        return None
    epochs = chosen_epochs(task.callbacks)
    if epochs is None:
        log.info("refit: skipped, no epoch count was chosen (early stopping off, or no epoch "
                 "beat the starting weights); the model is the run's own")
        return {"refit": None}
    if world_size > 1:
        log.info("refit: skipped under %d processes (it runs in one); the model is the run's "
                 "restored best", world_size)
        return {"refit": None}
    model = copy.deepcopy(task.model)
    model.load_state_dict(initial)
    engine = build_engine(cfg, model, task.loss_fn)
    # Its own random stream from the seed: the same refit whether the run was resumed or not.
    with torch.random.fork_rng(devices=_cuda_devices(engine.device)):
        torch.manual_seed(int(cfg.seed))
        engine.fit(task.refit_data, epochs=epochs, verbose=False)
    path = engine.save(Path(run_dir) / REFIT_FILE)
    task.model.load_state_dict(model.state_dict())
    rows = _rows(task.refit_data)
    log.info("refit: trained again from the initial weights on the training and validation "
             "rows together%s for the %d epochs early stopping chose (%d optimizer steps); "
             "the model is now that one, saved in %s",
             f" ({rows:,})" if rows else "", epochs, engine.global_step, path)
    return {"refit": {"epochs": epochs, "steps": int(engine.global_step), "rows": rows,
                      "file": REFIT_FILE}}


def _cuda_devices(device: torch.device) -> list[int]:
    """The CUDA device whose generator the refit forks (none on other devices)."""
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def _rows(data: Any) -> int | None:
    """Rows of a :class:`~beyondfit.TensorBatches` (its first tensor), else ``None``."""
    tensors = getattr(data, "tensors", None)
    if isinstance(tensors, Sequence) and tensors and isinstance(tensors[0], torch.Tensor):
        return int(tensors[0].shape[0])
    return None
