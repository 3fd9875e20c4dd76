"""Writing checkpoints atomically with a checksum, and reading them safely."""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError, with_path

log = logging.getLogger("beyondfit")


class ModelMismatchError(BeyondfitError):
    """A checkpoint whose weights are not this model's (other names or shapes).

    ``saved_config``: the config the checkpoint was written with, where the loader knows it
    (the command line names the task settings that differ from it)."""

    saved_config: Any = None


class CorruptCheckpointError(BeyondfitError):
    """A checkpoint file that cannot be trusted: truncated (a kill during a copy, a full
    disk), changed after it was written (its checksum does not match), or not a checkpoint
    at all. Resuming a run directory falls back to the previous file on this error, never on
    a refused (unsafe) one."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


# ---------------------------------------------------------------------- the file format
# A checkpoint is torch.save's zip archive followed by one fixed-size line: its SHA-256.
#
#     <torch.save bytes> \n beyondfit-checkpoint v1 sha256=<64 lowercase hex digits> \n
#
# torch.load still reads the file as it is (zip readers find the archive's directory from its
# end record and ignore what follows), so a checkpoint stays a torch file for other tools,
# while every flipped bit anywhere in it is caught: in the archive by the digest, in the
# trailer by its exact form. Check one by hand: head -c -97 FILE | sha256sum
_TRAILER_HEAD = b"\nbeyondfit-checkpoint v1 sha256="
TRAILER_SIZE = len(_TRAILER_HEAD) + 64 + 1
# Files from before the checksum end with the zip's end record (22 bytes, no comment).
_ZIP_END = b"PK\x05\x06"
_ZIP_END_SIZE = 22
_CHUNK = 1 << 20


class _HashingWriter:
    """A write-only file wrapper that hashes what passes through (torch.save writes in order)."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """``torch.save`` plus a SHA-256 trailer to a temporary file beside ``path``, fsync it,
    then rename it over ``path``.

    A process killed at any moment leaves either the old file or the new one, never half
    of one: the rename is atomic on POSIX file systems. A failed write (a full disk, no
    permission) raises ``OSError`` naming ``path``, and leaves the old file as it was; a
    ``path`` that is a directory is a :class:`BeyondfitError` before anything is written.
    """
    path = Path(path)
    if path.is_dir():
        raise BeyondfitError(f"{str(path)!r} is a directory; give a file path to save to, e.g. "
                             f"{str(path / 'engine.pt')!r}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise with_path(exc, path) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(obj, writer)
            f.write(_TRAILER_HEAD + writer.digest.hexdigest().encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        # torch's zip writer reports a failed write (a full disk, a file-size limit) as a
        # RuntimeError ("unexpected pos") raised while handling the OSError: name the OSError.
        failed = exc if isinstance(exc, OSError) else _os_error_behind(exc)
        if failed is not None:
            raise with_path(failed, path) from exc
        raise
    _fsync_dir(path.parent)
    return path


def _os_error_behind(exc: BaseException) -> OSError | None:
    """The OSError an Exception was raised while handling (or from), if any."""
    if not isinstance(exc, Exception):
        return None  # a Ctrl-C stays a Ctrl-C
    seen = exc.__cause__ or exc.__context__
    for _ in range(5):
        if seen is None or isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


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
    """Verify a checkpoint's checksum, then load it with ``weights_only=True``.

    Every failure is a one-line :class:`BeyondfitError` naming the file:
    :class:`CorruptCheckpointError` when it is damaged, truncated or no checkpoint at all
    (a run directory's resume falls back past it); a plain BeyondfitError when it holds
    objects other than tensors and plain data, which are refused, never executed. A file
    written before checksums existed loads with a warning that it cannot be verified.
    """
    path = Path(path)
    if not path.is_file():
        raise BeyondfitError(f"checkpoint {str(path)!r} does not exist; check the path")
    try:
        with path.open("rb") as f:  # one descriptor: what was verified is what is loaded
            verified = _verify(f, path)
            f.seek(0)
            state = _load(f, path, map_location, verified)
    except OSError as exc:
        raise CorruptCheckpointError(
            f"checkpoint {str(path)!r} cannot be read ({exc.strerror or exc}); check its "
            "permissions, or resume from an earlier checkpoint",
            path,
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise CorruptCheckpointError(
            f"checkpoint {str(path)!r} is not a beyondfit checkpoint (no 'model' entry)", path
        )
    if not verified:
        log.warning(
            "checkpoint %s has no checksum (written by an older beyondfit): it loaded, but "
            "damage to it could not be detected", path,
        )
    return state


def _verify(f: Any, path: Path) -> bool:
    """Check the trailer's digest; True when verified, False for a pre-checksum file."""
    size = os.fstat(f.fileno()).st_size
    if size >= TRAILER_SIZE:
        f.seek(size - TRAILER_SIZE)
        trailer = f.read(TRAILER_SIZE)
        if trailer.startswith(_TRAILER_HEAD):
            expected = trailer[len(_TRAILER_HEAD) : -1]
            f.seek(0)
            digest = hashlib.sha256()
            left = size - TRAILER_SIZE
            while left > 0:
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    break
                digest.update(chunk)
                left -= len(chunk)
            if trailer.endswith(b"\n") and digest.hexdigest().encode() == expected:
                return True
            raise CorruptCheckpointError(
                f"checkpoint {str(path)!r} does not match its checksum: it changed after it "
                "was written (a damaged disk or copy); resume from an earlier checkpoint",
                path,
            )
    if size >= _ZIP_END_SIZE:
        f.seek(size - _ZIP_END_SIZE)
        end = f.read(_ZIP_END_SIZE)
        if end.startswith(_ZIP_END) and end[-2:] == b"\x00\x00":
            return False  # a torch file without a trailer: an older beyondfit's checkpoint
    raise CorruptCheckpointError(
        f"checkpoint {str(path)!r} is truncated or corrupt, or not a checkpoint ({size} bytes, "
        "no checksum record at its end); resume from an earlier checkpoint",
        path,
    )


def _load(f: Any, path: Path, map_location: Any, verified: bool) -> Any:
    try:
        return torch.load(f, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        # A verified file is as it was written: what it holds was put there on purpose.
        # In an unverified one only a reference to a callable is surely not damage.
        # torch words it "Unsupported global: GLOBAL x.y" or "unsupported GLOBAL x.y whose
        # module x is blocked" (os.system, eval): either way a call it refused to make.
        found = re.search(r"unsupported global:? (?:GLOBAL )?([^\s]+)", str(exc), re.I)
        if verified or found:
            what = f"a reference to {found.group(1)}" if found else "an unsupported object"
            raise BeyondfitError(
                f"checkpoint {str(path)!r} was refused as unsafe: it holds objects other than "
                f"tensors and plain data ({what[:120]}), which are never unpickled; only load "
                "checkpoints written by beyondfit"
            ) from None
        raise _corrupt(path, exc) from None
    except Exception as exc:  # a damaged archive fails in any of torch's layers
        raise _corrupt(path, exc) from None


def _corrupt(path: Path, exc: BaseException) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"checkpoint {str(path)!r} is truncated or corrupt ({type(exc).__name__}); resume "
        "from an earlier checkpoint",
        path,
    )


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


# ---------------------------------------------------------------------- does it fit?
#: What a checkpoint needs to continue a run (Engine.state_dict's keys).
RESUME_KEYS = ("model", "updates", "counters", "metrics")


def check_state_fits(
    state: Mapping[str, Any],
    model: torch.nn.Module,
    optimizers: Mapping[str, torch.optim.Optimizer],
    source: str,
) -> None:
    """Raise a one-line BeyondfitError when ``state`` cannot continue this model and these
    optimizers (by Update name: ``{"": opt}`` for a one-optimizer engine); change nothing.
    Call it before loading anything.

    Catches a file that is not a whole training checkpoint (weights only, another tool's), a
    model of another shape or task (the keys that differ), and another optimizer (whose
    settings would otherwise be loaded and fail at the first step, e.g. ``KeyError:
    'momentum'``).
    """
    absent = [key for key in RESUME_KEYS if not isinstance(state.get(key), Mapping)]
    if absent:
        raise BeyondfitError(
            f"{source} is not a whole training checkpoint (no {', '.join(absent)}); it cannot "
            "continue a run (weights alone load with model.load_state_dict)"
        )
    problems = mismatched_keys(model.state_dict(), state["model"])
    if problems:
        shown = "; ".join(problems[:8])
        if len(problems) > 8:
            shown += f"; and {len(problems) - 8} more"
        raise ModelMismatchError(
            f"{source} does not fit this model ({shown}); it was written for a different "
            "task or model shape"
        )
    saved = state["updates"]
    if sorted(saved) != sorted(optimizers):
        raise BeyondfitError(
            f"{source} holds optimizers {sorted(saved)} but this engine has "
            f"{sorted(optimizers)}; resume with the same optimizers"
        )
    for name, optimizer in optimizers.items():
        entry = saved[name]
        old = entry.get("optimizer") if isinstance(entry, Mapping) else None
        problem = (optimizer_mismatch(optimizer.state_dict(), old)
                   if isinstance(old, Mapping) else "no optimizer state")
        if problem:
            which = f" {name!r}" if name else ""
            raise BeyondfitError(
                f"{source} holds the state of another optimizer{which} ({problem}); resume "
                "with the optimizer it was written with"
            )


#: Keys torch's LR schedulers add to an optimizer's param groups when they are built.
SCHEDULER_GROUP_KEYS = frozenset(
    {"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"})


def optimizer_mismatch(mine: Mapping[str, Any], saved: Mapping[str, Any]) -> str | None:
    """How a saved optimizer state differs from this optimizer's, or ``None`` if it fits.

    Settings the saved groups have and this optimizer lacks mean another algorithm (Adam's
    ``betas`` into SGD); settings only this one has are tolerated (a newer torch adds some).
    """
    groups, saved_groups = mine.get("param_groups"), saved.get("param_groups")
    if not isinstance(saved_groups, list) or not isinstance(groups, list):
        return "no parameter groups"
    if len(saved_groups) != len(groups):
        return f"{len(saved_groups)} parameter groups, this optimizer has {len(groups)}"
    for index, (group, old) in enumerate(zip(groups, saved_groups)):
        if not isinstance(old, Mapping) or not isinstance(old.get("params"), list):
            return f"parameter group {index} is malformed"
        if len(old["params"]) != len(group["params"]):
            return (f"group {index} has {len(old['params'])} parameters, this optimizer "
                    f"{len(group['params'])}")
        # LR schedulers write their own keys into the groups (``initial_lr`` and OneCycle's
        # bounds) when they are built, which a fresh engine does after ``load``.
        foreign = sorted(set(old) - set(group) - SCHEDULER_GROUP_KEYS)
        if foreign:
            return f"settings {', '.join(map(str, foreign))} that this optimizer does not have"
    return None


def nonfinite_entries(named: Iterable[tuple[str, Any]], limit: int = 5) -> list[str]:
    """Names of the floating tensors among ``named`` holding NaN or inf (at most ``limit``).

    One host sync in all, however many tensors: cheap enough for every checkpoint.
    """
    names, flags = [], []
    for name, value in named:
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
            names.append(name)
            flags.append(torch.isfinite(value.detach()).all())
    if not flags:
        return []
    finite = torch.stack([flag.to(flags[0].device) for flag in flags]).tolist()
    return [name for name, ok in zip(names, finite) if not ok][:limit]


def is_plain_extra_state(name: str, value: object) -> bool:
    """A module's ``get_extra_state`` entry of a state dict (``NAME._extra_state``) holding
    plain data only (numbers, strings, booleans, None, lists and string-keyed dicts of them),
    as :class:`~beyondfit.core.target.SlowCopy` saves its call counter: not a tensor, but data.
    """
    def plain(v: object) -> bool:
        if v is None or isinstance(v, bool | int | float | str):
            return True
        if isinstance(v, list | tuple):
            return all(plain(x) for x in v)
        return isinstance(v, dict) and all(isinstance(k, str) and plain(x) for k, x in v.items())

    return name.endswith("_extra_state") and plain(value)
