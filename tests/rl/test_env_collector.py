"""Episode statistics (``beyondfit/rl/collect/env_collector.py``): sums per log row, and the
episodes an env reports one by one (``RecordEpisodeStatistics``) with the mean of the last 100."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from beyondfit import BeyondfitError
from beyondfit.rl.collect.env_collector import EpisodeStats
from beyondfit.rl.collect.onpolicy import RolloutCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.nets.policies import ActorCritic


def test_reported_episodes_give_the_mean_of_the_last_100_and_survive_a_checkpoint() -> None:
    stats = EpisodeStats()
    stats.add_each(np.arange(150.0), np.ones(150))
    row = stats.take()
    assert row["episode_return"] == np.arange(150.0).mean()
    assert row["episode_return_100"] == np.arange(50.0, 150.0).mean()
    assert stats.take() == {}  # nothing finished since: no mean, no NaN
    again = EpisodeStats()
    again.load_state_dict(stats.state_dict())
    again.add_each(np.array([1000.0]), np.array([3]))
    assert again.take()["episode_return_100"] == (np.arange(51.0, 150.0).sum() + 1000) / 100
    assert EpisodeStats().state_dict() == [0, 0.0, 0]  # the former three entries when unused


class Scored(gym.Wrapper):
    """What a learner sees of CartPole here: rewards clipped to 0, and an "episode" every 3
    steps that does not reset the game (as a lost Atari life), while RecordEpisodeStatistics
    inside it reports each whole CartPole episode's return."""

    def reset(self, *, seed=None, options=None):
        if seed is not None or getattr(self, "over", True):
            self.obs, info = self.env.reset(seed=seed, options=options)
            self.t, self.over = 0, False
            return self.obs, info
        return self.obs, {}

    def step(self, action):
        self.obs, _, terminated, truncated, info = self.env.step(action)
        self.t += 1
        self.over = terminated or truncated
        return self.obs, 0.0, self.over or self.t % 3 == 0, truncated, info


def test_the_collector_counts_the_episodes_the_env_reports() -> None:
    wrappers = [gym.wrappers.RecordEpisodeStatistics, Scored]
    envs = make_vector_env("CartPole-v1", 2, wrappers)
    assert envs.reports_episodes
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space)
    data = RolloutCollector(envs, policy, num_steps=64, total_env_steps=128, seed=0)
    for _ in data:
        pass
    row = data.metrics()
    # Whole CartPole episodes (a reward of 1 a step), not the wrapper's 3-step pieces of 0.
    assert row["episode_return"] > 3 and row["episode_return"] == row["episode_length"]
    assert "episode_return_100" in row
    envs.close()
    assert not make_vector_env("CartPole-v1", 2).reports_episodes


@pytest.mark.e2e  # async: a subprocess per copy
def test_the_copies_are_stepped_as_task_vectorization_says() -> None:
    envs = make_vector_env("CartPole-v1", 2, vectorization="async")
    assert isinstance(envs, gym.vector.AsyncVectorEnv)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space)
    batch = next(iter(RolloutCollector(envs, policy, num_steps=8, total_env_steps=16, seed=0)))
    assert batch.obs.shape == (16, 4)
    envs.close()
    assert isinstance(make_vector_env("CartPole-v1", 2, vectorization="sync"),
                      gym.vector.SyncVectorEnv)
    for options, words in (({"vectorization": "fast"}, "task.vectorization='fast'"),
                           ({"vectorization": "async", "sync": True}, "use task.vectorization")):
        with pytest.raises(BeyondfitError, match=words.replace(".", r"\.")):
            make_vector_env("CartPole-v1", 2, **options)
