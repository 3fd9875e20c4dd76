"""One run per directory: a live run holds a lock on its run directory.

Two runs writing one directory interleave their metrics rows and set aside each other's
checkpoints. So a run takes an exclusive ``flock`` on ``RUN_DIR/.beyondfit.lock`` (its pid and
host written inside) before Hydra writes anything there, and keeps it until it ends. The
kernel drops the lock when the process dies, however it dies: a lock left by a killed run
(``kill -9``, a node failure with a local disk) is simply taken over. A second run on a held
directory stops with one line naming the directory and the holder.

A directory that already holds a finished or stopped run (rows in ``metrics.jsonl``, files in
``checkpoints/``) is refused unless the run continues it (``resume=``): its rows would mix
with the new run's.

Under torchrun only rank 0 runs Hydra and locks; the other ranks write nothing.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from pathlib import Path
from typing import Any

from beyondfit.core.errors import BeyondfitError

try:  # POSIX; elsewhere runs are not locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".beyondfit.lock"

# Directories this process holds, so the Hydra callback and run() lock each one once.
_held: dict[Path, int | None] = {}


def claim_run_dir(run_dir: str | Path, *, resuming: bool) -> bool:
    """Lock ``run_dir`` for this process (creating it) or raise a one-line BeyondfitError.

    Refuses a directory another live run holds, and one with a previous run's rows or
    checkpoints unless ``resuming``. Returns True when this call took the lock, False when
    this process already held it (then it does nothing).
    """
    run_dir = Path(run_dir).expanduser().absolute()
    if run_dir in _held:
        return False
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = _lock(run_dir)
    try:
        if not resuming:
            _refuse_previous_run(run_dir)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    _held[run_dir] = fd
    return True


def _lock(run_dir: Path) -> int | None:
    if fcntl is None:
        return None
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise BeyondfitError(
            f"run directory {str(run_dir)!r} is in use by another run "
            f"({_read_holder(path)}); wait for it to end, or give this run its own "
            "hydra.run.dir"
        ) from None
    os.ftruncate(fd, 0)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode())
    return fd


def release_run_dir(run_dir: str | Path) -> None:
    """Drop this process's lock on ``run_dir`` (no-op when not held)."""
    fd = _held.pop(Path(run_dir).expanduser().absolute(), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the flock (the file stays)


def _read_holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "a process that is still starting"


def _refuse_previous_run(run_dir: Path) -> None:
    # Imported here: the command line imports this module before it needs torch.
    from beyondfit.checkpoint import CHECKPOINT_DIR

    metrics = run_dir / "metrics.jsonl"
    checkpoints = run_dir / CHECKPOINT_DIR
    found = []
    if metrics.is_file() and metrics.stat().st_size > 0:
        found.append("metrics.jsonl")
    if checkpoints.is_dir() and any(checkpoints.glob("*.pt")):
        found.append(f"{CHECKPOINT_DIR}/")
    if found:
        raise BeyondfitError(
            f"run directory {str(run_dir)!r} already holds a run ({', '.join(found)}); "
            f"continue it with resume={run_dir}, or give this run its own hydra.run.dir"
        )


def _resuming(cfg: Any) -> bool:
    value = cfg.get("resume") if cfg is not None else None
    return value not in (None, "", "null")


try:
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover - Hydra is a dependency
    _HydraCallback = object  # type: ignore[assignment,misc]


class RunDirRefused(BaseException):
    """The run directory cannot be used: stops Hydra before it writes anything there.

    A BaseException because Hydra turns an Exception from a callback into a warning and
    carries on; the command line prints ``error`` as one line (exit status 2).
    """

    def __init__(self, error: BeyondfitError | OSError) -> None:
        super().__init__(str(error))
        self.error = error


class ClaimRunDir(_HydraCallback):  # type: ignore[misc,valid-type]
    """Hydra callback (``hydra.callbacks`` in ``conf/config.yaml``): lock the run directory
    before Hydra writes its ``.hydra/`` record and log file into it.

    The directory name is resolved here, once, and pinned into the config, so Hydra uses
    exactly the directory that was locked (``${now:...}`` would otherwise be read again).
    A refusal raises :class:`RunDirRefused`.
    """

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        """Single runs: resolve, pin and lock ``hydra.run.dir``."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf, read_write

        HydraConfig.instance().set_config(config)
        run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir"))).absolute()
        with read_write(config.hydra.run):
            config.hydra.run.dir = str(run_dir)
        try:
            claim_run_dir(run_dir, resuming=_resuming(config))
        except (BeyondfitError, OSError) as exc:
            raise RunDirRefused(exc) from None

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        """Release the lock once the run is over."""
        release_run_dir(str(config.hydra.run.dir))


def os_error_line(exc: OSError) -> str:
    """One line for a file-system error: the path, the reason, and what to do. A failed write
    names no file (a full disk as Hydra writes .hydra/): then the run directory is named."""
    path = exc.filename or (next(iter(_held)) if len(_held) == 1 else None)
    reason = exc.strerror or str(exc) or type(exc).__name__
    hint = {
        errno.ENOSPC: "the disk is full: free space, then continue with resume=RUN_DIR",
        errno.EDQUOT: "the disk quota is used up: free space, then continue with resume=RUN_DIR",
        errno.EROFS: "the file system is read-only: pick another hydra.run.dir",
        errno.EACCES: "no permission: pick a writable hydra.run.dir",
        errno.EPERM: "no permission: pick a writable hydra.run.dir",
        errno.EEXIST: "a file is where a folder should be: move it away",
        errno.ENOTDIR: "a file is where a folder should be: move it away",
        errno.EISDIR: "a folder is where a file should be: move it away",
        errno.EFBIG: "the file grew past this process's file-size limit (ulimit -f): raise it, "
                     "then continue with resume=RUN_DIR",
    }.get(exc.errno or 0, "check the path")
    where = f" {str(path)!r}" if path else ""
    return f"cannot use{where}: {reason} ({hint})"
