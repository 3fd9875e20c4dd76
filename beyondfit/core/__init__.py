"""The engine's layer: one step engine and what it needs, nothing above it.

Nothing here imports Hydra, OmegaConf, Gymnasium, matplotlib or TensorBoard, nor any of
``beyondfit.rl``, ``beyondfit.tasks``, ``beyondfit.cli`` or ``beyondfit.observers``.
The names below load on first use (:mod:`beyondfit.core.lazy`): ``beyondfit.core.errors``
and the other torch-free modules import without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from beyondfit.core.lazy import lazy_exports

_EXPORTS = {
    "BeyondfitError": "beyondfit.core.errors",
    "Callback": "beyondfit.core.callbacks",
    "EarlyStopping": "beyondfit.core.early_stopping",
    "Engine": "beyondfit.core.engine",
    "MetricTracker": "beyondfit.core.metrics",
    "StopRule": "beyondfit.core.callbacks",
    "Strategy": "beyondfit.core.strategy",
    "Update": "beyondfit.core.update",
    "move_to_device": "beyondfit.core.device",
    "resolve_device": "beyondfit.core.device",
    "resolve_strategy": "beyondfit.core.strategy",
    "seed_everything": "beyondfit.core.seeding",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from beyondfit.core.callbacks import Callback, StopRule
    from beyondfit.core.device import move_to_device, resolve_device
    from beyondfit.core.early_stopping import EarlyStopping
    from beyondfit.core.engine import Engine
    from beyondfit.core.errors import BeyondfitError
    from beyondfit.core.metrics import MetricTracker
    from beyondfit.core.seeding import seed_everything
    from beyondfit.core.strategy import Strategy, resolve_strategy
    from beyondfit.core.update import Update

__all__ = [
    "BeyondfitError",
    "Callback",
    "EarlyStopping",
    "Engine",
    "MetricTracker",
    "StopRule",
    "Strategy",
    "Update",
    "move_to_device",
    "resolve_device",
    "resolve_strategy",
    "seed_everything",
]
