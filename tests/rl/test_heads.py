"""Q heads (``beyondfit/rl/nets/heads.py``): the dueling head's zero-mean advantages, a head of
one's own, the names a checkpoint has always had, and one line for each mistake."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError
from beyondfit.rl.nets.agents import QAgent
from beyondfit.rl.nets.heads import DuelingHead, make_head

from kit import QUIET, cli

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
VECTOR = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)


def test_dueling_q_is_the_value_plus_advantages_of_zero_mean() -> None:
    torch.manual_seed(0)
    head = DuelingHead(16, 5, hidden=[8])
    features = torch.randn(7, 16)
    q = head(features)
    value = head.value(features)
    advantage = head.advantage(features)
    centred = advantage - advantage.mean(1, keepdim=True)
    torch.testing.assert_close(centred.mean(1), torch.zeros(7), atol=1e-6, rtol=0)
    torch.testing.assert_close(q, value + centred)
    torch.testing.assert_close(q.mean(1, keepdim=True), value)  # V is the mean of Q over actions


def test_the_mlp_head_keeps_the_parameter_names_of_earlier_checkpoints() -> None:
    names = set(QAgent(VECTOR, gym.spaces.Discrete(3), hidden=[8]).state_dict())
    assert {"q.head.0.weight", "q.head.2.bias"} <= names
    dueling = set(QAgent(VECTOR, gym.spaces.Discrete(3), hidden=[], head="dueling").state_dict())
    assert {"q.head.value.0.weight", "q.head.advantage.0.weight"} <= dueling


class Scaled(nn.Module):
    """A head of a user's own: Q values as a linear map, times a learned scale."""

    def __init__(self, features: int, n_actions: int, hidden: list[int], activation: str,
                 scale: float = 2.0) -> None:
        super().__init__()
        self.linear = nn.Linear(features, n_actions)
        self.scale = nn.Parameter(torch.tensor(scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.linear(x)


def test_a_head_of_ones_own_is_built_with_the_agents_sizes() -> None:
    agent = QAgent(VECTOR, gym.spaces.Discrete(4), hidden=[], head=functools.partial(Scaled,
                                                                                     scale=3.0))
    assert isinstance(agent.q.head, Scaled) and float(agent.q.head.scale) == 3.0
    assert agent.q(torch.zeros(5, 6)).shape == (5, 4)


@pytest.mark.parametrize("head, message", [
    ("wide", "unknown task.agent.head='wide'; choose one of mlp, dueling"),
    (3, "task.agent.head is a int"),
    (lambda features, n_actions, hidden, activation: nn.Linear(features, 1),
     r"\(2, 1\) .* \(2, 4\)"),
    (lambda features, n_actions, hidden, activation: nn.Identity(), r"returned \(2, 6\)"),
    (lambda **kw: 1 / 0, "could not be built .* ZeroDivisionError"),
    (lambda **kw: "a head", "built a str, not a torch.nn.Module"),
])
def test_head_mistakes_are_one_line_naming_the_key(head, message) -> None:
    with pytest.raises(BeyondfitError, match=message) as info:
        make_head(head, 6, 4, [], "relu")
    assert "\n" not in str(info.value) and "task.agent.head" in str(info.value)


@pytest.mark.e2e
def test_a_dueling_dqn_trains_from_the_command_line_and_plays(tmp_path: Path) -> None:
    run = tmp_path / "dueling"
    done = cli("+task=cartpole", "algo=dqn", "task.agent.head=dueling",
               "task.total_env_steps=600", "task.replay.learning_starts=100",
               "task.eval_every_env_steps=100000", "task.eval_episodes=1",
               "task.confirm_episodes=1", "logger=[]", *QUIET, f"hydra.run.dir={run}",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "policy.json").read_text())["agent"]["head"] == "dueling"
    played = cli(str(run), "--episodes", "1", module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
