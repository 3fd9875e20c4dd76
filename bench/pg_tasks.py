"""LunarLander, Hopper and HalfCheetah: beyondfit PPO beside Stable-Baselines3 PPO (RL-Zoo).

    python bench/pg_tasks.py                        # 3 seeds, both methods, then the table
    python bench/pg_tasks.py --only sb3 --worker 0/2  # one of two background workers (SB3 only)
    python bench/pg_tasks.py --table                # the table from the stored results alone
    python bench/pg_tasks.py --mujoco-budget 1000000  # the 1M-step MuJoCo table (hours here)
    python bench/pg_tasks.py --tasks hopper,halfcheetah --seed-list 1 2 3   # unseen seeds only

Seed 0 is the tuning seed (the presets were chosen on it); ``--seed-list`` runs and tabulates
the seeds it names instead of ``0..--seeds-1``. The smoke check (``tests/bench/
test_bench_smoke.py`` runs it as typed here, into a temporary folder instead of /tmp/pg):

    python bench/pg_tasks.py --tasks hopper --seed-list 1 --mujoco-budget 2048 --results /tmp/pg

Protocol (the same for both methods): a greedy evaluation is the mean return of 20 episodes on
20 separate env copies (seed ``seed + 10_000``), each taking the most likely action; SB3 with
``deterministic=True``, observations normalized by the training statistics, frozen.

- **LunarLander-v3**: evaluated at the first rollout boundary after every ``--eval-every`` env
  steps (16,384: one SB3 rollout); training stops at the first evaluation >= 200 ("env steps to
  solve" counts the env steps the evaluated policy was trained on), or after 1,000,000 env steps
  (RL-Zoo's budget).
- **Hopper-v5, HalfCheetah-v5**: one evaluation after ``--mujoco-budget`` env steps (300,000).

Training time leaves the evaluations out. Both wall seconds and the process's CPU seconds are
recorded: every contender is single-threaded (torch threads 1), so on this shared machine CPU
time is what wall time would be on an idle one, and the table's ratios use it. Throughput is
training env steps per CPU second, updates included.

SB3 runs RL-Zoo's hyperparameters (rl-baselines3-zoo ``hyperparams/ppo.yml``; for the MuJoCo
envs its tuned ``-v4`` entries, which the zoo has not re-tuned for ``-v5``), with its
``VecNormalize`` where the zoo sets ``normalize: true``. beyondfit runs the shipped task configs
(``+task=lunarlander`` ...) through the objects the command line builds.

Each run writes one JSON file into ``--results`` (default ``bench/results/``); a run whose file
exists is not run again, so workers can run in the background and the table is built from the
files. Results are written, never asserted on: times depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

EVAL_EPISODES = 20


@dataclass(frozen=True)
class Bench:
    """One benchmarked env: its beyondfit task, budget, evaluation cadence and target."""

    task: str
    env: str
    budget: int
    eval_every: int | None  # None: evaluate once, at the end
    target: float | None


def benches(mujoco_budget: int, eval_every: int) -> dict[str, Bench]:
    """The three benchmarks, by beyondfit task name."""
    return {
        "lunarlander": Bench("lunarlander", "LunarLander-v3", 1_000_000, eval_every, 200.0),
        "hopper": Bench("hopper", "Hopper-v5", mujoco_budget, None, None),
        "halfcheetah": Bench("halfcheetah", "HalfCheetah-v5", mujoco_budget, None, None),
    }


# ---------------------------------------------------------------------------------- clock
class Clock:
    """Wall and process-CPU seconds of training, with evaluation time taken out."""

    def __init__(self) -> None:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        self.eval_wall = self.eval_cpu = 0.0

    def evaluating(self):
        """Context manager: time spent inside is not training."""
        clock = self

        class _Eval:
            def __enter__(self):
                self.w, self.c = time.perf_counter(), time.process_time()

            def __exit__(self, *exc):
                clock.eval_wall += time.perf_counter() - self.w
                clock.eval_cpu += time.process_time() - self.c

        return _Eval()

    def seconds(self) -> tuple[float, float]:
        """(wall, cpu) seconds of training so far."""
        return (time.perf_counter() - self.wall0 - self.eval_wall,
                time.process_time() - self.cpu0 - self.eval_cpu)


# ------------------------------------------------------------------------------- stable-baselines3
def zoo_hyperparams(env_id: str) -> tuple[int, dict, bool]:
    """(n_envs, PPO kwargs, normalize) from rl-baselines3-zoo's hyperparams/ppo.yml."""
    from torch import nn

    mujoco_policy = dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU,
                         net_arch=dict(pi=[256, 256], vf=[256, 256]))
    if env_id == "LunarLander-v3":
        return 16, dict(n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
                        ent_coef=0.01), False
    if env_id == "Hopper-v5":  # the zoo's Hopper-v4 entry
        return 1, dict(batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05,
                       ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99,
                       max_grad_norm=0.7, vf_coef=0.835671, policy_kwargs=mujoco_policy), True
    if env_id == "HalfCheetah-v5":  # the zoo's HalfCheetah-v4 entry
        return 1, dict(batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
                       ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92,
                       max_grad_norm=0.8, vf_coef=0.58096, policy_kwargs=mujoco_policy), True
    raise ValueError(env_id)


def greedy_return(eval_envs, act) -> float:
    """Mean return of one greedy episode per copy of ``eval_envs`` (already seeded once)."""
    obs, _ = eval_envs.reset()
    total = np.zeros(eval_envs.num_envs)
    running = np.ones(eval_envs.num_envs, dtype=bool)
    while running.any():
        obs, reward, term, trunc, _ = eval_envs.step(act(obs))
        total += reward * running
        running &= ~(term | trunc)
    return float(total.mean())


def run_sb3(bench: Bench, seed: int) -> dict:
    """Train SB3 PPO with RL-Zoo settings; evaluate with the protocol above."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    n_envs, hyper, normalize = zoo_hyperparams(bench.env)
    env = make_vec_env(bench.env, n_envs=n_envs, seed=seed)
    if normalize:  # the zoo passes the algorithm's gamma to VecNormalize
        env = VecNormalize(env, gamma=hyper["gamma"])
    eval_envs = gym.make_vec(bench.env, EVAL_EPISODES, vectorization_mode="sync")
    eval_envs.reset(seed=seed + 10_000)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", **hyper)
    clock = Clock()

    def evaluate() -> float:
        with clock.evaluating():
            def act(obs):
                if normalize:
                    obs = env.normalize_obs(obs)
                return model.predict(obs, deterministic=True)[0]

            return greedy_return(eval_envs, act)

    class Evaluations(BaseCallback):
        """Greedy evaluations at rollout starts, i.e. right after an update."""

        def __init__(self) -> None:
            super().__init__()
            self.next = bench.eval_every or bench.budget + 1
            self.solved_at: int | None = None
            self.history: list[tuple[int, float]] = []
            self.stop = False

        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= self.next and self.solved_at is None:
                self.next += bench.eval_every or 0
                self.history.append((self.num_timesteps, evaluate()))
                if bench.target is not None and self.history[-1][1] >= bench.target:
                    self.solved_at = self.num_timesteps
                    self.stop = True

        def _on_step(self) -> bool:
            return not self.stop

    callback = Evaluations()
    model.learn(bench.budget, callback=callback)
    wall, cpu = clock.seconds()
    steps = callback.solved_at or model.num_timesteps
    if callback.solved_at is None:
        callback.history.append((model.num_timesteps, evaluate()))
    env.close()
    eval_envs.close()
    return {"solved_at": callback.solved_at, "final_return": callback.history[-1][1],
            "env_steps": steps, "wall_seconds": wall, "cpu_seconds": cpu,
            "evaluations": callback.history,
            "settings": {"n_envs": n_envs, "normalize": normalize,
                         **json.loads(json.dumps(hyper, default=repr))}}


# ------------------------------------------------------------------------------------- beyondfit
def compose(task: str, overrides: list[str]):
    """The config ``python -m beyondfit +task=TASK OVERRIDES...`` would run."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", [f"+task={task}", *overrides], return_hydra_config=True)


def run_beyondfit(bench: Bench, seed: int, overrides: tuple[str, ...] = ()) -> dict:
    """Train the shipped task config; evaluate with the protocol above."""
    from omegaconf import OmegaConf

    from beyondfit.cli.run import build_optimizer, build_task
    from beyondfit.core.callbacks import StopRule
    from beyondfit.core.engine import Engine
    from beyondfit.core.seeding import seed_everything

    # The bench evaluates by its own protocol (timed apart): no confirming evaluation inside.
    extra = [f"seed={seed}", f"task.total_env_steps={bench.budget}",
             f"task.eval_every_env_steps={bench.eval_every or bench.budget}",
             "task.confirm_episodes=0", *overrides]
    cfg = compose(bench.task, extra)
    # What the run trained with, kept in its result file: a file made under another preset
    # (seed 0's HalfCheetah, before its zoo preset) says so.
    settings = {"tuned": cfg.hydra.runtime.choices.get("experiment/tuned@_global_"),
                **{k: OmegaConf.to_container(cfg[k], resolve=True)
                   for k in ("task", "optimizer", "engine")}}
    seed_everything(seed)
    built = build_task(cfg.task)
    evaluator, collector = built.val_data, built.train_data
    engine_options = OmegaConf.to_container(cfg.engine, resolve=True)
    stop = [StopRule(f"val_return>={bench.target}")] if bench.target is not None else []
    engine = Engine(built.model, built.loss_fn, build_optimizer(cfg.optimizer), device="cpu",
                    callbacks=stop + built.callbacks, **engine_options)
    clock = Clock()
    evaluate = evaluator.__call__

    def timed(model):
        with clock.evaluating():
            return evaluate(model)

    engine.fit(collector, epochs=1, val_data=timed,
               eval_every=None if bench.eval_every is None else built.eval_every)
    wall, cpu = clock.seconds()
    history = [(int(h["env_steps"]), h["val_return"]) for h in evaluator.history]
    if not history or history[-1][0] != collector.env_steps:
        timed(built.model)
        history = [(int(h["env_steps"]), h["val_return"]) for h in evaluator.history]
    final = history[-1][1]
    solved = collector.env_steps if bench.target is not None and final >= bench.target else None
    collector.close()
    evaluator.close()
    return {"solved_at": solved, "final_return": final, "env_steps": collector.env_steps,
            "wall_seconds": wall, "cpu_seconds": cpu, "evaluations": history,
            "settings": settings}


# -------------------------------------------------------------------------------- results files
METHODS = {"beyondfit": run_beyondfit, "sb3": run_sb3}


def result_path(results: Path, method: str, bench: Bench, seed: int) -> Path:
    """Where one run's result lives."""
    return results / f"{method}-{bench.task}-{bench.budget}-seed{seed}.json"


def run_missing(results: Path, jobs: list[tuple[str, Bench, int]]) -> None:
    """Run each job whose result file does not exist yet, writing it when done."""
    results.mkdir(parents=True, exist_ok=True)
    for method, bench, seed in jobs:
        path = result_path(results, method, bench, seed)
        if path.exists():
            continue
        print(f"{method} {bench.env} seed {seed}: running", file=sys.stderr, flush=True)
        out = METHODS[method](bench, seed)
        out.update(method=method, env=bench.env, seed=seed, budget=bench.budget,
                   torch=torch.__version__)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        os.replace(tmp, path)
        print(f"{method} {bench.env} seed {seed}: final {out['final_return']:.1f}, solved at "
              f"{out['solved_at']}, {out['cpu_seconds']:.0f} CPU s", file=sys.stderr, flush=True)


def seed_list(seeds: int | Sequence[int]) -> list[int]:
    """``seeds`` as a list: a count ``N`` is seeds ``0..N-1``."""
    return list(range(seeds)) if isinstance(seeds, int) else list(seeds)


def load(results: Path, method: str, bench: Bench, seeds: int | Sequence[int]) -> list[dict]:
    """The stored results of ``method`` on ``bench`` for the seeds (a count ``N``: 0..N-1)
    that exist, in the seeds' order."""
    out = []
    for seed in seed_list(seeds):
        path = result_path(results, method, bench, seed)
        if path.exists():
            out.append(json.loads(path.read_text()))
    return out


# --------------------------------------------------------------------------------------- tables
def table(results: Path, all_benches: dict[str, Bench], seeds: int | Sequence[int]) -> str:
    """Markdown: one row per (env, method) with medians over the stored runs of ``seeds``
    (a count ``N``: 0..N-1)."""
    lines = ["| env (budget) | method | seeds | median final greedy return | per seed | "
             "median env steps to solve | solved | median train CPU s | CPU s vs SB3 | "
             "env steps / CPU s | median wall s |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for bench in all_benches.values():
        runs = {m: load(results, m, bench, seeds) for m in ("beyondfit", "sb3")}
        sb3_cpu = statistics.median(r["cpu_seconds"] for r in runs["sb3"]) if runs["sb3"] else None
        for method, label in (("beyondfit", f"beyondfit `+task={bench.task}`"),
                              ("sb3", "SB3 PPO (RL-Zoo)")):
            rs = runs[method]
            if not rs:
                continue
            finals = [r["final_return"] for r in rs]
            cpu = statistics.median(r["cpu_seconds"] for r in rs)
            rate = statistics.median(r["env_steps"] / r["cpu_seconds"] for r in rs)
            if bench.target is None:
                steps, solved = "–", "–"
            else:
                steps = statistics.median(r["solved_at"] or float("inf") for r in rs)
                steps = "never" if steps == float("inf") else f"{steps:,.0f}"
                solved = f"{sum(r['solved_at'] is not None for r in rs)}/{len(rs)}"
            ratio = f"{cpu / sb3_cpu:.2f}x" if sb3_cpu else "–"
            lines.append(
                f"| {bench.env} ({bench.budget:,}) | {label} | {len(rs)} | "
                f"{statistics.median(finals):.1f} | {', '.join(f'{f:.0f}' for f in finals)} | "
                f"{steps} | {solved} | {cpu:.0f} | {ratio} | {rate:,.0f} | "
                f"{statistics.median(r['wall_seconds'] for r in rs):.0f} |")
    return "\n".join(lines)


def main() -> None:
    """Parse options, run what is missing, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    seeds.add_argument("--seed-list", type=int, nargs="+", metavar="SEED",
                       help="these seeds instead (the unseen ones: 1 2 3; 0 is the tuning seed)")
    parser.add_argument("--tasks", default="lunarlander,hopper,halfcheetah")
    parser.add_argument("--only", choices=("beyondfit", "sb3"), default=None)
    parser.add_argument("--worker", default="0/1", help="K/N: run every N-th job from the K-th")
    parser.add_argument("--mujoco-budget", type=int, default=300_000)
    parser.add_argument("--eval-every", type=int, default=16_384,
                        help="LunarLander: env steps between evaluations")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--table", action="store_true", help="only print the stored results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    gym.logger.min_level = 40
    all_benches = benches(args.mujoco_budget, args.eval_every)
    chosen = {k: all_benches[k] for k in args.tasks.split(",")}
    seeds = args.seed_list if args.seed_list is not None else seed_list(args.seeds)
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        parser.error(f"--seed-list {' '.join(map(str, seeds))}: give distinct seeds >= 0")
    if not args.table:
        methods = [args.only] if args.only else ["beyondfit", "sb3"]
        jobs = [(m, b, s) for s in seeds for b in chosen.values() for m in methods]
        k, n = (int(x) for x in args.worker.split("/"))
        run_missing(args.results, jobs[k::n])
    print(table(args.results, chosen, seeds))


if __name__ == "__main__":
    main()
