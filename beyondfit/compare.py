"""``python -m beyondfit.compare RUN_OR_SWEEP_DIR ...``: see :mod:`beyondfit.cli.compare`."""

from beyondfit.cli.compare import main

if __name__ == "__main__":
    main()
