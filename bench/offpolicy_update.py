"""The cost of one off-policy update: beyondfit ``algo=sac``/``td3`` beside SB3 and a hand-written
CleanRL-style SAC loop, in one run.

    python bench/offpolicy_update.py                 # Pendulum-v1 sizes, 200 updates x 5 rounds
    python bench/offpolicy_update.py --env Hopper-v5 --updates 100 --rounds 3
    python bench/offpolicy_update.py --profile       # where beyondfit's SAC update spends it

Every contender updates from a filled replay buffer (sampling included, env steps not): the
engine step of the command line's ``algo=sac`` / ``algo=td3`` (minibatches from its replay
buffer), SB3's ``model.train(gradient_steps=N)`` after a short ``learn`` has filled its buffer,
and :class:`bench.cleanrl_sac.CleanRLSAC`. Same sizes as the bench's runs: batch 256, SAC nets
256x256 (lr 1e-3), TD3 as the tuned Pendulum config
(``conf/experiment/tuned/pendulum_td3.yaml``) beside SB3's zoo nets (400x300). Rounds are
interleaved (a round of every contender, then the next), the cost is the thread's CPU time per
update, and the table gives the median round; torch threads 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from cleanrl_sac import CleanRLSAC  # noqa: E402
from offpolicy import BENCHES, build, zoo_hyperparams  # noqa: E402

TASKS = {b.env: b.task for b in BENCHES.values()}


def beyondfit(algo: str, env: str, overrides: tuple[str, ...] = ()) -> Callable[[int], None]:
    """``updates -> None``: that many engine steps of ``algo=ALGO`` on ``env``'s task."""
    task, engine = build(TASKS[env], [f"algo={algo}", "task.total_env_steps=3000",
                                      "task.replay.learning_starts=1000", *overrides])
    data = task.train_data
    first = next(iter(data))  # fills the buffer with the random steps
    engine.train_step(first)
    buffer, generator = data.buffer, data._generator

    def run(n: int) -> None:
        for _ in range(n):
            engine.train_step(buffer.sample(256, generator))

    return run


def sb3(algo: str, env: str) -> Callable[[int], None]:
    """``updates -> None``: SB3's own training loop for that many gradient steps."""
    import stable_baselines3

    hyper = zoo_hyperparams(algo, env)
    hyper.pop("noise_std", None)
    hyper["learning_starts"] = 500
    cls = {"sac": stable_baselines3.SAC, "td3": stable_baselines3.TD3}[algo]
    model = cls("MlpPolicy", env, device="cpu", seed=0, verbose=0, **hyper)
    model.learn(total_timesteps=600)  # fills the buffer and sets up the logger

    def run(n: int) -> None:
        model.train(gradient_steps=n, batch_size=model.batch_size)

    return run


def cleanrl(env: str, loop_class: type = CleanRLSAC) -> Callable[[int], None]:
    """``updates -> None``: the hand-written loop's updates (``LeanRLSAC``: compiled)."""
    import gymnasium as gym

    spec = gym.make(env)
    loop = loop_class(spec.observation_space.shape[0], spec.action_space.shape[0])
    spec.close()

    def run(n: int) -> None:
        for _ in range(n):
            loop.update()

    return run


def main(argv: list[str] | None = None) -> str:
    """Time every contender; print (and return) the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pendulum-v1", choices=sorted(TASKS))
    parser.add_argument("--updates", type=int, default=200, help="updates per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-sb3", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    contenders: dict[str, Callable[[int], None]] = {
        "beyondfit `algo=sac` (engine step)": beyondfit("sac", args.env),
        "hand-written CleanRL-style SAC (`bench/cleanrl_sac.py`)": cleanrl(args.env),
        "beyondfit `algo=td3` (engine step)": beyondfit("td3", args.env),
    }
    if not args.no_sb3:
        contenders["SB3 SAC (`model.train`)"] = sb3("sac", args.env)
        contenders["SB3 TD3 (`model.train`)"] = sb3("td3", args.env)
    if args.profile:
        from torch.profiler import profile

        run = contenders["beyondfit `algo=sac` (engine step)"]
        run(20)
        with profile() as prof:
            run(args.updates)
        text = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
        print(text)
        return text
    for run in contenders.values():
        run(10)  # warm-up
    costs: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, run in contenders.items():
            start = time.thread_time()
            run(args.updates)
            costs[name].append((time.thread_time() - start) / args.updates * 1e3)
    sac_ref = statistics.median(costs["hand-written CleanRL-style SAC (`bench/cleanrl_sac.py`)"])
    lines = [f"{args.env}, {args.updates} updates x {args.rounds} interleaved rounds, torch "
             "threads 1, thread CPU ms per update (median round; spread = min-max)", "",
             "| contender | ms/update | spread | vs hand-written SAC |", "|---|---:|---:|---:|"]
    for name, values in costs.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.2f} | {min(values):.2f}-{max(values):.2f} | "
                     f"{median / sac_ref:.2f}x |")
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
