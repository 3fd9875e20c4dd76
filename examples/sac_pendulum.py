"""Soft actor-critic on Pendulum-v1 from the Python API: what ``algo=sac`` builds, spelled out.

The command line does all of this with ``python -m beyondfit +task=pendulum algo=sac``; this
script shows the pieces, each from the package, put together by hand:

- the agent (:class:`~beyondfit.rl.nets.agents.OffPolicyAgent`): a tanh-squashed Gaussian actor,
  twin Q critics evaluated as one batched ensemble, a slow target copy of the critics
  (:class:`~beyondfit.SlowCopy`) and the log of the entropy temperature;
- the data (:class:`~beyondfit.rl.collect.offpolicy.ReplayCollector`): an iterable of minibatches
  that steps the env with the current actor (random actions for ``learning_starts`` steps), stores
  the transitions and samples from them;
- the algorithm (:func:`~beyondfit.rl.algos.offpolicy.sac_loss`): three declared updates,
  each a closure that is the loss of its own optimizer, stepped in order on every minibatch by
  one :class:`~beyondfit.Engine`; the target critics it declares follow the critic's optimizer
  right after each of its steps (``after_step``);
- the evaluation (:class:`~beyondfit.rl.evaluation.evaluator.GreedyEvaluator`): greedy episodes on
  envs kept apart from training.

Hyperparameters are RL-Zoo's for Pendulum-v1 (SB3's defaults with lr 1e-3).

Run: ``python examples/sac_pendulum.py [--env-steps 20000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import time

import torch

from beyondfit import Engine, Update
from beyondfit.core.target import SlowCopy
from beyondfit.rl.algos.offpolicy import sac_loss
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.evaluation.evaluator import GreedyEvaluator
from beyondfit.rl.nets.agents import OffPolicyAgent

ENV_ID = "Pendulum-v1"
ENV_STEPS = 20_000  # the whole budget, random steps included
LEARNING_STARTS = 1_000  # random actions, no updates, until the buffer holds this many
BATCH, GAMMA, TAU, LR = 256, 0.99, 0.005, 1e-3
EVAL_EPISODES = 10


def build(seed: int = 0, env_steps: int = ENV_STEPS, learning_starts: int = LEARNING_STARTS,
          log_every: int = 1000) -> tuple[Engine, ReplayCollector]:  # fmt: skip
    """The engine (three optimizers) and its replay collector."""
    torch.manual_seed(seed)
    envs = make_vector_env(ENV_ID, 1)
    agent = OffPolicyAgent(envs.single_observation_space, envs.single_action_space,
                           actor="gaussian", hidden=(256, 256), critics=2)  # fmt: skip
    # sac_loss declares its three updates: each closure, the part it trains, its target copy.
    critic, actor, alpha = sac_loss(gamma=GAMMA, tau=TAU)
    agent.critic_target = SlowCopy(agent.critic, rate=critic.target.rate)  # what critic reads
    data = ReplayCollector(envs, agent, total_env_steps=env_steps, batch_size=BATCH,
                           learning_starts=learning_starts, seed=seed)  # fmt: skip
    engine = Engine(agent, [
        Update("critic", critic.loss, torch.optim.Adam(agent.critic.parameters(), LR),
               after_step=[agent.critic_target.update]),
        Update("actor", actor.loss, torch.optim.Adam(agent.actor.parameters(), LR)),
        Update("alpha", alpha.loss, torch.optim.Adam([agent.log_alpha], LR)),
    ], device="cpu", log_every=log_every)  # fmt: skip
    return engine, data


def train(seed: int = 0, env_steps: int = ENV_STEPS, learning_starts: int = LEARNING_STARTS,
          episodes: int = EVAL_EPISODES, log_every: int = 1000,
          verbose: bool | str = "auto") -> dict[str, float]:  # fmt: skip
    """Train SAC for ``env_steps`` env steps, then run ``episodes`` greedy episodes on envs kept
    apart from training. Returns ``val_return``, ``val_length``, ``env_steps``, ``updates``
    and the training's ``train_seconds`` and ``train_cpu_seconds`` (evaluation excluded)."""
    engine, data = build(seed, env_steps, learning_starts, log_every)
    start, cpu_start = time.perf_counter(), time.process_time()
    engine.fit(data, epochs=1, verbose=verbose)  # one pass of the collector: the whole budget
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    data.close()
    evaluator = GreedyEvaluator(ENV_ID, episodes=episodes, seed=seed + 10_000)
    try:
        result = engine.evaluate(evaluator)  # greedy actions, eval mode, no gradients
    finally:
        evaluator.close()
    return {**result, "env_steps": float(data.env_steps), "updates": float(engine.global_step),
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
