"""Checkpoints of a run: when and where they are written, resuming, and interruptions.

The file format itself (atomic write, safe read) is the engine's
(:mod:`beyondfit.core.state.serialization`); this package decides *when* to save, *which* file
to resume from (``beyondfit.resume``, the one entry point), and turns Ctrl-C and SIGTERM
into a checkpoint and a clean exit.
"""

from beyondfit.checkpoint.checkpointer import (
    BEST_FILE,
    CHECKPOINT_DIR,
    step_checkpoints,
    step_file_name,
)
from beyondfit.checkpoint.interrupt import GracefulInterrupt, TrainingInterrupted
from beyondfit.checkpoint.resume import config_changes

__all__ = [
    "BEST_FILE",
    "CHECKPOINT_DIR",
    "GracefulInterrupt",
    "TrainingInterrupted",
    "config_changes",
    "step_checkpoints",
    "step_file_name",
]
