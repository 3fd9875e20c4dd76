"""A policy-gradient loss of your own: PPO with a KL penalty instead of clipping.

PPO's paper (Schulman et al. 2017, section 4) compares its clipped surrogate with a penalty on
the KL divergence between the policy that collected the rollout and the one being updated:

    loss = -mean(ratio * advantage) + beta * KL(old || new) + vf_coef * value_loss

The loss is a factory returning a closure ``loss_fn(policy, batch)``; everything else (the
rollout collector, the policy, the greedy evaluator, the engine) is beyondfit's. The batch is a
``beyondfit.rl.RolloutBatch``: ``obs``, ``actions``, ``old_log_prob`` (collection-time
log-probabilities), ``old_values``, ``advantages`` (GAE) and ``returns``.

Through the Python API (this script):

    python examples/custom_pg_loss.py --total-env-steps 30000

The same loss from the command line, with checkpoints, logs and plots: one override on top of
PPO's collector settings, from the directory of this file (the launch directory is importable):

    cd examples
    python -m beyondfit +task=cartpole task.loss._target_=custom_pg_loss.kl_penalty_loss

(PPO's ``clip_coef`` is left out with a warning: ``kl_penalty_loss`` takes no such option.)
"""

from __future__ import annotations

import argparse

import torch

from beyondfit import Engine
from beyondfit.core.callbacks import StopRule
from beyondfit.core.seeding import seed_everything
from beyondfit.rl import RolloutBatch
from beyondfit.tasks.policy_gradient import build


def kl_penalty_loss(beta: float = 3.0, vf_coef: float = 0.5, ent_coef: float = 0.0,
                    normalize_advantages: bool = True):
    """PPO's surrogate with a fixed KL penalty of weight ``beta`` (no ratio clipping)."""

    def loss_fn(policy: torch.nn.Module, batch: RolloutBatch) -> dict[str, torch.Tensor]:
        log_prob, entropy = policy.log_prob_entropy(batch.obs, batch.actions)
        advantages = batch.advantages
        if normalize_advantages:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_ratio = log_prob - batch.old_log_prob
        ratio = log_ratio.exp()
        # KL(old || new) estimated from the old policy's samples, >= 0 and unbiased:
        # http://joschu.net/blog/kl-approx.html (k3).
        kl = ((ratio - 1) - log_ratio).mean()
        policy_loss = -(ratio * advantages).mean()
        value_loss = 0.5 * (policy.value(batch.obs) - batch.returns).pow(2).mean()
        entropy = entropy.mean()
        loss = policy_loss + beta * kl + vf_coef * value_loss - ent_coef * entropy
        return {"loss": loss, "policy_loss": policy_loss.detach(), "kl": kl.detach(),
                "value_loss": value_loss.detach(), "entropy": entropy.detach()}

    return loss_fn


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train CartPole-v1 with the KL-penalty loss and PPO's collector settings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-env-steps", type=int, default=100_000)
    parser.add_argument("--beta", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    seed_everything(args.seed)
    # PPO's collector settings from conf/algo/ppo.yaml: 10 epochs of 3 minibatches per rollout.
    task = build(kl_penalty_loss(beta=args.beta), env="CartPole-v1", seed=args.seed,
                 total_env_steps=args.total_env_steps,
                 collector={"rollout_steps": 64, "gae_lambda": 0.9, "epochs": 10,
                            "minibatches": 3, "old_log_prob": True})
    engine = Engine(task.model, task.loss_fn, torch.optim.Adam(task.model.parameters(), 5e-3),
                    device="cpu", callbacks=[StopRule("val_return>=475")])
    engine.fit(task.train_data, val_data=task.val_data, eval_every=task.eval_every)
    task.train_data.close()
    task.val_data.close()
    result = {"val_return": engine.last_val["val_return"],
              "env_steps": float(task.train_data.env_steps), "kl": engine.history[-1]["kl"]}
    print(f"CartPole-v1, PPO with a KL penalty (beta {args.beta}): greedy return "
          f"{result['val_return']:.1f} after {task.train_data.env_steps} env steps")
    return result


if __name__ == "__main__":
    main()
