"""The one exception type for mistakes a user can make."""

from __future__ import annotations


class BeyondfitError(Exception):
    """A problem the user can fix: bad config, data, loss closure or checkpoint.

    The message names the bad key or value and says how to fix it. The command line
    prints it as one line and exits with status 2, without a traceback.
    """


def with_path(exc: OSError, path: object) -> OSError:
    """``exc`` naming ``path`` when it names no file (``ENOSPC`` from a write names none).

    The command line prints a file-system error as one line with its path; raise
    ``with_path(exc, path) from exc`` where a write can fail.
    """
    if exc.filename is not None:
        return exc
    import errno

    return OSError(exc.errno or errno.EIO, exc.strerror or str(exc) or "I/O error", str(path))
