"""``python -m beyondfit.new NAME [--kind rl]``: a runnable task of your own in this directory.

See :mod:`beyondfit.cli.scaffold`; ``beyondfit new NAME`` is the same command.
"""

from beyondfit.cli.scaffold import main

if __name__ == "__main__":
    main()
