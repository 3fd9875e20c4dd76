"""task.aux: auxiliary self-supervised terms on the encoder (beyondfit/rl/algos/auxiliary.py): DrQ's
shift against a padded crop and its averaged targets, each term summed into the algorithm's
closure under the encoder's optimizer with its momentum copies, the refusals, and a run that
asks for none unchanged."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from beyondfit import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.target import SlowCopy
from beyondfit.rl.algos.algorithm import engine_updates
from beyondfit.rl.algos.auxiliary import (
    AuxLoss,
    Momentum,
    ShiftedReplayBatch,
    random_shift,
    resolve,
    shifted,
)
from beyondfit.rl.algos.offpolicy import dqn_loss
from beyondfit.rl.collect.onpolicy import RolloutBatch, RolloutCollector, RolloutTransitions
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.nets.agents import QAgent
from beyondfit.rl.nets.policies import ActorCritic
from beyondfit.rl.replay.buffer import ReplayBatch

BOARD = gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)  # MinAtar's layout: channels last
FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # a frame stack: channels first
ACTIONS = gym.spaces.Discrete(3)


def _crop_reference(image: torch.Tensor, pad: int, dy: int, dx: int) -> torch.Tensor:
    # (C, H, W) float: replicate padding, then the crop at (dy, dx), as DrQ writes it.
    padded = F.pad(image[None], (pad, pad, pad, pad), mode="replicate")[0]
    return padded[:, dy:dy + image.shape[1], dx:dx + image.shape[2]]


@pytest.mark.parametrize("layout", ["first", "last", "gray"])
def test_random_shift_is_a_replicate_padded_crop_in_the_batchs_dtype(layout: str) -> None:
    g = torch.Generator().manual_seed(0)
    shape = {"first": (6, 3, 12, 12), "last": (6, 10, 10, 4), "gray": (6, 12, 12)}[layout]
    obs = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    torch.manual_seed(5)
    out = random_shift(obs, pad=4)
    torch.manual_seed(5)
    offsets = torch.randint(0, 9, (6, 2))  # the draw random_shift makes
    assert out.dtype == torch.uint8 and out.shape == obs.shape
    as_chw = {"first": lambda x: x, "last": lambda x: x.permute(2, 0, 1),
              "gray": lambda x: x[None]}[layout]
    for i in range(6):
        want = _crop_reference(as_chw(obs[i]).float(), 4, *offsets[i].tolist())
        assert torch.equal(as_chw(out[i]).float(), want)
    assert not torch.equal(out, obs)
    bools = random_shift(obs > 127, pad=2)
    assert bools.dtype == torch.bool


def _replay_batch(space: gym.spaces.Box, n: int = 8) -> ReplayBatch:
    g = torch.Generator().manual_seed(1)
    frames = lambda: torch.rand((n, *space.shape), generator=g) < 0.5  # noqa: E731
    return ReplayBatch(frames(), torch.randint(3, (n,), generator=g), torch.randn(n, generator=g),
                       frames(), (torch.rand(n, generator=g) < 0.3).float(), torch.zeros(n))


def _q_agent() -> QAgent:
    torch.manual_seed(0)
    agent = QAgent(BOARD, ACTIONS, hidden=())
    agent.q_target = SlowCopy(agent.q, rate=1.0)
    with torch.no_grad():
        for p in agent.q_target.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return agent


def test_the_shift_is_drqs_4_of_84_pixels_in_proportion_unless_given() -> None:
    # On a 10x10 MinAtar board DrQ's 4 pixels would move it by 40%: PPO with it learned
    # nothing on Breakout (last-100 return 0.8 against 4.6 without it, 500k env steps).
    assert resolve(["shift"], None, BOARD, ACTIONS).shift.pad == 1
    assert resolve(["shift"], None, FRAMES, ACTIONS).shift.pad == 4
    assert resolve(["shift"], None, gym.spaces.Box(0, 255, (64, 64, 3), np.uint8),
                   ACTIONS).shift.pad == 3
    assert resolve(["shift"], {"shift": {"pad": 4}}, BOARD, ACTIONS).shift.pad == 4
    with pytest.raises(BeyondfitError, match=r"task\.aux_options\.shift\.pad"):
        resolve(["shift"], {"shift": {"pad": "wide"}}, BOARD, ACTIONS)


@pytest.mark.parametrize("double", [False, True])
def test_drq_averages_k_targets_and_m_losses(double: bool) -> None:
    agent, batch = _q_agent(), _replay_batch(BOARD)
    shift = resolve(["shift"], {"shift": {"k": 3, "m": 2}}, BOARD, ACTIONS).shift
    torch.manual_seed(3)
    views = shifted(batch, shift)
    assert isinstance(views, ShiftedReplayBatch)
    assert views.obs_views.shape == (16, 10, 10, 4) and views.next_views.shape == (24, 10, 10, 4)
    assert torch.equal(views.obs, views.obs_views[:8]) and views.obs.dtype == torch.bool
    (update,) = dqn_loss(gamma=0.9, double=double)
    out = update.loss(agent, views)
    with torch.no_grad():  # DrQ by hand: mean over k of each view's target
        values = []
        for i in range(3):
            nxt = views.next_views[8 * i:8 * (i + 1)]
            target_q = agent.q_target(nxt)
            pick = agent.q(nxt).argmax(1) if double else target_q.argmax(1)
            values.append(target_q[torch.arange(8), pick])
        target = batch.rewards + 0.9 * (1 - batch.terminated) * torch.stack(values).mean(0)
    losses = [F.smooth_l1_loss(agent.q(views.obs_views[8 * i:8 * (i + 1)])[
        torch.arange(8), batch.actions], target) for i in range(2)]
    torch.testing.assert_close(out["loss"], torch.stack(losses).mean())


def test_drq_of_one_unshifted_view_is_plain_dqn() -> None:
    agent, batch = _q_agent(), _replay_batch(BOARD)
    one = resolve(["shift"], {"shift": {"k": 1, "m": 1, "pad": 0}}, BOARD, ACTIONS).shift
    (update,) = dqn_loss(gamma=0.9)
    plain = update.loss(agent, batch)["loss"]
    torch.testing.assert_close(update.loss(agent, shifted(batch, one))["loss"], plain,
                               rtol=0, atol=0)


def test_a_rollout_batch_is_shifted_once_with_its_next_observations() -> None:
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (5, 4, 84, 84), generator=g, dtype=torch.uint8)
    batch = RolloutTransitions(obs, torch.zeros(5, dtype=torch.long), None, None,
                               torch.zeros(5), torch.zeros(5), obs.clone(), torch.zeros(5),
                               torch.zeros(5))
    shift = resolve(["shift"], None, FRAMES, ACTIONS).shift
    out = shifted(batch, shift)
    assert isinstance(out, RolloutTransitions) and out.obs.shape == obs.shape
    assert not torch.equal(out.obs, obs) and not torch.equal(out.next_obs, obs)
    assert out.actions is batch.actions and out.old_log_prob is None


@pytest.mark.parametrize(("aux", "options", "space", "message"), [
    (["reconstruction"], None, gym.spaces.Box(-1, 1, (4,)), r"task\.aux=reconstruction works "
     r"on the encoder of image observations"),
    (["shiftt"], None, BOARD, r"unknown task\.aux entry 'shiftt'; choose among shift"),
    (["shift"], {"shift": {"pad": -1}}, BOARD, r"task\.aux_options\.shift\.pad=-1"),
    (["shift"], {"shift": {"K": 2}}, BOARD, r"unknown task\.aux_options\.shift option\(s\) "
     r"\['K'\]"),
    (["shift"], {"recon": {}}, BOARD, r"unknown task\.aux_options \['recon'\]"),
    ([3], None, BOARD, r"task\.aux entry 3 is a int"),
    (["self_prediction"], {"self_prediction": {"rate": 0}}, BOARD,
     r"task\.aux_options\.self_prediction\.rate=0"),
])
def test_aux_mistakes_are_one_line_errors(aux, options, space, message: str) -> None:
    with pytest.raises(BeyondfitError, match=message) as info:
        resolve(aux, options, space, ACTIONS)
    assert "\n" not in str(info.value)


def test_none_asked_is_none() -> None:
    assert resolve([], None, BOARD, ACTIONS) is None and resolve(None, None, BOARD,
                                                                  ACTIONS) is None


def _dqn_engine(aux):
    agent = _q_agent()
    del agent.q_target
    auxiliary = resolve(aux, None, BOARD, ACTIONS)
    updates, added = engine_updates(agent, dqn_loss(gamma=0.9, target_every=2), None, auxiliary)
    engine = Engine(agent, updates, lambda p: torch.optim.Adam(p, 1e-3), device="cpu",
                    log_every=1)
    return agent, engine, added


def test_each_term_rides_on_the_encoders_optimizer_and_its_copies_follow_each_step() -> None:
    agent, engine, added = _dqn_engine(["reconstruction", "self_prediction"])
    assert added == ["q_target", "decoder", "spr_transition", "spr_projection", "spr_predictor",
                     "spr_encoder_target", "spr_projection_target"]
    (update,) = engine.updates
    trained = {id(p) for p in update.optimizer.param_groups[0]["params"]}
    for part in ("q", "decoder", "spr_transition", "spr_projection", "spr_predictor"):
        assert all(id(p) in trained for p in getattr(agent, part).parameters()), part
    for copy in ("q_target", "spr_encoder_target", "spr_projection_target"):
        assert not any(id(p) in trained for p in getattr(agent, copy).parameters()), copy
    before = [p.clone() for p in agent.spr_encoder_target.parameters()]
    history = engine.fit([_replay_batch(BOARD) for _ in range(3)], verbose=False)
    row = history[-1]
    assert {"q/aux/reconstruction", "q/aux/self_prediction", "q/aux/self_prediction/cos",
            "q/aux/reconstruction/pixels"} <= set(row)
    assert agent.spr_encoder_target.calls == 3
    online = list(agent.encoder.parameters())
    for old, new, source in zip(before, agent.spr_encoder_target.parameters(), online,
                                strict=True):
        # one EMA step of rate 0.01 at a time: the copy moved, towards the online weights
        assert not torch.equal(old, new) and not torch.equal(new, source)


def test_self_prediction_reads_an_n_step_batchs_one_step_observation() -> None:
    """Its target is the next observation: an n-step batch's ``next_obs`` is up to n on, its
    ``one_step_obs`` one step on, which the term reads as a one-step batch's ``next_obs``."""
    agent = _q_agent()
    term = resolve(["self_prediction"], None, BOARD, ACTIONS).terms[0]
    for part, build in term.parts.items():
        setattr(agent, part, build(agent))
    agent.spr_encoder_target, agent.spr_projection_target = agent.encoder, agent.spr_projection
    one_step = _replay_batch(BOARD)
    further = _replay_batch(BOARD)._replace(next_obs=~one_step.next_obs,
                                             discount=torch.full((8,), 0.81),
                                             one_step_obs=one_step.next_obs)
    torch.testing.assert_close(term.loss(agent, further), term.loss(agent, one_step))
    assert not torch.equal(term.loss(agent, further._replace(one_step_obs=None))["loss"],
                           term.loss(agent, one_step)["loss"])


def test_the_sum_is_the_rl_loss_plus_each_weighted_term() -> None:
    agent = _q_agent()
    seen = []

    def term(model, batch):
        seen.append(batch)
        return {"loss": model.encoder(batch.obs).pow(2).mean(), "extra": torch.tensor(2.0)}

    auxiliary = resolve([AuxLoss("mine", term, weight=0.25)], None, BOARD, ACTIONS)
    (declared,) = dqn_loss(gamma=0.9)
    batch = _replay_batch(BOARD)
    out = auxiliary.wrap(declared.loss)(agent, batch)
    plain = declared.loss(agent, batch)
    mine = agent.encoder(batch.obs).pow(2).mean()
    torch.testing.assert_close(out["loss"], plain["loss"] + 0.25 * mine)
    assert out["aux/mine"] == mine and out["aux/mine/extra"] == 2.0 and seen == [batch]


def test_a_momentum_copy_of_a_missing_part_is_one_line() -> None:
    bad = AuxLoss("bad", lambda m, b: torch.zeros(()), momentum=[Momentum("x_target", "nope")])
    with pytest.raises(BeyondfitError, match=r"task\.aux 'bad': its momentum copy 'x_target' "
                       r"follows model\.nope, which is not a module"):
        resolve([bad], None, BOARD, ACTIONS).attach(_q_agent())


def test_ppo_policy_takes_the_parts_and_keeps_its_encoder_shared() -> None:
    torch.manual_seed(0)
    policy = ActorCritic(BOARD, ACTIONS, hidden=(), activation="relu", encoder="minatar")
    params, hooks, added = resolve(["self_prediction"], None, BOARD, ACTIONS).attach(policy)
    assert added[-2:] == ["spr_encoder_target", "spr_projection_target"]
    assert len(hooks) == 2 and all(p.requires_grad for p in params)
    assert isinstance(policy.spr_encoder_target, SlowCopy)
    assert policy.spr_encoder_target.source is policy.encoder


def _rollouts(transitions: bool, env: str = "CartPole-v1"):
    torch.manual_seed(0)
    envs = make_vector_env(env, 3, sync=True)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    col = RolloutCollector(envs, policy, num_steps=40, total_env_steps=240, seed=2, epochs=2,
                           minibatches=3, transitions=transitions)
    return list(col)


def test_transitions_add_next_observations_and_dones_and_change_no_field() -> None:
    plain, full = _rollouts(False), _rollouts(True)
    assert len(plain) == len(full) == 12
    for a, b in zip(plain, full, strict=True):
        assert type(a) is RolloutBatch and type(b) is RolloutTransitions
        assert all(torch.equal(x, y) for x, y in zip(a, b[:6], strict=True))  # bitwise
        assert b.next_obs.shape == b.obs.shape and b.terminated.dtype == torch.float32
    # One env copy, unshuffled: the rollout's steps in order (CartPole ends by termination).
    (whole,) = list(_one_rollout())
    done = whole.terminated + whole.truncated
    assert done.sum() > 0
    for i in range(len(whole.obs) - 1):  # within an episode: the next step's observation
        if done[i] == 0:
            assert torch.equal(whole.next_obs[i], whole.obs[i + 1]), i
        else:  # its end: the final observation, not the next episode's first
            assert not torch.equal(whole.next_obs[i], whole.obs[i + 1]), i


def _one_rollout():
    torch.manual_seed(0)
    envs = make_vector_env("CartPole-v1", 1, sync=True)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    return RolloutCollector(envs, policy, num_steps=120, total_env_steps=120, seed=2,
                            transitions=True)
