"""``python -m beyondfit +task=TASK algo=dqn`` on several seeds, as a user runs it, beside SB3.

    python bench/dqn.py --seeds 0 1 2                     # CartPole-v1, the missing runs; the table
    python bench/dqn.py --method sb3                      # SB3's DQN, the same protocol
    python bench/dqn.py --task lunarlander --seeds 0 1 2  # LunarLander-v3
    python bench/dqn.py --table                           # the table from the kept runs
    python bench/dqn.py --table --seeds 10 11 12          # ... of these seeds only

Each seed is one command-line run with RL-Zoo's settings (``conf/experiment/tuned/TASK_dqn.yaml``:
CartPole-v1 at most 50,000 env steps, LunarLander-v3 100,000), the task's stop rule (a greedy
mean over the evaluation's episodes at or above the target: CartPole 475 over 20 episodes every
2,500 env steps, LunarLander 200 over 10 every 5,000) and its confirming evaluation (100 fresh
greedy episodes: "solved" only if it holds; at the end too). Kept per seed under ``--results``
(``bench/results/dqn-TASK/seedS.json``, its run directory ``seedS/`` beside it, not kept in
git): whether it was solved, the env steps when it stopped, the confirmed return, and the run's
CPU time (the whole process: building, training, evaluations). A seed whose ``seedS.json``
exists is not run again. Results are written, never asserted on: times depend on the machine.

``--method sb3`` runs Stable-Baselines3's DQN with the same RL-Zoo settings (hyperparams/dqn.yml)
under the same protocol, in a process of its own as well: the same greedy evaluation (envs
seeded ``seed + 10000``, as beyondfit's), the same stop, then 100 fresh greedy episodes (seeds
``seed + 500000`` on, as beyondfit's confirming evaluation); a stop the fresh episodes do not
confirm is withdrawn and training goes on, as in beyondfit. Kept under
``bench/results/dqn-TASK-sb3/``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CONFIRM_EPISODES = 100


@dataclass(frozen=True)
class Bench:
    """One task: its env, budget, evaluation (every, episodes), target and RL-Zoo's settings."""

    env: str
    budget: int
    eval_every: int
    eval_episodes: int
    target: float
    zoo: dict


BENCHES = {  # rl-baselines3-zoo hyperparams/dqn.yml
    "cartpole": Bench("CartPole-v1", 50_000, 2500, 20, 475.0, dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
        gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04,
        policy_kwargs=dict(net_arch=[256, 256]))),
    "lunarlander": Bench("LunarLander-v3", 100_000, 5000, 10, 200.0, dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0,
        gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
        exploration_fraction=0.12, exploration_final_eps=0.1,
        policy_kwargs=dict(net_arch=[256, 256]))),
}


def sb3_main(task: str, seed: int, run_dir: Path, budget: int) -> None:
    """SB3 DQN on the task's env under the protocol (run in a process of its own)."""
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    sys.path.insert(0, str(ROOT))
    from beyondfit.rl.evaluation.evaluator import GreedyEvaluator

    torch.set_num_threads(1)

    class Greedy:  # the SB3 model through the evaluator's act(obs, greedy) interface
        def __init__(self, model: DQN) -> None:
            self.model = model

        def parameters(self):
            return self.model.policy.parameters()

        def act(self, obs: torch.Tensor, greedy: bool = True) -> torch.Tensor:
            return torch.as_tensor(self.model.predict(obs.numpy(), deterministic=greedy)[0])

    bench = BENCHES[task]
    evaluator = GreedyEvaluator(bench.env, bench.eval_episodes, seed=seed + 10_000)

    class Stop(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next, self.attempts, self.result = bench.eval_every, 0, None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next:
                return True
            self.next += bench.eval_every
            if evaluator(Greedy(self.model))["val_return"] < bench.target:
                return True
            first = seed + 500_000 + self.attempts * CONFIRM_EPISODES
            self.attempts += 1
            fresh = GreedyEvaluator(bench.env, CONFIRM_EPISODES, seed=first)
            self.result = fresh(Greedy(self.model))["val_return"]
            fresh.close()
            return self.result < bench.target  # an unconfirmed stop is withdrawn

    zoo = {**bench.zoo, "learning_starts": min(bench.zoo["learning_starts"], budget // 2)}
    model = DQN("MlpPolicy", bench.env, seed=seed, device="cpu", verbose=0, **zoo)
    stop = Stop()
    model.learn(budget, callback=stop)
    if stop.result is None or stop.result < bench.target:  # ran its budget: confirm at the end
        fresh = GreedyEvaluator(bench.env, CONFIRM_EPISODES,
                                seed=seed + 500_000 + stop.attempts * CONFIRM_EPISODES)
        stop.result = fresh(Greedy(model))["val_return"]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "result.json").write_text(json.dumps(
        {"solved": stop.result >= bench.target, "values": {"val_return": stop.result},
         "stopped_by": "the stop rule" if model.num_timesteps < budget else None,
         "step": model._n_updates, "env_steps": model.num_timesteps}) + "\n")


def run_seed(task: str, seed: int, results: Path, overrides: list[str], method: str,
             budget: int) -> dict:  # fmt: skip
    """One run in a process of its own; its summary (also ``results/seedS.json``)."""
    run_dir = results / f"seed{seed}"
    if method == "sb3":
        command = [sys.executable, str(Path(__file__).resolve()), "--task", task, "--sb3-one",
                   str(seed), "--results", str(results), "--budget", str(budget)]
    else:
        command = [sys.executable, "-m", "beyondfit", f"+task={task}", "algo=dqn",
                   f"seed={seed}", "device=cpu", "threads=1", "progress.bar=false",
                   "plots=false", f"hydra.run.dir={run_dir}", f"task.total_env_steps={budget}",
                   *overrides]
    commit = _commit()  # the tree the run starts from, not the HEAD when it ends
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"seed {seed} failed:\n{done.stderr[-3000:]}")
    record = json.loads((run_dir / "result.json").read_text())
    if method == "sb3":
        env_steps = record["env_steps"]
    else:
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        env_steps = max(row.get("env_steps", 0) for row in rows)

    summary = {"seed": seed, "solved": bool(record["solved"]),
               "return": record["values"]["val_return"], "env_steps": int(env_steps),
               "stopped_by": record["stopped_by"], "optimizer_steps": record["step"],
               "cpu_seconds": (after.ru_utime + after.ru_stime) - (before.ru_utime
                                                                    + before.ru_stime),
               "seconds": seconds, "command": " ".join(command[1:]),
               "commit": commit}  # fmt: skip
    if method != "sb3":  # of the per-step rows (which stay local, untracked), the curve alone
        summary["curve"] = curve(rows)
    (results / f"seed{seed}.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def curve(rows: list[dict], points: int = 50) -> dict[str, list[list[float]]]:
    """A run's learning curve, small enough to keep in git: each greedy evaluation's
    ``[env_steps, val_return]`` (an evaluation row's env steps: those of the last training row
    at or before its optimizer step) and ``[env_steps, episode_return]`` at up to ``points``
    evenly spaced training rows."""
    at_step = sorted((r["step"], r["env_steps"]) for r in rows
                     if r.get("kind") == "train" and "env_steps" in r)
    evals = []
    for r in rows:
        if r.get("kind") == "val" and "val_return" in r:
            before = [env for step, env in at_step if step <= r["step"]]
            evals.append([before[-1] if before else 0, r["val_return"]])
    train = [[r["env_steps"], r["episode_return"]] for r in rows
             if r.get("kind") == "train" and "episode_return" in r and "env_steps" in r]
    if len(train) > points:
        train = [train[round(i * (len(train) - 1) / (points - 1))] for i in range(points)]
    return {"eval": evals, "train": train}


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--", "beyondfit", "conf", "bench/dqn.py")
    return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")


def table(results: Path, seeds: list[int] | None = None) -> str:
    """The kept seeds (all, or those of ``seeds``) as a markdown table, and their medians."""
    found = sorted((json.loads(p.read_text()) for p in results.glob("seed*.json")),
                   key=lambda s: s["seed"])
    if seeds is not None:
        found = [s for s in found if s["seed"] in seeds]
    lines = ["| seed | solved (100 fresh episodes) | return | env steps | CPU s | commit |",
             "|---|---|---|---|---|---|"]
    for s in found:
        lines.append(f"| {s['seed']} | {'yes' if s['solved'] else 'no'} | {s['return']:.1f} | "
                     f"{s['env_steps']:,} | {s['cpu_seconds']:.0f} | {s['commit']} |")
    if found:
        solved = [s for s in found if s["solved"]]
        median = statistics.median(s["env_steps"] if s["solved"] else float("inf") for s in found)
        lines.append(f"\n{len(solved)} of {len(found)} solved; median env steps to solve "
                     f"{median:,.0f} (unsolved count as never); median CPU "
                     f"{statistics.median(s['cpu_seconds'] for s in found):.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(BENCHES), default="cartpole")
    parser.add_argument("--seeds", type=int, nargs="*", default=None,
                        help="default: run 0 1 2; with --table: every kept seed")
    parser.add_argument("--method", choices=("beyondfit", "sb3"), default="beyondfit")
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--budget", type=int, default=None, help="env steps per run, at most")
    parser.add_argument("--sb3-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--table", action="store_true", help="only print the kept runs' table")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides (tests)")
    args = parser.parse_args(argv)
    budget = args.budget or BENCHES[args.task].budget
    if args.sb3_one is not None:
        sb3_main(args.task, args.sb3_one, args.results / f"seed{args.sb3_one}", budget)
        return ""
    if args.results is None:
        args.results = RESULTS / f"dqn-{args.task}{'-sb3' if args.method == 'sb3' else ''}"
    args.results.mkdir(parents=True, exist_ok=True)
    if not args.table:
        for seed in [0, 1, 2] if args.seeds is None else args.seeds:
            if not (args.results / f"seed{seed}.json").exists():
                summary = run_seed(args.task, seed, args.results, args.overrides, args.method,
                                   budget)
                print(json.dumps(summary), flush=True)
    text = table(args.results, args.seeds)
    print(text)
    return text


if __name__ == "__main__":
    main()
