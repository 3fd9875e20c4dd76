"""Every field of a training checkpoint checked before anything is loaded.

A checkpoint's checksum proves it is the file that was written, not who wrote it: a file
edited and re-sealed passes it. So each field :meth:`~beyondfit.core.state.Checkpointable.
state_dict` writes is checked here for its type, range, shape (against this model and these
optimizers) and finiteness, and refused in one line naming the field, before the engine is
touched and before a resume says "resumed from": a string step counter, a step of 1e15 or of
-1, garbage RNG state, an Adam moment of the wrong shape, NaN weights. Callbacks and data
sources whose saved state needs checks of their own give a ``state_problem(state)`` method
(returns ``None`` or what is wrong).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from beyondfit.core.callbacks import state_key
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.serialization import is_plain_extra_state, nonfinite_entries

#: The largest counter a checkpoint may hold: far beyond any run (2**40 steps).
MAX_COUNT = 1 << 40
#: Optimizer state entries that have their parameter's shape (torch's optimizers).
PARAM_SHAPED = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer",
                          "square_avg", "acc_delta", "grad_avg", "sum", "ax", "prev", "exp_inf"})


class FieldError(BeyondfitError):
    """A checkpoint field that is not what beyondfit writes."""


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
            return str(_fail(key, state[key], want))
    return None


def check_checkpoint_fields(state: Mapping[str, Any], engine: Any, source: str) -> None:
    """Raise a one-line :class:`BeyondfitError` naming the first field of ``state`` that this
    engine must not load; change nothing. Call it after
    :func:`~beyondfit.core.serialization.check_state_fits` (which checks keys and optimizer
    kinds)."""
    try:
        _check(state, engine)
    except FieldError as exc:
        raise BeyondfitError(
            f"{source} was refused: {exc}; it was changed after beyondfit wrote it (a "
            "checksum is integrity, not authenticity), resume from another checkpoint"
        ) from None


def _fail(field: str, value: Any, want: str) -> FieldError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return FieldError(f"{field}={shown} is not {want}")


def _check(state: Mapping[str, Any], engine: Any) -> None:
    counters = state["counters"]
    for name, value in counters.items():
        if name == "data_exhausted":
            if not isinstance(value, bool):
                raise _fail(f"counters.{name}", value, "true or false")
        elif not is_count(value, -1 if name == "evaluated_at" else 0):
            raise _fail(f"counters.{name}", value, f"a whole number in [0, {MAX_COUNT}]")
    if counters.get("evaluated_at", -1) > counters.get("global_step", 0):
        raise _fail("counters.evaluated_at", counters["evaluated_at"],
                    "at most counters.global_step")
    weights = state["model"]
    for name, value in weights.items():
        if not isinstance(value, torch.Tensor) and not is_plain_extra_state(name, value):
            raise _fail(f"model.{name}", type(value).__name__, "a tensor")
    params = [name for name, _ in engine.model.named_parameters()]
    bad = nonfinite_entries((f"model.{n}", weights[n]) for n in params if n in weights)
    if bad:
        raise FieldError(f"{', '.join(bad)} holds values that are not finite (NaN or inf)")
    for update in engine.updates:
        _check_update(state["updates"][update.name], update, f"updates[{update.name!r}]")
    history = state.get("history", [])
    if not isinstance(history, list):
        raise _fail("history", history, "a list of rows")
    rows = [("last_val", state.get("last_val", {}))]
    rows += [(f"history[{i}]", row) for i, row in enumerate(history)]
    for field, row in rows:
        if not isinstance(row, Mapping) or not all(
                isinstance(k, str) and is_real(v) for k, v in row.items()):
            raise _fail(field, row, "a mapping of names to numbers")
    _check_metrics(state["metrics"])
    if "rng" in state:
        _check_rng(state["rng"])
    for field, checker, entry in _stateful(engine, state):
        problem = checker(entry)
        if problem:
            raise FieldError(f"{field}: {problem}")


def _stateful(engine: Any, state: Mapping[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """Field name, ``state_problem`` checker and saved entry of each callback and data source
    that checks its own state."""
    saved = state.get("callbacks", {})
    if not isinstance(saved, Mapping):
        raise _fail("callbacks", saved, "a mapping")
    for cb in engine.callbacks:
        key = state_key(cb)
        checker = getattr(cb, "state_problem", None)
        if key in saved and callable(checker) and callable(getattr(cb, "load_state_dict", None)):
            yield f"callbacks.{key}", checker, saved[key]
    checker = getattr(engine.train_data, "state_problem", None)
    if state.get("data") is not None and callable(checker):
        yield "data", checker, state["data"]


def _check_update(entry: Mapping[str, Any], update: Any, field: str) -> None:
    if not is_count(entry.get("steps", 0)):
        raise _fail(f"{field}.steps", entry.get("steps"), "a whole number of steps")
    saved = entry["optimizer"]
    groups, saved_groups = update.optimizer.param_groups, saved["param_groups"]
    index: dict[Any, torch.Tensor] = {}
    for g, (group, old) in enumerate(zip(groups, saved_groups)):
        index.update(zip(old["params"], group["params"]))
        for key, mine in group.items():
            if key == "params" or key not in old:
                continue
            value = old[key]
            where = f"{field}.param_groups[{g}].{key}"
            if isinstance(mine, bool):
                if not isinstance(value, bool):
                    raise _fail(where, value, "true or false")
            elif is_real(mine) and not (is_real(value) or isinstance(value, torch.Tensor)):
                raise _fail(where, value, "a number")
            elif is_real(mine) and is_real(value) and not math.isfinite(value):
                raise _fail(where, value, "a finite number")
            elif isinstance(mine, tuple) and not (
                    isinstance(value, tuple | list) and len(value) == len(mine)
                    and all(is_real(v) and math.isfinite(v) for v in value)):
                raise _fail(where, value, f"{len(mine)} finite numbers")
    per_param = saved.get("state", {})
    if not isinstance(per_param, Mapping):
        raise _fail(f"{field}.state", per_param, "a mapping")
    tensors = []
    for key, entries in per_param.items():
        param = index.get(key)
        if param is None or not isinstance(entries, Mapping):
            raise _fail(f"{field}.state[{key!r}]", entries, "the state of one of its parameters")
        for name, value in entries.items():
            where = f"{field}.state[{key!r}].{name}"
            if isinstance(value, torch.Tensor):
                if name in PARAM_SHAPED and value.shape != param.shape:
                    raise _fail(where, tuple(value.shape),
                                f"the parameter's shape {tuple(param.shape)}")
                tensors.append((where, value))
            elif not (value is None or isinstance(value, bool) or is_real(value)):
                raise _fail(where, value, "a tensor or a number")
    bad = nonfinite_entries(tensors)
    if bad:
        raise FieldError(f"{', '.join(bad)} holds values that are not finite (NaN or inf)")
    scheduler = entry.get("scheduler")
    if scheduler is not None:
        if not isinstance(scheduler, Mapping) or not is_count(scheduler.get("last_epoch", 0), -1):
            raise _fail(f"{field}.scheduler", scheduler, "a scheduler state")
        last_lr = scheduler.get("_last_lr", [])
        if not isinstance(last_lr, list) or not all(is_real(v) for v in last_lr):
            raise _fail(f"{field}.scheduler._last_lr", last_lr, "a list of numbers")


def _check_metrics(metrics: Mapping[str, Any]) -> None:
    sums, counts = metrics.get("sums"), metrics.get("counts")
    if not isinstance(sums, Mapping) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sums.items()):
        raise _fail("metrics.sums", sums, "a mapping of names to tensors")
    if not isinstance(counts, Mapping) or not all(
            isinstance(k, str) and is_count(v) for k, v in counts.items()):
        raise _fail("metrics.counts", counts, "a mapping of names to counts")


def _check_rng(rng: Any) -> None:
    """Set each saved generator state on a scratch generator: what fails there would fail on
    the global ones after the weights were already loaded."""
    if not isinstance(rng, Mapping):
        raise _fail("rng", rng, "a mapping of generator states")
    try:
        version, internal, gauss = rng["python"]
        random.Random().setstate((version, tuple(internal), gauss))
    except Exception:
        raise _fail("rng.python", rng.get("python"), "Python's random state") from None
    try:
        np_state = rng["numpy"]
        keys = np_state["keys"]
        if not isinstance(keys, torch.Tensor) or keys.shape != (624,):
            raise ValueError
        np.random.RandomState().set_state((np_state["kind"], keys.numpy().astype(np.uint32),
                                           np_state["pos"], np_state["has_gauss"],
                                           np_state["cached"]))
    except Exception:
        raise _fail("rng.numpy", type(rng.get("numpy")).__name__, "NumPy's random state") \
            from None
    value = rng.get("torch")
    if not (isinstance(value, torch.Tensor) and value.dtype == torch.uint8
            and value.shape == torch.get_rng_state().shape):
        raise _fail("rng.torch", value, "torch's CPU generator state")
    cuda = rng.get("cuda", [])
    if not isinstance(cuda, list | tuple) or not all(
            isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda):
        raise _fail("rng.cuda", cuda, "a list of CUDA generator states")
