"""The one exception type for mistakes a user can make."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class BeyondfitError(Exception):
    """A problem the user can fix: bad config, data, loss closure or checkpoint.

    The message names the bad key or value and says how to fix it. The command line
    prints it as one line and exits with status 2, without a traceback.
    """


def no_train_batches(data: Any, one_shot: bool, epochs_done: int) -> str:
    """Why an epoch got no training batches, and what to pass instead."""
    if one_shot and epochs_done > 0:
        return (
            f"train_data yielded no batches in epoch {epochs_done + 1}: it is a one-shot "
            f"iterator ({type(data).__name__}), used up by the first epoch; pass something "
            "that can be iterated again (a list, a DataLoader, a class with __iter__), or "
            "train one epoch per fit call"
        )
    return "train_data yielded no batches; check the data source and the batch size"


def no_val_batches(data: Any) -> str:
    """Why an evaluation got no batches, and what to pass instead."""
    if isinstance(data, Iterator):
        return (
            f"val_data yielded no batches: it is a one-shot iterator ({type(data).__name__}), "
            "used up by an earlier evaluation; pass a list or a DataLoader"
        )
    return "val_data yielded no batches; check the validation split"


def with_path(exc: OSError, path: object) -> OSError:
    """``exc`` naming ``path`` when it names no file (``ENOSPC`` from a write names none).

    The command line prints a file-system error as one line with its path; raise
    ``with_path(exc, path) from exc`` where a write can fail.
    """
    if exc.filename is not None:
        return exc
    import errno

    return OSError(exc.errno or errno.EIO, exc.strerror or str(exc) or "I/O error", str(path))


def one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                     lineno: int, line: str | None = None) -> str:
    """``warnings.formatwarning`` for the command line: one line per warning (Python's own
    adds the source line below it), so a library's warning before an error stays one line."""
    return f"{category.__name__}: {' '.join(str(message).split())}\n"
