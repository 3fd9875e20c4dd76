"""What a loss closure sees under DDP: the model's own interface, every call synchronised.

DDP arms its gradient all-reduce in ``forward``; a closure also calls the model's methods
(``model.value(obs)``, ``model.actor(x)``), so :class:`DistributedModel` routes those through
DDP's forward too (:class:`_Dispatch`), while ``engine.model`` stays the plain module.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any

from torch import nn


class _Dispatch(nn.Module):
    """The module DDP wraps: its forward runs any method of any submodule of the model.

    DDP arms its gradient all-reduce in ``forward``; loss closures also call methods
    (``model.log_prob_entropy(...)``), so those are routed through here too.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.__dict__["target"] = module  # the callable root: module, or torch.compile of it

    def forward(self, path: str, method: str | None, *args: Any, **kwargs: Any) -> Any:
        """Call ``module.<path>`` (or its ``method``) with the arguments."""
        obj = self.target if not path else self.module.get_submodule(path)
        if method is None:
            return obj(*args, **kwargs)
        return getattr(obj, method)(*args, **kwargs)


class DistributedModel:
    """What a loss closure sees under DDP: the model's own interface, synchronised.

    ``model(x)``, ``model.value(x)`` and ``model.actor(x)`` all run through DDP's forward;
    attributes, parameters and ``nn.Module``'s own methods (``parameters()``, ``training``)
    come from the plain module. ``no_sync()`` is DDP's.
    """

    __slots__ = ("_ddp", "_module", "_path")

    def __init__(self, ddp: nn.Module, module: nn.Module, path: str = "") -> None:
        self._ddp = ddp
        self._module = module
        self._path = path

    @property
    def module(self) -> nn.Module:
        """The plain (unwrapped) module."""
        return self._module

    @property
    def ddp(self) -> nn.Module:
        """The ``DistributedDataParallel`` instance."""
        return self._ddp

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync``: accumulate gradients locally (forward and backward inside)."""
        return self._ddp.no_sync()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._ddp(self._path, None, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if isinstance(attr, nn.Module):
            return DistributedModel(self._ddp, attr, f"{self._path}.{name}" if self._path else name)
        if (
            inspect.ismethod(attr)
            and attr.__self__ is self._module
            and (name == "forward" or not hasattr(nn.Module, name))
        ):
            return functools.partial(self._ddp, self._path, None if name == "forward" else name)
        return attr

    def __getitem__(self, index: Any) -> Any:
        item = self._module[index]  # type: ignore[index]
        if isinstance(item, nn.Module) and isinstance(index, int):
            position = index % len(self._module)  # type: ignore[arg-type]
            path = f"{self._path}.{position}" if self._path else str(position)
            return DistributedModel(self._ddp, item, path)
        return item

    def __repr__(self) -> str:
        return f"DistributedModel({self._module!r})"
