"""Supervised regression: an MLP beside a linear path, fit with MSE to diabetes or the user's table.

Defaults that adapt to the table instead of being tuned on one: two hidden layers sized by
the number of training rows, a batch size that keeps an epoch a few dozen steps, the linear
path started at the least-squares solution (so training starts from the baseline the report
compares with), light decoupled weight decay, a cosine learning-rate decay over the epoch
budget, and early stopping on the validation loss that restores the best weights. Text
columns are one-hot encoded and missing cells imputed (:mod:`beyondfit.data.encoding`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from beyondfit import Task
from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.data import split
from beyondfit.data.bundled import diabetes
from beyondfit.data.tables import Table
from beyondfit.tasks.supervised import (
    DEFAULT_EARLY_STOPPING,
    prepare_features,
    read_source,
    refuse_missing_target,
    table_net,
    table_task,
)


def build(
    seed: int = 0,
    hidden: Sequence[int] | int | str = "auto",
    dropout: float = 0.0,
    wide: bool = True,
    batch_size: int | str = "auto",
    val_fraction: float = 0.2,
    early_stopping: Mapping[str, Any] | None = DEFAULT_EARLY_STOPPING,
    data: Mapping[str, Any] | None = None,
) -> Task:
    """Build the regression task.

    Args:
        seed: seeds the split, the weights and the batch order.
        hidden: hidden layer widths of the MLP, or ``"auto"`` (by training rows).
        dropout: dropout after each hidden layer.
        wide: add a linear path beside the MLP (:class:`~beyondfit.nets.WideAndDeep`),
            started at the least-squares fit of the training rows.
        batch_size: training rows per step, or ``"auto"`` (by training rows).
        val_fraction: share of rows held out for validation.
        early_stopping: :class:`~beyondfit.EarlyStopping` options (monitor ``val_loss``
            unless given), or ``None`` to train every epoch.
        data: ``{"path": file.csv|file.npz, "target": COLUMN, "missing": impute|refuse}``;
            default: diabetes.
    """
    table = read_source(data, "diabetes", diabetes)
    missing = str(dict(data or {}).get("missing") or "impute")
    y = regression_target(table)
    train_idx, val_idx = split(len(table), val_fraction, seed)
    if np.ptp(y[train_idx.numpy()], axis=0).max() == 0:
        raise table.error(
            f"target {table.target.name!r} is constant over the training rows; nothing to learn"
        )
    features = prepare_features(table, train_idx, val_idx, missing)
    y_all = torch.from_numpy(y)
    # Standardize with training statistics only: nothing about the validation rows leaks in.
    y_mean, y_std = y_all[train_idx].mean(0), y_all[train_idx].std(0).clamp_min(1e-8)
    y_all = (y_all - y_mean) / y_std
    x_train, x_val = features.train, features.val
    y_train, y_val = y_all[train_idx], y_all[val_idx]
    val_variance = y_val.var(0, unbiased=False).clamp_min(1e-12)
    features.extra = {"target": table.target.name, "target_mean": y_mean.tolist(),
                      "target_std": y_std.tolist()}

    model = table_net(x_train, y_train.shape[1], hidden=hidden, batch_size=batch_size,
                      dropout=dropout, wide=wide)
    start_logs = None
    if wide:
        least_squares_init(model.linear, x_train, y_train)
        # The MLP path starts at zero, so the model starts as least squares: early stopping
        # keeps those weights unless an epoch does better on the validation rows.
        with torch.no_grad():
            error = ((model.eval()(x_val) - y_val) ** 2).mean(0)
        model.train()
        start_logs = {"val_loss": float(error.mean()),
                      "val_r2": float((1.0 - error / val_variance).mean())}

    def loss_fn(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Any:
        features, target = batch
        prediction = model(features)
        mse = F.mse_loss(prediction, target)
        if model.training:
            return mse
        # Evaluation sees the whole split as one batch, so this is the exact R² (averaged
        # over outputs when there are several). The variance is the task's tensor: it goes
        # where the engine put the model and the batch (CUDA), as the closure cannot know.
        variance = val_variance.to(prediction.device)
        r2 = 1.0 - ((prediction - target) ** 2).mean(0) / variance
        return {"loss": mse, "r2": r2.mean()}

    def summary(engine: Engine) -> str:
        ols = least_squares_r2(x_train, y_train, x_val, y_val)
        r2 = engine.last_val.get("val_r2", float("nan"))
        return f"validation R2: model {r2:.4f} | ordinary least squares {ols:.4f} (same split)"

    return table_task(model, loss_fn, features, (y_train, y_val), batch_size=batch_size,
                      seed=seed, early_stopping=early_stopping, start_logs=start_logs,
                      summary=summary)


def regression_target(table: Table) -> np.ndarray:
    """The target as float32 ``(n, k)``; text, missing or constant targets are errors."""
    target = table.target
    if not target.numeric:
        first = next(i for i, v in enumerate(target.values) if v is not None)
        raise table.error(
            f"target {target.name!r} holds text ({target.values[first]!r} at "
            f"{table.where(first)}); regression needs numbers, for labels use "
            "+task=classification"
        )
    refuse_missing_target(table)
    y = target.values.reshape(len(table), -1)
    if np.ptp(y, axis=0).max() == 0:
        raise table.error(
            f"target {target.name!r} has the same value ({y[0, 0]:g}) in every row; there is "
            "nothing to learn, pick another target column"
        )
    return y.astype(np.float32)


def least_squares_init(linear: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor) -> None:
    """Set ``linear`` to the least-squares fit of ``y`` on ``x`` (a tiny ridge keeps it stable)."""
    a = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
    ridge = 1e-6 * len(x) * torch.eye(a.shape[1], dtype=torch.float64)
    ridge[-1, -1] = 0.0  # the intercept is not shrunk
    coef = torch.linalg.solve(a.T @ a + ridge, a.T @ y.double())
    with torch.no_grad():
        linear.weight.copy_(coef[:-1].T.float())
        linear.bias.copy_(coef[-1].float())


def least_squares_r2(
    x_train: torch.Tensor, y_train: torch.Tensor, x_val: torch.Tensor, y_val: torch.Tensor
) -> float:
    """Validation R² of ordinary least squares (with intercept) fit on the training rows."""
    if len(x_train) <= x_train.shape[1]:
        raise BeyondfitError("too few training rows for the least-squares baseline")
    a = np.hstack([x_train.numpy(), np.ones((len(x_train), 1), np.float32)]).astype(np.float64)
    coef, *_ = np.linalg.lstsq(a, y_train.numpy().astype(np.float64), rcond=None)
    b = np.hstack([x_val.numpy(), np.ones((len(x_val), 1))])
    residual = ((b @ coef - y_val.numpy()) ** 2).sum(0)
    total = ((y_val.numpy() - y_val.numpy().mean(0)) ** 2).sum(0)
    return float((1.0 - residual / np.maximum(total, 1e-12)).mean())
