"""beyondfit: one step engine for training loops that ``fit()`` cannot express.

Write a loss closure ``loss_fn(model, batch)``; :class:`Engine` does the rest, the same way
for supervised, self-supervised and reinforcement learning.
"""

from beyondfit.checkpoint import Checkpointer, GracefulInterrupt, resume
from beyondfit.core import (
    BeyondfitError,
    Callback,
    Engine,
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
    "Engine",
    "GracefulInterrupt",
    "MetricsFile",
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
