"""Running normalization of observations and reward scaling, as buffers of the policy.

What SB3's ``VecNormalize`` and CleanRL's ``NormalizeObservation`` / ``NormalizeReward`` wrappers
do, but inside the policy module instead of around the env: the statistics are buffers, so they
are saved with the weights (checkpoints, ``policy.pt``), restored on resume, used by ``play`` and
the greedy evaluator, and nobody has to remember to wrap the evaluation env the same way.

- :class:`RunningMoments`: count, mean and sum of squared deviations (``M2``) of a stream, merged
  batch by batch with Chan et al.'s parallel formula, in float64. When ``torch.distributed`` is
  initialized with several processes, each merge first gathers every rank's batch moments and
  combines them in rank order: every rank ends with the same statistics, those of all the data.
- :class:`Normalizer`: the policy's ``normalizer`` submodule: observation moments (applied in
  ``forward``: ``(obs - mean) / sqrt(var + eps)``, clipped) and the moments of the discounted
  return (rewards are divided by its standard deviation, SB3's ``norm_reward``).

Who updates what, and when, is the collector's business (:mod:`beyondfit.rl.collect.onpolicy`): only
during collection, never in evaluation, and observations only between rollouts, so that a rollout
and every update on it see one fixed normalization (PPO's ratio then compares like with like).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.distributed.connector import process_strategy


def batch_moments(x: torch.Tensor) -> torch.Tensor:
    """``[count, mean..., M2...]`` of the rows of ``x`` (shape ``(B, D)``), float64, one tensor.

    One flat tensor so that ranks exchange a rollout's moments in one collective.
    """
    x = x.detach().to(torch.float64)
    count = x.shape[0]
    mean = x.mean(0) if count else torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
    m2 = ((x - mean) ** 2).sum(0)
    return torch.cat([torch.tensor([float(count)], dtype=torch.float64, device=x.device),
                      mean, m2])


def merge_moments(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Moments of the union of two disjoint sets from theirs (Chan, Golub & LeVeque 1979)."""
    d = (a.numel() - 1) // 2
    n_a, mean_a, m2_a = a[0], a[1:1 + d], a[1 + d:]
    n_b, mean_b, m2_b = b[0], b[1:1 + d], b[1 + d:]
    n = n_a + n_b
    if float(n) == 0.0:
        return a.clone()
    delta = mean_b - mean_a
    mean = mean_a + delta * (n_b / n)
    m2 = m2_a + m2_b + delta.pow(2) * (n_a * n_b / n)
    return torch.cat([n.reshape(1), mean, m2])


def gather_moments(moments: torch.Tensor) -> torch.Tensor:
    """All ranks' batch moments combined (in rank order, so every rank gets the same bits);
    ``moments`` itself in one process (the process's strategy gathers them)."""
    strategy = process_strategy()
    if strategy.world_size == 1:
        return moments
    parts = strategy.all_gather(moments)
    combined = parts[0]
    for part in parts[1:]:
        combined = merge_moments(combined, part)
    return combined


class RunningMoments(nn.Module):
    """Running count, mean and variance of ``D``-dimensional samples, as float64 buffers.

    Args:
        size: ``D``, the width of a sample.
        prior_count: weight of the prior (mean 0, variance 1) the statistics start from, as in
            SB3's ``RunningMeanStd(epsilon=1e-4)``: the first batch dominates at once, and a
            statistic is defined before any data arrived.
    """

    def __init__(self, size: int, prior_count: float = 1e-4) -> None:
        super().__init__()
        moments = torch.cat([torch.tensor([prior_count]), torch.zeros(size),
                             torch.full((size,), prior_count)]).to(torch.float64)
        self.register_buffer("moments", moments)  # [count, mean (D), M2 (D)]
        self.size = size

    @property
    def count(self) -> torch.Tensor:
        """Samples seen (plus the prior's weight)."""
        return self.moments[0]

    @property
    def mean(self) -> torch.Tensor:
        """Running mean, ``(D,)`` float64."""
        return self.moments[1:1 + self.size]

    @property
    def var(self) -> torch.Tensor:
        """Running (population) variance, ``(D,)`` float64."""
        return self.moments[1 + self.size:] / self.moments[0]

    def update(self, x: torch.Tensor) -> None:
        """Fold the rows of ``x`` (``(B, D)``) into the statistics; under several
        ``torch.distributed`` ranks, every rank's rows (a collective: all ranks must call it)."""
        self.merge(batch_moments(x))

    @torch.no_grad()
    def merge(self, moments: torch.Tensor) -> None:
        """Fold :func:`batch_moments` of a batch (every rank's, under several ranks) in."""
        merged = merge_moments(self.moments, gather_moments(moments.to(self.moments.device)))
        self.moments.copy_(merged)

    def extra_repr(self) -> str:
        """Shown by ``print(module)``."""
        return f"size={self.size}"


class Normalizer(nn.Module):
    """The policy's running normalization: observations (in ``forward``) and reward scale.

    Args:
        obs_size: flattened observation width.
        observations: normalize observations by their running mean and std.
        rewards: scale rewards by the running std of the discounted return (the collector
            calls :meth:`scale_rewards`); ``gamma`` is the discount of that return.
        clip: normalized observations and scaled rewards are clipped to ``[-clip, clip]``.
        epsilon: added to variances before the square root.
    """

    def __init__(
        self,
        obs_size: int,
        observations: bool = True,
        rewards: bool = True,
        gamma: float = 0.99,
        clip: float = 10.0,
        epsilon: float = 1e-8,
    ) -> None:
        super().__init__()
        if not (observations or rewards):
            raise BeyondfitError("a Normalizer needs observations=True or rewards=True")
        if not clip > 0:
            raise BeyondfitError(f"task.normalize.clip={clip!r} must be a positive number, e.g. 10")
        self.obs = RunningMoments(obs_size) if observations else None
        self.returns = RunningMoments(1) if rewards else None
        self.gamma, self.clip, self.epsilon = float(gamma), float(clip), float(epsilon)
        # float32 shift and scale used by every forward, derived from the float64 moments after
        # each update and load (not saved: they are a function of what is).
        self.register_buffer("_shift", torch.zeros(obs_size), persistent=False)
        self.register_buffer("_scale", torch.ones(obs_size), persistent=False)
        self._refresh()
        self.register_load_state_dict_post_hook(lambda module, _: module._refresh())

    def _refresh(self) -> None:
        if self.obs is not None:
            self._shift.copy_(self.obs.mean)
            self._scale.copy_((self.obs.var + self.epsilon).rsqrt())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalized, clipped observations ``(B, D)`` (unchanged without observation stats)."""
        if self.obs is None:
            return obs
        return ((obs - self._shift) * self._scale).clamp(-self.clip, self.clip)

    def merge_observations(self, moments: torch.Tensor) -> None:
        """Fold the :func:`batch_moments` of a rollout's observations into the statistics
        (a collective under several ranks)."""
        if self.obs is not None:
            self.obs.merge(moments)
            self._refresh()

    def scale_rewards(
        self, rewards: np.ndarray, done: np.ndarray, valid: np.ndarray, running: np.ndarray
    ) -> np.ndarray:
        """Rewards ``(T, N)`` divided by the running std of the discounted return, clipped.

        ``running`` (``(N,)``, updated in place) is each env's discounted return so far, carried
        from rollout to rollout and restarted after every episode end. Only valid steps (not
        the reset step after an episode's end) feed the statistics. Rewards are returned
        unchanged when reward scaling is off.
        """
        if self.returns is None:
            return rewards
        returns = np.empty_like(rewards, dtype=np.float64)
        g = running
        for t in range(rewards.shape[0]):  # T small NumPy ops per rollout, not per env step
            g = g * self.gamma + rewards[t]
            returns[t] = g
            g = np.where(done[t], 0.0, g)
        running[:] = g
        self.returns.update(torch.from_numpy(returns[valid]).reshape(-1, 1))
        std = float((self.returns.var[0] + self.epsilon).sqrt())
        return np.clip(rewards / std, -self.clip, self.clip).astype(np.float32, copy=False)

    def describe(self) -> dict[str, Any]:
        """The settings ``play`` needs to rebuild this module (stored in ``policy.pt``)."""
        return {"observations": self.obs is not None, "rewards": self.returns is not None,
                "gamma": self.gamma, "clip": self.clip, "epsilon": self.epsilon}


def normalizer_options(options: Any, obs_size: int, gamma: float) -> Normalizer | None:
    """``task.normalize`` (``null``/``false``, ``true``, or a mapping of :class:`Normalizer`
    options) as a module, or ``None`` for no normalization."""
    if options is None or options is False:
        return None
    if options is True:
        return Normalizer(obs_size, gamma=gamma)
    if not isinstance(options, dict):
        raise BeyondfitError(
            f"task.normalize={options!r}; use true, false, or a mapping such as "
            "{observations: true, rewards: false, clip: 10}"
        )
    known: Sequence[str] = ("observations", "rewards", "clip", "epsilon")
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise BeyondfitError(
            f"unknown task.normalize option(s) {unknown}; known: {', '.join(known)}"
        )
    if not (options.get("observations", True) or options.get("rewards", True)):
        return None
    return Normalizer(obs_size, gamma=gamma, **options)
