"""Off-policy actor-critics side by side: beyondfit SAC/TD3 vs Stable-Baselines3 (RL-Zoo settings).

    python bench/offpolicy.py                                   # every missing run, then the table
    python bench/offpolicy.py --run sb3-td3 pendulum 0          # one run (a queue's unit)
    python bench/offpolicy.py --table                           # the table from the kept files
    python bench/offpolicy.py --seeds 3 4 5 6 7 --tasks hopper  # other seeds, one env

Protocol (the same for every method): train for the env's budget of env steps (Pendulum-v1
20,000: RL-Zoo's ``n_timesteps``; Hopper-v5 and HalfCheetah-v5 50,000), then one greedy
evaluation: the mean return of ``--episodes`` (10) episodes at once on a vector env seeded
``seed + 10000``, each copy taking the policy's deterministic action
(``beyondfit.rl.evaluation.evaluator.GreedyEvaluator`` for every method). Training time excludes the
evaluation; the wall time and the process's CPU time are both kept, the CPU time being the
steadier measure on a shared machine. Every run uses one torch thread.

SB3 runs RL-Zoo's hyperparameters (rl-baselines3-zoo ``hyperparams/sac.yml`` and ``td3.yml``:
its ``-v4`` MuJoCo entries for the ``-v5`` envs, which the zoo has not re-tuned), everything
else SB3's defaults. Each run writes one JSON file into ``--results`` (``bench/results/``),
``offpolicy-METHOD-TASK-BUDGET-epsN-seedS.json``; a run whose file exists is not run again, so
an interrupted bench resumes where it stopped. SB3 SAC on Pendulum also reads the files
``bench/sac_pendulum.py`` kept under its own names (``sac-sb3-20000-eps10-seedS.json``): the
same protocol. Each result keeps the command a user types for the same run, the commit it
started from and the versions of torch, Gymnasium, the simulator and SB3. Results are written,
never asserted on: times depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beyondfit.rl.evaluation.evaluator import GreedyEvaluator  # noqa: E402


@dataclass(frozen=True)
class Bench:
    """One benchmarked env: beyondfit's task name, the Gymnasium id and the env-step budget."""

    task: str
    env: str
    budget: int


BENCHES = {
    "pendulum": Bench("pendulum", "Pendulum-v1", 20_000),
    "hopper": Bench("hopper", "Hopper-v5", 50_000),
    "halfcheetah": Bench("halfcheetah", "HalfCheetah-v5", 50_000),
}


# ----------------------------------------------------------------------------- stable-baselines3
def zoo_hyperparams(algo: str, env_id: str) -> dict:
    """SB3 keyword arguments from RL-Zoo's ``hyperparams/{sac,td3}.yml`` for ``env_id``.

    ``learning_starts`` is SB3's default (100) where the zoo leaves it out; TD3's exploration
    noise is the zoo's ``noise_type: normal`` (a ``NormalActionNoise``), built by the caller.
    """
    if algo == "sac":
        if env_id == "Pendulum-v1":
            return dict(learning_rate=1e-3, learning_starts=100)
        return dict(learning_starts=10_000)  # the zoo's mujoco-defaults (HalfCheetah-v4 ...)
    if algo == "td3":
        if env_id == "Pendulum-v1":
            return dict(gamma=0.98, buffer_size=200_000, learning_starts=10_000, noise_std=0.1,
                        gradient_steps=1, train_freq=1, learning_rate=1e-3,
                        policy_kwargs=dict(net_arch=[400, 300]))
        return dict(learning_starts=10_000, noise_std=0.1, train_freq=1, gradient_steps=1,
                    learning_rate=1e-3, batch_size=256, policy_kwargs=dict(net_arch=[400, 300]))
    raise ValueError(algo)


class SB3Greedy:
    """An SB3 model seen through the ``act(obs, greedy=True)`` interface of the evaluator."""

    def __init__(self, model: object) -> None:
        self.model = model

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The policy's parameters (the evaluator reads the device from them)."""
        return self.model.policy.parameters()

    def act(self, obs: torch.Tensor, greedy: bool = True) -> torch.Tensor:
        """SB3's deterministic action, already rescaled to the env's bounds."""
        action, _ = self.model.predict(obs.cpu().numpy(), deterministic=greedy)
        return torch.as_tensor(np.asarray(action))


def greedy(env_id: str, seed: int, episodes: int, model: object) -> float:
    """The protocol's evaluation: mean greedy return of ``episodes`` episodes."""
    evaluator = GreedyEvaluator(env_id, episodes=episodes, seed=seed + 10_000)
    try:
        return evaluator(model)["val_return"]
    finally:
        evaluator.close()


def run_sb3(algo: str, bench: Bench, seed: int, episodes: int, budget: int) -> dict:
    """SB3 SAC or TD3 with RL-Zoo settings for ``budget`` env steps, then the evaluation."""
    import stable_baselines3

    hyper = zoo_hyperparams(algo, bench.env)
    hyper["learning_starts"] = min(hyper["learning_starts"], budget // 2)  # tiny test budgets
    if "noise_std" in hyper:
        import gymnasium as gym
        from stable_baselines3.common.noise import NormalActionNoise

        n_actions = gym.spec(bench.env).make().action_space.shape[0]
        std = hyper.pop("noise_std")
        hyper["action_noise"] = NormalActionNoise(np.zeros(n_actions), std * np.ones(n_actions))
    cls = {"sac": stable_baselines3.SAC, "td3": stable_baselines3.TD3}[algo]
    model = cls("MlpPolicy", bench.env, seed=seed, device="cpu", verbose=0, **hyper)
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=budget)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    updates = max(budget - model.learning_starts, 0)
    return {"return": greedy(bench.env, seed, episodes, SB3Greedy(model)), "seconds": seconds,
            "cpu_seconds": cpu_seconds, "updates": float(updates)}


# ------------------------------------------------------------------------------------- beyondfit
def compose(task: str, overrides: list[str]):
    """The config ``python -m beyondfit +task=TASK OVERRIDES...`` would run."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import beyondfit.cli.run  # noqa: F401  (registers the config schema)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", [f"+task={task}", *overrides])


def build(task_name: str, overrides: list[str]) -> tuple[Any, Any]:
    """``(task, engine)`` as ``python -m beyondfit +task=TASK OVERRIDES...`` builds them (on the
    CPU, without the command line's loggers and checkpoints)."""
    from omegaconf import OmegaConf

    from beyondfit.cli.builders import build_optimizer, build_task
    from beyondfit.core.engine import Engine
    from beyondfit.core.seeding import seed_everything

    cfg = compose(task_name, overrides)
    budget = cfg.task.total_env_steps
    if budget < cfg.task.replay.learning_starts * 2:  # tiny test budgets
        cfg.task.replay.learning_starts = budget // 2
    seed_everything(int(cfg.seed))
    task = build_task(cfg.task, swapped=[])
    options = OmegaConf.to_container(cfg.engine, resolve=True)
    options.pop("strategy", None)
    return task, Engine(task.model, task.loss_fn, build_optimizer(cfg.optimizer), device="cpu",
                        **options)


def run_beyondfit(algo: str, bench: Bench, seed: int, episodes: int, budget: int,
                  overrides: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """``python -m beyondfit +task=TASK algo=ALGO`` for ``budget`` env steps, built by the
    command line's own builders, then the protocol's evaluation (not the task's)."""
    extra = [f"algo={algo}", f"task.total_env_steps={budget}", f"seed={seed}", *overrides]
    task, engine = build(bench.task, extra)
    start, cpu_start = time.perf_counter(), time.process_time()
    engine.fit(task.train_data, epochs=1, verbose=False)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    task.train_data.close()
    task.val_data.close()
    return {"return": greedy(bench.env, seed, episodes, task.model.eval()), "seconds": seconds,
            "cpu_seconds": cpu_seconds, "updates": float(engine.global_step),
            "overrides": extra,
            "command": " ".join(["python -m beyondfit", f"+task={bench.task}", *extra])}


# ----------------------------------------------------------------------------------- the methods
Runner = Callable[[Bench, int, int, int], dict]
METHODS: dict[str, tuple[str, Runner]] = {
    "sb3-sac": ("SB3 SAC (RL-Zoo)", lambda b, s, e, n: run_sb3("sac", b, s, e, n)),
    "sb3-td3": ("SB3 TD3 (RL-Zoo)", lambda b, s, e, n: run_sb3("td3", b, s, e, n)),
    "beyondfit-sac": ("beyondfit `algo=sac`", lambda b, s, e, n: run_beyondfit("sac", b, s, e, n)),
    "beyondfit-td3": ("beyondfit `algo=td3`", lambda b, s, e, n: run_beyondfit("td3", b, s, e, n)),
}
#: The SB3 method each row is compared with (CPU-time ratio).
BASELINE = {"sb3-sac": "sb3-sac", "sb3-td3": "sb3-td3", "beyondfit-sac": "sb3-sac",
            "beyondfit-td3": "sb3-td3"}


def result_path(results: Path, method: str, bench: Bench, budget: int, episodes: int,
                seed: int) -> Path:  # fmt: skip
    """Where one run's result is kept."""
    return results / f"offpolicy-{method}-{bench.task}-{budget}-eps{episodes}-seed{seed}.json"


def legacy_path(results: Path, method: str, bench: Bench, budget: int, episodes: int,
                seed: int) -> Path | None:  # fmt: skip
    """``bench/sac_pendulum.py``'s file for the same run (same protocol), if it has one."""
    if method == "sb3-sac" and bench.task == "pendulum":
        return results / f"sac-sb3-{budget}-eps{episodes}-seed{seed}.json"
    return None


def load(results: Path, method: str, bench: Bench, budget: int, episodes: int,
         seed: int) -> dict | None:  # fmt: skip
    """The kept result of one run, or None."""
    for path in (result_path(results, method, bench, budget, episodes, seed),
                 legacy_path(results, method, bench, budget, episodes, seed)):
        if path is not None and path.exists():
            return json.loads(path.read_text())
    return None


def run_one(results: Path, method: str, bench: Bench, seed: int, episodes: int,
            budget: int) -> dict:  # fmt: skip
    """Run one job unless its result is kept; write the result file (atomically)."""
    kept = load(results, method, bench, budget, episodes, seed)
    if kept is not None:
        return kept
    torch.set_num_threads(1)
    commit = _commit()  # what the run starts from: HEAD may move while a long run trains
    print(f"{method} {bench.env} seed {seed}: running", file=sys.stderr, flush=True)
    out = METHODS[method][1](bench, seed, episodes, budget)
    out.update(method=method, env=bench.env, seed=seed, budget=budget, episodes=episodes,
               commit=commit, **versions())
    results.mkdir(parents=True, exist_ok=True)
    path = result_path(results, method, bench, budget, episodes, seed)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    os.replace(tmp, path)
    print(f"{method} {bench.env} seed {seed}: return {out['return']:.1f}, train "
          f"{out['seconds']:.0f}s wall, {out['cpu_seconds']:.0f}s CPU", file=sys.stderr,
          flush=True)  # fmt: skip
    return out


def versions() -> dict[str, str]:
    """The versions a result depends on: torch, Gymnasium, the simulator (MuJoCo, Box2D) and
    Stable-Baselines3, each where installed."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "gymnasium", "mujoco", "box2d", "stable_baselines3"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


def _commit() -> str:
    """The checkout's commit (what a kept result was measured with), ``+dirty`` when tracked
    files of beyondfit/, conf/ or this script differ from it, or ``"unknown"``."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, text=True, capture_output=True,
                              check=True).stdout.strip()

    try:
        changed = git("status", "--porcelain", "--untracked-files=no", "--", "beyondfit",
                      "conf", "bench/offpolicy.py")
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ---------------------------------------------------------------------------------------- table
def table(results: Path, seeds: list[int], episodes: int, budgets: dict[str, int]) -> str:
    """Markdown: one row per (env, method) with the kept runs of ``seeds``, mean/median return,
    CPU ratio."""
    lines = ["| env (env steps) | method | seeds | greedy return per seed | mean | median | "
             "median train CPU s | CPU vs SB3 | median train wall s |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for task, bench in BENCHES.items():
        budget = budgets[task]

        def kept(method: str, bench: Bench = bench, budget: int = budget) -> list[dict]:
            runs = (load(results, method, bench, budget, episodes, s) for s in seeds)
            return [r for r in runs if r is not None]

        for method, (label, _) in METHODS.items():
            runs = kept(method)
            if not runs:
                continue
            base = kept(BASELINE[method])
            cpu = statistics.median(r["cpu_seconds"] for r in runs)
            ratio = (f"{cpu / statistics.median(r['cpu_seconds'] for r in base):.2f}x"
                     if base else "–")
            returns = [r["return"] for r in runs]
            lines.append(
                f"| {bench.env} ({budget:,}) | {label} | {len(runs)} | "
                f"{', '.join(f'{x:.1f}' for x in returns)} | {statistics.mean(returns):.1f} | "
                f"{statistics.median(returns):.1f} | {cpu:.0f} | {ratio} | "
                f"{statistics.median(r['seconds'] for r in runs):.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    """Run one job (``--run``) or every missing one, then print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", nargs=3, metavar=("METHOD", "TASK", "SEED"),
                        help=f"one run; METHOD in {sorted(METHODS)}, TASK in {sorted(BENCHES)}")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--tasks", default=",".join(BENCHES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="the seeds to run and to table (default: 0 1 2)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--budget", type=int, default=None,
                        help="env steps for every task (default: each task's own budget)")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--table", action="store_true", help="only print the kept results")
    args = parser.parse_args(argv)
    budgets = {t: args.budget or b.budget for t, b in BENCHES.items()}
    if args.run:
        method, task, seed = args.run
        run_one(args.results, method, BENCHES[task], int(seed), args.episodes, budgets[task])
    elif not args.table:
        for seed in args.seeds:
            for task in args.tasks.split(","):
                for method in args.methods.split(","):
                    run_one(args.results, method, BENCHES[task], seed, args.episodes,
                            budgets[task])
    text = table(args.results, args.seeds, args.episodes, budgets)
    print(text)
    return text


if __name__ == "__main__":
    main()
