"""``python -m beyondfit +task=NAME [key=value ...]``: see :mod:`beyondfit.cli.app`."""

from beyondfit.cli.app import main

if __name__ == "__main__":
    main()
