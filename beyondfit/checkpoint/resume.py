"""Finding the checkpoint to resume from, and loading it into an engine.

:func:`resume` takes a checkpoint file or a run directory. For a directory it loads the
newest good ``step-*.pt``: an unreadable, truncated or corrupt newest file (its checksum
tells) is skipped, with a warning naming it, for the one before it. A file that would need
arbitrary unpickling is refused, never executed; one of another model, optimizer or task is
a clear error before anything is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit.checkpoint.checkpointer import CHECKPOINT_DIR, file_step, step_checkpoints
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.serialization import (
    CorruptCheckpointError,
    ModelMismatchError,
    check_state_fits,
    safe_load,
)

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")


# ---------------------------------------------------------------------- resuming
def resume_run_dir(path: str | Path) -> Path | None:
    """The run directory a ``resume=PATH`` continues in, or ``None`` for a loose file.

    ``PATH`` may be a run directory, its ``checkpoints/`` folder, or a checkpoint inside
    it; a checkpoint file anywhere else has no run directory, and neither has a PATH that
    does not exist: a missing checkpoint of a finished run is not that run's finish (the
    resume then says it is missing, :func:`resume_candidates`).
    """
    path = Path(path).expanduser().resolve()
    if not path.exists():
        return None
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
        raise BeyondfitError(f"resume={str(path)!r} does not exist; {_instead(given)}")
    folder = given if given.name == CHECKPOINT_DIR else given / CHECKPOINT_DIR
    found = step_checkpoints(folder)
    if not found:
        raise BeyondfitError(
            f"resume={str(path)!r}: no step-*.pt checkpoint in {str(folder)!r} (the run may "
            "have stopped before its first checkpoint); start it again without resume"
        )
    return found, False


def _instead(missing: Path) -> str:
    """What to give instead of a ``resume=`` path that does not exist: the checkpoints of the
    folder it names, when that folder is there."""
    folder = missing.parent
    if folder.name != CHECKPOINT_DIR or not folder.is_dir():
        return ("give a checkpoint file or a run directory (one with a "
                f"{CHECKPOINT_DIR}/ folder)")
    found = sorted(p.name for p in folder.glob("*.pt") if p.is_file())
    if not found:
        return f"{str(folder)!r} holds no checkpoint"
    shown = ", ".join(found[-4:]) if len(found) <= 4 else f"..., {', '.join(found[-3:])}"
    return (f"{str(folder)!r} holds {shown}; give one of them, or resume={str(folder.parent)!r} "
            "for its newest")


def resume(
    engine: Engine,
    path: str | Path,
    *,
    config: Mapping[str, Any] | None = None,
    must_match: Sequence[str] = (),
) -> tuple[Path, dict[str, Any]]:
    """Load the checkpoint ``resume=PATH`` names into ``engine``; returns the file and state.

    For a run directory the newest ``step-*.pt`` is taken; when it is unreadable, truncated,
    or does not match its checksum, the previous one is loaded instead, with a warning
    naming both. Anything else is a one-line error before the engine is touched: an unsafe
    file, a file that is not a training checkpoint, another model, another optimizer, or
    (with ``config``) a saved config whose ``must_match`` keys (dotted, e.g.
    ``"task._target_"``) differ from ``config``'s.
    """
    candidates, explicit = resume_candidates(path)
    for index, candidate in enumerate(candidates):
        source = f"checkpoint {str(candidate)!r}"
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
        if config is not None:  # first: "another task" says more than the keys that differ
            _check_same(state.get("config"), config, must_match, source)
        named = file_step(candidate)
        counters = state.get("counters")
        step = counters.get("global_step") if isinstance(counters, Mapping) else None
        if named is not None and step != named:
            raise BeyondfitError(
                f"{source} was refused: counters.global_step={step!r} but the file is named "
                f"for step {named}; it was changed after beyondfit wrote it, resume from "
                "another checkpoint"
            )
        try:
            check_state_fits(state, engine.model, engine_optimizers(engine), source)
        except ModelMismatchError as exc:
            exc.saved_config = state.get("config")
            raise
        engine.load_state_dict(state, source=source)
        home = resume_run_dir(candidate)  # whose rows a branch's metrics files begin with
        for callback in engine.callbacks:
            resumed_from = getattr(callback, "resumed_from", None)
            if callable(resumed_from):
                resumed_from(home)
        return candidate, state
    raise AssertionError("unreachable: candidates is never empty")


def engine_optimizers(engine: Engine) -> dict[str, Any]:
    """The engine's optimizers by Update name (``""`` for a one-optimizer engine)."""
    return {update.name: update.optimizer for update in engine.updates}


def _check_same(saved: Any, current: Mapping[str, Any], keys: Sequence[str], source: str) -> None:
    if not isinstance(saved, Mapping):
        return  # written without a config (the Python API): nothing to compare
    for key in keys:
        old, new = _select(saved, key), _select(current, key)
        if old != new:
            raise BeyondfitError(
                f"{source} was written with {key}={old!r}, this run has {new!r}; resume "
                "with the same setting, or start a new run without resume"
            )


def _select(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, Mapping) else None
    return tree


#: What :func:`changed_settings` gives for a side of the comparison that lacks the key.
ABSENT = "<absent>"


def changed_settings(
    saved: Any, current: Any, ignore: tuple[str, ...] = ()
) -> list[tuple[str, Any, Any]]:
    """``(dotted key, saved value, current value)`` for every setting that differs between two
    plain config trees; a side without the key gives :data:`ABSENT`. ``ignore``: dotted keys
    (and what is under them) left out."""
    changes: list[tuple[str, Any, Any]] = []

    def walk(a: Any, b: Any, key: str) -> None:
        if key in ignore:
            return
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for sub in sorted(set(a) | set(b), key=str):
                name = f"{key}.{sub}" if key else str(sub)
                walk(a.get(sub, ABSENT), b.get(sub, ABSENT), name)
        elif a != b:
            changes.append((key, a, b))

    walk(saved, current, "")
    return changes


def config_changes(saved: Any, current: Any, ignore: tuple[str, ...] = ()) -> list[str]:
    """Dotted keys whose values differ between two plain config trees, as ``key: a -> b``.

    Used to warn when a run is resumed with settings other than those it was started with.
    """
    return [f"{key}: {a!r} -> {b!r}" for key, a, b in changed_settings(saved, current, ignore)]


def model_settings_hint(saved: Any, current: Mapping[str, Any]) -> str:
    """For a checkpoint whose weights do not fit this model: the ``task.`` settings (what
    builds the model) that differ from the config it was written with, and the overrides that
    give that run's values; ``""`` when there is nothing to say. A key the checkpoint's run
    did not have is newer than it (``task.members``, since issue 47): named, with no value."""
    if not isinstance(saved, Mapping):
        return ""
    changes = changed_settings({"task": saved.get("task")}, {"task": current.get("task")})
    if not changes:
        return ""
    shown = "; ".join(f"{key}: {a!r} -> {b!r}" for key, a, b in changes[:8])
    if len(changes) > 8:
        shown += f"; and {len(changes) - 8} more"
    values = " ".join(f"{'+' if b == ABSENT else ''}{key}={_override_value(a)}"
                      for key, a, b in changes if a != ABSENT)
    newer = [key for key, a, _ in changes if a == ABSENT]
    give = f" (e.g. {values})" if values else ""
    late = (f"; {', '.join(newer)} did not exist when it ran: give the value that builds the "
            "model it had (see the key in the config reference)") if newer else ""
    return (f"; its run's task settings differ from this run's ({shown}): resume with the "
            f"first run's settings{give}{late}")


def _override_value(value: Any) -> str:
    """``value`` as written in a Hydra command-line override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    return str(value)
