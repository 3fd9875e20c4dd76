"""beyondfit: one step engine for training loops that ``fit()`` cannot express.

Write a loss closure ``loss_fn(model, batch)``; :class:`Engine` does the rest, the same way
for supervised, self-supervised and reinforcement learning.
"""

from beyondfit.callbacks import Callback, StopRule
from beyondfit.checkpointing import Checkpointer, resume
from beyondfit.data import TensorBatches
from beyondfit.device import move_to_device, resolve_device
from beyondfit.engine import Engine
from beyondfit.errors import BeyondfitError
from beyondfit.interrupt import GracefulInterrupt
from beyondfit.loggers import ConsoleLogger, CsvFile, MetricsFile
from beyondfit.seeding import seed_everything
from beyondfit.task import Task

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
    "move_to_device",
    "resolve_device",
    "resume",
    "seed_everything",
]
__version__ = "0.1.0"
