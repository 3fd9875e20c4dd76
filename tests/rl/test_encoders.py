"""The encoder part (``beyondfit/rl/nets/encoders.py``): chosen from the space, shapes and dtypes,
a user's own, and the networks built over it (policy, Q network, critic and actor)."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit import BeyondfitError
from beyondfit.rl.collect.normalization import Normalizer
from beyondfit.rl.collect.onpolicy import RolloutCollector
from beyondfit.rl.nets.agents import OffPolicyAgent, QAgent
from beyondfit.rl.nets.encoders import (
    Flat,
    MinAtarCNN,
    NatureCNN,
    channels_last,
    describe_encoder,
    is_image,
    make_encoder,
)
from beyondfit.rl.nets.policies import ActorCritic

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
BOARD = gym.spaces.Box(0, 1, (10, 10, 4), bool)  # MinAtar's boards
CUBE = gym.spaces.Box(0, 1, (10, 10, 10), bool)
RGB = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def sample(space: gym.Space, n: int = 3, seed: int = 0) -> torch.Tensor:
    space.seed(seed)
    return torch.as_tensor(np.stack([space.sample() for _ in range(n)]))


@pytest.mark.parametrize(("space", "kind", "features"), [
    (VECTOR, Flat, 4), (FRAMES, NatureCNN, 512), (RGB, NatureCNN, 512),
    (BOARD, MinAtarCNN, 128), (CUBE, MinAtarCNN, 128)])
def test_auto_picks_from_the_space_and_features_are_float32(space, kind, features) -> None:
    encoder = make_encoder(space)
    assert type(encoder) is kind and encoder.features == features
    obs = sample(space)
    assert obs.dtype in (torch.uint8, torch.bool, torch.float32)
    out = encoder(obs)
    assert out.shape == (3, features) and out.dtype == torch.float32


def test_images_are_told_apart_from_vectors_and_their_channel_axis_found() -> None:
    assert is_image(FRAMES) and is_image(BOARD) and is_image(RGB) and not is_image(VECTOR)
    assert is_image(gym.spaces.Box(0, 255, (84, 84), np.uint8))
    assert not is_image(gym.spaces.Box(-1.0, 1.0, (3, 5), np.float32))  # a float matrix
    assert not channels_last((4, 84, 84)) and channels_last((84, 84, 4))
    assert channels_last((210, 160, 3)) and channels_last((10, 10, 10))


def test_the_nature_cnn_reads_uint8_frames_as_pixels_over_255() -> None:
    torch.manual_seed(0)
    encoder = NatureCNN(FRAMES)
    frames = sample(FRAMES, 5)
    convs = [m for m in encoder.convs if isinstance(m, nn.Conv2d)]
    x = frames.float() / 255.0  # CleanRL's ppo_atari.py: the network sees x / 255
    for conv in convs:
        x = F.relu(F.conv2d(x, conv.weight, conv.bias, conv.stride))
    expected = encoder.head(x.flatten(1))
    assert torch.allclose(encoder(frames), expected, atol=1e-5)
    # Channels-last in memory (oneDNN's layout), whatever layout the frames came in.
    assert encoder.pixels(frames).is_contiguous(memory_format=torch.channels_last)


def test_a_board_is_read_channels_last_and_bool_as_0_1() -> None:
    torch.manual_seed(0)
    encoder = MinAtarCNN(BOARD)
    boards = sample(BOARD, 4)
    conv = encoder.convs[0]
    x = F.relu(F.conv2d(boards.float().permute(0, 3, 1, 2), conv.weight, conv.bias))
    assert torch.allclose(encoder(boards), encoder.head(x.flatten(1)), atol=1e-6)


def _orthogonal_like(layer: nn.Module) -> bool:
    # Orthogonal of gain sqrt 2: the rows (or columns) of the flattened weight are orthogonal
    # with squared norm 2, and the biases are zero.
    w = layer.weight.detach().flatten(1)
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return bool(torch.allclose(gram, 2 * torch.eye(len(gram)), atol=1e-4)
                and torch.count_nonzero(layer.bias) == 0)


def test_the_policy_initializes_its_cnn_as_its_heads_like_sb3s_ppo() -> None:
    """SB3's PPO (``ortho_init``) and CleanRL's ``layer_init`` start the features extractor
    orthogonal (gain sqrt 2): so does the policy under ``task.init=orthogonal``, for either CNN;
    ``task.init=default`` leaves torch's own. DQN's MinAtar network keeps torch's, as SB3's."""
    for space in (BOARD, FRAMES):
        layers = [m for m in ActorCritic(space, gym.spaces.Discrete(3), hidden=()).encoder
                  .modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        assert layers and all(_orthogonal_like(m) for m in layers)
        plain = ActorCritic(space, gym.spaces.Discrete(3), hidden=(), init="default").encoder
        assert not any(_orthogonal_like(m) for m in plain.modules()
                       if isinstance(m, (nn.Conv2d, nn.Linear)))
    q = QAgent(BOARD, gym.spaces.Discrete(3), hidden=(8,))
    assert not any(_orthogonal_like(m) for m in q.q.encoder.modules()
                   if isinstance(m, (nn.Conv2d, nn.Linear)))
    assert type(make_encoder(FRAMES, init="default")) is NatureCNN
    with pytest.raises(BeyondfitError, match=r"unknown task\.init='xavier'"):
        make_encoder(BOARD, init="xavier")


def test_bad_encoder_choices_are_one_line() -> None:
    cases = [
        (lambda: make_encoder(VECTOR, "nature"), "reads images"),
        (lambda: make_encoder(FRAMES, "resnet"), "unknown task.encoder='resnet'"),
        (lambda: make_encoder(FRAMES, 3), "task.encoder is a int"),
        (lambda: make_encoder(BOARD, "nature"), "at least 36x36"),
        (lambda: make_encoder(FRAMES, "auto", normalized=True), "task.normalize"),
    ]
    for call, words in cases:
        with pytest.raises(BeyondfitError) as info:
            call()
        assert words in str(info.value) and "\n" not in str(info.value)


class Impala(nn.Module):
    """A user's encoder: one residual block on the board, then a linear layer."""

    def __init__(self, space: gym.Space, width: int = 32) -> None:
        super().__init__()
        self.conv = nn.Conv2d(space.shape[-1], 8, 3, padding=1)
        self.res = nn.Conv2d(8, 8, 3, padding=1)
        self.out = nn.Linear(8 * 10 * 10, width)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.conv(obs.permute(0, 3, 1, 2).float())
        x = x + self.res(F.relu(x))
        return F.relu(self.out(x.flatten(1)))


def test_an_encoder_of_ones_own_is_measured_on_one_observation() -> None:
    encoder = make_encoder(BOARD, lambda space: Impala(space, 24))
    assert encoder.features == 24
    policy = ActorCritic(BOARD, gym.spaces.Discrete(3), hidden=(), encoder=Impala)
    assert policy.encoder.features == 32 and policy.shares_encoder
    assert describe_encoder(Impala) == {"_target_": f"{__name__}.Impala"}
    assert describe_encoder("minatar") == "minatar"


@pytest.mark.parametrize(("factory", "words"), [
    (lambda space: 1 / 0, "raised ZeroDivisionError"),
    (lambda space: "not a module", "not a torch.nn.Module"),
    (lambda space: nn.Linear(3, 3), "cannot read a batch of observations"),
    (lambda space: nn.Flatten(0), "returned (800,)"),
    # the trial: float64 or int64 features, one row whatever the batch, zero width
    (lambda space: nn.Sequential(nn.Flatten(), _Cast(torch.float64)), "torch.float64 features"),
    (lambda space: nn.Sequential(nn.Flatten(), _Cast(torch.int64)), "torch.int64 features"),
    (lambda space: _OneRow(), "returned (1, 4) for a batch of 2"),
    (lambda space: nn.Sequential(nn.Flatten(), _Cast(torch.float32), nn.Linear(400, 0)),
     "0 features"),
])
def test_an_encoder_of_ones_own_that_fails_is_one_line(factory, words) -> None:
    with pytest.raises(BeyondfitError) as info:
        make_encoder(BOARD, factory)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert "task.encoder" in str(info.value)


class _Cast(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype)


class _OneRow(nn.Module):
    """An encoder that returns one row whatever the batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(1, 4)


def test_stacked_color_frames_are_refused_in_one_line_not_flattened() -> None:
    stacked = gym.spaces.Box(0, 255, (4, 84, 84, 3), np.uint8)  # grayscale_obs=false, stacked
    for encoder in ("auto", "flat"):
        with pytest.raises(BeyondfitError, match="stacked color frames") as info:
            make_encoder(stacked, encoder)
        assert "grayscale_obs" in str(info.value) and "\n" not in str(info.value)
    assert make_encoder(stacked, lambda space: nn.Sequential(
        nn.Flatten(), _Cast(torch.float32), nn.Linear(4 * 84 * 84 * 3, 8))).features == 8


def test_the_policy_shares_its_cnn_between_policy_and_value() -> None:
    torch.manual_seed(0)
    policy = ActorCritic(FRAMES, gym.spaces.Discrete(4), hidden=())
    obs, actions = sample(FRAMES, 6), torch.tensor([0, 1, 2, 3, 0, 1])
    logp, entropy, value = policy.evaluate_actions(obs, actions)
    logp2, entropy2 = policy.log_prob_entropy(obs, actions)
    assert torch.allclose(logp, logp2) and torch.allclose(entropy, entropy2)
    assert torch.allclose(value, policy.value(obs))
    out, value3 = policy.forward_and_value(obs)
    assert torch.allclose(out, policy(obs)) and torch.allclose(value3, value)
    value.sum().backward()
    assert policy.encoder.head[0].weight.grad is not None  # the value trains the trunk too


def test_running_statistics_are_refused_for_images_in_one_line() -> None:
    with pytest.raises(BeyondfitError, match=r"task\.normalize"):
        ActorCritic(FRAMES, gym.spaces.Discrete(4), normalizer=Normalizer(4 * 84 * 84))
    ActorCritic(FRAMES, gym.spaces.Discrete(4),  # rewards alone are fine
                normalizer=Normalizer(4 * 84 * 84, observations=False))


def test_a_flat_policy_draws_the_weights_it_always_drew() -> None:
    # No parameters in the flat encoder: the heads are the MLPs they were, same init order.
    from beyondfit.nets import mlp

    torch.manual_seed(3)
    policy = ActorCritic(VECTOR, gym.spaces.Discrete(2), hidden=(16,))
    torch.manual_seed(3)
    actor = mlp([4, 16, 2], "tanh", init="orthogonal", out_gain=0.01)
    critic = mlp([4, 16, 1], "tanh", init="orthogonal")
    for mine, theirs in zip([*policy.actor.parameters(), *policy.critic.parameters()],
                            [*actor.parameters(), *critic.parameters()], strict=True):
        assert torch.equal(mine, theirs)
    assert not policy.shares_encoder and list(policy.encoder.parameters()) == []


def test_dqns_encoder_is_inside_its_q_network_and_its_target() -> None:
    torch.manual_seed(0)
    agent = QAgent(FRAMES, gym.spaces.Discrete(4), hidden=())
    obs = sample(FRAMES, 5)
    assert agent.q(obs).shape == (5, 4) and agent.encoder is agent.q.encoder
    assert agent.explore(obs, progress=1.0).shape == (5,)
    target = copy.deepcopy(agent.q)  # what the algorithm's SlowCopy does
    assert target.encoder is not agent.q.encoder
    assert torch.equal(target(obs), agent.q(obs))


def test_sac_and_td3_read_images_through_the_critics_encoder() -> None:
    torch.manual_seed(0)
    box = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    for actor in ("gaussian", "deterministic"):
        agent = OffPolicyAgent(BOARD, box, actor=actor, hidden=(32,), init_alpha=None)
        obs = sample(BOARD, 6)
        action = agent.actor(obs)
        assert action.shape == (6, 2) and agent.critic(obs, action).shape == (2, 6)
        assert agent.act(obs).shape == (6, 2)
        # The critic owns the encoder; the actor's loss never trains it.
        assert {n for n, _ in agent.actor.named_parameters()}.isdisjoint(
            {f"encoder.{n}" for n, _ in agent.encoder.named_parameters()})
        agent.actor(obs).sum().backward()
        assert all(p.grad is None for p in agent.encoder.parameters())
        agent.critic(obs, action.detach()).sum().backward()
        assert all(p.grad is not None for p in agent.encoder.parameters())
        # A target actor reads the online encoder; a target critic has its own.
        assert copy.deepcopy(agent.actor).encoder.module is agent.encoder
        assert copy.deepcopy(agent.critic).encoder is not agent.encoder


class Frames(gym.Env):
    """A tiny pixel env: 8x8 uint8 frames that count the steps, 3 actions, 7-step episodes."""

    observation_space = gym.spaces.Box(0, 255, (8, 8), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._frame(), {}

    def step(self, action):
        self.t += 1
        return self._frame(), float(action == 1), self.t >= 7, False, {}

    def _frame(self):
        return np.full((8, 8), 30 * self.t, dtype=np.uint8)


def test_uint8_frames_reach_the_rollout_batch_as_uint8() -> None:
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.FrameStackObservation(Frames(), 2) for _ in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space, hidden=(),
                         encoder="minatar")
    data = RolloutCollector(envs, policy, num_steps=5, total_env_steps=20, seed=0)
    batch = next(iter(data))
    assert batch.obs.dtype == torch.uint8 and batch.obs.shape[1:] == (2, 8, 8)
    assert batch.old_values is not None and torch.isfinite(batch.old_values).all()
    envs.close()
