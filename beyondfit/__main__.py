"""``python -m beyondfit +task=NAME [key=value ...]``: see :mod:`beyondfit.cli.app`.

Kept free of heavy imports: Ctrl-C while torch and Hydra load (the first seconds) ends with
one line and status 130, like Ctrl-C at any later moment.
"""

import sys


def main() -> None:
    """The ``beyondfit`` console script and ``python -m beyondfit``."""
    try:
        from beyondfit.cli.app import main as cli_main
    except KeyboardInterrupt:
        print("\nbeyondfit: interrupted (SIGINT)", file=sys.stderr)
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
