"""One check for every numeric option: a wrong value is one clear error naming the key.

``check_number("clip_norm", 0.0, above=0)`` raises
``BeyondfitError("clip_norm=0.0; it must be a number > 0")``. Booleans are refused even
though Python counts them as integers (``accumulate=True`` is a mistake, not ``1``), and so
are NaN, infinities and numbers beyond float32's range unless ``finite=False``: every option
ends up in float32 arithmetic (``clip_value=1e300`` would fail inside ``torch.clamp``).
"""

from __future__ import annotations

import math
from typing import Any

from beyondfit.core.errors import BeyondfitError

#: The largest float32: a float option beyond it overflows once it meets a tensor.
FLOAT32_MAX = 3.4028234663852886e38


def check_number(
    name: str,
    value: Any,
    *,
    integer: bool = False,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    allow_none: bool = False,
    finite: bool = True,
    example: str | None = None,
) -> Any:
    """Return ``value`` if it is a number within the bounds, else raise :class:`BeyondfitError`.

    Args:
        name: the key as the user wrote it (``"task.num_envs"``, ``"clip_norm"``).
        value: the value to check.
        integer: require a whole number (``int``, not ``float``).
        above: exclusive lower bound (``above=0``: positive).
        at_least: inclusive lower bound.
        at_most: inclusive upper bound.
        allow_none: ``None`` passes (an option that may be unset).
        finite: refuse NaN, infinities and magnitudes above float32's largest value.
        example: a valid setting to suggest, e.g. ``"task.num_envs=8"``.
    """
    if value is None and allow_none:
        return value
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    out_of_range = (
        ok and not integer and finite
        and not (math.isfinite(value) and abs(value) <= FLOAT32_MAX)
    )
    if out_of_range:
        raise BeyondfitError(
            f"{name}={value!r}; it must be a finite number within float32's range "
            f"(|x| <= {FLOAT32_MAX:.3g})" + (f", e.g. {example}" if example else "")
        )
    if ok and above is not None and not value > above:
        ok = False
    if ok and at_least is not None and not value >= at_least:
        ok = False
    if ok and at_most is not None and not value <= at_most:
        ok = False
    if ok:
        return value
    what = _describe(integer, above, at_least, at_most)
    raise BeyondfitError(f"{name}={value!r}; it must be {what}"
                         + (f", e.g. {example}" if example else ""))


def _describe(integer: bool, above: float | None, at_least: float | None,
              at_most: float | None) -> str:
    kind = "whole number" if integer else "number"
    if above == 0 and at_least is None and at_most is None:
        return f"a positive {kind}"
    if integer and at_least == 1 and above is None and at_most is None:
        return "a positive whole number"
    bounds = []
    if above is not None:
        bounds.append(f"> {_show(above)}")
    if at_least is not None:
        bounds.append(f">= {_show(at_least)}")
    if at_most is not None:
        bounds.append(f"<= {_show(at_most)}")
    return f"a {kind}" + (" " + " and ".join(bounds) if bounds else "")


def _show(bound: float) -> str:
    # Whole bounds in full (a seed's 4294967295, not 4.29497e+09).
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"
