"""``python -m beyondfit +task=cartpole algo=dqn`` on several seeds, as a user runs it.

    python bench/dqn_cartpole.py --seeds 0 1 2     # the missing runs, one at a time; the table
    python bench/dqn_cartpole.py --table           # the table from the kept runs

Each seed is one command-line run with RL-Zoo's CartPole-v1 settings
(``conf/experiment/tuned/cartpole_dqn.yaml``: at most 50,000 env steps), its stop rule (a greedy
mean of 20 episodes >= 475, every 2,500 env steps) and its confirming evaluation (100 fresh greedy
episodes: "solved" only if it holds). Kept per seed under ``--results``
(``bench/results/dqn-cartpole/seedS/``: the run directory, and ``summary.json``): whether it
was solved, the env steps when it stopped, the confirmed return, and the run's CPU time (the
whole process: building, training, evaluations). A seed whose ``summary.json`` exists is not
run again. Results are written, never asserted on: times depend on the machine.
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


def run_seed(seed: int, results: Path, overrides: list[str]) -> dict:
    """One command-line run; its summary (also written to ``results/seedS/summary.json``)."""
    run_dir = results / f"seed{seed}"
    command = [sys.executable, "-m", "beyondfit", "+task=cartpole", "algo=dqn", f"seed={seed}",
               "device=cpu", "threads=1", "progress.bar=false", "plots=false",
               f"hydra.run.dir={run_dir}", *overrides]
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
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--table", action="store_true", help="only print the kept runs' table")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides (tests)")
    args = parser.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    if not args.table:
        for seed in args.seeds:
            if not (args.results / f"seed{seed}" / "summary.json").exists():
                print(json.dumps(run_seed(seed, args.results, args.overrides)), flush=True)
    text = table(args.results)
    print(text)
    return text


if __name__ == "__main__":
    main()
