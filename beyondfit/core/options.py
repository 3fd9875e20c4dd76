"""Every option's rule, once: :data:`OPTIONS` holds what each option of the library's classes
accepts, and :func:`check_number` is the one check for numbers.

``check_option("Engine.clip_norm", 0.0)`` raises ``OptionError("clip_norm=0.0; it must be a
positive number or None")``: library code names its Python argument. The command line's schema
(``cli/schema.py``) refers to the same entries for ``engine.clip_norm`` and the other keys, so
a config value is checked by the same rule before anything is built, in the config's words; an
error the library raises later is translated to config keys in one place
(:func:`beyondfit.cli.schema.in_config_words`).

Booleans are refused even though Python counts them as integers (``accumulate=True`` is a
mistake, not ``1``), and so are NaN, infinities and numbers beyond float32's range unless
``finite=False``: every option ends up in float32 arithmetic (``clip_value=1e300`` would fail
inside ``torch.clamp``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from beyondfit.core.errors import BeyondfitError


class OptionError(BeyondfitError):
    """A value an option does not accept; ``option`` is its :data:`OPTIONS` key (or ``""``
    for an option outside the table), ``name`` the argument the message names."""

    def __init__(self, message: str, option: str = "", name: str = "") -> None:
        super().__init__(message)
        self.option, self.name = option, name


@dataclass(frozen=True)
class Rule:
    """What one option accepts: a number within bounds (see :func:`check_number`), or one of
    ``choices`` (compared as stripped lower-case text: ``True`` and ``"true"`` are one choice;
    :meth:`check` returns the choice itself, so callers compare canonical values)."""

    integer: bool = False
    above: float | None = None
    at_least: float | None = None
    at_most: float | None = None
    allow_none: bool = False
    choices: tuple[Any, ...] = ()
    example: str = ""  # a valid setting the message suggests

    def check(self, name: str, value: Any, option: str = "") -> Any:
        """``value`` if this rule accepts it, else an :class:`OptionError` naming ``name``."""
        if self.choices:
            if value is None and self.allow_none:
                return value
            text = str(value).strip().lower()
            for choice in self.choices:
                if text == str(choice).lower():
                    return choice  # the canonical spelling: "MIN" is "min", "true" is True
            *most, last = (str(c).lower() for c in self.choices)
            allowed = f"{', '.join(most)} or {last}" if most else last
            raise OptionError(f"{name}={value!r}; use {allowed}", option, name)
        try:
            return check_number(name, value, integer=self.integer, above=self.above,
                                at_least=self.at_least, at_most=self.at_most,
                                allow_none=self.allow_none, example=self.example or None)
        except OptionError as exc:
            raise OptionError(str(exc), option, name) from None


#: The library's options that the command line exposes, by ``Owner.argument``: each rule here
#: and nowhere else. The owner checks with it (``check_option``); ``cli/schema.py`` points its
#: keys at these entries.
OPTIONS: dict[str, Rule] = {
    "Engine.accumulate": Rule(integer=True, at_least=1),
    "Engine.compile": Rule(choices=(False, True, "max")),
    "Engine.log_every": Rule(integer=True, at_least=1),
    "Engine.on_nonfinite": Rule(choices=("raise", "skip", "ignore")),
    "Engine.max_skips": Rule(integer=True, at_least=1),
    "Engine.strategy": Rule(choices=("auto", "none", "ddp"), allow_none=True),
    "Update.clip_norm": Rule(above=0, allow_none=True),
    "Update.clip_value": Rule(above=0, allow_none=True),
    "fit.epochs": Rule(integer=True, at_least=1, allow_none=True),
    "fit.max_steps": Rule(integer=True, at_least=1, allow_none=True),
    "fit.eval_every": Rule(integer=True, at_least=1, allow_none=True),
    "Checkpointer.every": Rule(integer=True, at_least=1, allow_none=True),
    "Checkpointer.keep": Rule(integer=True, at_least=1),
    "Monitor.mode": Rule(choices=("min", "max")),
    "progress_callback.bar": Rule(choices=("auto", True, False)),
    "progress_callback.refresh": Rule(above=0),
    "progress_callback.every": Rule(integer=True, at_least=1, allow_none=True),
    "progress_callback.interval": Rule(above=0, allow_none=True),
}


def check_option(option: str, value: Any, name: str | None = None) -> Any:
    """Check ``value`` with ``OPTIONS[option]``; the message names ``name`` (default: the
    argument, ``option``'s part after the dot)."""
    return OPTIONS[option].check(name or option.rpartition(".")[2], value, option)

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
        raise OptionError(
            f"{name}={value!r}; it must be a finite number within float32's range "
            f"(|x| <= {FLOAT32_MAX:.3g})" + (f", e.g. {example}" if example else ""), name=name
        )
    if ok and above is not None and not value > above:
        ok = False
    if ok and at_least is not None and not value >= at_least:
        ok = False
    if ok and at_most is not None and not value <= at_most:
        ok = False
    if ok:
        return value
    what = describe_range(integer, above, at_least, at_most)
    raise OptionError(f"{name}={value!r}; it must be {what}"
                      + (f", e.g. {example}" if example else ""), name=name)


def describe_range(integer: bool, above: float | None, at_least: float | None,
              at_most: float | None) -> str:
    """A number rule in words, as its error messages say it (``a positive whole number``,
    ``a number > 0 and <= 1000``); the config reference uses the same words."""
    kind = "whole number" if integer else "number"
    if above == 0 and at_least is None and at_most is None:
        return f"a positive {kind}"
    if integer and at_least == 1 and above is None and at_most is None:
        return "a positive whole number"
    if not integer and above is None and None not in (at_least, at_most):
        return f"a number in [{_show(at_least)}, {_show(at_most)}]"  # a share, a discount
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


#: Above any learning rate a published recipe uses (LARS' largest is ~30) and far below
#: float32's overflow (3.4e38), where torch fails inside the optimizer step.
LR_MAX = 1e3


def check_learning_rate(lr: Any, key: str = "optimizer.lr") -> float:
    """A learning rate (``optimizer.lr``, or ``key``): a finite number in ``(0, 1e3]``.

    The bound is a sanity limit, not a tuning hint: every update is ``lr`` times a
    gradient-sized quantity, so ``1e300`` overflows the float32 weights at the first step
    (torch then fails with "value cannot be converted to type float without overflow"), and
    anything above 1e3 diverges on any problem that is not pathologically scaled. It also
    catches an exponent that lost its minus sign (``1e5`` for ``1e-5``).
    """
    # finite=False: NaN and inf fail the bounds anyway, with the bound in the message.
    return check_number(key, lr, above=0, at_most=LR_MAX, finite=False, example=f"{key}=0.001")
