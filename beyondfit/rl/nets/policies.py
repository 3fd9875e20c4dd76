"""Policies: categorical for ``Discrete`` actions, diagonal Gaussian for ``Box`` actions, over an
encoder (:mod:`beyondfit.rl.nets.encoders`: flat vectors, CNNs for frames and boards, your own).

The distribution is written out by hand (log-softmax, Gumbel-max sampling, Gaussian log-density)
instead of ``torch.distributions``: building a validated ``Categorical`` per environment step costs
more than the MLP itself, and the rollout loop calls :meth:`ActorCritic.act` once per step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.nets import INITS, mlp
from beyondfit.rl.envs.spaces import check_spaces
from beyondfit.rl.nets.encoders import make_encoder

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)



def _layer_sizes(key: str, sizes: Any) -> tuple[int, ...]:
    """``sizes`` as a tuple of positive layer widths, or one line naming ``task.KEY``."""
    if isinstance(sizes, str) or not isinstance(sizes, Sequence) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in sizes):
        raise BeyondfitError(f"task.{key}={sizes!r}: give a list of positive layer sizes, e.g. "
                             "[256, 256]")
    return tuple(sizes)


class ActorCritic(nn.Module):
    """An actor (action distribution) and an optional critic (state value): two heads over one
    encoder.

    The encoder is the shared trunk (CleanRL's ``ppo_atari.py``: one CNN, a policy and a value
    head). On flat observations it is a flatten with no parameters, so actor and critic are
    separate MLPs; the heads keep the per-step forward to the actor alone, and the collector
    computes values for the whole rollout in one batched call afterwards.

    Args:
        observation_space: a ``Box``: a vector (flattened) or images.
        action_space: ``Discrete`` -> categorical policy, ``Box`` -> diagonal Gaussian with a
            learned, state-independent log standard deviation.
        hidden: hidden layer sizes of the actor's MLP (and of the critic's, unless
            ``critic_hidden`` is given).
        value_head: build the critic (the built-in losses use it as baseline or for GAE; a loss
            that needs no values runs without one, and the collector then computes none).
        log_std_init: initial log standard deviation of the Gaussian policy.
        activation: hidden activation, ``"relu"`` or ``"tanh"``.
        critic_hidden: hidden layer sizes of the critic's MLP (SB3's ``net_arch=dict(pi=...,
            vf=...)``); ``None``: ``hidden``.
        init: how the heads' linear layers start: ``"orthogonal"`` (CleanRL's ``layer_init``:
            gain sqrt(2) in hidden layers, 0.01 on the actor's last, 1 on the critic's, zero
            biases) or ``"default"`` (torch's own, as SB3's ``ortho_init=False`` leaves them).
            The encoder (a CNN) initializes itself either way.
        normalizer: optional running normalization (:class:`~beyondfit.rl.collect.normalization.
            Normalizer`): every method that takes observations takes raw ones and normalizes
            them with its (saved, frozen outside collection) statistics (flat observations).
        encoder: what reads observations (:func:`~beyondfit.rl.nets.encoders.make_encoder`):
            ``"auto"`` (from the space), ``"flat"``, ``"nature"``, ``"minatar"`` or a factory
            ``observation_space -> nn.Module``; ``hidden`` sizes the heads after it.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden: Sequence[int] = (64, 64),
        value_head: bool = True,
        log_std_init: float = 0.0,
        activation: str = "tanh",
        normalizer: nn.Module | None = None,
        encoder: Any = "auto",
        critic_hidden: Sequence[int] | None = None,
        init: str = "orthogonal",
    ) -> None:
        super().__init__()
        check_spaces(observation_space, action_space)
        normalized = getattr(normalizer, "obs", None) is not None
        if init not in INITS:
            raise BeyondfitError(f"unknown task.init={init!r}; choose one of {', '.join(INITS)}")
        # A built-in CNN starts as the heads do (SB3's PPO ortho-initializes its extractor).
        self.encoder = make_encoder(observation_space, encoder, normalized, init)
        obs_dim = self.encoder.features
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            out_dim = int(action_space.n)
            self.action_shape: tuple[int, ...] = ()
        else:
            out_dim = int(np.prod(action_space.shape))
            self.action_shape = tuple(action_space.shape)
            self.log_std = nn.Parameter(torch.full((out_dim,), float(log_std_init)))
        if activation not in ("relu", "tanh"):
            raise BeyondfitError(
                f"unknown task.activation={activation!r}; choose one of relu, tanh"
            )
        hidden = _layer_sizes("hidden", hidden)
        critic_hidden = hidden if critic_hidden is None else _layer_sizes("critic_hidden",
                                                                          critic_hidden)
        self.actor = mlp([obs_dim, *hidden, out_dim], activation, init=init, out_gain=0.01)
        self.critic = mlp([obs_dim, *critic_hidden, 1], activation, init=init) if value_head \
            else None
        self.normalizer = normalizer
        self._spaces = f"{observation_space} -> {action_space}"

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the heads see: the encoder's ``(B, F)`` features of raw observations (flat
        ones normalized by the running statistics)."""
        x = self.encoder(obs)
        return x if self.normalizer is None else self.normalizer(x)

    @property
    def shares_encoder(self) -> bool:
        """Do the heads share a trained encoder (a CNN), so that values are best computed
        with the actions, from the same features? (A flatten has no parameters: there the
        collector computes a rollout's values in one batched pass.)"""
        return self.critic is not None and any(True for _ in self.encoder.parameters())

    def forward_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` and :meth:`value` of ``obs`` from one pass of the encoder."""
        features = self.features(obs)
        return self.actor(features), self._critic()(features).squeeze(-1)

    @property
    def has_critic(self) -> bool:
        """Whether :meth:`value` works (the collector computes values and GAE only then)."""
        return self.critic is not None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits (discrete) or action means (continuous), shape ``(B, n)``."""
        return self.actor(self.features(obs))

    def act(
        self,
        obs: torch.Tensor,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample actions (the most likely ones when ``greedy``) for a batch of observations.

        Call it under ``torch.inference_mode()`` (the collector and evaluator do): it is the
        per-step hot path, so it carries no grad-mode switch of its own. ``generator`` makes
        sampling reproducible independently of the global RNG.
        """
        return self.draw(self(obs), greedy, generator)

    def draw(
        self,
        out: torch.Tensor,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Actions from the distribution that ``out`` defines (the output of :meth:`forward`:
        logits or Gaussian means); the most likely ones when ``greedy``."""
        if self.discrete:
            if greedy:
                return out.argmax(-1)
            # Gumbel-max: argmax(logits + Gumbel noise) is an exact categorical sample.
            noise = torch.empty_like(out).exponential_(generator=generator)
            return (out - noise.log()).argmax(-1)
        if not greedy:
            noise = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
            out = out + self.log_std.exp() * noise
        return out.view(-1, *self.action_shape)

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions and their log-probabilities, from one forward pass."""
        out = self(obs)
        action = self.draw(out, generator=generator)
        return action, self.log_prob(out, action)

    def log_prob(self, out: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of ``actions`` under ``out`` (the output of :meth:`forward`), ``(B,)``.

        Row by row, so the collector keeps each step's ``out`` and scores a whole rollout in one
        call after it: a few kernels per rollout instead of a few per env step.
        """
        if self.discrete:
            return out.log_softmax(-1).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        z = (actions.flatten(1) - out) / self.log_std.exp()
        return (-0.5 * z.pow(2)).sum(-1) - (self.log_std.sum() + _LOG_SQRT_2PI * out.shape[1])

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``actions`` and policy entropy at ``obs``, each shape ``(B,)``."""
        return self._log_prob_entropy(self(obs), actions)

    def _log_prob_entropy(self, out: torch.Tensor, actions: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        if self.discrete:
            logp_all = out.log_softmax(-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp, entropy
        entropy = (0.5 + _LOG_SQRT_2PI + self.log_std).sum()  # state-independent
        return self.log_prob(out, actions), entropy.expand(out.shape[0])

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values, shape ``(B,)``."""
        return self._critic()(self.features(obs)).squeeze(-1)

    def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """``(log_prob, entropy, value)`` of ``actions`` at ``obs``, each ``(B,)``, from one
        pass of the encoder (what :meth:`log_prob_entropy` and :meth:`value` give, without
        encoding the frames twice)."""
        critic = self._critic()
        features = self.features(obs)
        logp, entropy = self._log_prob_entropy(self.actor(features), actions)
        return logp, entropy, critic(features).squeeze(-1)

    def _critic(self) -> nn.Module:
        if self.critic is None:
            raise BeyondfitError(
                f"the policy {type(self).__name__}({self._spaces}) has no value head, but "
                "something (the loss?) asked it for values: build it with value_head=True "
                "(on the command line task.critic=true), or use a loss that needs no critic"
            )
        return self.critic
