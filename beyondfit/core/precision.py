"""Mixed precision as one object the engine calls: autocast, loss scaling, unscale, overflow.

Like Fabric's precision plugins: the step asks :class:`Precision` for a forward context, a
backward, an unscale before clipping, and an optimizer step; it never branches on the dtype.

- ``"32"``: no autocast, plain backward and step.
- ``"bf16"``: autocast to bfloat16 (weights, optimizer state and logged sums stay float32).
- ``"16"``: fp16 autocast with a ``torch.amp.GradScaler``. Gradients are unscaled before
  clipping, so ``clip_norm`` and ``grad_norm`` are in real units; a step whose gradients
  overflow is skipped by the scaler and reported by :meth:`Precision.unscale`.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError

#: Accepted spellings (ours, Lightning's, torch dtype names) -> the autocast dtype.
PRECISIONS: dict[str, torch.dtype | None] = {
    "32": None, "fp32": None, "32-true": None, "float32": None,
    "bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16, "bfloat16": torch.bfloat16,
    "16": torch.float16, "fp16": torch.float16, "16-mixed": torch.float16, "float16": torch.float16,
}  # fmt: skip
_NULL_CONTEXT = contextlib.nullcontext()


class Precision:
    """The numeric format of one engine's steps.

    Args:
        precision: ``"32"``, ``"bf16"`` or ``"16"`` (or a spelling in :data:`PRECISIONS`).
        device: the device the model trains on (autocast and the scaler are per device type).
    """

    def __init__(self, precision: str | int, device: torch.device) -> None:
        key = str(precision).lower()
        if key not in PRECISIONS:
            raise BeyondfitError(f"precision={precision!r}; use 32, bf16 or 16")
        self.name = key
        self.dtype = PRECISIONS[key]
        self.device_type = device.type
        self.scaler = torch.amp.GradScaler(device.type) if self.dtype is torch.float16 else None
        #: fp16: the scaler finds non-finite gradients itself (and skips those steps).
        self.checks_gradients = self.scaler is not None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context the loss closure runs in."""
        if self.dtype is None:
            return _NULL_CONTEXT
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor, inputs: list[torch.Tensor] | None = None) -> None:
        """``loss.backward()``, scaled under fp16; into ``inputs`` only when given."""
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        if inputs is None:
            loss.backward()
        else:
            torch.autograd.backward(loss, inputs=inputs)

    def unscale(self, optimizer: torch.optim.Optimizer, device: torch.device) -> Any:
        """Bring ``optimizer``'s gradients back to real units (fp16 only) before clipping.

        Returns a 0-d device tensor, 1.0 when the gradients overflowed (the scaler will skip
        this step), or ``None`` when nothing can overflow. It never waits for the device.
        """
        if self.scaler is None:
            return None
        self.scaler.unscale_(optimizer)
        try:
            found = self.scaler._found_inf_per_device(optimizer)
        except (AttributeError, KeyError, RuntimeError):  # a torch without this helper
            return None
        if not found:
            return None
        return torch.stack([f.to(device).reshape(()) for f in found.values()]).amax()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer step: the scaler's (which skips on overflow) under fp16."""
        if self.scaler is not None:
            self.scaler.step(optimizer)
        else:
            optimizer.step()

    def update(self) -> None:
        """After every optimizer of an engine step has stepped: adjust the loss scale once
        (torch's recipe for several optimizers sharing one GradScaler)."""
        if self.scaler is not None:
            self.scaler.update()

    def step_scheduler(self, scheduler: Any, first_step: bool, *args: Any) -> None:
        """Step an LR scheduler after an optimizer step.

        The schedule counts optimizer steps, skipped or not; torch warns (once) when the
        scaler skipped the very first one, which fp16 runs often do: that warning is noise.
        """
        if self.scaler is not None and first_step:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step")
                scheduler.step(*args)
        else:
            scheduler.step(*args)

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state (empty without one)."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
