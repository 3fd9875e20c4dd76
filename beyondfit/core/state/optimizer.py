"""What an :class:`~beyondfit.core.update.Update`'s saved state must be before its optimizer
loads it: torch's ``Optimizer.load_state_dict`` takes moments of the wrong shape, NaN moments
or a string learning rate without a word, and the run fails (or silently diverges) later."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from beyondfit.core.state.checks import FieldError, fail, is_count, is_real
from beyondfit.core.state.serialization import nonfinite_entries

#: Optimizer state entries that have their parameter's shape (torch's optimizers).
PARAM_SHAPED = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer",
                          "square_avg", "acc_delta", "grad_avg", "sum", "ax", "prev", "exp_inf"})


def check_optimizer_entry(entry: Mapping[str, Any], optimizer: torch.optim.Optimizer) -> None:
    """Raise :class:`FieldError` naming the first field of an Update's saved ``entry``
    (step count, the optimizer's groups and per-parameter state, the scheduler's) that
    ``optimizer`` must not load: a wrong type, a shape other than its parameter's, a value
    that is not finite."""
    if not is_count(entry.get("steps", 0)):
        raise fail("steps", entry.get("steps"), "a whole number of steps")
    saved = entry["optimizer"]
    groups, saved_groups = optimizer.param_groups, saved["param_groups"]
    index: dict[Any, torch.Tensor] = {}
    for g, (group, old) in enumerate(zip(groups, saved_groups)):
        index.update(zip(old["params"], group["params"]))
        for key, mine in group.items():
            if key == "params" or key not in old:
                continue
            value = old[key]
            where = f"param_groups[{g}].{key}"
            if isinstance(mine, bool):
                if not isinstance(value, bool):
                    raise fail(where, value, "true or false")
            elif is_real(mine) and not (is_real(value) or isinstance(value, torch.Tensor)):
                raise fail(where, value, "a number")
            elif is_real(mine) and is_real(value) and not math.isfinite(value):
                raise fail(where, value, "a finite number")
            elif isinstance(mine, tuple) and not (
                    isinstance(value, tuple | list) and len(value) == len(mine)
                    and all(is_real(v) and math.isfinite(v) for v in value)):
                raise fail(where, value, f"{len(mine)} finite numbers")
    per_param = saved.get("state", {})
    if not isinstance(per_param, Mapping):
        raise fail("state", per_param, "a mapping")
    tensors = []
    for key, entries in per_param.items():
        param = index.get(key)
        if param is None or not isinstance(entries, Mapping):
            raise fail(f"state[{key!r}]", entries, "the state of one of its parameters")
        for name, value in entries.items():
            where = f"state[{key!r}].{name}"
            if isinstance(value, torch.Tensor):
                if name in PARAM_SHAPED and value.shape != param.shape:
                    raise fail(where, tuple(value.shape),
                                f"the parameter's shape {tuple(param.shape)}")
                tensors.append((where, value))
            elif not (value is None or isinstance(value, bool) or is_real(value)):
                raise fail(where, value, "a tensor or a number")
    bad = nonfinite_entries(tensors)
    if bad:
        raise FieldError(f"{', '.join(bad)} holds values that are not finite (NaN or inf)")
    scheduler = entry.get("scheduler")
    if scheduler is not None:
        if not isinstance(scheduler, Mapping) or not is_count(scheduler.get("last_epoch", 0), -1):
            raise fail("scheduler", scheduler, "a scheduler state")
        last_lr = scheduler.get("_last_lr", [])
        if not isinstance(last_lr, list) or not all(is_real(v) for v in last_lr):
            raise fail("scheduler._last_lr", last_lr, "a list of numbers")
