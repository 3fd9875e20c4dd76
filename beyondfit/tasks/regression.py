"""Supervised regression: an MLP fit with MSE to diabetes, or to the user's own table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.data import TensorBatches, load_table, split
from beyondfit.data.bundled import diabetes
from beyondfit.nets import WideAndDeep, mlp
from beyondfit.tasks import Task


def build(
    seed: int = 0,
    hidden: Sequence[int] = (16,),
    dropout: float = 0.3,
    wide: bool = True,
    batch_size: int = 32,
    val_fraction: float = 0.2,
    data: Mapping[str, Any] | None = None,
) -> Task:
    """Build the regression task.

    Args:
        seed: seeds the split, the weights and the batch order.
        hidden: hidden layer widths of the MLP.
        dropout: dropout after each hidden layer.
        wide: add a linear path beside the MLP (:class:`~beyondfit.nets.WideAndDeep`).
        batch_size: training rows per step.
        val_fraction: share of rows held out for validation.
        data: ``{"path": file.csv|file.npz, "target": COLUMN}``; default: diabetes.
    """
    data = dict(data or {})
    if data.get("path"):
        x, y, _ = load_table(Path(str(data["path"])).expanduser(), data.get("target"))
    else:
        x, y = diabetes()
    train_idx, val_idx = split(len(x), val_fraction, seed)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    # Standardize with training statistics only: nothing about the validation rows leaks in.
    x_mean, x_std = x[train_idx].mean(0), x[train_idx].std(0).clamp_min(1e-8)
    y_mean, y_std = y[train_idx].mean(0), y[train_idx].std(0).clamp_min(1e-8)
    x, y = (x - x_mean) / x_std, (y - y_mean) / y_std
    x_train, y_train, x_val, y_val = x[train_idx], y[train_idx], x[val_idx], y[val_idx]
    val_variance = y_val.var(unbiased=False).clamp_min(1e-12)

    if isinstance(hidden, int):
        hidden = [hidden]
    if wide:
        model: torch.nn.Module = WideAndDeep(x.shape[1], hidden, y.shape[1], dropout=dropout)
    else:
        model = mlp([x.shape[1], *hidden, y.shape[1]], dropout=dropout)

    def loss_fn(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Any:
        features, target = batch
        mse = F.mse_loss(model(features), target)
        if model.training:
            return mse
        # Evaluation sees the whole split as one batch, so this is the exact R².
        return {"loss": mse, "r2": 1.0 - mse / val_variance}

    def finish(engine: Engine, run_dir: Path) -> list[str]:
        ols = least_squares_r2(x_train, y_train, x_val, y_val)
        r2 = engine.last_val.get("val_r2", float("nan"))
        return [f"validation R2: model {r2:.4f} | ordinary least squares {ols:.4f} (same split)"]

    return Task(
        model=model,
        loss_fn=loss_fn,
        train_data=TensorBatches(x_train, y_train, batch_size=batch_size, seed=seed),
        val_data=[(x_val, y_val)],
        finish=finish,
    )


def least_squares_r2(
    x_train: torch.Tensor, y_train: torch.Tensor, x_val: torch.Tensor, y_val: torch.Tensor
) -> float:
    """Validation R² of ordinary least squares (with intercept) fit on the training rows."""
    if len(x_train) <= x_train.shape[1]:
        raise BeyondfitError("too few training rows for the least-squares baseline")
    a = np.hstack([x_train.numpy(), np.ones((len(x_train), 1), np.float32)]).astype(np.float64)
    coef, *_ = np.linalg.lstsq(a, y_train.numpy().astype(np.float64), rcond=None)
    b = np.hstack([x_val.numpy(), np.ones((len(x_val), 1))])
    residual = ((b @ coef - y_val.numpy()) ** 2).sum()
    total = ((y_val.numpy() - y_val.numpy().mean(0)) ** 2).sum()
    return float(1.0 - residual / total)
