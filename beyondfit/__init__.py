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
from typing import TYPE_CHECKING

from beyondfit.core.lazy import lazy_exports


def _starting_the_command_line() -> bool:
    # `python -m beyondfit ...` (Python's own argv) or the `beyondfit` console script.
    argv = getattr(sys, "orig_argv", [])
    as_module = any(a == "-m" and b == "beyondfit" for a, b in itertools.pairwise(argv))
    return as_module or os.path.basename(sys.argv[0] if sys.argv else "") == "beyondfit"


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """SIGINT or SIGTERM before the command line is loaded: one line, status 130 or 143,
    at once."""
    name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT"
    os.write(2, f"\nbeyondfit: interrupted ({name})\n".encode())
    os._exit(128 + signum)  # nothing has started: nothing to clean up


if _starting_the_command_line():
    # From here to the command line's own handling, Python (runpy) and the imports run;
    # a KeyboardInterrupt there would be a traceback. beyondfit.__main__ takes over.
    for _signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signum, _interrupted_while_starting)

# Each public name and the module that defines it (its one home; this is its one re-export).
# Everything else is imported from its own module: beyondfit.core.device, .checkpoint.interrupt,
# .observers.files, .core.console, ...
_EXPORTS = {
    "Engine": "beyondfit.core.engine",
    "Update": "beyondfit.core.update",
    "Callback": "beyondfit.core.callbacks",
    "StopRule": "beyondfit.core.callbacks",
    "EarlyStopping": "beyondfit.core.early_stopping",
    "BeyondfitError": "beyondfit.core.errors",
    "seed_everything": "beyondfit.core.seeding",
    "TensorBatches": "beyondfit.data.batches",
    "Task": "beyondfit.tasks.contract",
    "MetricsFile": "beyondfit.observers.files",
    "Checkpointer": "beyondfit.checkpoint.checkpointer",
    "resume": "beyondfit.checkpoint.resume",
}

if TYPE_CHECKING:
    from beyondfit.checkpoint.checkpointer import Checkpointer
    from beyondfit.checkpoint.resume import resume
    from beyondfit.core.callbacks import Callback, StopRule
    from beyondfit.core.early_stopping import EarlyStopping
    from beyondfit.core.engine import Engine
    from beyondfit.core.errors import BeyondfitError
    from beyondfit.core.seeding import seed_everything
    from beyondfit.core.update import Update
    from beyondfit.data.batches import TensorBatches
    from beyondfit.observers.files import MetricsFile
    from beyondfit.tasks.contract import Task

__all__ = [
    "BeyondfitError",
    "Callback",
    "Checkpointer",
    "EarlyStopping",
    "Engine",
    "MetricsFile",
    "StopRule",
    "Task",
    "TensorBatches",
    "Update",
    "resume",
    "seed_everything",
]
__version__ = "0.1.0"
_lazy_getattr, __dir__ = lazy_exports(globals(), _EXPORTS)


def __getattr__(name: str) -> object:
    """A public name, imported on first use; the engine with the distributed layer's
    strategy resolver in place (strategy="auto" is DDP under torchrun), which the core itself
    does not import."""
    if name == "Engine":
        importlib.import_module("beyondfit.distributed.connector")
    return _lazy_getattr(name)
