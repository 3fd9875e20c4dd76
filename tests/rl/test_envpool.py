"""Atari copies in envpool (``task.vectorization=envpool``, ``beyondfit/rl/envs/envpool_atari.py``):
the same observations as Gymnasium's path, the game's raw score per finished game, next-step
autoreset whose reset step is never learned from, what ``auto`` picks, and the refusals."""

from __future__ import annotations

import functools
import logging
import re
import sys

import gymnasium as gym
import numpy as np
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from beyondfit import BeyondfitError
from beyondfit.rl.collect.onpolicy import RolloutCollector
from beyondfit.rl.envs.envpool_atari import EnvPoolVectorEnv, NoEquivalent, envpool_options
from beyondfit.rl.envs.vector import envpool_atari, make_vector_env
from beyondfit.rl.nets.policies import ActorCritic

from kit import ROOT

pytest.importorskip("ale_py", reason='the atari extra: pip install -e ".[atari]"')
pytest.importorskip("envpool", reason="pip install envpool")

TASK = OmegaConf.load(ROOT / "conf" / "task" / "atari.yaml").task


def atari(env_id: str = "ALE/Breakout-v5", num_envs: int = 2, **options) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_id`` with the atari task's wrappers and env_kwargs."""
    return make_vector_env(env_id, num_envs, [instantiate(w) for w in TASK.wrappers],
                           env_kwargs=dict(TASK.env_kwargs), **options)


def test_the_task_wrappers_read_as_envpool_options() -> None:
    task, options, reports = envpool_options("ALE/SpaceInvaders-v5",
                                             [instantiate(w) for w in TASK.wrappers],
                                             dict(TASK.env_kwargs))
    assert task == "SpaceInvaders-v5" and reports
    assert options == {
        "repeat_action_probability": 0.25, "full_action_space": False, "mode": -1,
        "difficulty": -1, "noop_max": 30, "frame_skip": 4, "img_width": 84, "img_height": 84,
        "gray_scale": True, "episodic_life": True, "use_fire_reset": True, "reward_clip": True,
        "stack_num": 4, "max_episode_steps": 27000}  # v5's 108,000 frames / 4


def test_observations_are_the_gymnasium_paths_own() -> None:
    pooled, synced = atari(vectorization="envpool"), atari(vectorization="sync")
    assert isinstance(pooled, EnvPoolVectorEnv) and isinstance(synced, gym.vector.SyncVectorEnv)
    assert pooled.single_observation_space == synced.single_observation_space  # (4, 84, 84) u8
    assert pooled.single_action_space == synced.single_action_space
    assert pooled.observation_space == synced.observation_space
    assert pooled.reports_episodes and synced.reports_episodes
    assert pooled.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    for envs in (pooled, synced):
        obs, _ = envs.reset(seed=3)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        obs, reward, terminated, truncated, _ = envs.step(np.array([1, 1]))
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert terminated.dtype == truncated.dtype == np.bool_ and reward.shape == (2,)
        envs.close()
    # The same game's first frames, resized alike (envpool's no-op starts differ from
    # Gymnasium's draws, so a frame or two of the ball's flight apart at most).
    first = [e.reset(seed=0)[0][:, -1].astype(int) for e in (atari(vectorization="envpool"),
                                                               atari(vectorization="sync"))]
    assert np.abs(first[0] - first[1]).mean() < 2.0


def test_a_seeded_reset_makes_the_same_games_and_a_list_seeds_each_copy() -> None:
    envs = atari(vectorization="envpool")
    actions = np.random.default_rng(0).integers(0, 4, (50, 2))

    def play(seed):
        frames = [envs.reset(seed=seed)[0]]
        frames += [envs.step(a)[0] for a in actions]
        return np.stack(frames)

    five = play(5)
    assert np.array_equal(play([5, 6]), five)  # the same games: copy i of seed s gets s + i
    assert not np.array_equal(play(7), five)
    envs.close()


def test_each_finished_game_reports_its_unclipped_score_over_all_its_lives() -> None:
    # Space Invaders scores 5 to 30 a shot: the learner's clipped rewards are 1, the score not.
    envs = atari("ALE/SpaceInvaders-v5", 2, vectorization="envpool")
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    raw, clipped, lives_lost, games = np.zeros(2), np.zeros(2), np.zeros(2, int), []
    prev_done = np.zeros(2, bool)
    for _ in range(3000):
        _, reward, terminated, truncated, info = envs.step(rng.integers(0, 6, 2))
        assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0}
        assert not (reward[prev_done].any() or terminated[prev_done].any())  # the reset step
        raw += info["reward"]
        clipped += reward
        lives_lost += terminated & ~info["terminated"].astype(bool)
        if "_episode" in info:
            for i in np.flatnonzero(info["_episode"]):
                assert info["episode"]["r"][i] == raw[i] > clipped[i]
                assert info["episode"]["l"][i] > 0 and lives_lost[i] == 2  # three lives
                games.append(raw[i])
                raw[i], clipped[i], lives_lost[i] = 0.0, 0.0, 0
        prev_done = terminated | truncated
        if len(games) >= 2:
            break
    assert len(games) >= 2, "no two games ended in 3,000 random steps"
    envs.close()


class Recorded(gym.vector.VectorEnv):
    """A vector env stepping ``envs`` and keeping each step's done flags and rewards."""

    def __init__(self, envs):
        self.envs_, self.done, self.rewards = envs, [], []
        for name in ("num_envs", "single_observation_space", "single_action_space",
                     "observation_space", "action_space", "metadata", "reports_episodes",
                     "spec"):
            setattr(self, name, getattr(envs, name))

    def reset(self, **kwargs):
        return self.envs_.reset(**kwargs)

    def step(self, actions):
        out = self.envs_.step(actions)
        self.done.append(out[2] | out[3])
        self.rewards.append(out[1])
        return out


def test_the_step_after_an_episodes_end_is_a_reset_the_collector_never_learns_from() -> None:
    envs = Recorded(atari(num_envs=2, vectorization="envpool"))
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden=[])
    data = RolloutCollector(envs, policy, num_steps=200, total_env_steps=800, seed=0)
    batches = list(data)
    done = np.stack(envs.done)  # two rollouts of 200 steps of 2 copies: (400, 2)
    assert done.shape == (400, 2) and done.any(), "no life lost in 800 random Breakout steps"
    rewards = np.stack(envs.rewards)
    assert not rewards[1:][done[:-1]].any()  # the reset step's reward: 0
    reset_steps = [done[:199].sum(), done[199].sum() + done[200:399].sum()]
    assert [len(b.obs) for b in batches] == [400 - reset_steps[0], 400 - reset_steps[1]]
    assert data.metrics()["env_steps"] == 800
    envs.envs_.close()


def test_auto_picks_envpool_for_atari_and_says_so(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="beyondfit.rl"):
        envs = atari()
    assert isinstance(envs, EnvPoolVectorEnv)
    said = [r.getMessage() for r in caplog.records if "task.vectorization=auto" in r.getMessage()]
    assert said == ["task.vectorization=auto: envpool (2 copies of Breakout-v5 preprocessed in "
                    "its C++ threads; task.vectorization=sync for Gymnasium's wrappers)"]
    envs.close()
    # The off-policy task's copies (sync=True) and the greedy evaluation's stay Gymnasium's.
    for options in ({"sync": True}, {"pool": False}):
        envs = atari(**options)
        assert isinstance(envs, gym.vector.SyncVectorEnv)
        envs.close()
    assert not isinstance(make_vector_env("CartPole-v1", 2), EnvPoolVectorEnv)


class Mine(gym.Wrapper):
    """A wrapper of one's own: envpool has no equivalent."""


def test_wrappers_without_an_envpool_equivalent_are_one_line_or_sync_under_auto(caplog) -> None:
    wrappers = [instantiate(w) for w in TASK.wrappers]
    kwargs = dict(TASK.env_kwargs)
    cases = {
        "task.wrappers[3] (Mine) has no envpool equivalent": [*wrappers[:3], Mine,
                                                              *wrappers[3:]],
        "scale_obs=True has no envpool equivalent": [
            wrappers[0], functools.partial(gym.wrappers.AtariPreprocessing, scale_obs=True)],
        "must hold gymnasium.wrappers.AtariPreprocessing": [wrappers[0]],
    }
    for words, given in cases.items():
        with pytest.raises(NoEquivalent, match=re.escape(words)):
            make_vector_env("ALE/Breakout-v5", 2, given, env_kwargs=kwargs,
                            vectorization="envpool")
        with caplog.at_level(logging.INFO, logger="beyondfit.rl"):
            envs = make_vector_env("ALE/Breakout-v5", 2, given, env_kwargs=kwargs)
        assert isinstance(envs, gym.vector.SyncVectorEnv)
        assert any(words in r.getMessage() and r.getMessage().startswith(
            "task.vectorization=auto: sync (") for r in caplog.records), words
        envs.close()
    with pytest.raises(BeyondfitError,
                       match=re.escape("task.env='CartPole-v1' is not one; use task")):
        make_vector_env("CartPole-v1", 2, vectorization="envpool")
    with pytest.raises(BeyondfitError, match=re.escape("frameskip=4: envpool's frame skip is ")):
        make_vector_env("ALE/Breakout-v5", 2, wrappers, vectorization="envpool")


def test_the_off_policy_task_refuses_envpool_as_it_refuses_async() -> None:
    with pytest.raises(BeyondfitError, match=re.escape(
            "task.vectorization=envpool: the off-policy task needs env copies of its own")):
        atari(sync=True, vectorization="envpool")


def test_envpool_hidden_is_one_line_naming_pip_install_or_sync_under_auto(monkeypatch,
                                                                          caplog) -> None:
    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool raises ImportError
    with pytest.raises(BeyondfitError, match=re.escape(
            "needs the envpool package, which is not installed: pip install envpool")):
        atari(vectorization="envpool")
    with caplog.at_level(logging.INFO, logger="beyondfit.rl"):
        envs = atari()
    assert isinstance(envs, gym.vector.SyncVectorEnv)
    assert any("envpool, faster for Atari, is not installed: pip install envpool" in
               r.getMessage() for r in caplog.records)
    envs.close()
    assert not envpool_atari.envpool_installed()
