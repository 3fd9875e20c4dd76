"""Checks of what the Python API hands the engine, each a one-line :class:`BeyondfitError`:
an optimizer that would train nothing, a model on the meta device, a ``fit`` called from
inside ``fit``, an evaluator's result. The engine calls them as ``guards.NAME``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError

Method = TypeVar("Method", bound=Callable[..., Any])


def model(model: Any) -> None:
    """Refuse what is not a module, and a model whose tensors are on the meta device: they
    hold no values."""
    if not isinstance(model, nn.Module):
        raise BeyondfitError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    meta = [name for name, t in [*model.named_parameters(), *model.named_buffers()]
            if t.is_meta]
    if meta:
        raise BeyondfitError(
            f"the model's {', '.join(meta[:3])}{' ...' if len(meta) > 3 else ''} are on the "
            "meta device (shapes without values); materialize them first, e.g. "
            "model.to_empty(device='cpu') then initialize or load_state_dict(..., assign=True)"
        )


def optimizers(model: nn.Module, updates: Sequence[Any]) -> None:
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


def fit_arguments(train_data: Any, val_data: Any, updates: Sequence[Any]) -> None:
    """Refuse training data that is not iterable, and a ``ReduceLROnPlateau`` scheduler
    without the validation data it steps on."""
    if not isinstance(train_data, Iterable):
        raise BeyondfitError("train_data must be an iterable of batches, got "
                             f"{type(train_data).__name__}")
    if val_data is None and any(u.plateau for u in updates):
        raise BeyondfitError(
            "a ReduceLROnPlateau scheduler steps on a validation value: pass val_data, "
            "or use a scheduler that follows the step count"
        )


def not_reentrant(method: Method) -> Method:
    """Refuse a call of ``method`` (``fit``) while the same engine is inside it (a callback
    calling fit): the inner run would reshard the data and reset the counters under the
    outer one."""

    @functools.wraps(method)
    def guarded(engine: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(engine, "_fitting", False):
            raise BeyondfitError(
                f"{method.__name__} was called while this engine's {method.__name__} is running "
                "(from a callback?); stop it with engine.should_stop = True instead"
            )
        engine._fitting = True
        try:
            return method(engine, *args, **kwargs)
        finally:
            engine._fitting = False

    return guarded  # type: ignore[return-value]


def scores(raw: Any) -> Mapping[str, Any]:
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
