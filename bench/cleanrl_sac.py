"""A hand-written SAC update in CleanRL's style (``sac_continuous_action.py``), for timing.

The loop a careful researcher writes without a library: two separate Q networks and their
target copies, a tanh-squashed Gaussian actor, three Adam optimizers, the replay buffer as
tensors sampled with ``randint``; one update = critic step, actor step, temperature step,
Polyak update of the targets (CleanRL with ``policy_frequency=1``, ``autotune=True``).
``bench/offpolicy_update.py`` times it beside beyondfit's ``algo=sac`` and SB3's SAC.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class SoftQNetwork(nn.Module):
    """Q(s, a): an MLP of the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + act_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Q values, ``(B, 1)``."""
        x = F.relu(self.fc1(torch.cat([x, a], 1)))
        return self.fc3(F.relu(self.fc2(x)))


class Actor(nn.Module):
    """CleanRL's actor: mean and log-std heads, log-std squashed into its range by tanh."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(obs_dim, hidden), nn.Linear(hidden, hidden)
        self.fc_mean, self.fc_logstd = nn.Linear(hidden, act_dim), nn.Linear(hidden, act_dim)

    def get_action(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A squashed sample in [-1, 1] and its log-probability, ``(B, 1)``."""
        x = F.relu(self.fc2(F.relu(self.fc1(x))))
        mean, log_std = self.fc_mean(x), torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        normal = torch.distributions.Normal(mean, log_std.exp())
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        log_prob = normal.log_prob(x_t) - torch.log(1 - y_t.pow(2) + 1e-6)
        return y_t, log_prob.sum(1, keepdim=True)


class CleanRLSAC:
    """The networks, optimizers and a filled replay buffer; :meth:`update` is one SAC update."""

    def __init__(self, obs_dim: int, act_dim: int, rows: int = 10_000, batch: int = 256,
                 lr: float = 1e-3, gamma: float = 0.99, tau: float = 0.005,
                 seed: int = 0) -> None:  # fmt: skip
        torch.manual_seed(seed)
        self.actor = Actor(obs_dim, act_dim)
        self.qf1, self.qf2 = SoftQNetwork(obs_dim, act_dim), SoftQNetwork(obs_dim, act_dim)
        self.qf1_target, self.qf2_target = (SoftQNetwork(obs_dim, act_dim),
                                            SoftQNetwork(obs_dim, act_dim))  # fmt: skip
        self.qf1_target.load_state_dict(self.qf1.state_dict())
        self.qf2_target.load_state_dict(self.qf2.state_dict())
        self.q_optimizer = torch.optim.Adam([*self.qf1.parameters(), *self.qf2.parameters()], lr)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr)
        self.target_entropy = -float(act_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.a_optimizer = torch.optim.Adam([self.log_alpha], lr)
        self.gamma, self.tau, self.batch = gamma, tau, batch
        self.obs, self.next_obs = torch.randn(rows, obs_dim), torch.randn(rows, obs_dim)
        self.actions = torch.rand(rows, act_dim) * 2 - 1
        self.rewards, self.dones = torch.randn(rows), torch.zeros(rows)

    def critic_loss(self, alpha, obs, actions, next_obs, rewards, dones) -> torch.Tensor:
        """Both Q networks' TD loss against the target networks' soft value."""
        with torch.no_grad():
            next_actions, next_log_pi = self.actor.get_action(next_obs)
            min_qf_next = torch.min(self.qf1_target(next_obs, next_actions),
                                    self.qf2_target(next_obs, next_actions)) - alpha * next_log_pi
            next_q = rewards + (1 - dones) * self.gamma * min_qf_next.view(-1)
        return (F.mse_loss(self.qf1(obs, actions).view(-1), next_q)
                + F.mse_loss(self.qf2(obs, actions).view(-1), next_q))  # fmt: skip

    def update(self) -> None:
        """One update: critic, actor, temperature, then the targets."""
        idx = torch.randint(len(self.obs), (self.batch,))
        obs, actions, next_obs = self.obs[idx], self.actions[idx], self.next_obs[idx]
        rewards, dones = self.rewards[idx], self.dones[idx]
        alpha = self.log_alpha.exp().item()  # CleanRL reads alpha on the host
        qf_loss = self.critic_loss(alpha, obs, actions, next_obs, rewards, dones)
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()

        pi, log_pi = self.actor.get_action(obs)
        min_qf_pi = torch.min(self.qf1(obs, pi), self.qf2(obs, pi))
        actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        with torch.no_grad():
            _, log_pi = self.actor.get_action(obs)
        alpha_loss = (-self.log_alpha.exp() * (log_pi + self.target_entropy)).mean()
        self.a_optimizer.zero_grad()
        alpha_loss.backward()
        self.a_optimizer.step()

        for net, target in ((self.qf1, self.qf1_target), (self.qf2, self.qf2_target)):
            for param, target_param in zip(net.parameters(), target.parameters(), strict=True):
                target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)


class LeanRLSAC(CleanRLSAC):
    """The same update the way LeanRL (``sac_continuous_action_torchcompile.py``) speeds it up:
    the temperature stays a tensor (no ``.item()``), the Polyak update is one fused
    ``lerp``, and the critic and the policy updates, backward and optimizer step included,
    each go through ``torch.compile`` (dynamo splits them at the backward)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.targets = [*self.qf1_target.parameters(), *self.qf2_target.parameters()]
        self.sources = [*self.qf1.parameters(), *self.qf2.parameters()]
        self._update_q = torch.compile(self._q)
        self._update_pi = torch.compile(self._pi)

    def _q(self, obs, actions, next_obs, rewards, dones):
        qf_loss = self.critic_loss(self.log_alpha.detach().exp(), obs, actions, next_obs,
                                   rewards, dones)
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        return qf_loss.detach()

    def _pi(self, obs):
        alpha = self.log_alpha.detach().exp()
        pi, log_pi = self.actor.get_action(obs)
        min_qf_pi = torch.min(self.qf1(obs, pi), self.qf2(obs, pi))
        actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()
        alpha_loss = (-self.log_alpha.exp() * (log_pi.detach() + self.target_entropy)).mean()
        self.a_optimizer.zero_grad()
        alpha_loss.backward()
        self.a_optimizer.step()
        return actor_loss.detach()

    def update(self) -> None:
        """One update: critic, actor and temperature (compiled), then the targets."""
        idx = torch.randint(len(self.obs), (self.batch,))
        self._update_q(self.obs[idx], self.actions[idx], self.next_obs[idx], self.rewards[idx],
                       self.dones[idx])
        self._update_pi(self.obs[idx])
        with torch.no_grad():
            torch._foreach_lerp_(self.targets, self.sources, self.tau)
