"""Finding the first NaN: the operation that made it, and the line of the user's code.

``with detect_anomaly(): engine.fit(...)`` (the command line: ``+debug=anomaly``) checks the
result of every torch operation in the forward pass (a ``TorchFunctionMode``) and turns on
torch's autograd anomaly mode for the backward. The first NaN made from NaN-free inputs
stops training with one :class:`BeyondfitError` line, e.g. ``NaN first made by torch.log at
mymod.py:12 in loss_fn: return torch.log(pred - y).mean()``. Every operation waits for its
result to be checked, so training is several times slower: a tool for finding a bug, off by
default and costing nothing when off.
"""

from __future__ import annotations

import contextlib
import re
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from beyondfit.core.errors import BeyondfitError

# Frames inside torch and beyondfit are not the user's line.
_LIBRARIES = (
    str(Path(torch.__file__).resolve().parent),
    str(Path(__file__).resolve().parent.parent),
)
# Results that may hold NaN without anything being wrong: uninitialised memory, attributes.
_NOT_CHECKED = re.compile(r"empty|\.__get__$|^torch\.Tensor\.(data_ptr|untyped_storage)")
_BACKWARD = re.compile(r"Function '(\w+)' returned nan values in its (\d+)\w* output")


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _has_nan(value: Any) -> bool:
    for tensor in _tensors(value):
        if (tensor.is_floating_point() or tensor.is_complex()) and tensor.numel():
            if tensor.device.type != "meta" and bool(torch.isnan(tensor.detach()).any()):
                return True
    return False


def user_line(stack: list[traceback.FrameSummary] | None = None) -> str:
    """``file:line in function: source`` of the innermost frame outside torch and beyondfit."""
    frames = stack if stack is not None else traceback.extract_stack()
    for frame in reversed(frames):
        if not frame.filename.startswith(_LIBRARIES) and not frame.filename.startswith("<"):
            source = f": {frame.line.strip()}" if frame.line else ""
            return f"{frame.filename}:{frame.lineno} in {frame.name}{source}"
    return "(no frame outside torch and beyondfit)"


class _FirstNaN(TorchFunctionMode):
    """Raises at the first operation whose result has a NaN that its inputs had not."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = resolve_name(func) or getattr(func, "__qualname__", repr(func))
        if _NOT_CHECKED.search(name):
            return func(*args, **kwargs)
        # Checked before as well as after: an in-place operation returns its own input.
        had_nan = _has_nan(args) or _has_nan(kwargs)
        out = func(*args, **kwargs)
        if not had_nan and _has_nan(out):
            raise BeyondfitError(
                f"NaN first made by {name} at {user_line()} (debug.anomaly: the inputs of "
                "this operation had no NaN); check its inputs' range (log or sqrt of a "
                "negative, 0/0, inf - inf)"
            )
        return out


@contextlib.contextmanager
def detect_anomaly() -> Iterator[None]:
    """Stop at the first NaN of the forward or the backward pass, naming the operation."""
    forward_traces: list[str] = []
    shown = warnings.showwarning

    def keep_trace(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
        # Anomaly mode warns with the forward traceback of the failing backward node.
        if str(message).startswith("Error detected in"):
            forward_traces.append(str(message))
            return
        shown(message, category, filename, lineno, *rest)

    warnings.showwarning = keep_trace
    try:
        with torch.autograd.set_detect_anomaly(True, check_nan=True), _FirstNaN():
            yield
    except RuntimeError as exc:
        found = _BACKWARD.search(str(exc))
        if found is None:
            raise
        where = _forward_line(forward_traces[-1]) if forward_traces else "(no forward trace)"
        raise BeyondfitError(
            f"NaN first made in the backward pass by {found.group(1)} (output "
            f"{found.group(2)}), the gradient of the operation at {where} (debug.anomaly); "
            "look for sqrt or log at 0, or a division by a value that can be 0"
        ) from None
    finally:
        warnings.showwarning = shown


def _forward_line(trace: str) -> str:
    """The user's frame in anomaly mode's forward traceback text."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace)
    for filename, lineno, name, source in reversed(frames):
        if not filename.startswith(_LIBRARIES):
            return f"{filename}:{lineno} in {name}: {source.strip()}"
    return "(no frame outside torch and beyondfit)"
