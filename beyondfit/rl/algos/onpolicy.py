"""Policy-gradient algorithms as loss closures ``loss_fn(policy, batch) -> dict``.

A loss factory (``ppo_loss(clip_coef=0.2, ...)``) returns the closure; the config names the
factory and its options under ``task.loss`` (``conf/algo/*.yaml``), beside the collector
settings that make the algorithm (rollout length, GAE lambda, epochs and minibatches per rollout).
A loss of your own is a factory like these in your own module, picked with
``task.loss._target_=mymodule.my_loss`` or an ``algo`` config file of your own.

What a loss may call on the policy (:class:`~beyondfit.rl.nets.policies.ActorCritic`):

- ``policy(obs)``: logits (``Discrete`` actions) or Gaussian means (``Box``), ``(B, n)``;
- ``policy.log_prob_entropy(obs, actions)``: ``(log_prob, entropy)``, each ``(B,)``;
- ``policy.log_prob(out, actions)``: log-probabilities under an output of ``policy(obs)``;
- ``policy.value(obs)``: state values ``(B,)``, only when ``policy.has_critic``
  (``task.critic=true``); a policy without a critic raises a clear error;
- ``policy.evaluate_actions(obs, actions)``: ``(log_prob, entropy, value)`` from one pass of
  the policy's encoder (the built-in losses use it when the policy has it: on frames the CNN
  then runs once per minibatch, not twice).

What the batch holds: a :class:`~beyondfit.rl.collect.onpolicy.RolloutBatch` with ``obs``,
``actions``, ``old_log_prob``, ``old_values``, ``advantages`` and ``returns`` (see its docstring).

The closure returns ``"loss"`` (what the engine differentiates) plus detached diagnostics, which
the engine logs as running means. Observations in the batch are the raw ones: a policy with a
``normalizer`` normalizes them itself, with the statistics the rollout was collected with.

Two optional attributes of the closure (``ppo_loss`` has both; a loss of your own may too):
``loss_fn.coefficients``, an object whose numeric attributes ``task.anneal`` may anneal by name
(:mod:`beyondfit.rl.algos.schedules`), and ``loss_fn.stop_epochs``, a ``() -> bool`` that the task
hands the collector to end a rollout's epochs early (:mod:`beyondfit.rl.algos.kl_stop`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from beyondfit.core.errors import BeyondfitError
from beyondfit.rl.algos.kl_stop import TargetKL
from beyondfit.rl.collect.onpolicy import RolloutBatch
from beyondfit.rl.nets.policies import ActorCritic

LossFn = Callable[[ActorCritic, RolloutBatch], dict[str, torch.Tensor]]


def _normalize(x: torch.Tensor) -> torch.Tensor:
    # Scale-free advantages make one learning rate fit rewards of any magnitude.
    if x.numel() < 2:
        return x - x.mean()
    std, mean = torch.std_mean(x)
    return (x - mean) / (std + 1e-8)


def _combine(policy_loss: torch.Tensor, value_loss: torch.Tensor, entropy: torch.Tensor,
             vf_coef: float, ent_coef: float) -> torch.Tensor:
    loss = policy_loss + vf_coef * value_loss
    # Without a bonus the entropy is only a diagnostic: leaving it out of the loss spares the
    # backward pass its few ops, which show at the small batch sizes RL runs at.
    return loss - ent_coef * entropy if ent_coef else loss


def _evaluate(model: ActorCritic, batch: RolloutBatch
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    # (log_prob, entropy, value) of the batch: one encoder pass where the policy offers it.
    evaluate = getattr(model, "evaluate_actions", None)
    if evaluate is not None:
        return evaluate(batch.obs, batch.actions)
    logp, entropy = model.log_prob_entropy(batch.obs, batch.actions)
    return logp, entropy, model.value(batch.obs)


def _value_loss(values: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    # Half the mean squared error: its gradient is the plain residual.
    return 0.5 * F.mse_loss(values, batch.returns)


def clipped_value_loss(model: ActorCritic, batch: RolloutBatch, clip: float,
                       values: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """PPO's value clipping (OpenAI baselines, CleanRL's ``clip_vloss``): the new value may move
    at most ``clip`` from the collection-time value before the loss stops rewarding it; the
    larger of the clipped and unclipped squared errors is taken. ``values``: the policy's
    values of ``batch.obs`` if already computed."""
    values = model.value(batch.obs) if values is None else values
    clipped = batch.old_values + (values - batch.old_values).clamp(-clip, clip)
    return 0.5 * torch.max((values - batch.returns) ** 2, (clipped - batch.returns) ** 2).mean()


@dataclass
class PPOCoefficients:
    """PPO's adjustable settings, read at every call of the loss closure, so that schedules
    (:class:`beyondfit.rl.algos.schedules.EnvStepSchedules`) can change them between rollouts."""

    clip_coef: float
    vf_coef: float
    ent_coef: float


def reinforce_loss(
    vf_coef: float = 0.5, ent_coef: float = 0.0, normalize_advantages: bool = True
) -> LossFn:
    """REINFORCE with a learned baseline: raise log-probs in proportion to return minus baseline.

    Pair it with ``gae_lambda=1`` (Monte-Carlo returns) and long rollouts; the critic only serves as
    the baseline and is regressed onto the returns.
    """

    def loss_fn(model: ActorCritic, batch: RolloutBatch) -> dict[str, torch.Tensor]:
        logp, entropy, values = _evaluate(model, batch)
        advantages = _normalize(batch.advantages) if normalize_advantages else batch.advantages
        policy_loss = -(logp * advantages).mean()
        value_loss = _value_loss(values, batch)
        entropy = entropy.mean()
        loss = _combine(policy_loss, value_loss, entropy, vf_coef, ent_coef)
        return {"loss": loss, "policy_loss": policy_loss.detach(),
                "value_loss": value_loss.detach(), "entropy": entropy.detach()}

    return loss_fn


def a2c_loss(
    vf_coef: float = 0.5, ent_coef: float = 0.0, normalize_advantages: bool = True
) -> LossFn:
    """Advantage actor-critic: the same gradient as REINFORCE, with GAE advantages.

    The closure is REINFORCE's; what makes it A2C is the collector: short rollouts and
    ``gae_lambda < 1``, i.e. bootstrapping from the critic instead of waiting for episode ends.
    """
    return reinforce_loss(vf_coef, ent_coef, normalize_advantages)


def ppo_loss(
    clip_coef: float = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.0,
    normalize_advantages: bool = True,
    value_clip: float | None = None,
    target_kl: float | None = None,
) -> LossFn:
    """PPO's clipped surrogate (Schulman et al. 2017), value regression and entropy bonus.

    The collector yields several epochs of minibatches from one rollout; clipping the probability
    ratio keeps those repeated steps close to the policy that collected the data.

    Args:
        clip_coef: the ratio's clip range; the closure keeps it and the two weights below in
            ``loss_fn.coefficients`` (:class:`PPOCoefficients`), which schedules may change.
        vf_coef: the value loss's weight.
        ent_coef: the entropy bonus's weight.
        normalize_advantages: standardize advantages per minibatch.
        value_clip: clip the value update to this distance from the collection-time values
            (:func:`clipped_value_loss`); ``None``: plain regression.
        target_kl: stop a rollout's epochs early once their mean approximate KL exceeds this;
            the closure then has ``loss_fn.stop_epochs`` (:class:`~beyondfit.rl.algos.kl_stop.
            TargetKL`), which the collector must be given as its ``stop_epochs``.
    """
    if value_clip is not None and not (isinstance(value_clip, int | float) and value_clip > 0):
        raise BeyondfitError(
            f"value_clip={value_clip!r} must be a positive number (e.g. 0.2) or null"
        )
    coefficients = PPOCoefficients(clip_coef=clip_coef, vf_coef=vf_coef, ent_coef=ent_coef)
    monitor = TargetKL(target_kl) if target_kl is not None else None

    def loss_fn(model: ActorCritic, batch: RolloutBatch) -> dict[str, torch.Tensor]:
        if batch.old_log_prob is None:
            raise BeyondfitError(
                "PPO needs the log-probabilities of the collecting policy, but the batch has "
                "none: build the RolloutCollector with old_log_prob=True (in the config: "
                "task.collector.old_log_prob=true)"
            )
        c = coefficients
        clip_coef = c.clip_coef
        logp, entropy, values = _evaluate(model, batch)
        advantages = _normalize(batch.advantages) if normalize_advantages else batch.advantages
        log_ratio = logp - batch.old_log_prob
        ratio = log_ratio.exp()
        surrogate = torch.min(ratio * advantages,
                              ratio.clamp(1 - clip_coef, 1 + clip_coef) * advantages)
        policy_loss = -surrogate.mean()
        if value_clip is None:
            value_loss = _value_loss(values, batch)
        else:
            value_loss = clipped_value_loss(model, batch, value_clip, values)
        entropy = entropy.mean()
        loss = _combine(policy_loss, value_loss, entropy, c.vf_coef, c.ent_coef)
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # http://joschu.net/blog/kl-approx.html
            clip_frac = ((ratio - 1).abs() > clip_coef).float().mean()
        if monitor is not None:
            monitor.record(approx_kl)
        return {"loss": loss, "policy_loss": policy_loss.detach(),
                "value_loss": value_loss.detach(), "entropy": entropy.detach(),
                "approx_kl": approx_kl, "clip_frac": clip_frac}

    loss_fn.coefficients = coefficients  # type: ignore[attr-defined]
    loss_fn.stop_epochs = monitor  # type: ignore[attr-defined]
    return loss_fn
