"""Seeds compared honestly: the interquartile mean and its stratified bootstrap interval.

Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice"
(NeurIPS 2021), recommend reporting a few runs' aggregate score as the *interquartile mean*
(IQM: the mean of the middle 50% of the scores, robust to one lucky or broken seed yet less
noisy than the median) with a 95% *stratified bootstrap* confidence interval: resample the
runs of each task with replacement (tasks are the strata), recompute the IQM, and take the
2.5th and 97.5th percentiles of those IQMs.

This is the computation of their ``rliable`` package (``metrics.aggregate_iqm`` is
``scipy.stats.trim_mean(scores, 0.25, axis=None)``; ``library.get_interval_estimates``
draws 50,000 stratified resamples and takes percentile intervals), written here with numpy
instead of depending on it. rliable 1.2 does install beside numpy 2 and scipy 1.17, but it
brings ``arch``, ``statsmodels``, ``pandas``, ``seaborn``, ``patsy`` and ``formulaic`` for
these few lines; and its ``StratifiedBootstrap`` draws its indices from numpy's global
random state, ignoring the ``random_state`` it is given, so its intervals change from call
to call. Here the draws come from a seeded generator: the same scores always give the same
interval. With one task and at most 6 runs (6^6 = 46,656 resamples, fewer than the 50,000
draws) every resample is enumerated instead: the exact bootstrap distribution that the
random draws approximate.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Resamples drawn when the bootstrap distribution is not enumerated (rliable's default).
REPS = 50_000


def iqm(scores: Sequence[float] | Any) -> float:
    """The interquartile mean of ``scores`` (any shape, all entries pooled).

    As ``scipy.stats.trim_mean(scores, 0.25, axis=None)``: ``int(n / 4)`` scores are cut
    from each end of the sorted ``n``, and the rest averaged; below 4 scores nothing is
    cut, so the IQM is the mean.
    """
    values = np.sort(np.asarray(scores, dtype=float).ravel())
    if values.size == 0:
        raise ValueError("the IQM of no scores is undefined")
    cut = int(0.25 * values.size)
    return float(values[cut : values.size - cut].mean())


def _iqm_rows(samples: np.ndarray) -> np.ndarray:
    """The IQM of each row of a ``(resamples, scores)`` array."""
    ordered = np.sort(samples, axis=1)
    cut = int(0.25 * ordered.shape[1])
    return ordered[:, cut : ordered.shape[1] - cut].mean(axis=1)


def resample_indices(runs: int, tasks: int, reps: int = REPS, seed: int = 0) -> np.ndarray:
    """Run indices of stratified resamples, shape ``(resamples, runs, tasks)``.

    Each task's runs are drawn with replacement from that task's own runs. With one task and
    ``runs ** runs <= reps``, all ``runs ** runs`` equally likely resamples, in order.
    """
    if tasks == 1 and runs**runs <= reps:
        every = np.array(list(itertools.product(range(runs), repeat=runs)), dtype=np.int64)
        return every.reshape(-1, runs, 1)
    return np.random.default_rng(seed).integers(0, runs, size=(reps, runs, tasks))


def iqm_interval(
    scores: Sequence[float] | Sequence[Sequence[float]] | Any,
    confidence: float = 0.95,
    reps: int = REPS,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(iqm, low, high)``: the IQM and its stratified bootstrap percentile interval.

    Args:
        scores: one score per run (a setting's seeds), or a ``(runs, tasks)`` matrix whose
            columns are resampled separately (the strata).
        confidence: the interval's coverage (0.95: the 2.5th to 97.5th percentile).
        reps: resamples drawn when they are not all enumerated.
        seed: seeds the draws: the same scores always give the same interval.
    """
    matrix = np.asarray(scores, dtype=float)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    if matrix.ndim != 2 or matrix.size == 0:
        raise ValueError("scores must be a non-empty list or a (runs, tasks) matrix")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1")
    runs, tasks = matrix.shape
    indices = resample_indices(runs, tasks, reps, seed)
    samples = matrix[indices, np.arange(tasks)].reshape(len(indices), runs * tasks)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(_iqm_rows(samples), [tail, 100 - tail])
    return iqm(matrix), float(low), float(high)
