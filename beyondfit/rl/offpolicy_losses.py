"""Off-policy actor-critic algorithms as named loss closures, one per optimizer.

A factory (``sac_loss(gamma=0.99)``) returns a mapping ``{update name: closure}``; each closure
``loss(model, batch)`` gets the :class:`~beyondfit.rl.agents.OffPolicyAgent` and a
:class:`~beyondfit.rl.replay.ReplayBatch` and returns ``{"loss": ..., other logged values}``.
The off-policy task gives each name its own optimizer over its own parameters, stepped in the
mapping's order on every minibatch:

- ``critic``: ``model.critic``'s parameters; ``model.critic_target`` follows it;
- ``actor``: ``model.actor``'s; ``model.actor_target`` (if any) follows it;
- ``alpha``: ``model.log_alpha`` (SAC's temperature).

A closure with an ``every`` attribute steps once every ``every`` minibatches (TD3's delayed
actor). A loss of your own is a factory like these in your own module, picked with
``task.loss._target_=mymodule.my_loss``; each closure's backward reaches its own optimizer's
parameters only, so an actor loss may run the critic freely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.rl.agents import OffPolicyAgent
from beyondfit.rl.replay import ReplayBatch

Closure = Callable[[OffPolicyAgent, ReplayBatch], dict[str, torch.Tensor]]


def _check_gamma(gamma: float) -> None:
    check_number("task.loss.gamma", gamma, at_least=0, at_most=1, example="task.loss.gamma=0.99")


def _td_target(batch: ReplayBatch, next_value: torch.Tensor, gamma: float) -> torch.Tensor:
    # A truncated episode bootstraps from next_obs; only a true termination cuts the return.
    return batch.rewards + gamma * (1.0 - batch.terminated) * next_value


def sac_loss(gamma: float = 0.99, target_entropy: float | str = "auto") -> dict[str, Closure]:
    """Soft actor-critic (Haarnoja et al. 2018; SB3's and CleanRL's form).

    - ``critic``: ``0.5 * sum_m mse(Q_m(s, a), r + gamma (1 - term) (min_m Q'_m(s', a') -
      alpha log pi(a'|s')))`` with ``a' ~ pi(s')`` and the target critics ``Q'``;
    - ``actor``: ``mean(alpha log pi(a|s) - min_m Q_m(s, a))`` for a fresh ``a ~ pi(s)``;
    - ``alpha``: ``-mean(log_alpha (log pi(a|s) + target_entropy))`` with the actor's
      log-probabilities of the same minibatch; ``target_entropy="auto"`` is ``-act_dim``.
    """
    _check_gamma(gamma)
    if target_entropy != "auto" and not isinstance(target_entropy, int | float):
        raise BeyondfitError(f"task.loss.target_entropy={target_entropy!r}: a number or auto")
    shared: dict[str, torch.Tensor] = {}  # the actor's log-probs, for the temperature

    def critic(model: OffPolicyAgent, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            next_action, next_log_prob = model.actor.sample(batch.next_obs)
            next_q = model.critic_target(batch.next_obs, next_action).min(0).values
            alpha = model.log_alpha.exp()
            target = _td_target(batch, next_q - alpha * next_log_prob, gamma)
        q = model.critic(batch.obs, batch.actions)
        loss = 0.5 * (q - target).pow(2).mean(1).sum()
        return {"loss": loss, "q": q[0].detach().mean()}

    def actor(model: OffPolicyAgent, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        action, log_prob = model.actor.sample(batch.obs)
        q = model.critic(batch.obs, action).min(0).values
        shared["log_prob"] = log_prob.detach()
        loss = (model.log_alpha.detach().exp() * log_prob - q).mean()
        return {"loss": loss, "entropy": -log_prob.detach().mean()}

    def alpha(model: OffPolicyAgent, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        log_prob = shared.pop("log_prob", None)
        if log_prob is None:  # the actor did not run on this minibatch (a loss of one's own)
            with torch.no_grad():
                log_prob = model.actor.sample(batch.obs)[1]
        target = -float(model.act_dim) if target_entropy == "auto" else float(target_entropy)
        loss = -(model.log_alpha * (log_prob + target)).mean()
        return {"loss": loss, "value": model.log_alpha.detach().exp()}

    return {"critic": critic, "actor": actor, "alpha": alpha}


def td3_loss(gamma: float = 0.99, policy_noise: float = 0.2, noise_clip: float = 0.5,
             policy_delay: int = 2) -> dict[str, Any]:  # fmt: skip
    """TD3 (Fujimoto et al. 2018; SB3's form): clipped double Q, target policy smoothing and a
    delayed actor.

    - ``critic``: ``sum_m mse(Q_m(s, a), r + gamma (1 - term) min_m Q'_m(s', a'))`` with
      ``a' = clip(mu'(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), -1, 1)``;
    - ``actor`` (every ``policy_delay`` minibatches): ``-mean(Q_1(s, mu(s)))``.
    """
    _check_gamma(gamma)
    check_number("task.loss.policy_delay", policy_delay, integer=True, at_least=1,
                 example="task.loss.policy_delay=2")

    def critic(model: OffPolicyAgent, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            noise = (torch.randn_like(batch.actions) * policy_noise).clamp_(-noise_clip,
                                                                            noise_clip)
            next_action = (model.actor_target(batch.next_obs) + noise).clamp_(-1.0, 1.0)
            next_q = model.critic_target(batch.next_obs, next_action).min(0).values
            target = _td_target(batch, next_q, gamma)
        q = model.critic(batch.obs, batch.actions)
        return {"loss": (q - target).pow(2).mean(1).sum(), "q": q[0].detach().mean()}

    def actor(model: OffPolicyAgent, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        return {"loss": -model.critic(batch.obs, model.actor(batch.obs), members=1).mean()}

    actor.every = policy_delay  # type: ignore[attr-defined]
    return {"critic": critic, "actor": actor}
