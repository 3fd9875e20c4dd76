"""What every RL collector does the same way, written once: the on-policy
:class:`~beyondfit.rl.collector.RolloutCollector` and the off-policy
:class:`~beyondfit.rl.offpolicy.ReplayCollector` both step a vector env into batches.

- **Sharding** over data-parallel ranks: each rank its own seed (:func:`rank_seed`) and an equal
  share of the env-step budget (and of whatever else a collector lists in ``split``).
- **The sampling generator**: one ``torch.Generator`` on the model's device, seeded with the
  collector's seed, or continued from a checkpoint.
- **Episode statistics**: the finished episodes' mean return and length since the last log row,
  reported by :meth:`EnvCollector.metrics` without a device sync.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from beyondfit.core.seeding import rank_seed


class EpisodeStats:
    """Sums over the episodes that finished since the last :meth:`take`: count, return, length;
    and the returns of the last :data:`RECENT` episodes an env reported one by one (Gymnasium's
    ``RecordEpisodeStatistics``), whose mean the benchmarks compare (``episode_return_100``)."""

    #: How many reported episodes the trailing mean covers (the usual "last 100 episodes").
    RECENT = 100

    def __init__(self) -> None:
        self.episodes, self.returns, self.lengths = 0, 0.0, 0
        self.recent: collections.deque[float] = collections.deque(maxlen=self.RECENT)

    def add(self, episodes: int, returns: float, lengths: int) -> None:
        """Count ``episodes`` more finished episodes, with the sum of their returns and lengths."""
        self.episodes += int(episodes)
        self.returns += float(returns)
        self.lengths += int(lengths)

    def add_each(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Count finished episodes one by one (their returns and lengths)."""
        self.add(len(returns), float(np.sum(returns)), int(np.sum(lengths)))
        self.recent.extend(float(r) for r in returns)

    def take(self) -> dict[str, float]:
        """The means since the last call (``{}`` when no episode finished: an empty interval
        has no mean, and a NaN would poison plots and stop rules), then start afresh; with
        episodes reported one by one, also the mean of the last :data:`RECENT`."""
        out = {}
        if self.episodes:
            out = {"episode_return": self.returns / self.episodes,
                   "episode_length": self.lengths / self.episodes}
            if self.recent:
                out["episode_return_100"] = sum(self.recent) / len(self.recent)
        self.episodes, self.returns, self.lengths = 0, 0.0, 0
        return out

    def state_dict(self) -> list[Any]:
        """``[episodes, returns, lengths]`` and, when episodes were reported one by one, the
        recent returns: plain data for a checkpoint."""
        state: list[Any] = [self.episodes, self.returns, self.lengths]
        return [*state, list(self.recent)] if self.recent else state

    def load_state_dict(self, state: list[Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.episodes, self.returns, self.lengths = int(state[0]), float(state[1]), int(state[2])
        self.recent.clear()
        if len(state) > 3:
            self.recent.extend(float(r) for r in state[3][-self.RECENT:])


class EnvCollector:
    """The base of the RL collectors: an iterable of batches that steps ``envs``.

    A subclass calls :meth:`_init_collector` in its ``__init__`` and :meth:`_generator_on` at the
    start of each pass; it counts ``env_steps`` and adds finished episodes to ``episodes``.
    """

    #: Metrics that are counts: summed over data-parallel ranks, not averaged.
    metric_totals = ("env_steps",)
    #: Budgets split evenly over data-parallel ranks by :meth:`shard`.
    split: tuple[str, ...] = ("total_env_steps",)

    def _init_collector(self, envs: VectorEnv, seed: int, total_env_steps: int) -> None:
        self.envs, self.seed, self.total_env_steps = envs, seed, total_env_steps
        self.env_steps = 0
        self.episodes = EpisodeStats()
        self._unsharded: dict[str, int] | None = None
        self._generator: torch.Generator | None = None
        self._generator_state: torch.Tensor | None = None  # a checkpoint's, until used

    def shard(self, rank: int, world_size: int) -> Any:
        """Make this the collector of one of ``world_size`` data-parallel processes.

        Each rank steps its own environments with its own seed and takes an equal share of the
        budgets in :attr:`split`, so the run as a whole still takes ``total_env_steps`` and
        every rank yields the same number of batches (as data parallelism requires).
        ``env_steps`` and :meth:`metrics` then describe this rank's share. Idempotent.
        """
        if self._unsharded is None:
            self._unsharded = {"seed": self.seed, **{k: getattr(self, k) for k in self.split}}
        self.seed = rank_seed(self._unsharded["seed"], rank)
        for key in self.split:
            setattr(self, key, -(-self._unsharded[key] // world_size))
        return self

    def _generator_on(self, device: torch.device) -> torch.Generator:
        """The collector's sampling generator on ``device``: seeded, or the checkpoint's."""
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device).manual_seed(self.seed)
            if self._generator_state is not None:
                self._generator.set_state(self._generator_state)
        return self._generator

    def _restore_generator(self, state: torch.Tensor | None) -> None:
        """Use a checkpoint's generator state from the next pass on."""
        self._generator_state, self._generator = state, None

    def metrics(self) -> dict[str, float]:
        """Statistics since the previous call, then restart them; cheap (no device sync):
        always ``env_steps`` (total so far); ``episode_return`` and ``episode_length`` (means
        over the episodes that finished since the last call) only when at least one did."""
        return {"env_steps": float(self.env_steps), **self.episodes.take()}

    def close(self) -> None:
        """Close the environments."""
        self.envs.close()
