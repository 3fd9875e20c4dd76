"""Discounted returns and GAE against values worked out by hand.

Env 0 of the trajectory has everything a next-step-autoreset rollout has: an episode that
terminates (row 1), the reset step after it (row 2, reward 0), an episode cut by a time limit
(row 4), the reset step after that (row 5), and a bootstrap at the rollout end. Env 1 never ends.
"""

import numpy as np
import pytest
import torch

from beyondfit.rl.collect.returns import discounted_returns, gae_advantages

GAMMA = 0.5
REWARDS = np.array([[1, 1], [2, 1], [0, 1], [1, 1], [3, 1], [0, 1]], dtype=np.float32)
TERMINATED = np.array([[0, 0], [1, 0], [0, 0], [0, 0], [0, 0], [0, 0]], dtype=bool)
TRUNCATED = np.array([[0, 0], [0, 0], [0, 0], [0, 0], [1, 0], [0, 0]], dtype=bool)
# values[t] = V(obs[t]); values[6] is the bootstrap value after the last step.
VALUES = np.array([[1, 0], [2, 0], [3, 0], [4, 0], [5, 0], [6, 0], [7, 10]], dtype=np.float32)


def test_discounted_returns_by_hand():
    returns = discounted_returns(REWARDS, VALUES, TERMINATED, TRUNCATED, GAMMA)
    # env 0, backwards: row 5 bootstraps from V[6]=7 -> 0 + .5*7 = 3.5; row 4 is truncated:
    # bootstrap from the final obs' value V[5]=6 -> 3 + .5*6 = 6; row 3: 1 + .5*6 = 4;
    # row 2 (reset step, masked later): 0 + .5*4 = 2; row 1 terminated: 2; row 0: 1 + .5*2 = 2.
    expected_0 = [2.0, 2.0, 2.0, 4.0, 6.0, 3.5]
    # env 1 never ends: G5 = 1 + .5*10 = 6, then G[t] = 1 + .5*G[t+1].
    expected_1 = [2.125, 2.25, 2.5, 3.0, 4.0, 6.0]
    assert torch.allclose(returns[:, 0], torch.tensor(expected_0))
    assert torch.allclose(returns[:, 1], torch.tensor(expected_1))


def test_gae_by_hand():
    advantages = gae_advantages(REWARDS, VALUES, TERMINATED, TRUNCATED, GAMMA, gae_lambda=0.5)
    # deltas (env 0): r + .5*V[t+1]*(1-term) - V[t] = [1, 0, -1, -0.5, 1, -2.5]
    # A[t] = delta + .25*(1-done)*A[t+1]: row 4 is done (truncated), row 1 is done (terminated).
    expected_0 = [1.0, 0.0, -1.0625, -0.25, 1.0, -2.5]
    assert torch.allclose(advantages[:, 0], torch.tensor(expected_0))
    # env 1: deltas are 1 everywhere but the last: 1 + .5*10 = 6.
    a5 = 6.0
    a4 = 1 + 0.25 * a5
    a3 = 1 + 0.25 * a4
    a2 = 1 + 0.25 * a3
    a1 = 1 + 0.25 * a2
    a0 = 1 + 0.25 * a1
    assert torch.allclose(advantages[:, 1], torch.tensor([a0, a1, a2, a3, a4, a5]))


def test_gae_lambda_one_is_return_minus_baseline():
    advantages = gae_advantages(REWARDS, VALUES, TERMINATED, TRUNCATED, GAMMA, gae_lambda=1.0)
    returns = discounted_returns(REWARDS, VALUES, TERMINATED, TRUNCATED, GAMMA)
    assert torch.allclose(advantages, returns - torch.from_numpy(VALUES[:-1]))


def test_gae_lambda_zero_is_td_error():
    advantages = gae_advantages(REWARDS, VALUES, TERMINATED, TRUNCATED, GAMMA, gae_lambda=0.0)
    td = REWARDS + GAMMA * VALUES[1:] * ~TERMINATED - VALUES[:-1]
    assert torch.allclose(advantages, torch.from_numpy(td))


@pytest.mark.parametrize("as_tensor", [False, True])
def test_accepts_tensors_and_arrays(as_tensor):
    convert = torch.from_numpy if as_tensor else (lambda x: x)
    out = gae_advantages(*(convert(x) for x in (REWARDS, VALUES, TERMINATED, TRUNCATED)),
                         gamma=GAMMA, gae_lambda=0.5)
    assert out.dtype == torch.float32 and out.shape == REWARDS.shape
