"""Reference: hand-written REINFORCE with a learned value baseline on CartPole-v1.

Plain PyTorch + Gymnasium, no beyondfit: the loop the benchmark holds beyondfit's wall time against.
8 vectorized envs, lr 3e-3, whole episodes (each update uses one complete episode from every env
copy; a copy that finishes early idles until the others do, and its idle steps are not counted),
Monte-Carlo returns, normalized advantages. Greedy evaluation (20 episodes on separate envs) runs
every ``eval_every`` env steps; its time and steps are not counted as training.

    python bench/reinforce_raw.py --seed 0
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

ENV_ID = "CartPole-v1"
NUM_ENVS = 8
LEARNING_RATE = 3e-3
GAMMA = 0.99
HIDDEN = 64
TARGET_RETURN = 475.0
EVAL_EPISODES = 20


def mlp(out_dim: int, out_gain: float) -> nn.Sequential:
    """4 -> 64 -> 64 -> out tanh MLP, orthogonal init."""
    layers = [nn.Linear(4, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
              nn.Linear(HIDDEN, out_dim)]
    for layer, gain in zip(layers[::2], (2**0.5, 2**0.5, out_gain), strict=True):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


def evaluate(actor: nn.Module, envs: gym.vector.VectorEnv) -> float:
    """Mean return of one greedy episode per env copy."""
    obs, _ = envs.reset()
    total = np.zeros(envs.num_envs)
    running = np.ones(envs.num_envs, dtype=bool)
    with torch.inference_mode():
        while running.any():
            action = actor(torch.from_numpy(obs)).argmax(-1)
            obs, reward, term, trunc, _ = envs.step(action.numpy())
            total += reward * running
            running &= ~(term | trunc)
    return float(total.mean())


def train(seed: int, max_env_steps: int = 100_000, eval_every: int = 2048) -> dict[str, float]:
    """Train until the greedy evaluation reaches the target; return steps and times."""
    torch.manual_seed(seed)
    envs = gym.make_vec(ENV_ID, NUM_ENVS, vectorization_mode="vector_entry_point")
    eval_envs = gym.make_vec(ENV_ID, EVAL_EPISODES, vectorization_mode="vector_entry_point")
    eval_envs.reset(seed=seed + 10_000)
    actor, critic = mlp(2, 0.01), mlp(1, 1.0)
    optimizer = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=LEARNING_RATE)

    env_steps, next_eval, eval_seconds, solved_at = 0, eval_every, 0.0, None
    envs.reset(seed=seed)
    start = time.perf_counter()
    while env_steps < max_env_steps:
        # Collect one whole episode per env copy, all starting now (reset continues the seeded RNG).
        obs, _ = envs.reset()
        obs_list, act_list, rew_list, alive_list = [], [], [], []
        alive = np.ones(NUM_ENVS, dtype=bool)
        with torch.inference_mode():
            while alive.any():
                obs_t = torch.from_numpy(obs)
                logits = actor(obs_t)
                action = (logits - torch.empty_like(logits).exponential_().log()).argmax(-1)
                obs, reward, term, trunc, _ = envs.step(action.numpy())
                obs_list.append(obs_t)
                act_list.append(action)
                rew_list.append(reward)
                alive_list.append(alive.copy())
                alive &= ~(term | trunc)
        mask = np.stack(alive_list)  # (T, N): step t belongs to env n's episode
        rewards = np.stack(rew_list) * mask
        returns = np.zeros_like(rewards)
        running = np.zeros(NUM_ENVS, dtype=np.float32)
        for t in reversed(range(len(rew_list))):
            running = rewards[t] + GAMMA * running
            returns[t] = running
        keep = torch.from_numpy(mask.reshape(-1))
        b_obs = torch.stack(obs_list).flatten(0, 1)[keep]
        b_act = torch.stack(act_list).flatten()[keep]
        b_ret = torch.from_numpy(returns.reshape(-1))[keep]
        env_steps += int(mask.sum())

        # One update: policy gradient with normalized advantages + value regression.
        values = critic(b_obs).squeeze(-1)
        advantages = b_ret - values.detach()
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        logp = actor(b_obs).log_softmax(-1).gather(-1, b_act.unsqueeze(-1)).squeeze(-1)
        loss = -(logp * advantages).mean() + 0.5 * (values - b_ret).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        if env_steps >= next_eval:
            next_eval += eval_every
            t0 = time.perf_counter()
            score = evaluate(actor, eval_envs)
            eval_seconds += time.perf_counter() - t0
            if score >= TARGET_RETURN:
                solved_at = env_steps
                break
    wall = time.perf_counter() - start
    envs.close()
    eval_envs.close()
    return {"seed": seed, "solved_at": solved_at, "env_steps": env_steps,
            "train_seconds": wall - eval_seconds, "eval_seconds": eval_seconds}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps(train(args.seed, eval_every=args.eval_every)))
