"""beyondfit: one step engine for training loops that ``fit()`` cannot express.

Write a loss closure ``loss_fn(model, batch)``; :class:`Engine` does the rest, the same way
for supervised, self-supervised and reinforcement learning.

The names below load on first use (PEP 562): ``import beyondfit`` itself imports nothing
heavy, so the command line can answer Ctrl-C with one line even while torch is loading.
"""

from __future__ import annotations

import importlib
import itertools
import os
import signal
import sys
from typing import TYPE_CHECKING, Any


def _starting_the_command_line() -> bool:
    # `python -m beyondfit ...` (Python's own argv) or the `beyondfit` console script.
    argv = getattr(sys, "orig_argv", [])
    as_module = any(a == "-m" and b == "beyondfit" for a, b in itertools.pairwise(argv))
    return as_module or os.path.basename(sys.argv[0] if sys.argv else "") == "beyondfit"


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """SIGINT before the command line is loaded: one line, status 130, at once."""
    os.write(2, b"\nbeyondfit: interrupted (SIGINT)\n")
    os._exit(130)  # nothing has started: nothing to clean up


if _starting_the_command_line():
    # From here to the command line's own handling, Python (runpy) and the imports run;
    # a KeyboardInterrupt there would be a traceback. beyondfit.__main__ takes over.
    signal.signal(signal.SIGINT, _interrupted_while_starting)

# Each public name and the module that defines it.
_EXPORTS = {
    "BeyondfitError": "beyondfit.core",
    "Callback": "beyondfit.core",
    "EarlyStopping": "beyondfit.core",
    "Engine": "beyondfit.core",
    "SlowCopy": "beyondfit.core",
    "StopRule": "beyondfit.core",
    "Update": "beyondfit.core",
    "move_to_device": "beyondfit.core",
    "resolve_device": "beyondfit.core",
    "seed_everything": "beyondfit.core",
    "Checkpointer": "beyondfit.checkpoint",
    "GracefulInterrupt": "beyondfit.checkpoint",
    "resume": "beyondfit.checkpoint",
    "TensorBatches": "beyondfit.data",
    "ConsoleLogger": "beyondfit.observers",
    "CsvFile": "beyondfit.observers",
    "MetricsFile": "beyondfit.observers",
    "Task": "beyondfit.tasks",
}

if TYPE_CHECKING:
    from beyondfit.checkpoint import Checkpointer, GracefulInterrupt, resume
    from beyondfit.core import (
        BeyondfitError,
        Callback,
        EarlyStopping,
        Engine,
        SlowCopy,
        StopRule,
        Update,
        move_to_device,
        resolve_device,
        seed_everything,
    )
    from beyondfit.data import TensorBatches
    from beyondfit.observers import ConsoleLogger, CsvFile, MetricsFile
    from beyondfit.tasks import Task

__all__ = [
    "BeyondfitError",
    "Callback",
    "Checkpointer",
    "ConsoleLogger",
    "CsvFile",
    "EarlyStopping",
    "Engine",
    "GracefulInterrupt",
    "MetricsFile",
    "SlowCopy",
    "StopRule",
    "Task",
    "TensorBatches",
    "Update",
    "move_to_device",
    "resolve_device",
    "resume",
    "seed_everything",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'beyondfit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
