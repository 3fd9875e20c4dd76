"""Supervised classification: an MLP beside a linear path, cross-entropy, on digits or a user table.

Labels are integers or strings in the target column (``task.data.target``); their names are
kept and used in the report. Accuracy and macro-F1 are torchmetrics objects, logged as
``val_accuracy`` and ``val_f1``. The report prints the validation accuracy beside scikit-learn's
logistic regression on the same split and inputs, and writes ``confusion_matrix.csv`` and
``confusion_matrix.png`` (matplotlib optional). The split is stratified: every class keeps its
share in both parts. Inputs, sizes and early stopping are the regression task's
(:mod:`beyondfit.tasks.supervised`), with the differences that nonlinear tables with
thresholds and uninformative columns need (``bench/tabular.py``'s generated tables): the MLP
path reads each numeric input also as a piecewise-linear code over its training quantiles
(:class:`~beyondfit.nets.PiecewiseLinear`), eight such networks with dropout 0.2 are trained
side by side and their probabilities averaged (:class:`~beyondfit.nets.EnsembleClassifier`),
training uses label smoothing, early stopping waits 20 epochs, and once it has chosen the epoch
count the ensemble is trained again on the training and validation rows together
(:mod:`beyondfit.cli.refit`; ``task.refit``).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from beyondfit import Task
from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.data.bundled import digits
from beyondfit.data.tables import Table, printable
from beyondfit.nets import PiecewiseLinear
from beyondfit.observers.plots import skipped_without_matplotlib
from beyondfit.tasks.supervised import (
    prepare_features,
    read_source,
    refuse_missing_target,
    table_net,
    table_task,
)

#: Early stopping when the task is built without saying (the yaml says the same): more
#: patience than regression's, since label smoothing makes val_loss settle slower.
CLASSIFICATION_EARLY_STOPPING: Mapping[str, Any] = MappingProxyType({"patience": 20})

_NEEDS_TORCHMETRICS = (
    "the classification task computes accuracy and F1 with torchmetrics, which is not "
    "installed; pip install \"beyondfit[metrics]\" (or pip install torchmetrics)"
)


def build(
    seed: int = 0,
    hidden: Sequence[int] | int | str = "auto",
    dropout: float = 0.2,
    wide: bool = True,
    batch_size: int | str = "auto",
    val_fraction: float = 0.2,
    early_stopping: Mapping[str, Any] | None = CLASSIFICATION_EARLY_STOPPING,
    data: Mapping[str, Any] | None = None,
    bins: int | str | None = "auto",
    label_smoothing: float = 0.1,
    members: int = 8,
    refit: bool = True,
) -> Task:
    """Build the classification task.

    Args:
        seed: seeds the split, the weights and the batch order.
        hidden: hidden layer widths of the MLP, or ``"auto"`` (by training rows).
        dropout: dropout after each hidden layer.
        wide: add a linear path (multinomial logistic regression) beside the MLP.
        batch_size: training rows per step, or ``"auto"`` (by training rows).
        val_fraction: share of each class held out for validation.
        early_stopping: :class:`~beyondfit.EarlyStopping` options (monitor ``val_loss``
            unless given), or ``None`` to train every epoch.
        data: ``{"path": file.csv|file.npz, "target": COLUMN, "missing": impute|refuse}``;
            default: scikit-learn's 8x8 digits.
        bins: the MLP reads each numeric input also as a piecewise-linear code over this many
            bins of its training quantiles (:class:`~beyondfit.nets.PiecewiseLinear`), which
            lets it draw thresholds; ``"auto"``: by training rows (:func:`auto_bins`);
            ``None``: the standardized inputs only.
        label_smoothing: cross-entropy's label smoothing while training (validation loss is
            the plain cross-entropy).
        members: train this many networks side by side from their own initial weights and
            average their class probabilities (:class:`~beyondfit.nets.EnsembleClassifier`);
            each member's own cross-entropy is trained, the ensemble is validated. 1: one
            network.
        refit: once early stopping has chosen the epoch count, train the model again from
            its initial weights on the training and validation rows together for that many
            epochs (:mod:`beyondfit.cli.refit`); the run ends with that model. The report's
            validation figures stay the chosen epoch's.
    """
    table = read_source(data, "digits", digits)
    missing = str(dict(data or {}).get("missing") or "impute")
    labels, classes = class_labels(table)
    train_idx, val_idx = stratified_split(labels, val_fraction, seed)
    features = prepare_features(table, train_idx, val_idx, missing)
    try:  # after the table checks: a bad table is refused without this import's seconds
        from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score
    except ImportError:
        raise BeyondfitError(_NEEDS_TORCHMETRICS) from None
    features.extra = {"target": table.target.name, "classes": classes}
    y = torch.from_numpy(labels)
    x_train, x_val, y_train, y_val = features.train, features.val, y[train_idx], y[val_idx]

    n_classes = len(classes)
    bins = auto_bins(bins, len(x_train))
    check_number("task.label_smoothing", label_smoothing, at_least=0.0, at_most=0.9,
                 example="task.label_smoothing=0.1")
    check_number("task.members", members, integer=True, at_least=1, at_most=256,
                 example="task.members=8")
    encoder = None if bins is None else PiecewiseLinear(x_train, int(bins))
    model = table_net(x_train, n_classes, hidden=hidden, batch_size=batch_size,
                      dropout=dropout, wide=wide, encoder=encoder, members=int(members))
    accuracy = MulticlassAccuracy(num_classes=n_classes, average="micro")
    f1 = MulticlassF1Score(num_classes=n_classes, average="macro")

    def loss_fn(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Any:
        inputs, target = batch
        logits = model(inputs)
        if model.training:
            if logits.dim() == 3:  # an ensemble's members, (rows, members, classes): each
                # member's own loss, averaged (the ensemble's output is for evaluation only)
                logits, target = logits.flatten(0, 1), target.repeat_interleave(logits.shape[1])
            return F.cross_entropy(logits, target, label_smoothing=label_smoothing)
        loss = F.cross_entropy(logits, target)
        for metric in (accuracy, f1):
            if metric.device != logits.device:  # once: metrics start on the CPU
                metric.to(logits.device)
            metric.update(logits, target)
        return {"loss": loss, "accuracy": accuracy, "f1": f1}

    def summary(engine: Engine) -> str:
        acc = engine.last_val.get("val_accuracy", float("nan"))
        macro_f1 = engine.last_val.get("val_f1", float("nan"))
        baseline = logistic_regression_accuracy(x_train, y_train, x_val, y_val)
        return (f"validation accuracy: model {acc:.4f} | logistic regression {baseline} "
                f"(same split, {len(y_val)} rows); macro-F1 {macro_f1:.4f}")

    def details(engine: Engine, run_dir: Path) -> list[str]:
        with torch.inference_mode():
            engine.model.eval()
            predicted = engine.model(x_val.to(engine.device)).argmax(1).cpu().numpy()
        matrix = confusion_matrix(y_val.numpy(), predicted, n_classes)
        recall = matrix.diagonal() / np.maximum(matrix.sum(1), 1)
        shown = ", ".join(f"{printable(name)} {r:.2f}"  # labels come from the user's file
                          for name, r in list(zip(classes, recall))[:20])
        more = f", ... ({n_classes} classes)" if n_classes > 20 else ""
        return [f"per-class validation recall: {shown}{more}",
                *save_confusion_matrix(run_dir, matrix, classes)]

    if not isinstance(refit, bool):
        raise BeyondfitError(f"task.refit={refit!r}; give true or false")
    return table_task(model, loss_fn, features, (y_train, y_val), batch_size=batch_size,
                      seed=seed, early_stopping=early_stopping, summary=summary, details=details,
                      refit=refit)


def auto_bins(bins: int | str | None, n_train: int) -> int | None:
    """``task.bins`` as a number (or ``None``); ``"auto"``: 8 bins under 4,000 training rows,
    16 under 8,000, 32 beyond.

    Each bin's weights are learned from the rows that fall in it: on a small table a fine code
    of the columns that carry no signal is noise the MLP fits (issue 47's generated tables:
    32 bins on 1,280 training rows lost 0.07 accuracy to 8), while a large table needs the
    fine code to place its thresholds (thresholds15000, 9,600 rows: 32 bins 0.905, 8 bins
    with two layers of 256 and dropout 0.3 0.841). bench/results/tabular-issue47.md has the
    runs.
    """
    if bins == "auto":
        return 8 if n_train < 4000 else 16 if n_train < 8000 else 32
    check_number("task.bins", bins, integer=True, at_least=2, allow_none=True,
                 example="task.bins=32, task.bins=auto or task.bins=null")
    return None if bins is None else int(bins)


def class_labels(table: Table) -> tuple[np.ndarray, list[str]]:
    """Class indices (int64) and class names (sorted) of the target column.

    Numbers must be whole (``3``, ``3.0``); text labels are taken as they are. A missing
    label, a single class, or a class with one row is an error naming it.
    """
    target = table.target
    refuse_missing_target(table)
    if target.values.ndim != 1:
        raise table.error("has a 2-D target; classification needs one label per row")
    if target.numeric:
        values = target.values
        fractional = np.nonzero(values != np.round(values))[0]
        if len(fractional):
            i = int(fractional[0])
            raise table.error(
                f"target {target.name!r} holds {values[i]:g} at {table.where(i)}, not a whole "
                "number; class labels are whole numbers or text (for numbers, +task=regression)"
            )
        keys, labels = np.unique(values, return_inverse=True)
        names = [f"{k:g}" for k in keys]
    else:
        keys, labels = np.unique(target.values.astype(str), return_inverse=True)
        names = [str(k) for k in keys]
    if len(names) < 2:
        raise table.error(
            f"target {target.name!r} has one class ({names[0]!r}) in all {len(labels)} rows; "
            "a classifier needs at least two"
        )
    counts = np.bincount(labels, minlength=len(names))
    once = np.nonzero(counts == 1)[0]
    if len(once):
        row = int(np.nonzero(labels == once[0])[0][0])
        raise table.error(
            f"target {target.name!r} has class {names[once[0]]!r} only once (at "
            f"{table.where(row)}; {len(once)} such class(es)); every class needs at least two "
            "rows, one to train on and one to validate: add rows or drop the class"
        )
    return labels.astype(np.int64), names


def stratified_split(
    labels: np.ndarray, val_fraction: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded train/validation split keeping each class's share; each class in both parts."""
    if not 0.0 < val_fraction < 1.0:
        raise BeyondfitError(
            f"val_fraction={val_fraction!r}; it must be strictly between 0 and 1 (e.g. 0.2)"
        )
    generator = torch.Generator().manual_seed(int(seed))
    train: list[torch.Tensor] = []
    val: list[torch.Tensor] = []
    for c in range(int(labels.max()) + 1):
        rows = torch.from_numpy(np.nonzero(labels == c)[0])
        rows = rows[torch.randperm(len(rows), generator=generator)]
        n_val = min(max(1, round(len(rows) * val_fraction)), len(rows) - 1)
        val.append(rows[:n_val])
        train.append(rows[n_val:])
    # One permutation of each part, so batches do not come class by class.
    train_idx, val_idx = torch.cat(train), torch.cat(val)
    return (train_idx[torch.randperm(len(train_idx), generator=generator)],
            val_idx[torch.randperm(len(val_idx), generator=generator)])


def logistic_regression_accuracy(
    x_train: torch.Tensor, y_train: torch.Tensor, x_val: torch.Tensor, y_val: torch.Tensor
) -> str:
    """Validation accuracy of scikit-learn's ``LogisticRegression`` (its defaults), formatted.

    scikit-learn is imported here only, after training: the training path never loads it.
    """
    try:
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        return "n/a (scikit-learn is not installed)"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a convergence warning at max_iter is no news here
        model = LogisticRegression(max_iter=1000).fit(x_train.numpy(), y_train.numpy())
    return f"{float((model.predict(x_val.numpy()) == y_val.numpy()).mean()):.4f}"


def confusion_matrix(target: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """Counts: row = true class, column = predicted class."""
    flat = target.astype(np.int64) * n_classes + predicted.astype(np.int64)
    return np.bincount(flat, minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def save_confusion_matrix(run_dir: Path, matrix: np.ndarray, classes: list[str]) -> list[str]:
    """``confusion_matrix.csv`` always, ``confusion_matrix.png`` with matplotlib; report lines."""
    run_dir = Path(run_dir)
    table_path = run_dir / "confusion_matrix.csv"
    with table_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["true \\ predicted", *classes])
        for name, row in zip(classes, matrix):
            writer.writerow([name, *row.tolist()])
    png = run_dir / "confusion_matrix.png"
    try:
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state
    except ImportError:
        skipped_without_matplotlib(png.name)
        return [f"confusion matrix: {table_path}"]
    n = len(classes)
    size = min(12.0, 2.5 + 0.45 * n)
    fig = Figure(figsize=(size, size * 0.9), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(matrix, cmap="Blues", interpolation="nearest")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ticks = range(n)
    names = [printable(c, limit=12) for c in classes]  # no control characters in the figure
    ax.set_xticks(ticks, names, rotation=45 if n > 6 else 0, ha="right")
    ax.set_yticks(ticks, names)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if n <= 30:  # counts in the cells while they are readable
        threshold = matrix.max() / 2 if matrix.size else 0
        for (i, j), count in np.ndenumerate(matrix):
            ax.text(j, i, str(count), ha="center", va="center", fontsize=8,
                    color="white" if count > threshold else "black")
    accuracy = matrix.trace() / max(matrix.sum(), 1)
    ax.set_title(f"validation confusion matrix (accuracy {accuracy:.3f})")
    fig.tight_layout()
    fig.savefig(png)
    return [f"confusion matrix: {png} (counts in {table_path.name})"]

