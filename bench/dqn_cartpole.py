"""``python -m beyondfit +task=cartpole algo=dqn`` on several seeds, as a user runs it, beside SB3.

    python bench/dqn_cartpole.py --seeds 0 1 2     # the missing runs, one at a time; the table
    python bench/dqn_cartpole.py --method sb3      # SB3's DQN, the same protocol
    python bench/dqn_cartpole.py --table           # the table from the kept runs

Each seed is one command-line run with RL-Zoo's CartPole-v1 settings
(``conf/experiment/tuned/cartpole_dqn.yaml``: at most 50,000 env steps), its stop rule (a greedy
mean of 20 episodes >= 475, every 2,500 env steps) and its confirming evaluation (100 fresh greedy
episodes: "solved" only if it holds). Kept per seed under ``--results``
(``bench/results/dqn-cartpole/seedS/``: the run directory, and ``summary.json``): whether it
was solved, the env steps when it stopped, the confirmed return, and the run's CPU time (the
whole process: building, training, evaluations). A seed whose ``summary.json`` exists is not
run again. Results are written, never asserted on: times depend on the machine.

``--method sb3`` runs Stable-Baselines3's DQN with the same RL-Zoo settings (hyperparams/dqn.yml)
under the same protocol, in a process of its own as well: a greedy evaluation of 20 episodes
every 2,500 env steps (envs seeded ``seed + 10000``, as beyondfit's), stop at >= 475, then 100
fresh greedy episodes (seeds ``seed + 500000`` on, as beyondfit's confirming evaluation); a stop
the fresh episodes do not confirm is withdrawn and training goes on, as in beyondfit. Kept under
``bench/results/dqn-cartpole-sb3/``.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "dqn-cartpole"


ZOO = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
           gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
           exploration_fraction=0.16, exploration_final_eps=0.04,
           policy_kwargs=dict(net_arch=[256, 256]))  # RL-Zoo's CartPole-v1 entry
BUDGET, EVAL_EVERY, EVAL_EPISODES, CONFIRM_EPISODES, TARGET = 50_000, 2500, 20, 100, 475.0


def sb3_main(seed: int, run_dir: Path, budget: int = BUDGET) -> None:
    """SB3 DQN on CartPole-v1 under the protocol (run in a process of its own)."""
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    sys.path.insert(0, str(ROOT))
    from beyondfit.rl.evaluate import GreedyEvaluator

    torch.set_num_threads(1)

    class Greedy:  # the SB3 model through the evaluator's act(obs, greedy) interface
        def __init__(self, model: DQN) -> None:
            self.model = model

        def parameters(self):
            return self.model.policy.parameters()

        def act(self, obs: torch.Tensor, greedy: bool = True) -> torch.Tensor:
            return torch.as_tensor(self.model.predict(obs.numpy(), deterministic=greedy)[0])

    evaluator = GreedyEvaluator("CartPole-v1", EVAL_EPISODES, seed=seed + 10_000)

    class Stop(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next, self.attempts, self.result = EVAL_EVERY, 0, None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next:
                return True
            self.next += EVAL_EVERY
            if evaluator(Greedy(self.model))["val_return"] < TARGET:
                return True
            first = seed + 500_000 + self.attempts * CONFIRM_EPISODES
            self.attempts += 1
            fresh = GreedyEvaluator("CartPole-v1", CONFIRM_EPISODES, seed=first)
            self.result = fresh(Greedy(self.model))["val_return"]
            fresh.close()
            return self.result < TARGET  # an unconfirmed stop is withdrawn

    zoo = {**ZOO, "learning_starts": min(ZOO["learning_starts"], budget // 2)}  # tiny budgets
    model = DQN("MlpPolicy", "CartPole-v1", seed=seed, device="cpu", verbose=0, **zoo)
    stop = Stop()
    model.learn(budget, callback=stop)
    if stop.result is None or stop.result < TARGET:  # ran its budget: the final confirmation
        fresh = GreedyEvaluator("CartPole-v1", CONFIRM_EPISODES,
                                seed=seed + 500_000 + stop.attempts * CONFIRM_EPISODES)
        stop.result = fresh(Greedy(model))["val_return"]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "result.json").write_text(json.dumps(
        {"solved": stop.result >= TARGET, "values": {"val_return": stop.result},
         "stopped_by": "val_return>=475" if model.num_timesteps < budget else None,
         "step": model._n_updates, "env_steps": model.num_timesteps}) + "\n")


def run_seed(seed: int, results: Path, overrides: list[str], method: str = "beyondfit",
             budget: int = BUDGET) -> dict:  # fmt: skip
    """One run in a process of its own; its summary (also ``results/seedS/summary.json``)."""
    run_dir = results / f"seed{seed}"
    if method == "sb3":
        command = [sys.executable, str(Path(__file__).resolve()), "--sb3-one", str(seed),
                   "--results", str(results), "--budget", str(budget)]
    else:
        command = [sys.executable, "-m", "beyondfit", "+task=cartpole", "algo=dqn",
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
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--", "beyondfit", "conf", "bench/dqn_cartpole.py")
    return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")


def table(results: Path) -> str:
    """The kept seeds as a markdown table, and their medians."""
    found = sorted((json.loads(p.read_text()) for p in results.glob("seed*/summary.json")),
                   key=lambda s: s["seed"])
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
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--method", choices=("beyondfit", "sb3"), default="beyondfit")
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--budget", type=int, default=BUDGET, help="env steps per run, at most")
    parser.add_argument("--sb3-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--table", action="store_true", help="only print the kept runs' table")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides (tests)")
    args = parser.parse_args(argv)
    if args.sb3_one is not None:
        sb3_main(args.sb3_one, args.results / f"seed{args.sb3_one}", args.budget)
        return ""
    if args.results is None:
        args.results = RESULTS.with_name(RESULTS.name + ("-sb3" if args.method == "sb3" else ""))
    args.results.mkdir(parents=True, exist_ok=True)
    if not args.table:
        for seed in args.seeds:
            if not (args.results / f"seed{seed}" / "summary.json").exists():
                summary = run_seed(seed, args.results, args.overrides, args.method, args.budget)
                print(json.dumps(summary), flush=True)
    text = table(args.results)
    print(text)
    return text


if __name__ == "__main__":
    main()
