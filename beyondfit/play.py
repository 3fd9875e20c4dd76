"""``python -m beyondfit.play RUN_DIR``: greedy episodes of a trained policy; see
:mod:`beyondfit.rl.play`."""

from beyondfit.rl.play import main

if __name__ == "__main__":
    main()
