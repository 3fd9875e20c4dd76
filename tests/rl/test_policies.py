"""The policy-gradient policy's architecture options (issue 47: what SB3's MuJoCo policy has,
as options, not a fork): where the log-std starts, the critic's own hidden sizes, and how the
layers start (CleanRL's orthogonal ``layer_init``, still the default, or torch's own)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError
from beyondfit.rl.nets.policies import ActorCritic

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def linears(net: nn.Module) -> list[nn.Linear]:
    return [m for m in net.modules() if isinstance(m, nn.Linear)]


def shapes(net: nn.Module) -> list[tuple[int, int]]:
    return [(layer.in_features, layer.out_features) for layer in linears(net)]


def test_the_log_std_starts_at_log_std_init_and_sets_the_sampling_spread():
    policy = ActorCritic(OBS, BOX, hidden=(8,), log_std_init=-2.0)
    assert torch.equal(policy.log_std.detach(), torch.full((3,), -2.0))
    obs = torch.zeros(20_000, 5)
    with torch.inference_mode():
        means = policy(obs)
        spread = (policy.draw(means, generator=torch.Generator().manual_seed(0)) - means).std(0)
    assert torch.allclose(spread, torch.full((3,), math.exp(-2.0)), rtol=0.03)


def test_critic_hidden_sizes_the_critic_alone():
    policy = ActorCritic(OBS, BOX, hidden=(8,), critic_hidden=(16, 4))
    assert shapes(policy.actor) == [(5, 8), (8, 3)]
    assert shapes(policy.critic) == [(5, 16), (16, 4), (4, 1)]
    assert policy.value(torch.zeros(2, 5)).shape == (2,)
    shared = ActorCritic(OBS, BOX, hidden=(8,))  # None: the actor's sizes
    assert shapes(shared.critic) == [(5, 8), (8, 1)]


def test_init_default_leaves_torchs_own_initialization():
    torch.manual_seed(0)
    policy = ActorCritic(OBS, BOX, hidden=(8,), critic_hidden=(6,), init="default")
    torch.manual_seed(0)  # the same layers, built in the same order, untouched
    reference = [nn.Linear(5, 8), nn.Linear(8, 3), nn.Linear(5, 6), nn.Linear(6, 1)]
    mine = linears(policy.actor) + linears(policy.critic)
    assert len(mine) == len(reference)
    for layer, plain in zip(mine, reference):
        assert torch.equal(layer.weight, plain.weight) and torch.equal(layer.bias, plain.bias)


def test_the_default_is_still_cleanrls_orthogonal_layer_init():
    """Defaults unchanged: every existing PPO run builds the same weights, bit for bit."""
    torch.manual_seed(0)
    policy = ActorCritic(OBS, BOX, hidden=(8,))
    torch.manual_seed(0)
    reference = []
    for (n_in, n_out), gain in zip([(5, 8), (8, 3), (5, 8), (8, 1)],
                                   [math.sqrt(2), 0.01, math.sqrt(2), 1.0]):
        layer = nn.Linear(n_in, n_out)
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
        reference.append(layer)
    mine = linears(policy.actor) + linears(policy.critic)
    for layer, plain in zip(mine, reference, strict=True):
        assert torch.equal(layer.weight, plain.weight) and torch.equal(layer.bias, plain.bias)
    assert torch.equal(policy.log_std.detach(), torch.zeros(3))


@pytest.mark.parametrize(("options", "message"), [
    ({"init": "xavier"}, "unknown task.init='xavier'; choose one of default, orthogonal"),
    ({"critic_hidden": [0]}, "task.critic_hidden=[0]: give a list of positive layer sizes"),
    ({"critic_hidden": ["64"]}, "task.critic_hidden=['64']: give a list of positive layer"),
    ({"critic_hidden": 256}, "task.critic_hidden=256: give a list of positive layer sizes"),
    ({"hidden": "64"}, "task.hidden='64': give a list of positive layer sizes"),
])
def test_a_bad_option_is_one_line_naming_its_key(options, message):
    with pytest.raises(BeyondfitError) as caught:
        ActorCritic(OBS, BOX, **{"hidden": (8,), **options})
    assert message in str(caught.value) and "\n" not in str(caught.value)
