"""Generated nonlinear classification tables for ``bench/tabular.py``: text columns, text labels.

Each is a known rule the project writes down (no download): numeric Gaussian columns, one or two
text columns whose categories change the rule, and labels given as words. The rules mix what
linear models get (a linear score), what trees get (thresholds, interactions of thresholds) and
what smooth models get (products, curves), so no family of models is favoured by construction:

- :func:`ordinal_table`: three ordered classes (``low`` / ``medium`` / ``high``), the tertiles of
  a noisy score with thresholds, an interaction and a text column's shift (the shape of a
  user's 1,200-row table where logistic regression reached 0.78 and gradient boosting 0.83-0.85).
- :func:`quadrant_table`: four classes from the signs of two nonlinear scores (products, a
  sine, a square), two text columns flipping them, 4% of the labels redrawn at random.
- :func:`threshold_table`: three classes from a rule of thresholds on single columns and a text
  column, with a smooth term and 5% label noise: a tree's home ground.

Every generator returns ``(x, y)``: ``x`` an object array (floats, then strings in the text
columns), ``y`` the labels as strings.
"""

from __future__ import annotations

import numpy as np

Table = tuple[np.ndarray, np.ndarray]


def _frame(numbers: np.ndarray, *texts: np.ndarray) -> np.ndarray:
    """Numbers (rounded as a CSV would hold them) then the text columns, as one object array."""
    columns = [np.round(numbers[:, j], 5).astype(object) for j in range(numbers.shape[1])]
    return np.stack(columns + [values.astype(object) for values in texts], axis=1)


def ordinal_table(n: int = 1200, seed: int = 0) -> Table:
    """Three ordered classes: tertiles of a score with a linear part, thresholds and a shift."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6))
    segments = np.array(["north", "south", "east", "west"])
    seg = rng.choice(4, size=n, p=[0.4, 0.3, 0.2, 0.1])
    shift = np.array([0.0, 0.8, -0.6, 1.2])
    score = (x[:, 0] + 0.4 * x[:, 1] + shift[seg] + 1.0 * (x[:, 3] > 0.5)
             + 1.2 * (x[:, 1] > 0) * (x[:, 2] > 0) - 0.8 * (x[:, 4] < -0.8)
             + 0.5 * x[:, 5] * (seg == 3))
    score = score + 0.05 * score.std() * rng.normal(size=n)
    level = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    return _frame(x, segments[seg]), np.array(["low", "medium", "high"])[level]


def quadrant_table(n: int = 5000, seed: int = 0) -> Table:
    """Four classes: the signs of two nonlinear scores, flipped by two text columns."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8))
    kinds = np.array(["a", "b", "c", "d", "e", "f"])
    kind = rng.integers(0, 6, size=n)
    channel = rng.integers(0, 3, size=n)
    a = x[:, 0] * x[:, 1] + np.sin(2 * x[:, 2]) + 0.5 * x[:, 6] + np.array(
        [0.0, 0.5, -0.5, 1.0, -1.0, 0.0])[kind]
    b = x[:, 3] ** 2 - 1 + 0.8 * np.tanh(x[:, 4] * x[:, 5]) + 0.4 * x[:, 7]
    b = np.where(channel == 2, -b, b)
    label = 2 * (a > 0) + (b > 0)
    noisy = rng.random(n) < 0.04
    label[noisy] = rng.integers(0, 4, size=int(noisy.sum()))
    frame = _frame(x, kinds[kind], np.array(["web", "store", "phone"])[channel])
    return frame, np.array(["red", "green", "blue", "gray"])[label]


def threshold_table(n: int = 15000, seed: int = 0) -> Table:
    """Three classes from thresholds on single columns and a text column; a smooth term, noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 10))
    plans = np.array(["basic", "plus", "pro"])
    plan = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    points = ((x[:, 0] > 0.3).astype(int) + (x[:, 1] > -0.5) * (x[:, 2] < 0.7)
              + (plan == 2) * (x[:, 3] > 0) + (np.abs(x[:, 4]) > 1.2)
              + (0.7 * np.sin(2 * x[:, 5]) + 0.3 * x[:, 6] > 0.4))
    label = np.clip(points - 1, 0, 2)
    noisy = rng.random(n) < 0.05
    label[noisy] = rng.integers(0, 3, size=int(noisy.sum()))
    return _frame(x, plans[plan]), np.array(["no", "maybe", "yes"])[label]
