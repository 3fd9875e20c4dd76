"""``python -m beyondfit +task=NAME [key=value ...]``: see :mod:`beyondfit.cli.app`.

Ctrl-C while torch and Hydra load (the first seconds) ends at once with one line and status
130, like Ctrl-C at any later moment: until the command line is imported, SIGINT exits
directly instead of raising KeyboardInterrupt, which an import inside a C extension can
swallow (torch's import of NumPy does, leaving NumPy half-loaded and the run going on).
"""

import signal

from beyondfit import _interrupted_while_starting


def main() -> None:
    """The ``beyondfit`` console script and ``python -m beyondfit``."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # nothing has started yet
        signal.signal(signum, _interrupted_while_starting)
    from beyondfit.cli import startup_gc

    startup_gc.pause()  # until the run is built (run.py): the imports create no garbage
    from beyondfit.cli.app import main as cli_main

    cli_main()  # which puts Python's KeyboardInterrupt back, inside its own try


if __name__ == "__main__":
    main()
