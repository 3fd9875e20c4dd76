"""Greedy evaluation episodes on environments kept apart from training."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.rl.envs.vector import (
    WrapperFn,
    close_envs,
    env_error,
    greedy_policy,
    make_vector_env,
)
from beyondfit.rl.nets.policies import ActorCritic

#: The steps an evaluation episode may take when its env has no time limit of its own: the
#: Atari protocol's 27,000 agent steps (108,000 frames; Machado et al. 2018).
EPISODE_CAP = 27_000

log = logging.getLogger("beyondfit.rl")


class GreedyEvaluator:
    """``evaluator(model) -> {"val_return": ..., "val_length": ...}``: mean over greedy episodes.

    Runs ``episodes`` episodes at once, one per copy of a vector env that training never touches,
    each taking the policy's most likely action. The envs are seeded once; later evaluations
    continue their random stream, so each one sees fresh start states.

    Args:
        env_id: Gymnasium env id.
        episodes: episodes per evaluation.
        seed: seed of the evaluation envs (keep it apart from the training seed).
        progress: optional zero-argument callable (e.g. the collector's env-step count) recorded
            with each result in :attr:`history`.
        wrappers: wrapper factories applied to each env copy, as in training.
        max_steps: the cap of an episode's steps (``None``: the env's registered time limit
            if it has one, else :data:`EPISODE_CAP`, the Atari protocol's 27,000 agent steps):
            an episode still running then ends there, counted as truncated with the return
            it had, and the result says how many did (``val_capped``), so a policy that stalls
            in a game without a time limit (MinAtar's) never stops the run from ending.
        env_kwargs: keyword arguments of each copy's ``gym.make``, as in training.
        key: the config key ``episodes`` came from, for an error about it.
        epsilon: the chance of a uniformly random action at each step (``Discrete`` actions;
            ``task.eval_epsilon``): 0 is greedy; 0.001 is the Atari 100k protocol's, 0.05 the
            Nature DQN's. The draws come from a generator seeded with the envs.
    """

    def __init__(
        self,
        env_id: str,
        episodes: int = 20,
        seed: int = 0,
        progress: Callable[[], int] | None = None,
        wrappers: Sequence[WrapperFn] = (),
        max_steps: int | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        key: str = "task.eval_episodes",
        epsilon: float = 0.0,
    ) -> None:
        # Gymnasium's wrappers, never envpool: each copy plays whole games from real resets,
        # the reference preprocessing every vectorization's training is measured by.
        self.epsilon = float(check_number("task.eval_epsilon", epsilon, at_least=0, at_most=1,
                                          example="task.eval_epsilon=0.001"))
        self.envs = make_vector_env(env_id, episodes, wrappers, env_kwargs=env_kwargs, key=key,
                                    pool=False)
        self.env_id = env_id
        limit = getattr(self.envs.spec, "max_episode_steps", None) if max_steps is None else None
        self.max_steps = int(max_steps or limit or EPISODE_CAP)
        space = self.envs.single_action_space
        if self.epsilon and not isinstance(space, gym.spaces.Discrete):
            close_envs(self.envs)
            raise BeyondfitError(f"task.eval_epsilon={epsilon} draws random actions among n, "
                                 f"but the action space is {space}; set task.eval_epsilon=0")
        self._random = np.random.default_rng(seed)
        self.episodes, self.seed, self.progress = episodes, seed, progress
        self._seeded = False
        self.seconds = 0.0  # time spent evaluating, so benchmarks can leave it out
        self.history: list[dict[str, float]] = []

    def __call__(self, model: ActorCritic) -> dict[str, float]:
        """Run one greedy (or epsilon-greedy) episode per env copy; return mean return and
        length."""
        start = time.perf_counter()
        act = greedy_policy(model, self.envs.single_action_space)
        if self.epsilon:
            act = self._epsilon_greedy(act)
        try:
            obs, _ = self.envs.reset(seed=None if self._seeded else self.seed)
        except Exception as exc:
            raise env_error(self.env_id, "reset (evaluation)", exc) from None
        if not self._seeded:
            self._random = np.random.default_rng(self.seed)
        self._seeded = True
        returns = np.zeros(self.episodes)
        lengths = np.zeros(self.episodes, dtype=np.int64)
        running = np.ones(self.episodes, dtype=bool)
        # Envs that report their own episodes (RecordEpisodeStatistics: an Atari game over all
        # its lives, unclipped) are scored by those reports, not the wrapped env's episodes.
        reports = getattr(self.envs, "reports_episodes", False)
        capped = np.zeros(self.episodes, dtype=bool)
        while running.any():
            if lengths.max() >= self.max_steps:  # the cap: the episodes still running end here
                capped = running.copy()
                if reports:  # their game's score so far, as its report would have given it
                    returns[capped] = np.asarray(self.envs.get_attr("episode_returns"))[capped]
                break
            try:
                obs, reward, term, trunc, info = self.envs.step(act(obs))
            except Exception as exc:
                where = f"step {int(lengths.max())} of a greedy evaluation"
                raise env_error(self.env_id, where, exc) from None
            # Finished copies autoreset and keep stepping; their steps no longer count.
            lengths += running
            if reports:
                ended = info.get("_episode", np.zeros_like(running)) & running
                if ended.any():
                    returns[ended] = np.asarray(info["episode"]["r"])[ended]
                running &= ~ended
                continue
            returns += reward * running
            running &= ~(term | trunc)
        self.seconds += time.perf_counter() - start
        if not np.isfinite(returns.astype(np.float32)).all():
            raise BeyondfitError(
                f"env {self.env_id!r} returned rewards that are not finite float32 numbers in a "
                f"greedy evaluation (returns {returns.tolist()[:4]}); clip or rescale its reward"
            )
        result = {"val_return": float(returns.mean()), "val_length": float(lengths.mean())}
        if capped.any():
            result["val_capped"] = float(capped.sum())
            log.warning("evaluation: %d of %d episodes of %s reached the cap of %d steps and "
                        "count as truncated, with the return they had", int(capped.sum()),
                        self.episodes, self.env_id, self.max_steps)
        entry = dict(result)
        if self.progress is not None:
            entry["env_steps"] = float(self.progress())
        self.history.append(entry)
        return result

    def _epsilon_greedy(self, act: Callable[[np.ndarray], np.ndarray]
                        ) -> Callable[[np.ndarray], np.ndarray]:  # fmt: skip
        """``act`` with each copy's action replaced by a uniform one with chance epsilon."""
        space = self.envs.single_action_space

        def explore(obs: np.ndarray) -> np.ndarray:
            actions = act(obs)
            n = len(actions)
            uniform = space.start + self._random.integers(space.n, size=n)
            return np.where(self._random.random(n) < self.epsilon, uniform, actions)

        return explore

    @property
    def policy(self) -> str:
        """How the evaluation acts, as the result says it: ``greedy`` or ``epsilon 0.001``."""
        return f"epsilon {self.epsilon:g}" if self.epsilon else "greedy"

    def reseed(self, seed: int) -> None:
        """Start the next evaluation from envs reset with ``seed`` (episode ``i``: ``seed + i``)."""
        self.seed, self._seeded = seed, False

    def close(self) -> None:
        """Close the evaluation environments."""
        close_envs(self.envs)
