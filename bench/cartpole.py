"""CartPole-v1 side by side: beyondfit vs SB3 PPO vs SB3 A2C vs a hand-written REINFORCE loop.

    python bench/cartpole.py                    # 10 seeds, CartPole tables (a few minutes)
    python bench/cartpole.py --extra            # + Acrobot and Pendulum (vs SB3 PPO), ~20 min

Every method is trained until a greedy evaluation (mean return of 20 episodes on separate envs,
every ``--eval-every`` env steps) reaches 475, or for at most ``--budget`` env steps. Evaluation
steps and time are not counted. Methods run interleaved per seed, so a busy machine slows all alike.
beyondfit runs the shipped ``conf/task/cartpole.yaml`` through the same objects the command line
builds (task, optimizer, Engine, stop rule). SB3 uses the RL-Zoo hyperparameters. Torch: 1 thread.

Columns: median env steps to solve (unsolved runs count as never), solved runs, median training
seconds, and that median relative to the hand-written loop. The throughput table compares the
collector (rollouts only, no updates) with a bare loop over the same vector env and policy forward,
and with one that also runs the critic each step, as a hand-written PPO loop does.
Results are written, never asserted on: time depends on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import reinforce_raw  # noqa: E402

from beyondfit.cli.run import build_optimizer, build_task  # noqa: E402
from beyondfit.core.callbacks import StopRule  # noqa: E402
from beyondfit.core.engine import Engine  # noqa: E402
from beyondfit.core.seeding import seed_everything  # noqa: E402
from beyondfit.rl.envs.vector import make_vector_env  # noqa: E402

EVAL_EPISODES = 20
TARGET = 475.0


# ------------------------------------------------------------------------------------- beyondfit
def compose(task: str, overrides: list[str]):
    """The config ``python -m beyondfit +task=TASK OVERRIDES...`` would run."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", [f"+task={task}", *overrides])


def run_beyondfit(seed: int, task: str = "cartpole", overrides: tuple[str, ...] = (),
                  budget: int | None = None, eval_every: int | None = None) -> dict:
    """Train with the shipped task config; return env steps at solve and training seconds."""
    extra = [f"seed={seed}", *overrides]
    if budget:
        extra.append(f"task.total_env_steps={budget}")
    if eval_every:
        extra.append(f"task.eval_every_env_steps={eval_every}")
    cfg = compose(task, extra)
    seed_everything(seed)
    built = build_task(cfg.task)
    engine_options = OmegaConf.to_container(cfg.engine, resolve=True)
    stop = [StopRule(str(cfg.train.stop))] if cfg.train.get("stop") else []
    engine = Engine(built.model, built.loss_fn, build_optimizer(cfg.optimizer), device="cpu",
                    callbacks=stop, **engine_options)
    start = time.perf_counter()
    engine.fit(built.train_data, epochs=1, val_data=built.val_data, eval_every=built.eval_every,
               verbose=False)
    seconds = time.perf_counter() - start - built.val_data.seconds
    collector, final = built.train_data, engine.last_val.get("val_return", float("nan"))
    target = cfg.task.get("target_return")
    solved = collector.env_steps if target is not None and final >= target else None
    collector.close()
    built.val_data.close()
    return {"solved_at": solved, "train_seconds": seconds, "final_return": final,
            "env_steps": collector.env_steps}


# ------------------------------------------------------------------------------- stable-baselines3
def sb3_run(algo: str, env_id: str, seed: int, budget: int, eval_every: int,
            target: float | None) -> dict:
    """Train SB3 with RL-Zoo hyperparameters, greedy-evaluating every ``eval_every`` env steps."""
    from stable_baselines3 import A2C, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import LinearSchedule

    def lin(value: float) -> LinearSchedule:  # RL-Zoo's "lin_X": X * progress_remaining
        return LinearSchedule(value, 0.0, 1.0)

    zoo = {  # rl-baselines3-zoo hyperparams/{ppo,a2c}.yml
        ("ppo", "CartPole-v1"): (PPO, 8, dict(n_steps=32, batch_size=256, gae_lambda=0.8,
                                              gamma=0.98, n_epochs=20, ent_coef=0.0,
                                              learning_rate=lin(1e-3), clip_range=lin(0.2))),
        ("a2c", "CartPole-v1"): (A2C, 8, dict(ent_coef=0.0)),
        ("ppo", "Pendulum-v1"): (PPO, 4, dict(n_steps=1024, gae_lambda=0.95, gamma=0.9,
                                              n_epochs=10, ent_coef=0.0, learning_rate=1e-3,
                                              clip_range=0.2, use_sde=True, sde_sample_freq=4)),
    }
    cls, n_envs, hyper = zoo[(algo, env_id)]
    eval_envs = make_vector_env(env_id, EVAL_EPISODES)
    eval_envs.reset(seed=seed + 10_000)

    class GreedyEval(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next, self.seconds, self.solved, self.last = eval_every, 0.0, None, float("nan")

        def evaluate(self) -> float:
            start = time.perf_counter()
            obs, _ = eval_envs.reset()
            total, running = np.zeros(EVAL_EPISODES), np.ones(EVAL_EPISODES, dtype=bool)
            while running.any():
                action, _ = self.model.predict(obs, deterministic=True)
                obs, reward, term, trunc, _ = eval_envs.step(action)
                total += reward * running
                running &= ~(term | trunc)
            self.seconds += time.perf_counter() - start
            self.last = float(total.mean())
            return self.last

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next:
                return True
            self.next += eval_every
            if target is not None and self.evaluate() >= target:
                self.solved = self.num_timesteps
                return False
            return True

    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    model = cls("MlpPolicy", env, seed=seed, device="cpu", **hyper)
    callback = GreedyEval()
    start = time.perf_counter()
    model.learn(budget, callback=callback)
    seconds = time.perf_counter() - start - callback.seconds
    final = callback.last if callback.solved else callback.evaluate()
    env.close()
    eval_envs.close()
    return {"solved_at": callback.solved, "train_seconds": seconds, "final_return": final,
            "env_steps": model.num_timesteps}


def run_raw(seed: int, budget: int, eval_every: int) -> dict:
    """The hand-written REINFORCE loop of bench/reinforce_raw.py."""
    out = reinforce_raw.train(seed, max_env_steps=budget, eval_every=eval_every)
    return {"solved_at": out["solved_at"], "train_seconds": out["train_seconds"],
            "final_return": float("nan"), "env_steps": out["env_steps"]}


# ------------------------------------------------------------------------------------ throughput
def throughput(num_envs: int, env_steps: int, repeats: int) -> tuple[float, float, float]:
    """Best-of-``repeats`` env steps/s: the task's collector (its batches drawn, no updates) vs
    a bare loop over the same vector env and the same policy's sampling forward, and vs a bare
    loop that also runs the critic at every step (what a hand-written PPO loop such as CleanRL's
    does: the collector computes those values too, batched once per rollout)."""

    def collector() -> float:
        # One batch per rollout: cutting a rollout into PPO's minibatch epochs belongs to the
        # updates. What is timed is stepping, sampling, log-probs, values and advantages.
        overrides = [f"task.num_envs={num_envs}", f"task.total_env_steps={env_steps}",
                     "task.collector.epochs=1", "task.collector.minibatches=1"]
        cfg = compose("cartpole", overrides)
        seed_everything(0)
        data = build_task(cfg.task).train_data
        start = time.perf_counter()
        for _ in data:
            pass
        rate = data.env_steps / (time.perf_counter() - start)
        data.close()
        return rate

    def bare(with_critic: bool) -> float:
        envs = make_vector_env("CartPole-v1", num_envs)
        obs, _ = envs.reset(seed=0)
        start = time.perf_counter()
        with torch.inference_mode():
            for _ in range(env_steps // num_envs):
                obs_t = torch.from_numpy(obs)
                action = policy.act(obs_t)
                if with_critic:
                    policy.value(obs_t)
                obs, *_ = envs.step(action.numpy())
        rate = env_steps / (time.perf_counter() - start)
        envs.close()
        return rate

    seed_everything(0)
    policy = build_task(compose("cartpole", []).task).model
    results: dict[str, list[float]] = {"bare": [], "critic": [], "collector": []}
    for _ in range(repeats):  # interleaved: all see the same machine load
        results["bare"].append(bare(with_critic=False))
        results["critic"].append(bare(with_critic=True))
        results["collector"].append(collector())
    return max(results["collector"]), max(results["bare"]), max(results["critic"])


# --------------------------------------------------------------------------------------- tables
def median_steps(runs: list[dict]) -> float:
    """Median env steps to solve; an unsolved run counts as infinitely many."""
    return statistics.median(r["solved_at"] if r["solved_at"] else float("inf") for r in runs)


def cartpole_table(seeds: int, budget: int, eval_every: int, time_repeats: int = 1) -> str:
    """Run every method on every seed (interleaved) and format the markdown table.

    With ``time_repeats > 1`` each (method, seed) runs that many times and keeps its fastest
    run (``timeit``'s rule: on a shared machine the minimum is the least disturbed); the runs
    of a seed take the same env steps, so only the time differs."""
    methods: dict[str, Callable[[int], dict]] = {
        "beyondfit (`+task=cartpole`)": lambda s: run_beyondfit(s, budget=budget,
                                                                   eval_every=eval_every),
        "hand-written REINFORCE (`bench/reinforce_raw.py`)": lambda s: run_raw(s, budget,
                                                                              eval_every),
        "SB3 PPO (RL-Zoo)": lambda s: sb3_run("ppo", "CartPole-v1", s, budget, eval_every, TARGET),
        "SB3 A2C (RL-Zoo)": lambda s: sb3_run("a2c", "CartPole-v1", s, budget, eval_every, TARGET),
    }
    runs: dict[str, list[dict]] = {name: [] for name in methods}
    for seed in range(seeds):
        for name, method in methods.items():
            tries = [method(seed) for _ in range(time_repeats)]
            runs[name].append(min(tries, key=lambda r: r["train_seconds"]))
            r = runs[name][-1]
            print(f"  seed {seed} {name}: solved at {r['solved_at']}, "
                  f"{r['train_seconds']:.2f}s", file=sys.stderr, flush=True)
    raw_name = "hand-written REINFORCE (`bench/reinforce_raw.py`)"
    raw_seconds = statistics.median(r["train_seconds"] for r in runs[raw_name])
    lines = [
        "| method | median env steps to solve | solved | median train s | vs hand-written |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, results in runs.items():
        seconds = statistics.median(r["train_seconds"] for r in results)
        steps = median_steps(results)
        solved = sum(r["solved_at"] is not None for r in results)
        lines.append(f"| {name} | {steps:,.0f} | {solved}/{len(results)} | {seconds:.2f} | "
                     f"{seconds / raw_seconds:.2f}x |")
    return "\n".join(lines)


def throughput_table(repeats: int) -> str:
    """Collector vs bare loops at 8 and 64 envs."""
    lines = ["| envs | collector env steps/s | bare env + policy steps/s | ratio | "
             "bare env + policy + critic steps/s | ratio |",
             "|---:|---:|---:|---:|---:|---:|"]
    for num_envs in (8, 64):
        col, bare, critic = throughput(num_envs, env_steps=num_envs * 2048, repeats=repeats)
        lines.append(f"| {num_envs} | {col:,.0f} | {bare:,.0f} | {col / bare:.0%} | "
                     f"{critic:,.0f} | {col / critic:.0%} |")
    return "\n".join(lines)


def extra_table(seeds: int) -> str:
    """Acrobot (absolute target) and Pendulum (vs SB3 PPO at the same env-step budget)."""
    lines = ["| task | method | env steps (seed 0) | median final greedy return | per seed |",
             "|---|---|---:|---:|---|"]

    def row(task: str, method: str, results: list[dict]) -> str:
        finals = [r["final_return"] for r in results]
        shown = ", ".join(f"{f:.0f}" for f in finals)
        return (f"| {task} | {method} | {results[0]['env_steps']:,} | "
                f"{statistics.median(finals):.1f} | {shown} |")

    acrobot = [run_beyondfit(s, "acrobot") for s in range(seeds)]
    lines.append(row("Acrobot-v1 (target >= -100)", "beyondfit `+task=acrobot`", acrobot))
    ours, theirs = [], []
    for seed in range(seeds):
        ours.append(run_beyondfit(seed, "pendulum"))
        budget = ours[-1]["env_steps"]
        theirs.append(sb3_run("ppo", "Pendulum-v1", seed, budget, budget + 1, None))
    lines.append(row("Pendulum-v1", "beyondfit `+task=pendulum`", ours))
    lines.append(row("Pendulum-v1", "SB3 PPO (RL-Zoo, gSDE)", theirs))
    return "\n".join(lines)


def main() -> None:
    """Parse options, run the benchmarks, print (and optionally write) markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=100_000, help="env steps per run, at most")
    parser.add_argument("--eval-every", type=int, default=2048, help="env steps between evals")
    parser.add_argument("--repeats", type=int, default=5, help="throughput repetitions")
    parser.add_argument("--time-repeats", type=int, default=2,
                        help="runs per method and seed; the fastest counts")
    parser.add_argument("--extra", action="store_true", help="also Acrobot and Pendulum")
    parser.add_argument("--extra-seeds", type=int, default=3, help="seeds for --extra")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    gym.logger.min_level = 40  # keep SB3/gymnasium warnings out of the table

    started = time.perf_counter()
    sections = [
        f"CartPole-v1, seeds 0-{args.seeds - 1}, greedy eval of {EVAL_EPISODES} episodes every "
        f"{args.eval_every} env steps (not counted), solved = mean return >= {TARGET:g}, "
        f"budget {args.budget:,} env steps, torch threads 1, training time the fastest of "
        f"{args.time_repeats} runs of each method and seed.\n",
        cartpole_table(args.seeds, args.budget, args.eval_every, args.time_repeats),
        "\nRollout collection (CartPole-v1, the task's PPO collector with no updates: stepping, "
        "sampling, log-probs, values, GAE), best of "
        f"{args.repeats} interleaved repetitions:\n",
        throughput_table(args.repeats),
    ]
    if args.extra:
        sections += [f"\nOther envs, seeds 0-{args.extra_seeds - 1} (greedy return of 20 episodes "
                     "when the target is reached, else after the configured budget):\n",
                     extra_table(args.extra_seeds)]
    command = f"python bench/cartpole.py --seeds {args.seeds}"
    if args.extra:
        command += f" --extra --extra-seeds {args.extra_seeds}"
    sections.append(f"\n`{command}` took {time.perf_counter() - started:.0f}s.")
    text = "\n".join(sections)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
