"""What a loss closure may return, checked once per call: the loss and the entries to track."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.metrics import is_metric_object


def unpack_output(out: Any, training: bool) -> tuple[torch.Tensor, Mapping[str, Any]]:
    """Validate a closure's return value; give back the loss and the entries to track."""
    if isinstance(out, torch.Tensor):
        loss, logs = out, {"loss": out}
    elif type(out) is dict or isinstance(out, Mapping):  # dict first: skips the ABC check
        if "loss" not in out:
            raise BeyondfitError(
                f"loss_fn returned a mapping without 'loss' (keys: {sorted(map(str, out))}); "
                "return {'loss': scalar_tensor, ...}"
            )
        loss, logs = out["loss"], out
        for name, value in out.items():
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise BeyondfitError(
                        f"loss_fn returned {name!r} with shape {tuple(value.shape)}; every "
                        "returned tensor must be a scalar (reduce it, e.g. .mean())"
                    )
            elif not isinstance(value, (int, float)) and not is_metric_object(value):
                raise BeyondfitError(
                    f"loss_fn returned {name!r} of type {type(value).__name__}; entries must "
                    "be scalar tensors, numbers or metric objects"
                )
    else:
        raise BeyondfitError(
            f"loss_fn returned {type(out).__name__}; return a scalar tensor or a mapping "
            "with a 'loss' entry"
        )
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise BeyondfitError(
            f"loss_fn returned a loss of shape {shape}; the loss must be a scalar tensor "
            "(reduce it, e.g. .mean())"
        )
    if loss.is_complex():
        raise BeyondfitError(
            f"loss_fn returned a complex loss ({loss.dtype}); a loss to minimize must be real, "
            "e.g. its magnitude .abs() or .real"
        )
    if training and not loss.requires_grad:
        raise BeyondfitError(
            "the loss does not require grad: it does not depend on any trainable parameter "
            "(all frozen, or computed under no_grad/detach); unfreeze parameters or fix loss_fn"
        )
    return (loss.reshape(()) if loss.dim() else loss), logs
