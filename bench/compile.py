"""What ``compile=True`` buys: the compiled engine beside a raw loop, the best hand-compiled step,
the eager engine and Lightning; a SAC update beside CleanRL, LeanRL and SB3; whole command-line
runs with and without ``engine.compile=true``, first (cold cache) and second run.

    python bench/compile.py                          # every part, markdown tables on stdout
    python bench/compile.py --parts mlp              # the MLP steps only
    python bench/compile.py --parts sac --envs Pendulum-v1
    python bench/compile.py --parts e2e

- ``mlp``: the tiny (5-64-64-1) and medium (784-512-512-10) MLPs of ``bench/overhead.py``,
  Adam and clipping by norm, every contender in lockstep in one process (an epoch's steps
  each in turn, the thread's CPU time per step: machine noise falls on all alike, and each
  step runs after the contender's own previous one, as in a training run; ``--block 1``
  alternates every step instead, which puts every step on caches the others just filled and
  costs compiled steps 2-3x, eager ones ~2x). The *limits* are the best plain-PyTorch steps
  we could write: forward, ``torch.autograd.grad``, clipping and Adam's update in one
  ``torch.compile(fullgraph=True)`` graph; or the same graph without the update, then torch's
  fused Adam kernel. Compilation happens in each run's first steps; the
  median step excludes it.
- ``sac``: one SAC update (critic, actor, temperature, targets) from a filled buffer, 256x256
  nets, batch 256, interleaved rounds in a rotating order, each ratio the median of the
  per-round ratios (a round's contenders run seconds apart, on the same machine speed): the
  engine of ``algo=sac`` eager and compiled, CleanRL's update by hand
  (``bench/cleanrl_sac.py``), the same compiled the LeanRL way, and SB3's ``train``.
- ``e2e``: wall time of ``python -m beyondfit +task=...`` with and without
  ``engine.compile=true``; the compiled run twice, first with an empty inductor cache, then
  with the cache the first one filled (``TORCHINDUCTOR_CACHE_DIR``); a last row, the floor,
  does the same for one compiled forward and backward of a tiny MLP with no beyondfit at all.

Ratios, not absolute times, are what to quote: these machines are shared. torch uses one CPU
thread on every side.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import overhead  # noqa: E402
from overhead import CLIP_NORM, LR, SIZES, Problem, Result, Size, Timer  # noqa: E402

Run = Callable[[Problem, Timer], Result]


# ---------------------------------------------------------------------- MLP contenders
def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    # torch caches compiled code per code object: a fresh one per run, as the engine does.
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{time.perf_counter_ns()}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)


def raw_fused(p: Problem, timer: Timer) -> Result:
    """The raw eager loop with ``Adam(fused=True)``: the cheap win, no compiler."""
    model = p.model()
    opt = torch.optim.Adam(model.parameters(), lr=LR, fused=True)
    params = list(model.parameters())
    timer.begin()
    for epoch in range(p.size.epochs):
        for batch in _epoch(p, epoch):
            out = p.loss_fn(model, batch)
            out["loss"].backward()
            torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
            opt.step()
            opt.zero_grad(set_to_none=True)
            timer.tick()
    return Result(timer.costs, overhead._params(model))


def hand_compiled(p: Problem, timer: Timer, kernel: bool = False) -> Result:
    """The limit: one graph per step, written by hand in plain PyTorch. ``kernel``: the other
    limit, the graph without Adam's update, then torch's fused Adam kernel (which outruns
    inductor's code for that update on a CPU's larger models)."""
    model = p.model()
    params = list(model.parameters())
    if kernel:
        opt = torch.optim.Adam(params, lr=LR, fused=True)
    else:
        opt = torch.optim.Adam(params, lr=torch.tensor(LR, dtype=torch.float64))
    adam_step = type(opt).step
    while hasattr(adam_step, "__wrapped__"):  # torch's wrappers break the graph on purpose
        adam_step = adam_step.__wrapped__
    for param in params:
        param.grad = torch.zeros_like(param)
    loss_fn = p.loss_fn

    def step(batch: Any) -> dict[str, torch.Tensor]:
        out = loss_fn(model, batch)
        grads = torch.autograd.grad(out["loss"], params)
        with torch.no_grad():
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            torch._foreach_mul_(grads, torch.clamp(CLIP_NORM / (norm + 1e-6), max=1.0))
            torch._foreach_copy_([q.grad for q in params], grads)
            if not kernel:
                adam_step(opt)
        return {k: v.detach() for k, v in out.items()}

    compiled = torch.compile(_own_code(step), fullgraph=True)
    timer.begin()
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        for epoch in range(p.size.epochs):
            for batch in _epoch(p, epoch):
                compiled(batch)
                if kernel:
                    opt.step()
                timer.tick()
    return Result(timer.costs, overhead._params(model))


def hand_compiled_kernel(p: Problem, timer: Timer) -> Result:
    """The other limit (:func:`hand_compiled` with ``kernel``)."""
    return hand_compiled(p, timer, kernel=True)


def _epoch(p: Problem, epoch: int) -> Any:
    # TensorBatches' order (bench/overhead.py's raw_slicing).
    g = torch.Generator().manual_seed(overhead.SEED * 1_000_003 + epoch)
    order = torch.randperm(len(p.x), generator=g)
    xs, ys, bs = p.x[order], p.y[order], p.size.batch
    for i in range(0, len(xs), bs):
        yield xs[i:i + bs], ys[i:i + bs]


def engine_compiled(p: Problem, timer: Timer) -> Result:
    return overhead._engine(p, timer, p.batches(), compile=True)


def engine_compiled_nocheck(p: Problem, timer: Timer) -> Result:
    return overhead._engine(p, timer, p.batches(), compile=True, on_nonfinite="ignore")


MLP_ROWS: dict[str, tuple[str, Run]] = {
    "raw": ("raw eager loop (Adam, clip_grad_norm_)", overhead.raw_slicing),
    "raw_fused": ("raw eager loop, `Adam(fused=True)`", raw_fused),
    "limit": ("hand-compiled step: one graph (the limit)", hand_compiled),
    "limit_kernel": ("hand-compiled graph + fused Adam kernel (the other limit)",
                     hand_compiled_kernel),
    "engine": ("beyondfit engine, eager", overhead.engine_batches),
    "engine_compiled": ("beyondfit engine, `compile=True`", engine_compiled),
    "engine_compiled_nocheck": ("beyondfit engine, `compile=True, on_nonfinite=\"ignore\"`",
                                engine_compiled_nocheck),
    "lightning": ("Lightning Trainer, minimal", overhead.lightning_minimal),
}


def measure_mlp(size: Size, keys: list[str], repeats: int, block: int = 0) -> str:
    """``1 + repeats`` lockstep runs (the first uncounted), the ring rotated each time; each
    contender runs ``block`` steps per turn (0: an epoch's)."""
    block = block or size.steps_per_epoch
    problem = Problem.build(size)
    steps: dict[str, list[float]] = {k: [] for k in keys}
    ratios: dict[str, list[float]] = {k: [] for k in keys}
    finals: dict[str, Result] = {}
    for r in range(1 + repeats):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        gc.collect()
        with contextlib.redirect_stdout(sys.stderr):
            got = dict(zip(order, overhead.run_lockstep(
                problem, [MLP_ROWS[k][1] for k in order], time.thread_time, block),
                strict=True))
        finals = got
        if r == 0:
            continue
        base = statistics.median(got["raw"].costs)
        for k in keys:
            steps[k].append(statistics.median(got[k].costs))
            ratios[k].append(steps[k][-1] / base)
    ref = finals["raw"].params
    lines = [f"**{size.name}**: MLP {'-'.join(map(str, size.layers))}, batch {size.batch}, "
             f"{size.steps_per_epoch} steps x {size.epochs} epochs per run, {repeats} runs, "
             f"turns of {block} step{'s' if block > 1 else ''}",
             "", "| contender | ms/step | x raw eager loop | weights after the run vs raw |",
             "|---|---:|---:|---|"]
    for k in keys:
        drift = max(float((finals[k].params[n] - ref[n]).abs().max()) for n in ref)
        same = ("reference" if k == "raw" else "bitwise" if drift == 0
                else f"max |diff| {drift:.1e}")
        lines.append(f"| {MLP_ROWS[k][0]} | {statistics.median(steps[k]) * 1e3:.3f} | "
                     f"{statistics.median(ratios[k]):.2f} | {same} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------- SAC update
def measure_sac(env: str, updates: int, rounds: int, sb3: bool) -> str:
    """Interleaved rounds of every contender's updates (the order rotating each round); CPU ms
    per update (median round) and each ratio as the median of its per-round ratios: two
    contenders a round apart in time share the machine's speed at that moment, which on a
    shared host drifts by 20% from minute to minute."""
    import offpolicy_update as ou
    from cleanrl_sac import LeanRLSAC

    nets = ("task.hidden=[256,256]",)
    contenders = {
        "beyondfit `algo=sac`, eager": ou.beyondfit("sac", env, nets),
        "beyondfit `algo=sac`, `engine.compile=true`":
            ou.beyondfit("sac", env, (*nets, "engine.compile=true")),
        "CleanRL SAC by hand, eager": ou.cleanrl(env),
        "CleanRL SAC compiled the LeanRL way": ou.cleanrl(env, LeanRLSAC),
    }
    if sb3:
        contenders["SB3 SAC (`model.train`)"] = ou.sb3("sac", env)
    for run in contenders.values():
        run(20)  # warm-up, compilation included
    names = list(contenders)
    costs: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(rounds):
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            start = time.thread_time()
            contenders[name](updates)
            costs[name].append((time.thread_time() - start) / updates * 1e3)

    def ratio(name: str, base: str) -> float:
        return statistics.median(a / b for a, b in zip(costs[name], costs[base], strict=True))

    eager, cleanrl = names[0], names[2]
    lines = [f"**{env}**: SAC update, 256x256 nets, batch 256, {updates} updates x {rounds} "
             "interleaved rounds", "",
             "| contender | ms/update | x beyondfit eager | x CleanRL eager |",
             "|---|---:|---:|---:|"]
    for name in names:
        lines.append(f"| {name} | {statistics.median(costs[name]):.2f} | "
                     f"{ratio(name, eager):.2f} | {ratio(name, cleanrl):.2f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------- whole runs
E2E = {
    "`+task=regression`": ["+task=regression"],
    "`+task=cartpole task.total_env_steps=20000`":
        ["+task=cartpole", "task.total_env_steps=20000", "train.stop=null"],
    "`+task=pendulum algo=sac task.total_env_steps=4000`":
        ["+task=pendulum", "algo=sac", "task.total_env_steps=4000",
         "task.replay.learning_starts=1000"],
}


#: The floor under every row: no beyondfit, one forward and backward of a 3-layer MLP in a
#: fresh Python, eager or through a bare ``torch.compile`` (what any user of torch's compiler
#: pays per process before a first compiled step, whatever the framework around it).
FLOOR_LABEL = "floor: one forward+backward of a tiny MLP, bare `torch.compile`, no beyondfit"
FLOOR = """
import sys, torch
m = torch.nn.Sequential(torch.nn.Linear(10, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
def step(x, y):
    loss = ((m(x) - y) ** 2).mean()
    loss.backward()
    return loss
f = torch.compile(step) if sys.argv[1] == "compile" else step
f(torch.randn(32, 10), torch.randn(32, 1))
"""


def _timed(command: list[str], cache: str) -> float:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(command[1:])} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def _cli(args: list[str], cache: str, out: str) -> float:
    return _timed([sys.executable, "-m", "beyondfit", *args, f"hydra.run.dir={out}",
                   "plots=false", "checkpoint.every=null"], cache)


def measure_e2e(tasks: list[str]) -> str:
    """Each command eager, then compiled with a cold cache, then compiled again."""
    lines = ["**Whole runs**: wall seconds of the command, start-up included", "",
             "| command | eager | `engine.compile=true`, first run | second run |",
             "|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for i, label in enumerate(tasks):
            args = E2E[label]
            cache = str(Path(tmp) / f"cache{i}")
            eager = _cli(args, cache, f"{tmp}/eager{i}")
            first = _cli([*args, "engine.compile=true"], cache, f"{tmp}/first{i}")
            second = _cli([*args, "engine.compile=true"], cache, f"{tmp}/second{i}")
            lines.append(f"| {label} | {eager:.1f} | {first:.1f} | {second:.1f} |")
            print(lines[-1], file=sys.stderr, flush=True)
        cache = str(Path(tmp) / "floor")
        eager, first, second = (_timed([sys.executable, "-c", FLOOR, mode], cache)
                                for mode in ("eager", "compile", "compile"))
        lines.append(f"| {FLOOR_LABEL} | {eager:.1f} | {first:.1f} | {second:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="mlp,sac,e2e", help="comma list of mlp, sac, e2e")
    parser.add_argument("--sizes", default="tiny,medium")
    parser.add_argument("--repeats", type=int, default=9,
                        help="counted MLP runs per size (at 3, a medium ratio moved by +-0.03 "
                             "from one command to the next)")
    parser.add_argument("--steps-per-epoch", type=int, default=0, help="override (smoke runs)")
    parser.add_argument("--epochs", type=int, default=0, help="override (smoke runs)")
    parser.add_argument("--block", type=int, default=0,
                        help="MLP steps each contender runs per turn (0: an epoch's; 1: the "
                             "contenders alternate every step, each step on cold caches)")
    parser.add_argument("--no-lightning", action="store_true")
    parser.add_argument("--envs", default="Pendulum-v1,HalfCheetah-v5")
    parser.add_argument("--updates", type=int, default=50, help="SAC updates per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-sb3", action="store_true")
    parser.add_argument("--e2e", default=",".join(E2E), help="comma list of E2E's labels")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    parts = args.parts.split(",")
    tables = []
    if "mlp" in parts:
        lightning = not args.no_lightning and overhead.peer_installed("lightning",
                                                                      "--no-lightning")
        keys = [k for k in MLP_ROWS if k != "lightning" or lightning]
        for name in args.sizes.split(","):
            size = SIZES[name]
            size = Size(size.name, size.layers, size.batch,
                        args.steps_per_epoch or size.steps_per_epoch, args.epochs or size.epochs,
                        size.task, size.repeats)
            tables.append(measure_mlp(size, keys, args.repeats, args.block))
            print(tables[-1] + "\n", flush=True)
    if "sac" in parts:
        sb3 = not args.no_sb3 and overhead.peer_installed("stable_baselines3", "--no-sb3")
        for env in args.envs.split(","):
            tables.append(measure_sac(env, args.updates, args.rounds, sb3))
            print(tables[-1] + "\n", flush=True)
    if "e2e" in parts:
        tables.append(measure_e2e(args.e2e.split(",")))
        print(tables[-1] + "\n", flush=True)
    print(f"torch {torch.__version__}, one CPU thread on every side; thread CPU time per step "
          "(mlp: medians over runs of each run's median step, in lockstep; sac: median round, "
          "ratios the median of per-round ratios).")
    return "\n\n".join(tables)


if __name__ == "__main__":
    main()
