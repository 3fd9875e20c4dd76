"""Off-policy agents: the networks that act and are trained, with their exploration rule.

- :class:`OffPolicyAgent` (SAC, TD3): a critic ensemble in one batched matmul per layer and a
  tanh-squashed Gaussian actor (SAC) or a deterministic one (TD3); actions inside it (and in
  :class:`~beyondfit.rl.replay.buffer.ReplayBatch`) are scaled to ``[-1, 1]``, and
  :meth:`OffPolicyAgent.act` maps them to the env's bounds. Exploration: the actor's sample,
  or its action plus noise.
- :class:`QAgent` (DQN): a Q network over ``Discrete`` actions. Exploration: epsilon-greedy,
  epsilon linear over the run's env steps (SB3's and RL-Zoo's ``exploration_*`` settings).

Both read raw observations through an encoder (:mod:`beyondfit.rl.nets.encoders`: a flatten for
vectors, a CNN for frames, your own): inside the Q network for DQN (``model.q(obs)``); inside
the critic for SAC and TD3, whose actor reads the critic's features without training them
(SB3's shared features extractor; SAC-AE and DrQ detach the actor's input the same way).

Target copies are not the agent's: the algorithm declares them with its updates
(:mod:`beyondfit.rl.algos.algorithm`) and the task keeps them on the agent
(``model.critic_target``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.nets import mlp
from beyondfit.rl.algos.schedules import linear
from beyondfit.rl.envs.actions import box_bounds
from beyondfit.rl.envs.spaces import check_spaces
from beyondfit.rl.nets.encoders import as_encoder, make_encoder
from beyondfit.rl.nets.heads import make_head

#: How the Gaussian actor bounds its log-std: ``"tanh"`` (CleanRL) rescales a tanh into
#: ``[-5, 2]``, smooth and starting near std 0.22; ``"clamp"`` (SB3) clips a linear output to
#: ``[-20, 2]``, starting near std 1.
LOG_STD_RANGES = {"tanh": (-5.0, 2.0), "clamp": (-20.0, 2.0)}
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
ACTORS = ("gaussian", "deterministic")


class VectorizedLinear(nn.Module):
    """``members`` independent linear layers applied in one batched matmul (``baddbmm``; a
    compiled CPU step writes it out where BLAS is slow for its shapes:
    :mod:`beyondfit.core.compile.products`).

    Input ``(members, B, in)`` (or ``(B, in)``, shared by every member: broadcast without a
    copy), output ``(members, B, out)``. Initialised member by member as ``nn.Linear`` is.
    """

    def __init__(self, in_features: int, out_features: int, members: int) -> None:
        super().__init__()
        self.in_features, self.out_features, self.members = in_features, out_features, members
        bound = 1 / math.sqrt(in_features)  # nn.Linear's default for weight and bias
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features)
                                   .uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, members: int | None = None) -> torch.Tensor:
        """``x @ W_m + b_m`` for each member ``m`` (the first ``members`` only, if given)."""
        weight, bias = self.weight, self.bias
        if members is not None:
            weight, bias = weight[:members], bias[:members]
        if x.dim() == 2:
            x = x.expand(weight.shape[0], *x.shape)
        return torch.baddbmm(bias, x, weight)

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, members={self.members}"


class CriticEnsemble(nn.Module):
    """``members`` Q networks ``Q_m(s, a)`` over one ``encoder`` of raw observations, every
    layer of all of them one batched matmul. The encoder is the critic's: its optimizer
    trains it, and a target copy of the critic has its own."""

    def __init__(self, encoder: nn.Module | int, act_dim: int, hidden: Sequence[int],
                 members: int = 2, activation: str = "relu") -> None:  # fmt: skip
        super().__init__()
        self.encoder = encoder = as_encoder(encoder)
        sizes = [encoder.features + act_dim, *hidden, 1]
        self.layers = nn.ModuleList(VectorizedLinear(a, b, members)
                                    for a, b in itertools.pairwise(sizes))
        self.activation = {"relu": F.relu, "tanh": torch.tanh}[activation]
        self.members = members

    def forward(self, obs: torch.Tensor, actions: torch.Tensor,
                members: int | None = None) -> torch.Tensor:  # fmt: skip
        """Q values ``(members, B)`` (the first ``members`` only, if given: TD3's actor loss)."""
        x = torch.cat([self.encoder(obs), actions], 1)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, members)
            if i < last:
                x = self.activation(x)
        return x.squeeze(-1)


class Borrowed:
    """A module an actor reads but does not own: not registered on it (its parameters are the
    owner's, in the owner's optimizer), and kept, not copied, when the actor is deep-copied
    (a target actor reads the online encoder)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __deepcopy__(self, memo: dict[int, Any]) -> Borrowed:
        return self

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The module's output, detached: the actor's loss never trains the encoder."""
        return self.module(obs).detach()


class GaussianActor(nn.Module):
    """SAC's actor: a Gaussian over pre-squash actions, squashed into ``[-1, 1]`` by tanh.

    ``log_std`` picks how the state-dependent log-std is bounded (:data:`LOG_STD_RANGES`).
    """

    def __init__(self, encoder: nn.Module | int, act_dim: int, hidden: Sequence[int],
                 activation: str = "relu", log_std: str = "tanh") -> None:  # fmt: skip
        super().__init__()
        encoder = as_encoder(encoder)
        self.encoder = Borrowed(encoder)
        obs_dim = encoder.features
        if log_std not in LOG_STD_RANGES:
            raise BeyondfitError(f"unknown task.agent.log_std={log_std!r}; choose one of "
                                 f"{', '.join(LOG_STD_RANGES)}")
        self.trunk = mlp([obs_dim, *hidden], activation)
        if hidden:  # no hidden layer (task.hidden=[]): a linear policy, the observation bare
            self.trunk.append(nn.ReLU() if activation == "relu" else nn.Tanh())
        # mean and log-std in one matmul
        self.head = nn.Linear(hidden[-1] if hidden else obs_dim, 2 * act_dim)
        self.log_std_mode = log_std
        self.log_std_min, self.log_std_max = LOG_STD_RANGES[log_std]

    def _mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw = self.head(self.trunk(self.encoder.features(obs))).chunk(2, -1)
        low, high = self.log_std_min, self.log_std_max
        if self.log_std_mode == "clamp":
            return mean, raw.clamp(low, high)
        return mean, low + 0.5 * (high - low) * (torch.tanh(raw) + 1)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """A reparameterised action in ``[-1, 1]`` and its log-probability (tanh-corrected)."""
        mean, log_std = self._mean_log_std(obs)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device,
                            dtype=mean.dtype)  # fmt: skip
        u = mean + log_std.exp() * noise
        # log N(u) - sum log(1 - tanh(u)^2), the latter as 2 (log 2 - u - softplus(-2u)).
        log_prob = (-0.5 * noise.pow(2) - log_std - 2 * (math.log(2) - u - F.softplus(-2 * u)))
        return torch.tanh(u), log_prob.sum(-1) - _LOG_SQRT_2PI * mean.shape[-1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action: the squashed mean."""
        return torch.tanh(self._mean_log_std(obs)[0])


class DeterministicActor(nn.Module):
    """TD3's actor: ``tanh(MLP(obs))`` in ``[-1, 1]``."""

    def __init__(self, encoder: nn.Module | int, act_dim: int, hidden: Sequence[int],
                 activation: str = "relu") -> None:  # fmt: skip
        super().__init__()
        encoder = as_encoder(encoder)
        self.encoder = Borrowed(encoder)
        self.net = mlp([encoder.features, *hidden, act_dim], activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The action."""
        return torch.tanh(self.net(self.encoder.features(obs)))


class OffPolicyAgent(nn.Module):
    """Actor, critic ensemble, their slow target copies and (SAC) the log-temperature.

    What a loss may use (``model`` in ``loss(model, batch)``):

    - ``model.actor(obs)``: the deterministic action in ``[-1, 1]``, ``(B, act_dim)``;
      ``model.actor.sample(obs)`` (Gaussian actor only): ``(action, log_prob)``;
    - ``model.critic(obs, actions)``: Q values ``(members, B)``; ``members=1``: the first only;
    - ``model.critic_target``, ``model.actor_target``: the same calls on the slow copies
      (:class:`~beyondfit.core.target.SlowCopy`) when the algorithm declares them;
    - ``model.log_alpha``: SAC's log-temperature parameter (``None`` without one);
      ``model.obs_dim``, ``model.act_dim`` (flat sizes: a new part's, ``build(model)``);
      ``model.encoder`` (the critic's) and ``model.features``, its width.

    Args:
        observation_space: a ``Box``: a vector or images.
        action_space: a bounded ``Box``.
        actor: ``"gaussian"`` (SAC) or ``"deterministic"`` (TD3).
        hidden: hidden sizes of the actor; ``critic_hidden`` those of each critic (default the
            same).
        critics: members of the critic ensemble (2: clipped double Q).
        init_alpha: SAC's initial temperature (a learned ``log_alpha``); ``None``: none.
        exploration_noise: TD3's Gaussian action noise (std, in ``[-1, 1]`` units).
        log_std: how the Gaussian actor bounds its log-std: ``"tanh"`` or ``"clamp"``
            (:data:`LOG_STD_RANGES`).
        activation: ``"relu"`` or ``"tanh"``.
        encoder: what reads observations (:func:`~beyondfit.rl.nets.encoders.make_encoder`).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        actor: str = "gaussian",
        hidden: Sequence[int] = (256, 256),
        critic_hidden: Sequence[int] | None = None,
        critics: int = 2,
        init_alpha: float | None = 1.0,
        exploration_noise: float = 0.1,
        log_std: str = "tanh",
        activation: str = "relu",
        encoder: Any = "auto",
    ) -> None:
        super().__init__()
        check_spaces(observation_space, action_space)
        low, high = box_bounds(action_space)
        if actor not in ACTORS:
            raise BeyondfitError(f"unknown task.agent.actor={actor!r}; choose one of "
                                 f"{', '.join(ACTORS)}")
        if activation not in ("relu", "tanh"):
            raise BeyondfitError(f"unknown task.agent.activation={activation!r}; choose one of "
                                 "relu, tanh")
        check_number("task.agent.critics", critics, integer=True, at_least=1)
        check_number("task.agent.init_alpha", init_alpha, above=0, allow_none=True,
                     example="task.agent.init_alpha=1.0 (SAC's starting temperature)")
        self.obs_dim = int(np.prod(observation_space.shape))
        self.act_dim = int(low.size)
        self.action_shape = tuple(action_space.shape)
        hidden = tuple(hidden)
        encoder = make_encoder(observation_space, encoder)
        self.features = encoder.features
        # The actor first: on flat observations (no encoder parameters) the networks draw
        # their initial weights in the order they always did.
        if actor == "gaussian":
            self.actor = GaussianActor(encoder, self.act_dim, hidden, activation, log_std)
        else:
            self.actor = DeterministicActor(encoder, self.act_dim, hidden, activation)
        self.critic = CriticEnsemble(encoder, self.act_dim, tuple(critic_hidden or hidden),
                                     critics, activation)
        self.log_alpha = None if init_alpha is None else nn.Parameter(
            torch.tensor(math.log(init_alpha)))
        self.exploration_noise = float(exploration_noise)
        self.register_buffer("scale", torch.as_tensor((high - low) / 2, dtype=torch.float32))
        self.register_buffer("centre", torch.as_tensor((high + low) / 2, dtype=torch.float32))

    @property
    def encoder(self) -> nn.Module:
        """What reads the observations: the critic's encoder (the actor reads its features)."""
        return self.critic.encoder

    def explore(self, obs: torch.Tensor, generator: torch.Generator | None = None,
                progress: float = 0.0) -> torch.Tensor:  # fmt: skip
        """The collector's actions in ``[-1, 1]``: a Gaussian actor's sample, or the
        deterministic action plus Gaussian noise of std ``exploration_noise``, clipped (the
        same at any ``progress`` through the run)."""
        if isinstance(self.actor, GaussianActor):
            return self.actor.sample(obs, generator)[0]
        action = self.actor(obs)
        if self.exploration_noise:
            noise = torch.randn(action.shape, generator=generator, device=action.device,
                                dtype=action.dtype)  # fmt: skip
            action = (action + self.exploration_noise * noise).clamp_(-1.0, 1.0)
        return action

    def act(self, obs: torch.Tensor, greedy: bool = True,
            generator: torch.Generator | None = None) -> torch.Tensor:  # fmt: skip
        """Actions in the env's units: the deterministic one (``greedy``) or an exploring one."""
        action = self.actor(obs) if greedy else self.explore(obs, generator)
        return (action * self.scale + self.centre).view(-1, *self.action_shape)

    def exploration_state(self, progress: float) -> dict[str, float]:
        """The exploration rule's settings at ``progress``: none change over a run."""
        return {}


class QNetwork(nn.Module):
    """Q values ``(B, n_actions)`` of raw observations: the encoder, then a head
    (:mod:`beyondfit.rl.nets.heads`: ``mlp``, ``dueling`` or one's own)."""

    def __init__(self, encoder: nn.Module, hidden: Sequence[int], n_actions: int,
                 activation: str = "relu", head: Any = "mlp") -> None:  # fmt: skip
        super().__init__()
        self.encoder = encoder
        self.head = make_head(head, encoder.features, n_actions, hidden, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, n_actions)``."""
        return self.head(self.encoder(obs))


class QAgent(nn.Module):
    """DQN's agent: a Q network over ``Discrete`` actions, epsilon-greedy while collecting.

    What a loss may use: ``model.q(obs)``, Q values ``(B, n_actions)`` of raw observations
    (the encoder is inside the Q network, so a target copy has its own); ``model.q_target`` the
    same on the slow copy the algorithm declares (``dqn_loss``); ``model.n_actions``;
    ``model.encoder`` (``model.q.encoder``) and ``model.features``, its width.

    Args:
        observation_space: a ``Box``: a vector or images.
        action_space: a ``Discrete``.
        hidden: hidden sizes of the Q network's head, after the encoder.
        activation: ``"relu"`` or ``"tanh"``.
        exploration_fraction: the fraction of the run's env steps over which epsilon falls
            linearly from ``exploration_initial_eps`` to ``exploration_final_eps`` (SB3's
            names; it stays there after).
        exploration_start: the fraction of the run's env steps before epsilon starts to fall
            (0: from the start, SB3's; Dopamine's agents start at the end of their random
            steps, ``task.agent.exploration_start_steps``).
        head: the Q head (:data:`~beyondfit.rl.nets.heads.HEADS`: ``mlp``, ``dueling``; or a
            factory of one's own).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        hidden: Sequence[int] = (64, 64),
        activation: str = "relu",
        exploration_fraction: float = 0.1,
        exploration_initial_eps: float = 1.0,
        exploration_final_eps: float = 0.05,
        encoder: Any = "auto",
        exploration_start: float = 0.0,
        head: Any = "mlp",
    ) -> None:
        super().__init__()
        check_spaces(observation_space, action_space)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise BeyondfitError(f"action space {action_space} is not Discrete: DQN picks one of "
                                 "n actions; for Box actions use algo=sac or algo=td3")
        if activation not in ("relu", "tanh"):
            raise BeyondfitError(f"unknown task.agent.activation={activation!r}; choose one of "
                                 "relu, tanh")
        check_number("task.agent.exploration_fraction", exploration_fraction, above=0,
                     at_most=1, example="task.agent.exploration_fraction=0.1")
        check_number("task.agent.exploration_start", exploration_start, at_least=0,
                     at_most=1, example="task.agent.exploration_start_steps=1600")
        for key, value in (("exploration_initial_eps", exploration_initial_eps),
                           ("exploration_final_eps", exploration_final_eps)):
            check_number(f"task.agent.{key}", value, at_least=0, at_most=1,
                         example=f"task.agent.{key}=0.05")
        self.n_actions = int(action_space.n)
        self.start = int(action_space.start)
        self.q = QNetwork(make_encoder(observation_space, encoder), hidden, self.n_actions,
                          activation, head)
        self.features = self.q.encoder.features
        self.fraction, self.start_at = float(exploration_fraction), float(exploration_start)
        self.initial_eps, self.final_eps = float(exploration_initial_eps), float(
            exploration_final_eps)

    @property
    def encoder(self) -> nn.Module:
        """What reads the observations: the Q network's encoder."""
        return self.q.encoder

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q values ``(B, n_actions)``."""
        return self.q(obs)

    def epsilon(self, progress: float) -> float:
        """The chance of a random action at ``progress`` (the fraction of the run's env steps
        taken): linear from the initial to the final value over ``exploration_fraction``,
        from ``exploration_start`` on."""
        done = max(0.0, progress - self.start_at) / self.fraction
        return linear(self.initial_eps, self.final_eps, min(1.0, done))

    def explore(self, obs: torch.Tensor, generator: torch.Generator | None = None,
                progress: float = 0.0) -> torch.Tensor:  # fmt: skip
        """The collector's actions (indices ``(B,)``): epsilon-greedy at ``progress``."""
        shape, device = obs.shape[:1], obs.device
        chance = torch.rand(shape, generator=generator, device=device)
        uniform = torch.randint(self.n_actions, shape, generator=generator, device=device)
        explore = chance < self.epsilon(progress)
        # Every copy exploring: no forward pass (most steps early in a run). Asked on the CPU
        # only, where the answer costs no wait for the device.
        if device.type == "cpu" and bool(explore.all()):
            return uniform
        return torch.where(explore, uniform, self.q(obs).argmax(1))

    def act(self, obs: torch.Tensor, greedy: bool = True,
            generator: torch.Generator | None = None) -> torch.Tensor:  # fmt: skip
        """Actions in the env's units: the greedy one, or an epsilon-greedy one at the run's
        end (``greedy=False``)."""
        index = self.q(obs).argmax(1) if greedy else self.explore(obs, generator, 1.0)
        return index + self.start

    def exploration_state(self, progress: float) -> dict[str, float]:
        """The exploration rule at ``progress``: ``{"epsilon": ...}`` (what a checkpoint holds
        and a resume checks against this run's schedule)."""
        return {"epsilon": self.epsilon(progress)}


#: ``task.agent.kind``: the agent class each name builds (the other options are the class's).
AGENTS: dict[str, type[OffPolicyAgent] | type[QAgent]] = {"actor_critic": OffPolicyAgent,
                                                          "q": QAgent}
