"""The words objects' own ``load_state_dict`` checks are written in.

A checkpoint's checksum proves it is the file that was written, not who wrote it: a file
edited and re-sealed passes it. So every stateful object checks what it is given to load, in
its own ``load_state_dict``, for type, range, shape and finiteness (the counters
:class:`~beyondfit.core.state.position.TrainState`, an optimizer's state
:func:`~beyondfit.core.state.optimizer.check_optimizer_entry`, the metric sums, the RNG states,
a data source's position, a callback's state), and raises :class:`FieldError` naming the
field; the engine's restore (:mod:`beyondfit.core.state.engine_state`) puts everything back and says
it in one line. These helpers say what a saved value may be.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError

#: The largest counter a checkpoint may hold: far beyond any run (2**40 steps).
MAX_COUNT = 1 << 40


class FieldError(BeyondfitError):
    """A checkpoint field that is not what beyondfit writes (the message names the field)."""


def is_count(value: Any, low: int = 0) -> bool:
    """A whole number (not a bool) in ``[low, MAX_COUNT]``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_COUNT


def is_real(value: Any) -> bool:
    """A real number (not a bool); NaN and infinities included."""
    return isinstance(value, int | float) and not isinstance(value, bool)


#: ``field_problem`` kinds: test and what it wants.
KINDS: dict[str, tuple[Any, str]] = {
    "count": (is_count, "a whole number >= 0"),
    "count_or_none": (lambda v: v is None or is_count(v), "a whole number >= 0 or null"),
    "real": (is_real, "a number"),
    "real_or_none": (lambda v: v is None or is_real(v), "a number or null"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "tensor": (lambda v: v is None or isinstance(v, torch.Tensor), "a tensor or null"),
    "generator": (lambda v: v is None or (isinstance(v, torch.Tensor) and v.dtype == torch.uint8),
                  "a generator state (a uint8 tensor) or null"),
}


def field_problem(state: Any, kinds: Mapping[str, str]) -> str | None:
    """What is wrong with a saved ``state`` whose entries should be of ``kinds`` (key ->
    a :data:`KINDS` name), or ``None``; absent keys pass (older files lack newer ones)."""
    if not isinstance(state, Mapping):
        return f"a {type(state).__name__}, not a mapping"
    for key, kind in kinds.items():
        test, want = KINDS[kind]
        if key in state and not test(state[key]):
            return str(fail(key, state[key], want))
    return None


def check_fields(state: Any, kinds: Mapping[str, str]) -> None:
    """Raise :class:`FieldError` with :func:`field_problem`'s answer, if any."""
    problem = field_problem(state, kinds)
    if problem:
        raise FieldError(problem)


def fail(field: str, value: Any, want: str) -> FieldError:
    """``FIELD=VALUE is not WANT`` (the value shortened; a tensor by its shape)."""
    shape = getattr(value, "shape", None)
    shown = f"a tensor of shape {tuple(shape)}" if shape is not None else repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return FieldError(f"{field}={shown} is not {want}")
