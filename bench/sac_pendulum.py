"""SAC on Pendulum-v1 side by side: beyondfit's example vs Stable-Baselines3 with RL-Zoo settings.

    python bench/sac_pendulum.py                # 3 seeds, 20,000 env steps each
    python bench/sac_pendulum.py --workers 2    # the same runs, two at a time
    python bench/sac_pendulum.py --workers 2 --results bench/results  # keep and reuse runs

Each method trains for the same budget of env steps (RL-Zoo's ``n_timesteps: 20000`` for
Pendulum-v1), then plays the same greedy evaluation: ``--episodes`` episodes at once on a
vector env seeded ``seed + 10000``, each copy acting with the policy's deterministic action
(``beyondfit.rl.evaluate.GreedyEvaluator`` for both). beyondfit runs
``examples/sac_pendulum.py`` (three Updates of one Engine, a replay buffer as its data); SB3
runs ``SAC("MlpPolicy", learning_rate=1e-3)``, RL-Zoo's ``hyperparams/sac.yml`` entry for
Pendulum-v1 (everything else SB3's defaults: batch 256, gamma 0.99, tau 0.005,
learning_starts 100, nets of 256x256). Training time excludes evaluation; both the wall time
and the process's CPU time are reported, the CPU time being the steadier measure on a shared
machine. Runs are queued interleaved (seed 0 of each method, then seed 1, ...), so a busy
machine slows both methods alike; torch uses one thread per run.
Results are written, never asserted on: time depends on the machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beyondfit.rl.evaluate import GreedyEvaluator  # noqa: E402

ENV_ID = "Pendulum-v1"


def load_example() -> ModuleType:
    """``examples/sac_pendulum.py`` as a module (examples are scripts, not a package)."""
    path = ROOT / "examples" / "sac_pendulum.py"
    spec = importlib.util.spec_from_file_location("sac_pendulum", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_beyondfit(seed: int, env_steps: int, episodes: int) -> dict[str, float]:
    """The example's ``train``: greedy return and training seconds."""
    result = load_example().train(seed, env_steps=env_steps,
                                  learning_starts=min(1000, env_steps // 2),
                                  episodes=episodes, verbose=False)  # fmt: skip
    return {"return": result["val_return"], "seconds": result["train_seconds"],
            "cpu_seconds": result["train_cpu_seconds"], "updates": result["updates"]}


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


def run_sb3(seed: int, env_steps: int, episodes: int) -> dict[str, float]:
    """SB3 SAC with RL-Zoo's Pendulum-v1 settings; greedy return and training seconds."""
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", ENV_ID, learning_rate=1e-3, seed=seed, device="cpu", verbose=0,
                learning_starts=min(100, env_steps // 2))  # fmt: skip
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=env_steps)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    evaluator = GreedyEvaluator(ENV_ID, episodes=episodes, seed=seed + 10_000)
    try:
        result = evaluator(SB3Greedy(model))
    finally:
        evaluator.close()
    updates = max(env_steps - model.learning_starts, 0)
    return {"return": result["val_return"], "seconds": seconds, "cpu_seconds": cpu_seconds,
            "updates": float(updates)}


METHODS = {
    "beyondfit (`examples/sac_pendulum.py`)": run_beyondfit,
    "SB3 SAC (RL-Zoo)": run_sb3,
}
RESULT_KEYS = dict(zip(METHODS, ("beyondfit", "sb3"), strict=True))  # result file names


def run(method: str, seed: int, env_steps: int, episodes: int) -> dict[str, float]:
    """One method on one seed, on one torch thread (the unit a worker process runs)."""
    torch.set_num_threads(1)
    return METHODS[method](seed, env_steps, episodes)


def table(results: dict[str, list[dict[str, float]]], seeds: int, env_steps: int,
          episodes: int) -> str:  # fmt: skip
    """The markdown table: return per seed and its mean, training time and its ratio to SB3."""
    def median(method: str, key: str) -> float:
        return statistics.median(r[key] for r in results[method])

    sb3 = "SB3 SAC (RL-Zoo)"
    lines = [
        f"{ENV_ID}, seeds 0-{seeds - 1}, {env_steps:,} env steps each, greedy return of "
        f"{episodes} episodes after training, torch threads 1; train time excludes evaluation.",
        "",
        "| method | updates | greedy return per seed | mean | median train CPU s | vs SB3 "
        "| median train wall s | vs SB3 |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for method, runs in results.items():
        per_seed = ", ".join(f"{r['return']:.1f}" for r in runs)
        mean = statistics.mean(r["return"] for r in runs)
        cpu, wall = median(method, "cpu_seconds"), median(method, "seconds")
        lines.append(
            f"| {method} | {runs[0]['updates']:,.0f} | {per_seed} | {mean:.1f} | {cpu:.0f} | "
            f"{cpu / median(sb3, 'cpu_seconds'):.2f}x | {wall:.0f} | "
            f"{wall / median(sb3, 'seconds'):.2f}x |"
        )
    return "\n".join(lines)


def result_path(results: Path, method: str, seed: int, env_steps: int, episodes: int) -> Path:
    """Where one run's result is kept: ``sac-METHOD-STEPS-epsEPISODES-seedN.json``."""
    return results / f"sac-{RESULT_KEYS[method]}-{env_steps}-eps{episodes}-seed{seed}.json"


def main(argv: list[str] | None = None) -> str:
    """Run every method on every seed; print (and optionally write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--env-steps", type=int, default=20_000)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1, help="runs at a time (processes)")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    parser.add_argument("--results", type=Path, default=None,
                        help="keep each run's result here as JSON; a run already kept is not "
                             "run again (an interrupted bench resumes where it stopped)")
    args = parser.parse_args(argv)
    jobs = [(method, seed) for seed in range(args.seeds) for method in METHODS]
    done: dict[tuple[str, int], dict[str, float]] = {}
    if args.results is not None:
        args.results.mkdir(parents=True, exist_ok=True)
        for method, seed in jobs:
            path = result_path(args.results, method, seed, args.env_steps, args.episodes)
            if path.exists():
                done[method, seed] = json.loads(path.read_text())
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        futures = {job: pool.submit(run, *job, args.env_steps, args.episodes)
                   for job in jobs if job not in done}  # fmt: skip
        for (method, seed), future in futures.items():
            r = done[method, seed] = future.result()
            if args.results is not None:
                path = result_path(args.results, method, seed, args.env_steps, args.episodes)
                path.write_text(json.dumps(r, indent=1) + "\n")
            print(f"seed {seed} {method}: return {r['return']:.1f}, train {r['seconds']:.0f}s "
                  f"wall, {r['cpu_seconds']:.0f}s CPU", flush=True)  # fmt: skip
    results = {m: [done[m, seed] for seed in range(args.seeds)] for m in METHODS}
    text = table(results, args.seeds, args.env_steps, args.episodes)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return text

if __name__ == "__main__":
    main()
