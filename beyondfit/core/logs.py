"""Where the ``beyondfit`` logger's records go: results on stdout, diagnostics on stderr.

The command line's console handlers (``conf/config.yaml``) use :class:`ConsoleFormatter` and
:class:`BelowWarning`; a Python script whose logging was never configured gets the same split
from :func:`visible_logs` while ``fit`` runs.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any


class ConsoleFormatter(logging.Formatter):
    """Console format of the CLI: info lines bare (Keras-style), others prefixed by their level.

    Hydra's job log file keeps its own timestamped format; this only shapes the console.
    """

    def format(self, record: logging.LogRecord) -> str:
        """``message`` for INFO and below, ``WARNING: message`` above."""
        message = super().format(record)
        if record.levelno > logging.INFO:
            return f"{record.levelname}: {message}"
        return message


class BelowWarning(logging.Filter):
    """Pass only records below WARNING: results and progress on stdout, diagnostics on stderr.

    The command line's console handler (``conf/config.yaml``) and :func:`visible_logs` put
    INFO lines on stdout through this filter and WARNING and above on stderr, so that
    ``> results.txt`` keeps the warnings on the terminal and out of the results.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """True for DEBUG and INFO records."""
        return record.levelno < logging.WARNING


@contextlib.contextmanager
def visible_logs() -> Any:
    """Show the ``beyondfit`` logger's INFO lines on stdout (warnings on stderr) while inside,
    if nothing else does.

    In a script where logging was never configured, INFO records go nowhere; ``fit``'s
    default progress (Keras' ``verbose=1``) must still be seen. A configured logging setup
    (Hydra's, the user's) is left untouched.
    """
    logger = logging.getLogger("beyondfit")
    if logger.hasHandlers():
        yield
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(BelowWarning())
    warnings = logging.StreamHandler(sys.stderr)  # as Python's last-resort handler would
    warnings.setFormatter(ConsoleFormatter("%(message)s"))
    warnings.setLevel(logging.WARNING)
    level = logger.level
    logger.addHandler(handler)
    logger.addHandler(warnings)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.removeHandler(warnings)
        logger.setLevel(level)


def count(n: int, noun: str) -> str:
    """``n`` and ``noun`` for a message, plural unless ``n`` is 1: "1 graph", "2 graphs"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
