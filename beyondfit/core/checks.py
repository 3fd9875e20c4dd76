"""Checks of what the Python API hands the engine, each a one-line :class:`BeyondfitError`:
an optimizer that would train nothing, a model on the meta device, an evaluator's result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError


def check_model(model: nn.Module) -> None:
    """Refuse a model whose tensors are on the meta device: they hold no values."""
    meta = [name for name, t in [*model.named_parameters(), *model.named_buffers()]
            if t.is_meta]
    if meta:
        raise BeyondfitError(
            f"the model's {', '.join(meta[:3])}{' ...' if len(meta) > 3 else ''} are on the "
            "meta device (shapes without values); materialize them first, e.g. "
            "model.to_empty(device='cpu') then initialize or load_state_dict(..., assign=True)"
        )


def check_optimizers(model: nn.Module, updates: Sequence[Any]) -> None:
    """Refuse an optimizer that holds none of the model's parameters: it would step tensors
    the loss never reaches, leaving the model unchanged while its gradients accumulate."""
    owned = {id(p) for p in model.parameters()}
    for update in updates:
        foreign = [p for p in update.params if id(p) not in owned]
        if foreign and len(foreign) == len(update.params):
            shapes = ", ".join(str(tuple(p.shape)) for p in foreign[:4])
            more = f" and {len(foreign) - 4} more" if len(foreign) > 4 else ""
            which = f"optimizer {update.name!r}" if getattr(update, "name", "") else "the optimizer"
            raise BeyondfitError(
                f"{which} holds none of the model's parameters (it holds {len(foreign)} "
                f"others, shapes {shapes}{more}): training would not change the model; build "
                "it from model.parameters(), or pass a factory such as "
                "functools.partial(torch.optim.SGD, lr=0.1)"
            )


def check_evaluator_result(raw: Any) -> Mapping[str, Any]:
    """An evaluator ``evaluator(model)`` must return ``{name: number or scalar tensor}``."""
    if not isinstance(raw, Mapping):
        raise BeyondfitError(
            f"the evaluator returned {type(raw).__name__}; return a mapping of names to "
            "numbers, e.g. {'val_acc': 0.9}"
        )
    for name, value in raw.items():
        scalar = isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex()
        if not isinstance(name, str) or not (
            scalar or (isinstance(value, int | float) and not isinstance(value, bool))
        ):
            raise BeyondfitError(
                f"the evaluator returned {str(name)[:40]!r}: {type(value).__name__}; each entry "
                "must be a real number or a real scalar tensor under a string name"
            )
    return raw
