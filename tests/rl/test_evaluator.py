"""The evaluation's policy (``beyondfit/rl/evaluation/evaluator.py``): greedy, or epsilon-greedy
with ``task.eval_epsilon`` (the Atari 100k protocol's 0.001, the Nature DQN's 0.05), its draws
seeded with the envs, said in the result; refused in one line for actions it cannot draw."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from beyondfit import BeyondfitError
from beyondfit.rl.evaluation.evaluator import GreedyEvaluator
from beyondfit.rl.nets.agents import QAgent


def agent() -> QAgent:
    torch.manual_seed(0)
    return QAgent(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2),
                  hidden=[8])


def test_epsilon_greedy_evaluation_is_seeded_and_differs_from_greedy() -> None:
    model = agent()
    greedy = GreedyEvaluator("CartPole-v1", 6, seed=3)
    random = [GreedyEvaluator("CartPole-v1", 6, seed=3, epsilon=1.0) for _ in range(2)]
    assert greedy.policy == "greedy" and random[0].policy == "epsilon 1"
    first, second = (r(model) for r in random)
    assert first == second  # the same seed: the same draws
    # a constant greedy action topples the pole within about ten steps; random ones last longer
    assert greedy(model)["val_length"] < first["val_length"]
    tiny = GreedyEvaluator("CartPole-v1", 6, seed=3, epsilon=0.001)
    assert tiny.policy == "epsilon 0.001"
    for evaluator in (greedy, tiny, *random):
        evaluator.close()


@pytest.mark.parametrize("env, epsilon, message", [
    ("Pendulum-v1", 0.05, r"task\.eval_epsilon=0\.05 draws random actions among n"),
    ("CartPole-v1", 1.5, r"task\.eval_epsilon"),
])
def test_eval_epsilon_mistakes_are_one_line(env: str, epsilon: float, message: str) -> None:
    with pytest.raises(BeyondfitError, match=message) as info:
        GreedyEvaluator(env, 2, epsilon=epsilon)
    assert "\n" not in str(info.value)
