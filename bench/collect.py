"""Atari collection speed: ``task.vectorization=sync``, ``async`` and ``envpool`` side by side.

    nice -n 5 python bench/collect.py              # both tables, into bench/results/collect.md
    python bench/collect.py --table                # the table from the kept results

The smoke check (``tests/bench/test_bench_collect.py`` runs it as typed here, into a temporary
folder instead of /tmp/collect):

  python bench/collect.py --steps 16 --ppo-steps 1024 --repeats 1 --vectorizations envpool \\
      --results /tmp/collect

Every measurement runs in a child process of its own (``--child``), on one torch thread, and
times only what it measures: the CPU seconds of the process and of its waited-for children
(``getrusage``; ``AsyncVectorEnv``'s workers are joined, and so counted, when the envs close;
envpool's threads are the process's own) and the wall seconds, taken around it. Imports and
start-up are left out. Each vectorization is measured ``--repeats`` times, interleaved (sync,
async, envpool, sync, ...); the table gives the median.

- **Stepping**: 8 copies (``--envs``) of ``ALE/Breakout-v5`` made by
  ``beyondfit.rl.envs.vector.make_vector_env`` with ``conf/task/atari.yaml``'s wrappers and
  ``env_kwargs`` (for envpool: the same read as its own options), reset with seed 0 and
  stepped ``--steps`` times with uniform random actions from a fixed generator, then closed.
- **PPO**: ``+task=atari`` (CleanRL's settings: 8 envs x 128 steps a rollout, 4 epochs of 4
  minibatches) composed as ``python -m beyondfit +task=atari task.vectorization=V
  task.total_env_steps=B seed=0`` composes it, built, and fit for its one epoch without
  evaluations (``Engine.fit`` with the task's callbacks): collection, the policy's forward
  passes and the updates, the envs closed at the end. (envpool's pool is made at the first
  reset, inside the fit, Gymnasium's copies when the task is built: about 0.6 s of CPU
  counted against envpool.)

Results are written, never asserted on: ``RESULTS/collect.json`` and ``RESULTS/collect.md``
(default ``bench/results/``).
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
from importlib import metadata
from pathlib import Path
from typing import Any

from atari import cpu_name  # bench/ is this script's folder, first on its path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
ENV_ID = "ALE/Breakout-v5"
VECTORIZATIONS = ("sync", "async", "envpool")


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children so far."""
    own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                      resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _atari_config(*overrides: str) -> Any:
    """The config ``python -m beyondfit +task=atari OVERRIDES...`` composes."""
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(config_name="config", overrides=["+task=atari", *overrides])


def step_child(vectorization: str, envs_n: int, steps: int) -> dict:
    """Make, reset, step and close ``envs_n`` copies; the CPU and wall seconds of that."""
    import numpy as np
    from hydra.utils import instantiate

    from beyondfit.rl.envs.vector import make_vector_env

    task = _atari_config().task
    wrappers = [instantiate(w) for w in task.wrappers]
    rng = np.random.default_rng(0)
    cpu, wall = _cpu(), time.perf_counter()
    envs = make_vector_env(ENV_ID, envs_n, wrappers, env_kwargs=dict(task.env_kwargs),
                           vectorization=vectorization)
    envs.reset(seed=0)
    actions = envs.single_action_space.n
    for _ in range(steps):
        envs.step(rng.integers(0, actions, envs_n))
    kind = type(envs).__name__
    envs.close()
    return {"cpu_seconds": _cpu() - cpu, "wall_seconds": time.perf_counter() - wall,
            "env_steps": steps * envs_n, "envs": kind}


def ppo_child(vectorization: str, budget: int) -> dict:
    """Build ``+task=atari`` with ``vectorization`` and fit its one epoch of ``budget`` env
    steps, without evaluations; the CPU and wall seconds of the fit and the envs' closing."""
    import torch

    from beyondfit.cli.builders import build_optimizer, build_task, engine_options
    from beyondfit.core.engine import Engine
    from beyondfit.core.seeding import seed_everything

    torch.set_num_threads(1)
    cfg = _atari_config(f"task.vectorization={vectorization}", f"task.total_env_steps={budget}",
                        "seed=0")
    seed_everything(0)
    task = build_task(cfg.task)
    options = engine_options(cfg.engine)
    options.pop("strategy", None)
    engine = Engine(task.model, task.loss_fn, build_optimizer(cfg.optimizer), device="cpu",
                    callbacks=task.callbacks, **options)
    cpu, wall = _cpu(), time.perf_counter()
    engine.fit(task.train_data, epochs=1, verbose=False)
    kind = type(task.train_data.envs).__name__
    task.train_data.close()
    return {"cpu_seconds": _cpu() - cpu, "wall_seconds": time.perf_counter() - wall,
            "env_steps": int(task.train_data.env_steps), "envs": kind}


def measure(kind: str, vectorization: str, args: argparse.Namespace) -> dict:
    """One measurement in a child process of its own (its stderr kept for a failure)."""
    what = [str(args.envs), str(args.steps)] if kind == "step" else [str(args.ppo_steps)]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, vectorization, *what]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [s for s in done.stderr.splitlines() if "A.L.E" not in s and "Stella" not in s]
        return {"error": (lines or [f"exit {done.returncode}"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def run_all(args: argparse.Namespace) -> dict:
    """Every measurement, interleaved over the vectorizations ``--repeats`` times."""
    kinds = ["step"] + (["ppo"] if args.ppo_steps else [])
    runs: dict[str, dict[str, list[dict]]] = {k: {v: [] for v in args.vectorizations}
                                              for k in kinds}
    for kind in kinds:
        for _ in range(args.repeats):
            for vectorization in args.vectorizations:
                result = measure(kind, vectorization, args)
                runs[kind][vectorization].append(result)
                print(kind, vectorization, result, file=sys.stderr, flush=True)
    return {
        "date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "versions": {n: _version(n) for n in ("torch", "gymnasium", "ale-py", "envpool",
                                              "numpy", "opencv-python-headless")},
        "command": " ".join(["python", "bench/collect.py", *sys.argv[1:]]),
        "envs": args.envs, "steps": args.steps, "ppo_steps": args.ppo_steps,
        "repeats": args.repeats, "runs": runs,
    }


def _median(rows: list[dict], key: str) -> float | None:
    values = [r["env_steps"] / r[key] for r in rows if "error" not in r and r[key] > 0]
    return statistics.median(values) if values else None


def table(results: dict) -> str:
    """The markdown tables of :func:`run_all`'s results."""
    titles = {"step": f"Stepping: {results['envs']} copies of {ENV_ID}, random actions, "
                      f"{results['steps']:,} steps each",
              "ppo": f"PPO (+task=atari, CleanRL's settings): {results['ppo_steps']:,} env "
                     "steps, training only"}
    lines = [f"Measured {results['date']} on {results['cpu']} ({results['cores']} cores; load "
             f"average at the end {results['load_average']}), by `{results['command']}`; "
             f"the median of {results['repeats']} run(s) each. Versions: "
             + ", ".join(f"{k} {v}" for k, v in results["versions"].items() if v) + "."]
    for kind, by_vectorization in results["runs"].items():
        lines += ["", f"**{titles[kind]}**", "",
                  "| task.vectorization | env steps per CPU-second | env steps per second | "
                  "per CPU-second, vs sync |", "|---|---|---|---|"]
        base = _median(by_vectorization.get("sync", []), "cpu_seconds")
        for vectorization, rows in by_vectorization.items():
            errors = [r["error"] for r in rows if "error" in r]
            cpu, wall = _median(rows, "cpu_seconds"), _median(rows, "wall_seconds")
            if cpu is None:
                lines.append(f"| {vectorization} | not run: {errors[0] if errors else '?'} "
                             "| | |")
                continue
            ratio = f"{cpu / base:.2f}x" if base else ""
            lines.append(f"| {vectorization} | {cpu:,.0f} | {wall:,.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure (or, with ``--table``, re-tabulate the kept results) and write the table."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        kind, vectorization, *what = argv[1:]
        child = step_child if kind == "step" else ppo_child
        print(json.dumps(child(vectorization, *map(int, what))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8, help="env copies (default 8)")
    parser.add_argument("--steps", type=int, default=2500,
                        help="vector steps of the stepping table (default 2500 = 20,000 env "
                             "steps with 8 copies)")
    parser.add_argument("--ppo-steps", type=int, default=12288,
                        help="env steps of each PPO run (default 12288: 12 rollouts); 0: no "
                             "PPO table")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--vectorizations", type=lambda s: s.split(","),
                        default=list(VECTORIZATIONS))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--table", action="store_true", help="only the table of kept results")
    args = parser.parse_args(argv)
    path = args.results / "collect.json"
    if args.table:
        results = json.loads(path.read_text())
    else:
        results = run_all(args)
        args.results.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1) + "\n")
    text = table(results)
    (args.results / "collect.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
