"""``python -m beyondfit.play RUN_DIR``: greedy episodes of a trained policy; see
:mod:`beyondfit.rl.evaluation.play`."""

from beyondfit.rl.evaluation.play import main

if __name__ == "__main__":
    main()
