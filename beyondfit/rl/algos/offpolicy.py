"""Off-policy algorithms, each a factory that declares its updates (one per optimizer).

A factory (``sac_loss(gamma=0.99)``) returns a list of
:class:`~beyondfit.rl.algos.algorithm.OffPolicyUpdate`: each a closure ``loss(model, batch)`` over
the agent (:class:`~beyondfit.rl.nets.agents.OffPolicyAgent`, or
:class:`~beyondfit.rl.nets.agents.QAgent` for DQN) and a
:class:`~beyondfit.rl.replay.buffer.ReplayBatch`, the part of the agent its optimizer trains, its
step ratio and the target copy that follows it; the engine steps them in the list's order on every
minibatch. Read each factory's ``return`` for the whole algorithm's optimizers. A loss of your own
is a factory like these in your own module (``task.loss._target_=mymodule.my_loss``); each
closure's backward reaches its own optimizer's parameters only, so an actor loss may run the critic
freely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.rl.algos.algorithm import OffPolicyUpdate, Target
from beyondfit.rl.nets.agents import OffPolicyAgent, QAgent
from beyondfit.rl.replay.buffer import ReplayBatch

Closure = Callable[[Any, ReplayBatch], dict[str, torch.Tensor]]


def _check_gamma(gamma: float) -> None:
    check_number("task.loss.gamma", gamma, at_least=0, at_most=1, example="task.loss.gamma=0.99")


def _check_tau(tau: float) -> None:
    check_number("task.loss.tau", tau, above=0, at_most=1,
                 example="task.loss.tau=0.005 (1.0: a hard copy)")


def _td_target(batch: ReplayBatch, next_value: torch.Tensor, gamma: float) -> torch.Tensor:
    # Only a true termination cuts the return (truncated: bootstrap); n-step batches bring gamma^m.
    discount = gamma if batch.discount is None else batch.discount
    return batch.rewards + discount * (1.0 - batch.terminated) * next_value


class Handoff:
    """A value one update's closure gives the next one's on the same minibatch, declared beside
    both. ``take`` refuses a value not given since the last ``take`` (the giver did not run on
    this minibatch), so a changed order fails loudly instead of reading a stale value."""

    def __init__(self, giver: str, taker: str) -> None:
        self.giver, self.taker = giver, taker
        self._value: torch.Tensor | None = None

    def give(self, value: torch.Tensor) -> None:
        """Leave ``value`` for the taker."""
        self._value = value

    def take(self) -> torch.Tensor:
        """The value given on this minibatch (once)."""
        if self._value is None:
            raise BeyondfitError(f"the {self.taker!r} update reads what {self.giver!r} gives on "
                                 f"the same minibatch, and {self.giver!r} gave nothing: declare "
                                 f"{self.giver!r} right before {self.taker!r}, stepping as often")
        value, self._value = self._value, None
        return value


def sac_loss(gamma: float = 0.99, target_entropy: float | str = "auto",
             tau: float = 0.005) -> list[OffPolicyUpdate]:  # fmt: skip
    """Soft actor-critic (Haarnoja et al. 2018; SB3's and CleanRL's form).

    - ``critic``: ``0.5 * sum_m mse(Q_m(s, a), r + gamma (1 - term) (min_m Q'_m(s', a') -
      alpha log pi(a'|s')))`` with ``a' ~ pi(s')`` and the target critics ``Q'`` (Polyak
      ``tau`` after every critic step);
    - ``actor``: ``mean(alpha log pi(a|s) - min_m Q_m(s, a))`` for a fresh ``a ~ pi(s)``;
    - ``alpha``: ``-mean(log_alpha (log pi(a|s) + target_entropy))`` with the log-probabilities
      the actor's update drew on the same minibatch (SB3's form; a :class:`Handoff`);
      ``target_entropy="auto"`` is ``-act_dim``.
    """
    _check_gamma(gamma)
    _check_tau(tau)
    if target_entropy != "auto" and not isinstance(target_entropy, int | float):
        raise BeyondfitError(f"task.loss.target_entropy={target_entropy!r}: a number or auto")
    actor_log_prob = Handoff("actor", "alpha")

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
        actor_log_prob.give(log_prob.detach())
        loss = (model.log_alpha.detach().exp() * log_prob - q).mean()
        return {"loss": loss, "entropy": -log_prob.detach().mean()}

    def alpha(model: OffPolicyAgent, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        log_prob = actor_log_prob.take()
        target = -float(model.act_dim) if target_entropy == "auto" else float(target_entropy)
        loss = -(model.log_alpha * (log_prob + target)).mean()
        return {"loss": loss, "value": model.log_alpha.detach().exp()}

    return [
        OffPolicyUpdate("critic", critic, trains="critic", target=Target("critic_target", tau)),
        OffPolicyUpdate("actor", actor, trains="actor"),
        OffPolicyUpdate("alpha", alpha, trains="log_alpha"),  # right after the actor: Handoff
    ]


def td3_loss(gamma: float = 0.99, policy_noise: float = 0.2, noise_clip: float = 0.5,
             policy_delay: int = 2, tau: float = 0.005) -> list[OffPolicyUpdate]:  # fmt: skip
    """TD3 (Fujimoto et al. 2018; SB3's form): clipped double Q, target policy smoothing and a
    delayed actor.

    - ``critic``: ``sum_m mse(Q_m(s, a), r + gamma (1 - term) min_m Q'_m(s', a'))`` with
      ``a' = clip(mu'(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), -1, 1)``;
    - ``actor`` (every ``policy_delay`` minibatches): ``-mean(Q_1(s, mu(s)))``;
    - both targets follow by Polyak ``tau`` once every ``policy_delay`` minibatches (the
      critic's after every ``policy_delay``-th critic step, the actor's after each actor step).
    """
    _check_gamma(gamma)
    _check_tau(tau)
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

    return [
        OffPolicyUpdate("critic", critic, trains="critic",
                        target=Target("critic_target", tau, every=policy_delay)),
        OffPolicyUpdate("actor", actor, trains="actor", every=policy_delay,
                        target=Target("actor_target", tau)),
    ]


def dqn_loss(gamma: float = 0.99, double: bool = False, huber: bool = True, tau: float = 1.0,
             target_every: int = 10_000) -> list[OffPolicyUpdate]:  # fmt: skip
    """DQN (Mnih et al. 2015; SB3's form), and Double DQN (van Hasselt et al. 2016).

    - ``q``: ``huber(Q(s, a), r + gamma (1 - term) Q'(s', a*))`` (squared error with
      ``huber=False``), ``a* = argmax_a Q'(s', a)``; with ``double=True`` the online network
      picks ``a* = argmax_a Q(s', a)`` and the target network ``Q'`` scores it;
    - the target network follows once every ``target_every`` optimizer steps: a hard copy with
      ``tau=1.0`` (SB3's ``target_update_interval``, there counted in env steps), Polyak
      otherwise (CleanRL's ``tau``).

    With ``target_every=1`` and ``tau=1.0`` (DrQ(eps), SPR: the target copied after every
    update) the target network *is* the online one as it stands at each update: no copy is
    kept, and one pass of the online network under ``no_grad`` scores the next observations
    (the same numbers a copy would give, for a third less of the update's compute).

    Gradient clipping is the engine's (``engine.clip_norm=10``: SB3's ``max_grad_norm``).
    With ``task.aux=[shift]`` (DrQ, :mod:`beyondfit.rl.algos.auxiliary`) the TD target is averaged
    over ``k`` shifted next observations and the loss over ``m`` shifted observations.
    """
    _check_gamma(gamma)
    _check_tau(tau)
    check_number("task.loss.target_every", target_every, integer=True, at_least=1,
                 example="task.loss.target_every=1000 (optimizer steps between target copies)")
    for key, value in (("double", double), ("huber", huber)):
        if not isinstance(value, bool):
            raise BeyondfitError(f"task.loss.{key}={value!r}: true or false")

    online_target = target_every == 1 and tau == 1.0

    def next_values(model: QAgent, next_obs: torch.Tensor) -> torch.Tensor:
        """``Q'(s', a*)`` for each row of ``next_obs`` (rows of one or several views)."""
        if online_target:  # a copy after every update is the online network itself
            return model.q(next_obs).max(1).values  # (double's choice, scored by itself)
        next_q = model.q_target(next_obs)
        if double:
            best = model.q(next_obs).argmax(1, keepdim=True)
            return next_q.gather(1, best).squeeze(1)
        return next_q.max(1).values

    def q(model: QAgent, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        if getattr(batch, "obs_views", None) is not None:  # task.aux=[shift]: DrQ
            return drq(model, batch)
        with torch.no_grad():
            target = _td_target(batch, next_values(model, batch.next_obs), gamma)
        taken = model.q(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        error = F.smooth_l1_loss if huber else F.mse_loss
        return {"loss": error(taken, target), "q": taken.detach().mean()}

    def drq(model: QAgent, batch: Any) -> dict[str, torch.Tensor]:
        # DrQ (Kostrikov, Yarats et al. 2020): the target averaged over K shifted next
        # observations, the loss over M shifted observations (rows view-major: view i is
        # rows i * B to (i + 1) * B).
        n = batch.rewards.shape[0]
        with torch.no_grad():
            next_value = next_values(model, batch.next_views).view(-1, n)  # (K, B)
            target = _td_target(batch, next_value.mean(0), gamma)
        values = model.q(batch.obs_views).view(-1, n, model.n_actions)  # (M, B, A)
        index = batch.actions.view(1, n, 1).expand(values.shape[0], n, 1)
        taken = values.gather(2, index).squeeze(2)
        error = F.smooth_l1_loss if huber else F.mse_loss
        return {"loss": error(taken, target.expand_as(taken)), "q": taken.detach().mean()}

    target = None if online_target else Target("q_target", tau, target_every)
    return [OffPolicyUpdate("q", q, trains="q", target=target)]
