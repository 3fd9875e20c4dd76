"""The one exception type for mistakes a user can make."""

from __future__ import annotations


class BeyondfitError(Exception):
    """A problem the user can fix: bad config, data, loss closure or checkpoint.

    The message names the bad key or value and says how to fix it. The command line
    prints it as one line and exits with status 2, without a traceback.
    """
