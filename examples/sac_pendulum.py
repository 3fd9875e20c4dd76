"""Soft actor-critic on Pendulum-v1: three optimizers in one engine, a replay buffer as data.

SAC (Haarnoja et al., 2018) trains three things against each other: twin Q critics (with
slow-moving target copies), a tanh-squashed Gaussian actor, and the entropy temperature
alpha. Here they are three :class:`~beyondfit.Update` objects of one
:class:`~beyondfit.Engine`, stepped in this order on every batch (CleanRL's order):

1. ``critic``: both Q networks towards the soft Bellman target of the target networks;
2. ``actor``: maximise ``min(Q1, Q2) - alpha * log pi`` through the critics just updated
   (the backward reaches the actor's parameters only, never the critics');
3. ``alpha``: move the temperature so the policy's entropy tracks ``-dim(action)``.

The replay buffer is just another iterable of batches: each ``next()`` steps the env once
with the current actor (uniform random actions for the first ``learning_starts`` steps),
stores the transition and yields a sampled minibatch, so ``engine.fit`` trains on it like
any data. The target networks follow the critics by Polyak averaging in a callback's
``on_step_end``: it runs after every engine step, once all three optimizers have stepped,
which is where the algorithm puts it. (In the buffer's loop it would also run, one batch
late, but the buffer would then be reaching into the learner; the callback keeps data as
data.) Hyperparameters are RL-Zoo's for Pendulum-v1 (SB3's defaults with lr 1e-3).

Run: ``python examples/sac_pendulum.py [--env-steps 20000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from beyondfit import Callback, Engine, Update
from beyondfit.rl.evaluate import GreedyEvaluator

ENV_ID = "Pendulum-v1"
ENV_STEPS = 20_000  # the whole budget, random steps included
LEARNING_STARTS = 1_000  # random actions, no updates, until the buffer holds this many
BATCH, GAMMA, TAU, LR, HIDDEN = 256, 0.99, 0.005, 1e-3, 256
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
EVAL_EPISODES = 10


class Transitions(NamedTuple):
    """A minibatch from the buffer: rows of (s, a, r, s', terminated)."""

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor  # 1.0 at a true end; a time-limit cut is not one (bootstrap)


def q_network(obs_dim: int, act_dim: int) -> nn.Sequential:
    """Q(s, a): an MLP of the concatenated observation and action."""
    return nn.Sequential(
        nn.Linear(obs_dim + act_dim, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, 1),
    )  # fmt: skip


class Actor(nn.Module):
    """A Gaussian policy squashed by tanh and rescaled to the action bounds."""

    def __init__(self, obs_dim: int, act_dim: int, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(obs_dim, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU()
        )
        self.mean = nn.Linear(HIDDEN, act_dim)
        self.log_std = nn.Linear(HIDDEN, act_dim)
        self.register_buffer("scale", torch.as_tensor((high - low) / 2, dtype=torch.float32))
        self.register_buffer("centre", torch.as_tensor((high + low) / 2, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action sample and its log-probability (tanh-corrected)."""
        h = self.trunk(obs)
        mean = self.mean(h)
        # Squash the log-std into its range smoothly (CleanRL) rather than clamping it.
        squashed = torch.tanh(self.log_std(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (squashed + 1)
        noise = torch.randn_like(mean)
        u = mean + log_std.exp() * noise
        # log N(u; mean, std) - log |d action / d u|, with log(1 - tanh(u)^2) in a stable form.
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        log_prob = log_prob - (2 * (np.log(2) - u - F.softplus(-2 * u))).sum(-1)
        log_prob = log_prob - torch.log(self.scale).sum()
        return torch.tanh(u) * self.scale + self.centre, log_prob

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action: the squashed mean."""
        return torch.tanh(self.mean(self.trunk(obs))) * self.scale + self.centre


class SAC(nn.Module):
    """Actor, twin critics, their target copies and the log of the temperature."""

    def __init__(self, observation_space: gym.spaces.Box, action_space: gym.spaces.Box) -> None:
        super().__init__()
        obs_dim, act_dim = int(np.prod(observation_space.shape)), int(np.prod(action_space.shape))
        self.actor = Actor(obs_dim, act_dim, action_space.low, action_space.high)
        self.q1, self.q2 = q_network(obs_dim, act_dim), q_network(obs_dim, act_dim)
        self.q1_target, self.q2_target = q_network(obs_dim, act_dim), q_network(obs_dim, act_dim)
        self.q1_target.load_state_dict(self.q1.state_dict())
        self.q2_target.load_state_dict(self.q2.state_dict())
        self.q1_target.requires_grad_(False)  # moved by Polyak averaging, never by an optimizer
        self.q2_target.requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.zeros(()))  # alpha starts at 1 (SB3, CleanRL)
        self.target_entropy = -float(act_dim)

    def act(self, obs: torch.Tensor, greedy: bool = False) -> torch.Tensor:
        """An action for each observation: sampled, or the mean (``greedy``, for evaluation)."""
        return self.actor.greedy(obs) if greedy else self.actor(obs)[0]

    def alpha(self) -> torch.Tensor:
        """The entropy temperature, as a constant for the critic's and the actor's losses."""
        return self.log_alpha.detach().exp()


def critic_loss(model: SAC, batch: Transitions) -> dict[str, torch.Tensor]:
    """Both Q networks towards r + gamma * (min target Q - alpha * log pi) at s'."""
    with torch.no_grad():
        next_action, next_log_prob = model.actor(batch.next_obs)
        next_in = torch.cat([batch.next_obs, next_action], 1)
        next_q = torch.min(model.q1_target(next_in), model.q2_target(next_in)).squeeze(1)
        target = batch.reward + GAMMA * (1 - batch.terminated) * (
            next_q - model.alpha() * next_log_prob
        )
    q_in = torch.cat([batch.obs, batch.action], 1)
    q1, q2 = model.q1(q_in).squeeze(1), model.q2(q_in).squeeze(1)
    return {"loss": F.mse_loss(q1, target) + F.mse_loss(q2, target), "q": q1.mean()}


def actor_loss(model: SAC, batch: Transitions) -> dict[str, torch.Tensor]:
    """alpha * log pi(a|s) - min(Q1, Q2)(s, a) for a fresh reparameterised action."""
    action, log_prob = model.actor(batch.obs)
    q_in = torch.cat([batch.obs, action], 1)
    q = torch.min(model.q1(q_in), model.q2(q_in)).squeeze(1)
    return {"loss": (model.alpha() * log_prob - q).mean(), "entropy": -log_prob.mean()}


def alpha_loss(model: SAC, batch: Transitions) -> dict[str, torch.Tensor]:
    """Raise alpha while the entropy is below its target, lower it above (SB3's form)."""
    with torch.no_grad():
        _, log_prob = model.actor(batch.obs)
    loss = -(model.log_alpha * (log_prob + model.target_entropy)).mean()
    return {"loss": loss, "value": model.alpha()}


class ReplayBuffer:
    """An iterable of minibatches that plays the env as it goes.

    Each step of a pass acts once in the env with ``model``'s current actor (uniformly random
    for the first ``learning_starts`` steps), stores the transition, and, once the buffer holds
    more than ``learning_starts`` transitions, yields a minibatch sampled uniformly from it. A
    pass is the whole budget of ``env_steps``.

    ``metrics()`` reports ``env_steps`` and the mean return of the episodes finished since its
    last call; the engine adds them to its log rows.
    """

    metric_totals = ("env_steps",)

    def __init__(self, model: SAC, env: gym.Env, *, env_steps: int = ENV_STEPS,
                 learning_starts: int = LEARNING_STARTS, batch_size: int = BATCH,
                 capacity: int = 1_000_000, seed: int = 0) -> None:  # fmt: skip
        self.model, self.env = model, env
        self.total, self.learning_starts, self.batch_size = env_steps, learning_starts, batch_size
        self.seed = seed
        capacity = min(capacity, env_steps)  # no more rows than one pass can fill
        obs_dim = int(np.prod(env.observation_space.shape))
        act_dim = int(np.prod(env.action_space.shape))
        self.obs = torch.zeros(capacity, obs_dim)
        self.action = torch.zeros(capacity, act_dim)
        self.reward = torch.zeros(capacity)
        self.next_obs = torch.zeros(capacity, obs_dim)
        self.terminated = torch.zeros(capacity)
        self.size = 0  # rows filled; past the capacity the oldest are overwritten
        self.env_steps = 0
        self.rng = torch.Generator().manual_seed(seed)
        self._obs: np.ndarray | None = None  # the env's current observation (None: reset it)
        self._episode_return = 0.0
        self._finished: list[float] = []

    def __len__(self) -> int:
        return max(self.total - self.learning_starts, 0)

    def __iter__(self) -> Iterator[Transitions]:
        env, low, high = self.env, self.env.action_space.low, self.env.action_space.high
        if self._obs is None:  # the first pass seeds the env and the random actions
            env.action_space.seed(self.seed)
            self._obs, _ = env.reset(seed=self.seed)
        device = next(self.model.parameters()).device
        for _ in range(self.total):
            obs = self._obs
            if self.env_steps < self.learning_starts:
                action = env.action_space.sample()
            else:
                with torch.inference_mode():
                    obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)
                    action = self.model.act(obs_t[None])[0].cpu().numpy()
            next_obs, reward, terminated, truncated, _ = env.step(np.clip(action, low, high))
            self._store(obs, action, reward, next_obs, terminated)
            self._episode_return += float(reward)
            self._obs = next_obs
            if terminated or truncated:  # the stored next_obs is the true last observation
                self._finished.append(self._episode_return)
                self._episode_return = 0.0
                self._obs, _ = env.reset()
            if self.env_steps > self.learning_starts:
                yield self.sample()

    def _store(self, obs: np.ndarray, action: np.ndarray, reward: float, next_obs: np.ndarray,
               terminated: bool) -> None:  # fmt: skip
        i = self.env_steps % len(self.obs)
        self.obs[i] = torch.from_numpy(obs)
        self.action[i] = torch.from_numpy(np.asarray(action, dtype=np.float32))
        self.reward[i] = float(reward)
        self.next_obs[i] = torch.from_numpy(next_obs)
        self.terminated[i] = float(terminated)
        self.size = min(self.size + 1, len(self.obs))
        self.env_steps += 1

    def sample(self) -> Transitions:
        """A minibatch drawn uniformly (with replacement) from what the buffer holds."""
        rows = torch.randint(self.size, (self.batch_size,), generator=self.rng)
        return Transitions(self.obs[rows], self.action[rows], self.reward[rows],
                           self.next_obs[rows], self.terminated[rows])  # fmt: skip

    def metrics(self) -> dict[str, float]:
        """``env_steps`` and the mean return of the episodes finished since the last call."""
        logs = {"env_steps": float(self.env_steps)}
        if self._finished:
            logs["episode_return"] = float(np.mean(self._finished))
            self._finished.clear()
        return logs


class PolyakTargets(Callback):
    """After every engine step: target <- (1 - tau) * target + tau * online, for each pair."""

    def __init__(self, pairs: list[tuple[nn.Module, nn.Module]], tau: float = TAU) -> None:
        self.tau = tau
        self.targets = [p for target, _ in pairs for p in target.parameters()]
        self.online = [p for _, online in pairs for p in online.parameters()]

    def on_step_end(self, engine: Engine) -> None:
        """Move each target parameter a fraction ``tau`` towards its online twin."""
        with torch.no_grad():
            torch._foreach_lerp_(self.targets, self.online, self.tau)


def train(seed: int = 0, env_steps: int = ENV_STEPS, learning_starts: int = LEARNING_STARTS,
          episodes: int = EVAL_EPISODES, log_every: int = 1000,
          verbose: bool | str = "auto") -> dict[str, float]:  # fmt: skip
    """Train SAC for ``env_steps`` env steps, then run ``episodes`` greedy episodes on envs kept
    apart from training. Returns ``val_return``, ``val_length``, ``env_steps``, ``updates``
    and the training's ``train_seconds`` and ``train_cpu_seconds`` (evaluation excluded)."""
    torch.manual_seed(seed)
    env = gym.make(ENV_ID)
    model = SAC(env.observation_space, env.action_space)
    buffer = ReplayBuffer(model, env, env_steps=env_steps, learning_starts=learning_starts,
                          seed=seed)
    engine = Engine(model, [
        Update("critic", critic_loss, torch.optim.Adam([*model.q1.parameters(),
                                                        *model.q2.parameters()], LR)),
        Update("actor", actor_loss, torch.optim.Adam(model.actor.parameters(), LR)),
        Update("alpha", alpha_loss, torch.optim.Adam([model.log_alpha], LR)),
    ], device="cpu", log_every=log_every,
        callbacks=[PolyakTargets([(model.q1_target, model.q1), (model.q2_target, model.q2)])])
    start, cpu_start = time.perf_counter(), time.process_time()
    engine.fit(buffer, epochs=1, verbose=verbose)  # one pass of the buffer: the whole budget
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    env.close()
    evaluator = GreedyEvaluator(ENV_ID, episodes=episodes, seed=seed + 10_000)
    try:
        result = engine.evaluate(evaluator)  # greedy actions, eval mode, no gradients
    finally:
        evaluator.close()
    return {**result, "env_steps": float(buffer.env_steps), "updates": float(engine.global_step),
            "train_seconds": seconds, "train_cpu_seconds": cpu_seconds}


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train and print the greedy return; returns :func:`train`'s result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-steps", type=int, default=ENV_STEPS)
    parser.add_argument("--learning-starts", type=int, default=LEARNING_STARTS)
    parser.add_argument("--episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small models: one thread is fastest, and steady on busy cores
    result = train(args.seed, args.env_steps, args.learning_starts, args.episodes)
    print(f"{ENV_ID}, seed {args.seed}: greedy return {result['val_return']:.1f} over "
          f"{args.episodes} episodes after {result['env_steps']:.0f} env steps "
          f"({result['updates']:.0f} updates, {result['train_seconds']:.0f}s)")  # fmt: skip
    return result


if __name__ == "__main__":
    main()
