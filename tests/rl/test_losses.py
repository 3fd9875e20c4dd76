"""Policy-gradient sign: one loss step makes an advantaged action more likely, for every loss."""

import gymnasium as gym
import pytest
import torch

from beyondfit.nets import mlp
from beyondfit.rl.algos.onpolicy import a2c_loss, ppo_loss, reinforce_loss
from beyondfit.rl.collect.onpolicy import RolloutBatch
from beyondfit.rl.nets.policies import ActorCritic

LOSSES = {"reinforce": reinforce_loss, "a2c": a2c_loss, "ppo": ppo_loss}

OBS = gym.spaces.Box(-1.0, 1.0, (3,))


def one_step(model: ActorCritic, algo: str, batch: RolloutBatch) -> dict[str, torch.Tensor]:
    loss_fn = LOSSES[algo]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = loss_fn(model, batch)
    optimizer.zero_grad()
    out["loss"].backward()
    optimizer.step()
    return out


def batch_for(model: ActorCritic, obs: torch.Tensor, actions: torch.Tensor,
              advantages: torch.Tensor) -> RolloutBatch:
    with torch.no_grad():
        logp, _ = model.log_prob_entropy(obs, actions)
        values = model.value(obs)
    return RolloutBatch(obs, actions, logp, values, advantages, advantages + values)


@pytest.mark.parametrize("algo", ["reinforce", "a2c", "ppo"])
def test_discrete_step_raises_log_prob_of_advantaged_action(algo):
    torch.manual_seed(0)
    model = ActorCritic(OBS, gym.spaces.Discrete(3), hidden=(16,))
    obs = torch.zeros(2, 3) + 0.3  # the same state twice: action 2 was good, action 0 bad
    actions = torch.tensor([2, 0])
    batch = batch_for(model, obs, actions, torch.tensor([1.0, -1.0]))
    before, _ = model.log_prob_entropy(obs, actions)
    out = one_step(model, algo, batch)
    after, _ = model.log_prob_entropy(obs, actions)
    assert after[0] > before[0] and after[1] < before[1]
    assert {"loss", "policy_loss", "value_loss", "entropy"} <= set(out)


@pytest.mark.parametrize("algo", ["reinforce", "ppo"])
def test_gaussian_step_moves_the_mean_toward_an_advantaged_action(algo):
    torch.manual_seed(0)
    model = ActorCritic(OBS, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(16,))
    obs = torch.zeros(2, 3)
    actions = torch.tensor([[1.0], [-1.0]])
    batch = batch_for(model, obs, actions, torch.tensor([1.0, -1.0]))
    mean_before = model(obs[:1]).item()
    one_step(model, algo, batch)
    assert model(obs[:1]).item() > mean_before


def test_ppo_clipped_ratio_gives_no_policy_gradient():
    torch.manual_seed(0)
    model = ActorCritic(OBS, gym.spaces.Discrete(2), hidden=(16,))
    obs, actions = torch.zeros(2, 3), torch.tensor([1, 1])
    batch = batch_for(model, obs, actions, torch.tensor([1.0, 1.0]))
    # The old policy gave these actions far lower probability: ratio = e^2 >> 1 + clip, and
    # with a positive advantage the clipped term wins, which is constant in the parameters.
    far = batch._replace(old_log_prob=batch.old_log_prob - 2.0)
    out = ppo_loss(clip_coef=0.2, vf_coef=0.0, normalize_advantages=False)(model, far)
    out["loss"].backward()
    assert out["clip_frac"].item() == 1.0 and out["approx_kl"].item() > 0
    assert all(p.grad is None or p.grad.abs().max() == 0 for p in model.actor.parameters())


def test_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    model = ActorCritic(OBS, gym.spaces.Box(-1.0, 1.0, (2,)), hidden=(8,), log_std_init=-0.5)
    obs, actions = torch.randn(5, 3), torch.randn(5, 2)
    logp, entropy = model.log_prob_entropy(obs, actions)
    reference = torch.distributions.Normal(model(obs), model.log_std.exp())
    assert torch.allclose(logp, reference.log_prob(actions).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, reference.entropy().sum(-1), atol=1e-5)


def test_categorical_log_prob_and_sampling_match_torch_distributions():
    torch.manual_seed(0)
    model = ActorCritic(OBS, gym.spaces.Discrete(3), hidden=(8,))
    with torch.no_grad():
        model.actor[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
    obs = torch.zeros(20000, 3)
    reference = torch.distributions.Categorical(logits=model(obs[:1]))
    logp, entropy = model.log_prob_entropy(obs[:3], torch.tensor([0, 1, 2]))
    assert torch.allclose(logp, reference.log_prob(torch.tensor([0, 1, 2])), atol=1e-5)
    assert torch.allclose(entropy, reference.entropy().expand(3), atol=1e-5)
    with torch.inference_mode():
        freq = torch.bincount(model.act(obs), minlength=3).float() / len(obs)
    assert torch.allclose(freq, reference.probs[0], atol=0.02)  # Gumbel-max samples exactly


@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,))])
def test_sample_returns_the_log_prob_of_what_it_sampled(space):
    torch.manual_seed(0)
    model = ActorCritic(OBS, space, hidden=(8,), log_std_init=-0.3)
    obs = torch.randn(6, 3)
    with torch.inference_mode():
        action, logp = model.sample(obs)
        again, _ = model.log_prob_entropy(obs, action)
    assert torch.allclose(logp, again, atol=1e-5)


def test_policy_mlp_computes_what_nn_sequential_does_under_the_same_names():
    torch.manual_seed(0)
    fast = mlp([3, 8, 8, 2], "tanh", init="orthogonal", out_gain=0.01)
    plain = torch.nn.Sequential(*fast)  # the same layer objects, called the usual way
    x = torch.randn(5, 3)
    assert torch.equal(fast(x), plain(x))
    assert list(fast.state_dict()) == list(plain.state_dict())
    seen = []
    fast.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    fast(x)
    assert seen == [torch.Size([5, 2])]  # hooks on the MLP itself still run
