"""The rollout collector on tiny deterministic envs: autoreset boundaries, bootstraps, stats."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from beyondfit.rl.collect.onpolicy import RolloutCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.nets.policies import ActorCritic


class CountEnv(gym.Env):
    """Observation = steps taken in this episode; reward 1 per step; ends after ``length`` steps."""

    observation_space = gym.spaces.Box(0.0, 1000.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 3) -> None:
        self.length = length
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t >= self.length, False, {}


gym.register("BeyondfitTest/Count-v0", entry_point=CountEnv, kwargs={"length": 3})
# Never terminates by itself: only the time limit (4 steps) truncates it.
gym.register("BeyondfitTest/Timed-v0", entry_point=CountEnv, kwargs={"length": 10**9},
             max_episode_steps=4)


def constant_critic(policy: ActorCritic, value: float) -> ActorCritic:
    last = policy.critic[-1]
    torch.nn.init.zeros_(last.weight)
    torch.nn.init.constant_(last.bias, value)
    return policy


def collector(env_id: str, num_envs: int = 2, critic: bool = True, **kwargs) -> RolloutCollector:
    envs = make_vector_env(env_id, num_envs)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden=(8,),
                         value_head=critic)
    kwargs = {"num_steps": 8, "total_env_steps": 10**6, "gamma": 1.0, "gae_lambda": 1.0, **kwargs}
    return RolloutCollector(envs, policy, **kwargs)


def test_reset_step_after_termination_is_never_learned_from():
    col = collector("BeyondfitTest/Count-v0")
    batch = next(iter(col))
    # Per env: obs 0,1,2 (terminates), reset step on the final obs 3, obs 0,1,2 (terminates),
    # reset step: 6 of 8 transitions are real, and the final observation is never an input.
    assert batch.obs.shape == (12, 1)
    assert sorted(batch.obs.flatten().tolist()) == [0.0] * 4 + [1.0] * 4 + [2.0] * 4
    # gamma = lambda = 1 and every episode complete: return-to-go = 3 - steps so far.
    assert torch.allclose(batch.returns, 3.0 - batch.obs.flatten())
    assert col.env_steps == 16


def test_truncation_bootstraps_from_the_final_observation():
    col = collector("BeyondfitTest/Timed-v0", num_envs=1, num_steps=5, gamma=0.5)
    constant_critic(col.policy, 5.0)
    batch = next(iter(col))
    # obs 0..3, truncated at obs 3 (final obs 4, value 5), then the reset step (dropped).
    assert batch.obs.flatten().tolist() == [0.0, 1.0, 2.0, 3.0]
    g3 = 1 + 0.5 * 5.0  # bootstrapped: not 1, which would treat the time limit as a real end
    g2 = 1 + 0.5 * g3
    g1 = 1 + 0.5 * g2
    g0 = 1 + 0.5 * g1
    assert torch.allclose(batch.returns, torch.tensor([g0, g1, g2, g3]))
    assert torch.allclose(batch.advantages, batch.returns - 5.0)


def test_rollout_end_bootstraps_from_the_next_value():
    col = collector("BeyondfitTest/Timed-v0", num_envs=1, num_steps=2, gamma=0.5)
    constant_critic(col.policy, 4.0)
    batch = next(iter(col))
    assert torch.allclose(batch.returns, torch.tensor([1 + 0.5 * (1 + 0.5 * 4.0), 1 + 0.5 * 4.0]))


def test_without_a_critic_advantages_are_discounted_returns_cut_at_the_rollout_end():
    col = collector("BeyondfitTest/Timed-v0", num_envs=1, num_steps=6, gamma=0.5, critic=False)
    batch = next(iter(col))
    assert batch.old_values is None  # no critic ran
    # obs 0..3, truncated at obs 3: nothing to bootstrap from, so the return stops there; the
    # reset step (dropped); obs 0 of the next episode, cut by the rollout's end.
    assert batch.obs.flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 0.0]
    g3 = 1.0
    g2 = 1 + 0.5 * g3
    g1 = 1 + 0.5 * g2
    g0 = 1 + 0.5 * g1
    assert torch.allclose(batch.returns, torch.tensor([g0, g1, g2, g3, 1.0]))
    assert torch.equal(batch.advantages, batch.returns)


def test_a_loss_that_needs_values_names_the_policy_without_a_critic():
    from beyondfit.core.errors import BeyondfitError
    from beyondfit.rl.algos.onpolicy import a2c_loss

    col = collector("BeyondfitTest/Count-v0", critic=False)
    batch = next(iter(col))
    message = r"policy ActorCritic\(Box.*no value head.*task.critic"
    with pytest.raises(BeyondfitError, match=message):
        a2c_loss()(col.policy, batch)


def test_episode_statistics_span_rollouts_and_skip_empty_intervals():
    col = collector("BeyondfitTest/Count-v0", num_envs=1, num_steps=2)
    batches = iter(col)
    next(batches)  # steps obs 0, 1: no episode has ended yet
    first = col.metrics()
    assert first == {"env_steps": 2.0}  # no NaN for an empty interval: the keys are absent
    next(batches)  # obs 2 (terminates after 3 steps), then the reset step
    second = col.metrics()
    assert second == {"env_steps": 4.0, "episode_return": 3.0, "episode_length": 3.0}
    for _ in range(3):  # 6 more steps: two more whole episodes
        next(batches)
    third = col.metrics()
    assert third["episode_return"] == 3.0 and third["episode_length"] == 3.0
    assert all(math.isfinite(v) for v in third.values())


def test_stops_after_the_env_step_budget_and_yields_epochs_of_minibatches():
    col = collector("BeyondfitTest/Count-v0", total_env_steps=20, epochs=2, minibatches=3)
    batches = list(col)
    assert col.env_steps == 32  # two rollouts of 8 steps x 2 envs reach the budget of 20
    assert len(batches) == 2 * col.batches_per_rollout == 12
    first_epoch = batches[:3]
    sizes = [b.obs.shape[0] for b in first_epoch]
    assert sum(sizes) == 12 and max(sizes) - min(sizes) <= 1  # a partition of the rollout

    def rows(epoch):  # each row's fields side by side, in a canonical order
        cat = [torch.cat([getattr(b, f).reshape(len(b.obs), -1).float() for b in epoch])
               for f in ("obs", "actions", "old_log_prob", "old_values", "advantages", "returns")]
        return sorted(map(tuple, torch.cat(cat, 1).tolist()))

    assert rows(batches[3:6]) == rows(first_epoch)  # the second epoch reshuffles the same rows
    assert not all(torch.equal(a.obs, b.obs) for a, b in zip(batches[3:6], first_epoch))
    assert list(col) == []  # exhausted: a second pass yields nothing


def test_batches_are_ordinary_tensors_autograd_can_use():
    col = collector("BeyondfitTest/Count-v0")
    batch = next(iter(col))
    assert not any(t.is_inference() for t in batch)
    logp, _ = col.policy.log_prob_entropy(batch.obs, batch.actions)
    (logp * batch.advantages).mean().backward()  # would raise on inference tensors


def test_same_seed_same_rollouts():
    def first_batches(seed):
        torch.manual_seed(0)
        col = collector("CartPole-v1", num_envs=4, seed=seed, epochs=2, minibatches=2)
        it = iter(col)
        return [next(it) for _ in range(4)]

    a, b, c = first_batches(1), first_batches(1), first_batches(2)
    for x, y in zip(a, b):
        assert all(torch.equal(u, v) for u, v in zip(x, y))
    assert not all(torch.equal(u, v) for u, v in zip(a[0], c[0]))


def test_state_dict_round_trip():
    col = collector("BeyondfitTest/Count-v0")
    next(iter(col))
    state = col.state_dict()
    other = collector("BeyondfitTest/Count-v0")
    other.load_state_dict(state)
    assert other.env_steps == col.env_steps == 16 and other.rollouts == 1
    assert torch.equal(state["generator"], col.state_dict()["generator"])
    next(iter(other))  # resumes: reseeds the envs and continues counting
    assert other.env_steps == 32


def _resumable(seed: int = 3, device: str = "cpu") -> RolloutCollector:
    # Copies that are envs of their own (SyncVectorEnv): what an exact resume replays.
    envs = make_vector_env("CartPole-v1", 4, sync=True)
    torch.manual_seed(0)  # the same policy weights on both sides
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    return RolloutCollector(envs, policy.to(device), num_steps=16, total_env_steps=10**6,
                            seed=seed, epochs=2, minibatches=3)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("taken, device", [
    (1, "cpu"), (4, "cpu"), (6, "cpu"), (7, "cpu"), (13, "cpu"),  # mid-epoch, epoch/rollout end
    pytest.param(4, "cuda", marks=CUDA)])  # the shuffle and generator on the device
def test_a_collector_restored_at_any_batch_yields_the_same_batches_as_one_never_stopped(
        taken, device):
    import copy

    first = _resumable(device=device)
    it = iter(first)
    for _ in range(taken):
        next(it)
    state = copy.deepcopy(first.state_dict())
    later = [next(it) for _ in range(20)]  # crosses rollouts and CartPole episode ends
    resumed = _resumable(device=device)
    resumed.load_state_dict(state)
    again = iter(resumed)
    for want in later:
        got = next(again)
        assert all(torch.equal(u, v) for u, v in zip(got, want, strict=True))
    assert resumed.env_steps == first.env_steps
    assert resumed.state_dict()["ep_length"] == first.state_dict()["ep_length"]


@pytest.mark.parametrize("doctor, message", [
    (lambda s: s["rollout"].update(perm=torch.arange(3)), r"^rollout\.perm=.* is not a "
     r"permutation of the \d+ rows"),
    (lambda s: s["rollout"].update(epoch=2), r"^rollout\.epoch=2 is not a whole number below "
     r"epochs=2"),
    (lambda s: s["rollout"]["fields"].update(obs=s["rollout"]["fields"]["obs"][:, :2]),
     r"^rollout\.fields\.obs=a tensor of shape \(\d+, 2\) is not observations of shape"),
    (lambda s: s["rollout"]["fields"].update(obs=torch.zeros(3, 4)),
     r"^rollout\.fields\.actions=a tensor of shape \(\d+,\) is not a finite tensor of 3 rows"),
    (lambda s: s["rollout"]["fields"].pop("returns"), r"^rollout\.fields="),
    (lambda s: s["rollout"]["fields"]["actions"].__setitem__(0, 7),
     r"^rollout\.fields\.actions=a tensor of shape \(\d+,\) is not action indices in \[0, 2\)"),
    (lambda s: s.update(running_return=[0.0]), r"^running_return=\[0\.0\] is not a list of "
     r"4 finite numbers"),
    (lambda s: s.update(rollout_start=10**6), r"^rollout_start=1000000 is not at most "),
    (lambda s: s["episode_actions"].__setitem__(0, torch.tensor([0, 5])),
     r"^episode_actions\[0\] holds actions outside"),
])
def test_a_doctored_rollout_state_is_one_line_and_changes_nothing(doctor, message):
    import copy

    from beyondfit.core.state.checks import FieldError

    first = _resumable()
    it = iter(first)
    for _ in range(4):
        next(it)
    state = copy.deepcopy(first.state_dict())
    doctor(state)
    other = _resumable()
    before = copy.deepcopy(other.state_dict())
    with pytest.raises(FieldError, match=message):
        other.load_state_dict(state)
    after = other.state_dict()
    assert after.keys() == before.keys() and after["env_steps"] == before["env_steps"]
    assert "rollout" not in after


def test_continuous_actions_are_clipped_for_the_env_only():
    envs = make_vector_env("Pendulum-v1", 2)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden=(8,),
                         log_std_init=2.0)  # std ~7: many samples fall outside [-2, 2]
    col = RolloutCollector(envs, policy, num_steps=16, total_env_steps=32)
    batch = next(iter(col))
    assert batch.actions.shape == (32, 1)
    assert batch.actions.abs().max() > 2.0  # the learner keeps what the policy sampled


@pytest.mark.parametrize("mode", ["CartPole-v1", "Acrobot-v1"])
def test_vector_env_uses_next_step_autoreset(mode):
    envs = make_vector_env(mode, 2)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    envs.close()


def test_shard_splits_the_budget_and_seeds_once():
    col = collector("BeyondfitTest/Count-v0", total_env_steps=100, seed=7)
    col.shard(1, 4)
    col.shard(1, 4)  # the runner and the engine may both ask: no double split
    assert col.total_env_steps == 25 and col.seed == 7 + 1_000_003
    assert "env_steps" in col.metric_totals


def test_length_is_the_number_of_batches_of_a_full_pass():
    col = collector("BeyondfitTest/Count-v0", total_env_steps=20, epochs=2, minibatches=3)
    assert len(col) == len(list(col)) == 12


def test_log_probs_are_optional_and_ppo_asks_for_them():
    from beyondfit.core.errors import BeyondfitError
    from beyondfit.rl.algos.onpolicy import ppo_loss

    col = collector("BeyondfitTest/Count-v0", old_log_prob=False, minibatches=2)
    batch = next(iter(col))
    assert batch.old_log_prob is None
    with pytest.raises(BeyondfitError, match="old_log_prob=True"):
        ppo_loss()(col.policy, batch)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_recorded_log_probs_are_the_collecting_policys(env_id):
    """The collector scores a whole rollout at once; the result must be what the policy says
    of each action, so PPO's first ratio is exactly 1."""
    torch.manual_seed(0)
    col = collector(env_id, num_envs=3, minibatches=2)
    batch = next(iter(col))
    with torch.no_grad():
        logp, _ = col.policy.log_prob_entropy(batch.obs, batch.actions)
    assert torch.allclose(batch.old_log_prob, logp, atol=1e-5)
    col.close()
