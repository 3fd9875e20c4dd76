"""The engine's layer: one step engine and what it needs, nothing above it.

Nothing here imports Hydra, OmegaConf, Gymnasium, matplotlib or TensorBoard, nor any of
``beyondfit.rl``, ``beyondfit.tasks``, ``beyondfit.cli`` or ``beyondfit.observers``.
"""

from beyondfit.core.callbacks import Callback, StopRule
from beyondfit.core.device import move_to_device, resolve_device
from beyondfit.core.early_stopping import EarlyStopping
from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.metrics import MetricTracker
from beyondfit.core.seeding import seed_everything
from beyondfit.core.strategy import Strategy, resolve_strategy
from beyondfit.core.target import SlowCopy
from beyondfit.core.update import Update

__all__ = [
    "BeyondfitError",
    "Callback",
    "EarlyStopping",
    "Engine",
    "MetricTracker",
    "SlowCopy",
    "StopRule",
    "Strategy",
    "Update",
    "move_to_device",
    "resolve_device",
    "resolve_strategy",
    "seed_everything",
]
