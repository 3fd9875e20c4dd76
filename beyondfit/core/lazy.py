"""Package attributes that import their module on first use (PEP 562).

A package ``__init__`` that imports its submodules eagerly makes ``import pkg.light`` pay for
``pkg.heavy`` too: Python runs the package's ``__init__`` before any submodule. The command
line imports torch-free modules (``core.errors``, ``core.options``, ``checkpoint``'s file
names) to answer ``--help`` or a mistake at once; its packages therefore name their exports
here and load them when first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package whose ``globals()`` is ``namespace`` and
    whose public ``name`` lives in the module ``exports[name]``. The first lookup imports that
    module and caches the value in the namespace, so later lookups never come back here."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
