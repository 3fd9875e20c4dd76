"""Writing checkpoints atomically and reading them safely."""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError


class CorruptCheckpointError(BeyondfitError):
    """A checkpoint file that cannot be read back: truncated (a kill during a copy, a full
    disk) or otherwise damaged. Resuming a run directory falls back to the previous file on
    this error, never on a refused (unsafe) one."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """``torch.save`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    A process killed at any moment leaves either the old file or the new one, never half
    of one: the rename is atomic on POSIX file systems.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(directory: Path) -> None:
    # The rename itself must reach the disk too, or a power cut can undo it.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def safe_load(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; every failure is a clear BeyondfitError.

    Arbitrary pickled objects are refused, never executed: a checkpoint is data.
    """
    path = Path(path)
    if not path.is_file():
        raise BeyondfitError(f"checkpoint {str(path)!r} does not exist; check the path")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BeyondfitError(
            f"checkpoint {str(path)!r} was refused: it holds objects other than tensors and "
            f"plain data, which are never unpickled ({first[:160]}); "
            "only load checkpoints written by beyondfit"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CorruptCheckpointError(
            f"checkpoint {str(path)!r} is truncated or corrupt ({type(exc).__name__}); "
            "resume from an earlier checkpoint",
            path,
        ) from None
    if not isinstance(state, dict) or "model" not in state:
        raise BeyondfitError(
            f"checkpoint {str(path)!r} is not a beyondfit checkpoint (no 'model' entry)"
        )
    return state


def mismatched_keys(model_state: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """Describe how a saved model state differs from the model's: missing, extra, reshaped."""
    problems = [f"missing {k}" for k in model_state if k not in saved]
    problems += [f"unexpected {k}" for k in saved if k not in model_state]
    for key, value in saved.items():
        mine = model_state.get(key)
        if isinstance(mine, torch.Tensor) and isinstance(value, torch.Tensor):
            if mine.shape != value.shape:
                problems.append(f"{key} {tuple(value.shape)} vs model {tuple(mine.shape)}")
    return problems
