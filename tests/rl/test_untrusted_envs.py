"""An env of one's own that breaks Gymnasium's API, or returns an infinite reward, stops the
run with one error line naming the env and the env step, never a traceback or "lower the
learning rate"."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit import cli

pytestmark = pytest.mark.e2e  # every test here starts a command line

BAD_ENVS = '''
import gymnasium as gym
import numpy as np


class Fine(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(4, np.float32), 1.0, False, self.t >= 20, {}


class WrongShape(Fine):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return np.zeros(3, np.float32), reward, terminated, truncated, info


class OneValue(Fine):
    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed)[0]


class InfiniteReward(Fine):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, float("inf") if self.t == 5 else reward, terminated, truncated, info


for name in ("WrongShape", "OneValue", "InfiniteReward"):
    gym.register(f"{name}-v0", entry_point=f"badenvs:{name}", max_episode_steps=20)
'''


@pytest.mark.parametrize(("env", "words"), [
    ("WrongShape", "failed in env step 0 (ValueError"),
    ("OneValue", "failed in reset (ValueError: too many values to unpack"),
    ("InfiniteReward", "returned reward inf at env step 32 (copy 0)"),
])
def test_a_broken_env_is_one_error_line_naming_the_step(tmp_path: Path, env: str,
                                                        words: str) -> None:
    (tmp_path / "badenvs.py").write_text(BAD_ENVS)
    done = cli("+task=cartpole", f"task.env=badenvs:{env}-v0", "task.target_return=null",
               "train.stop=null", "task.total_env_steps=2048", "hydra.run.dir=run",
               cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("beyondfit: error:")]
    assert len(errors) == 1 and f"env '{env}-v0' " in errors[0] and words in errors[0], errors
    # Before it at most Gymnasium's own env-checker warning, one line too.
    assert done.stderr.count("\n") <= 2 and "Traceback" not in done.stderr, done.stderr
    assert "learning rate" not in done.stderr
