"""The modules a loss closure is given: the model, compiled or not, wrapped or not.

Training and evaluation share the forward path (the compiled model when ``compile=True``);
one optimizer trains through the strategy's wrapper (DDP), several all-reduce each
optimizer's gradients at its own step and so are given the unwrapped model.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.strategy import Strategy

log = logging.getLogger("beyondfit.core.engine")


class ForwardPath:
    """``train_model`` for training closures, ``eval_model`` for evaluation.

    Args:
        model: the engine's module, already on its device.
        strategy: wraps the training module (DDP) when ``wrapped``.
        compile: ``torch.compile`` both; the first call falls back to eager with a warning
            when the backend cannot compile.
        wrapped: one optimizer: train through the strategy's wrapper.
    """

    def __init__(self, model: nn.Module, strategy: Strategy, compile: bool, wrapped: bool):
        self.model = model
        self.strategy = strategy
        self.wrapped = wrapped
        self.compile_pending = bool(compile)
        self.eval_model: Any = torch.compile(model) if compile else model
        self.train_model: Any = (
            strategy.wrap(model, self.eval_model if compile else None) if wrapped
            else self.eval_model
        )

    def first_call(self, loss_fn: Any, batch: Any) -> Any:
        """The first training closure call under ``compile=True``: where compilation happens,
        and where a backend that cannot compile (no C compiler for inductor) falls back."""
        self.compile_pending = False
        try:
            return loss_fn(self.train_model, batch)
        except BeyondfitError:
            raise
        except Exception as exc:
            log.warning(
                "torch.compile failed (%s: %s); continuing without compilation",
                type(exc).__name__,
                str(exc).splitlines()[0][:200] if str(exc) else "",
            )
            self.eval_model = self.model
            self.train_model = self.strategy.wrap(self.model) if self.wrapped else self.model
            return loss_fn(self.train_model, batch)
