"""Checkpoints of a run: when and where they are written, resuming, and interruptions.

The file format itself (atomic write, safe read) is the engine's
(:mod:`beyondfit.core.serialization`); this package decides *when* to save, *which* file
to resume from, and turns Ctrl-C and SIGTERM into a checkpoint and a clean exit. The names
load on first use (:mod:`beyondfit.core.lazy`): the command line reads the file names
without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from beyondfit.core.lazy import lazy_exports

_CHECKPOINTER = "beyondfit.checkpoint.checkpointer"
_INTERRUPT = "beyondfit.checkpoint.interrupt"
_RESUME = "beyondfit.checkpoint.resume"
_EXPORTS = {
    "BEST_FILE": _CHECKPOINTER,
    "CHECKPOINT_DIR": _CHECKPOINTER,
    "Checkpointer": _CHECKPOINTER,
    "step_checkpoints": _CHECKPOINTER,
    "step_file_name": _CHECKPOINTER,
    "GracefulInterrupt": _INTERRUPT,
    "TrainingInterrupted": _INTERRUPT,
    "config_changes": _RESUME,
    "resume": _RESUME,
    "resume_candidates": _RESUME,
    "resume_run_dir": _RESUME,
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from beyondfit.checkpoint.checkpointer import (
        BEST_FILE,
        CHECKPOINT_DIR,
        Checkpointer,
        step_checkpoints,
        step_file_name,
    )
    from beyondfit.checkpoint.interrupt import GracefulInterrupt, TrainingInterrupted
    from beyondfit.checkpoint.resume import (
        config_changes,
        resume,
        resume_candidates,
        resume_run_dir,
    )

__all__ = [
    "BEST_FILE",
    "CHECKPOINT_DIR",
    "Checkpointer",
    "GracefulInterrupt",
    "TrainingInterrupted",
    "config_changes",
    "resume",
    "resume_candidates",
    "resume_run_dir",
    "step_checkpoints",
    "step_file_name",
]
