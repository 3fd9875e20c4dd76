"""Finding the checkpoint to resume from, and loading it into an engine.

:func:`resume` takes a checkpoint file or a run directory. For a directory it loads the
newest readable ``step-*.pt``; a truncated or corrupt newest file is skipped, with a
warning, for the one before it. A file that would need arbitrary unpickling is refused,
never executed, and never skipped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit.checkpoint.checkpointer import CHECKPOINT_DIR, step_checkpoints
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.serialization import CorruptCheckpointError, safe_load

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")


# ---------------------------------------------------------------------- resuming
def resume_run_dir(path: str | Path) -> Path | None:
    """The run directory a ``resume=PATH`` continues in, or ``None`` for a loose file.

    ``PATH`` may be a run directory, its ``checkpoints/`` folder, or a checkpoint inside
    it; a checkpoint file anywhere else has no run directory.
    """
    path = Path(path).expanduser().resolve()
    if path.is_dir():
        return path.parent if path.name == CHECKPOINT_DIR else path
    if path.parent.name == CHECKPOINT_DIR:
        return path.parent.parent
    return None


def resume_candidates(path: str | Path) -> tuple[list[Path], bool]:
    """Checkpoints to try for ``resume=PATH``, best first, and whether PATH named a file.

    Raises :class:`BeyondfitError` when PATH does not exist or holds no checkpoint.
    """
    given = Path(path).expanduser()
    if given.is_file():
        return [given], True
    if not given.exists():
        raise BeyondfitError(
            f"resume={str(path)!r} does not exist; give a checkpoint file or a run directory "
            f"(one with a {CHECKPOINT_DIR}/ folder)"
        )
    folder = given if given.name == CHECKPOINT_DIR else given / CHECKPOINT_DIR
    found = step_checkpoints(folder)
    if not found:
        raise BeyondfitError(
            f"resume={str(path)!r}: no step-*.pt checkpoint in {str(folder)!r} (the run may "
            "have stopped before its first checkpoint); start it again without resume"
        )
    return found, False


def resume(engine: Engine, path: str | Path) -> tuple[Path, dict[str, Any]]:
    """Load the checkpoint ``resume=PATH`` names into ``engine``; returns the file and state.

    For a run directory the newest ``step-*.pt`` is taken; when it is truncated or corrupt
    the previous one is loaded instead, with a warning naming both. Any other problem
    (an unsafe file, a different model) is an error.
    """
    candidates, explicit = resume_candidates(path)
    for index, candidate in enumerate(candidates):
        try:
            state = safe_load(candidate)
        except CorruptCheckpointError as exc:
            if explicit or index + 1 == len(candidates):
                if not explicit:
                    raise BeyondfitError(
                        f"every checkpoint in {str(candidate.parent)!r} is truncated or "
                        f"corrupt (the last tried: {candidate.name}); start the run again "
                        "without resume"
                    ) from None
                raise
            log.warning("%s; falling back to %s", exc, candidates[index + 1].name)
            continue
        engine.load_state_dict(state, source=f"checkpoint {str(candidate)!r}")
        return candidate, state
    raise AssertionError("unreachable: candidates is never empty")


def config_changes(saved: Any, current: Any, ignore: tuple[str, ...] = ()) -> list[str]:
    """Dotted keys whose values differ between two plain config trees, as ``key: a -> b``.

    Used to warn when a run is resumed with settings other than those it was started with.
    """
    changes: list[str] = []

    def walk(a: Any, b: Any, key: str) -> None:
        if key in ignore:
            return
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for sub in sorted(set(a) | set(b), key=str):
                name = f"{key}.{sub}" if key else str(sub)
                walk(a.get(sub, "<absent>"), b.get(sub, "<absent>"), name)
        elif a != b:
            changes.append(f"{key}: {a!r} -> {b!r}")

    walk(saved, current, "")
    return changes
