"""Per-step overhead of beyondfit's Engine against a hand-written PyTorch loop, and Lightning.

Every contender trains the same model (same initial weights) on the same data in the same
batch order with Adam and clipping by global norm; the engine rows must end with parameters
and per-epoch means bitwise equal to their raw loop's, and the table says whether they did.

How it is timed, so that a busy machine cannot tilt the result: all contenders of a size
train *at the same time, in lockstep*. Each runs its own loop in its own thread, and a baton
lets exactly one of them run at a time, passed on after every optimizer step: raw step 1,
engine step 1, Lightning step 1, raw step 2, ... Whatever the machine is doing in a given
millisecond, every contender's step k saw the same. A step's cost is the thread's CPU time
from receiving the baton to the end of its step (``--clock wall`` for wall time), so it
covers fetching the batch, the step, the bookkeeping and, for the first step of an epoch,
the epoch boundary. The table gives the median step per contender, and the ratios to the
raw loops of the same run; ``--repeats`` runs (after one uncounted warm-up run) with the
order of the ring rotated, medians over runs. torch uses one CPU thread on every side.

    python bench/overhead.py                         # both sizes, markdown tables on stdout
    python bench/overhead.py --sizes tiny --repeats 3 --no-lightning

Only the training loop is timed, never building the model, the optimizer or a Trainer:
start-up is ``bench/startup.py``'s job. Progress bars go to stderr (``2>/dev/null`` hides
them); Lightning's tqdm bar redraws every step by default, beyondfit's at most every 0.5 s.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

from beyondfit import Callback, Engine, TensorBatches
from beyondfit.core.console import ConsoleLogger

LR = 1e-3
CLIP_NORM = 1.0
SEED = 0


@dataclass(frozen=True)
class Size:
    """One benchmark problem: an MLP, a batch size and how long a run is."""

    name: str
    layers: tuple[int, ...]
    batch: int
    steps_per_epoch: int
    epochs: int
    task: str  # "regression" (MSE + MAE) or "classification" (cross-entropy + accuracy)
    repeats: int  # default number of counted runs


SIZES = {
    "tiny": Size("tiny", (5, 64, 64, 1), 64, steps_per_epoch=50, epochs=8,
                 task="regression", repeats=7),
    "medium": Size("medium", (784, 512, 512, 10), 256, steps_per_epoch=10, epochs=8,
                   task="classification", repeats=7),
}  # fmt: skip


# ---------------------------------------------------------------------- the problem
def make_model(layers: tuple[int, ...]) -> nn.Sequential:
    """Linear/ReLU stack ``layers[0] -> ... -> layers[-1]``."""
    mods: list[nn.Module] = []
    for i in range(len(layers) - 1):
        mods.append(nn.Linear(layers[i], layers[i + 1]))
        if i < len(layers) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def make_data(size: Size, seed: int = SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic features and targets: ``steps_per_epoch`` full batches."""
    g = torch.Generator().manual_seed(seed)
    n = size.batch * size.steps_per_epoch
    x = torch.randn(n, size.layers[0], generator=g)
    if size.task == "regression":
        w = torch.randn(size.layers[0], size.layers[-1], generator=g)
        y = torch.sin(x @ w) + 0.1 * torch.randn(n, size.layers[-1], generator=g)
    else:
        y = torch.randint(0, size.layers[-1], (n,), generator=g)
    return x, y


def make_loss_fn(task: str) -> Callable[[nn.Module, Any], dict[str, torch.Tensor]]:
    """The closure every contender computes: the loss plus one metric."""
    if task == "regression":

        def loss_fn(model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
            x, y = batch
            err = model(x) - y
            return {"loss": (err * err).mean(), "mae": err.abs().mean()}

    else:

        def loss_fn(model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
            x, y = batch
            logits = model(x)
            acc = (logits.argmax(1) == y).float().mean()
            return {"loss": F.cross_entropy(logits, y), "acc": acc}

    return loss_fn


class EpochShuffle(Sampler[int]):
    """A fresh permutation per pass, seeded by the pass number (TensorBatches' order).

    ``shuffle=True`` would do the same job, but its generator is a stream: how far it has
    run depends on whether the loop asked for one batch past the end (a raw loop does,
    Lightning does not), so from the second epoch on the two would see other batches.
    """

    def __init__(self, n: int, seed: int = SEED) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        self.epoch += 1
        return iter(torch.randperm(self.n, generator=g).tolist())


@dataclass
class Problem:
    """What every contender starts from: data, initial weights, the closure."""

    size: Size
    x: torch.Tensor
    y: torch.Tensor
    init: dict[str, torch.Tensor]
    loss_fn: Callable[[nn.Module, Any], dict[str, torch.Tensor]]

    @classmethod
    def build(cls, size: Size) -> Problem:
        x, y = make_data(size)
        torch.manual_seed(SEED)
        init = {k: v.clone() for k, v in make_model(size.layers).state_dict().items()}
        return cls(size, x, y, init, make_loss_fn(size.task))

    def model(self) -> nn.Sequential:
        model = make_model(self.size.layers)
        model.load_state_dict(self.init)
        return model

    def loader(self) -> DataLoader:
        """A fresh, identically ordered DataLoader (batches in TensorBatches' order)."""
        dataset = TensorDataset(self.x, self.y)
        return DataLoader(dataset, batch_size=self.size.batch, sampler=EpochShuffle(len(dataset)))

    def batches(self) -> TensorBatches:
        return TensorBatches(self.x, self.y, batch_size=self.size.batch, seed=SEED)


# ---------------------------------------------------------------------- lockstep timing
class Baton:
    """Round-robin hand-over between contender threads: exactly one runs at any time."""

    def __init__(self, n: int, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.turn = [threading.Semaphore(0) for _ in range(n)]
        self.ring = list(range(n))
        self.lock = threading.Lock()

    def _next(self, i: int) -> int | None:
        if not self.ring:
            return None
        if i in self.ring:
            return self.ring[(self.ring.index(i) + 1) % len(self.ring)]
        return self.ring[0]

    def wait(self, i: int) -> None:
        self.turn[i].acquire()

    def hand_over(self, i: int) -> None:
        with self.lock:
            nxt = self._next(i)
        if nxt != i and nxt is not None:
            self.turn[nxt].release()
            self.turn[i].acquire()

    def leave(self, i: int) -> None:
        with self.lock:
            nxt = self._next(i)
            self.ring.remove(i)
        if nxt != i and nxt is not None:
            self.turn[nxt].release()


class Timer:
    """What a contender calls: ``begin()`` as its loop starts, ``tick()`` after each step.

    Alone (``baton=None``) it only reads the clock; in lockstep it also passes the baton,
    after every ``block`` steps (1: after each).
    """

    def __init__(self, clock: Callable[[], float], baton: Baton | None = None, me: int = 0,
                 block: int = 1):
        self.clock, self.baton, self.me, self.block = clock, baton, me, block
        self.costs: list[float] = []  # per optimizer step, seconds
        self._since = 0.0

    def begin(self) -> None:
        self._since = self.clock()

    def tick(self) -> None:
        self.costs.append(self.clock() - self._since)
        if self.baton is not None and len(self.costs) % self.block == 0:
            self.baton.hand_over(self.me)
        self._since = self.clock()


@dataclass
class Result:
    """One run of one contender: per-step costs and the numbers it ended with."""

    costs: list[float]
    params: dict[str, torch.Tensor]
    history: list[dict[str, float]] = field(default_factory=list)


Run = Callable[["Problem", Timer], Result]


def run_lockstep(problem: Problem, runs: list[Run], clock: Callable[[], float],
                 block: int = 1) -> list[Result]:
    """Run every contender at once, ``block`` optimizer steps each in turn (1: one step)."""
    baton = Baton(len(runs), clock)
    results: list[Result | None] = [None] * len(runs)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        baton.wait(i)
        try:
            torch.set_num_threads(1)
            results[i] = runs[i](problem, Timer(clock, baton, i, block))
        except BaseException as exc:  # surfaced below, after every thread has finished
            errors.append(exc)
        finally:
            baton.leave(i)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(runs))]
    for t in threads:
        t.start()
    baton.turn[0].release()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


# ---------------------------------------------------------------------- raw PyTorch
def _raw_loop(p: Problem, timer: Timer, epoch_batches: Callable[[int], Any]) -> Result:
    """The hand-written loop: closure, backward, clip, step, detached per-epoch sums."""
    model = p.model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = p.loss_fn
    params = list(model.parameters())
    history: list[dict[str, float]] = []
    model.train()
    timer.begin()
    for epoch in range(p.size.epochs):
        sums: dict[str, torch.Tensor] = {}
        n = 0
        for batch in epoch_batches(epoch):
            out = loss_fn(model, batch)
            out["loss"].backward()
            torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
            opt.step()
            opt.zero_grad(set_to_none=True)
            for k, v in out.items():  # running sums on the device: no host sync per step
                if k in sums:
                    sums[k] += v.detach()
                else:
                    sums[k] = v.detach().clone()
            n += 1
            timer.tick()
        history.append({k: (v / n).item() for k, v in sums.items()})
    return Result(timer.costs, _params(model), history)


def raw_dataloader(p: Problem, timer: Timer) -> Result:
    loader = p.loader()
    return _raw_loop(p, timer, lambda epoch: loader)


def raw_slicing(p: Problem, timer: Timer) -> Result:
    """Slices of tensors permuted once per epoch (the order TensorBatches uses)."""
    x, y, bs = p.x, p.y, p.size.batch

    def epoch_batches(epoch: int) -> Any:
        g = torch.Generator().manual_seed(SEED * 1_000_003 + epoch)
        order = torch.randperm(len(x), generator=g)
        xs, ys = x[order], y[order]
        for i in range(0, len(xs), bs):
            yield xs[i : i + bs], ys[i : i + bs]

    return _raw_loop(p, timer, epoch_batches)


# ---------------------------------------------------------------------- beyondfit
class Tick(Callback):
    """Hands the engine's steps to the timer."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer

    def on_fit_start(self, engine: Engine) -> None:
        self.timer.begin()

    def on_step_end(self, engine: Engine) -> None:
        self.timer.tick()


def _engine(p: Problem, timer: Timer, data: Any, callbacks: Any = (), **options: Any) -> Result:
    model = p.model()
    engine = Engine(
        model,
        p.loss_fn,
        torch.optim.Adam(model.parameters(), lr=LR),
        clip_norm=CLIP_NORM,
        device="cpu",
        callbacks=[*callbacks, Tick(timer)],
        **options,
    )
    history = engine.fit(data, epochs=p.size.epochs, verbose=False)
    return Result(timer.costs, _params(model), history)


def engine_dataloader(p: Problem, timer: Timer) -> Result:
    return _engine(p, timer, p.loader())


def engine_batches(p: Problem, timer: Timer) -> Result:
    return _engine(p, timer, p.batches())


def engine_batches_nosync(p: Problem, timer: Timer) -> Result:
    return _engine(p, timer, p.batches(), on_nonfinite="ignore")


def progress_callbacks(epochs: int) -> tuple[str, list[Any]]:
    """beyondfit's progress bar (it prints the epoch lines too) where the package has one."""
    try:
        from beyondfit.core.console import progress_callback  # built alongside this benchmark
    except ImportError:
        return "per-epoch console lines", [ConsoleLogger(epochs=epochs)]
    return "progress bar + epoch lines", [progress_callback(epochs, bar=True)]


def engine_bar(p: Problem, timer: Timer) -> Result:
    return _engine(p, timer, p.loader(), callbacks=progress_callbacks(p.size.epochs)[1])


# ---------------------------------------------------------------------- Lightning
def peer_installed(module: str, flag: str) -> bool:
    """Whether a peer's package imports; if not, one line on stderr says its rows are left out
    and how to get them (the ``bench`` extra) or to leave them out quietly (``flag``)."""
    import importlib.util

    if importlib.util.find_spec(module) is not None:
        return True
    print(f"{module} is not installed: its rows are left out (pip install -e \".[bench]\" "
          f"adds them; {flag} leaves them out without this note)", file=sys.stderr)
    return False


def _lightning(p: Problem, timer: Timer, log: bool) -> Result:
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            out = p.loss_fn(self.model, batch)
            if log:
                self.log_dict(out, prog_bar=True)
            return out["loss"]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.model.parameters(), lr=LR)

    class LightningTick(L.Callback):
        def on_train_start(self, trainer: Any, module: Any) -> None:
            timer.begin()

        def on_train_batch_end(self, *args: Any) -> None:
            timer.tick()

    model = p.model()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=p.size.epochs,
        gradient_clip_val=CLIP_NORM,
        gradient_clip_algorithm="norm",
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=log,
        callbacks=[LightningTick()],
    )
    trainer.fit(Module(model), p.loader())
    return Result(timer.costs, _params(model))


def lightning_minimal(p: Problem, timer: Timer) -> Result:
    return _lightning(p, timer, log=False)


def lightning_log_bar(p: Problem, timer: Timer) -> Result:
    return _lightning(p, timer, log=True)


# ---------------------------------------------------------------------- the table
def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Bitwise-equal state dicts."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def same_history(a: list[dict[str, float]], b: list[dict[str, float]]) -> bool:
    """Equal per-epoch means for every key the raw loop reports (Lightning reports none)."""
    if not a or not b:
        return True
    return len(a) == len(b) and all(
        all(ra.get(k) == v for k, v in rb.items()) for ra, rb in zip(a, b)
    )


@dataclass(frozen=True)
class Contender:
    label: str
    run: Run
    reference: str | None  # the raw loop with the same data pipeline
    lightning: bool = False


def contenders(bar_label: str) -> dict[str, Contender]:
    """Rows of the table, in order; the keys name them on the command line (``--only``)."""
    return {
        "raw_dataloader": Contender("raw loop, DataLoader", raw_dataloader, None),
        "raw_slicing": Contender("raw loop, in-memory tensor slicing", raw_slicing, None),
        "engine_dataloader": Contender(
            "engine, DataLoader (loss + metric tracked)", engine_dataloader, "raw_dataloader"
        ),
        "engine_batches": Contender(
            "engine, TensorBatches (loss + metric tracked)", engine_batches, "raw_slicing"
        ),
        "engine_batches_nosync": Contender(
            "engine, TensorBatches, on_nonfinite=ignore", engine_batches_nosync, "raw_slicing"
        ),
        "engine_bar": Contender(
            f"engine, DataLoader + {bar_label}", engine_bar, "raw_dataloader"
        ),
        "lightning_minimal": Contender(
            "Lightning Trainer, minimal (no logger/ckpt/bar)", lightning_minimal,
            "raw_dataloader", lightning=True,
        ),
        "lightning_log_bar": Contender(
            "Lightning Trainer, self.log + tqdm bar", lightning_log_bar, "raw_dataloader",
            lightning=True,
        ),
    }  # fmt: skip


@dataclass
class Row:
    """One contender at one size: a sample per counted run."""

    label: str
    step: list[float] = field(default_factory=list)  # median step, seconds
    ratio: list[float] = field(default_factory=list)  # median step / raw DataLoader's
    own: list[float] = field(default_factory=list)  # median step / own raw loop's
    total: list[float] = field(default_factory=list)  # all steps' sum / raw DataLoader's
    same: bool | None = None  # numbers equal to the own raw loop's (None: is a raw loop)


def measure(
    size: Size,
    rows: dict[str, Contender],
    repeats: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.thread_time,
) -> dict[str, Row]:
    """``warmup + repeats`` lockstep runs, the ring rotated each time."""
    problem = Problem.build(size)
    out = {key: Row(c.label) for key, c in rows.items()}
    keys = list(rows)
    for r in range(warmup + repeats):
        shift = r % len(keys)
        order = keys[shift:] + keys[:shift]
        gc.collect()
        # Bars (beyondfit's and Lightning's) write to stdout: keep the tables clean.
        with contextlib.redirect_stdout(sys.stderr):
            got = dict(zip(order, run_lockstep(problem, [rows[k].run for k in order], clock)))
        base = got.get("raw_dataloader")
        for key, c in rows.items():
            res, row = got[key], out[key]
            ref = got.get(c.reference) if c.reference else None
            if ref is not None:
                same = same_params(res.params, ref.params) and same_history(
                    res.history, ref.history
                )
                row.same = same if row.same is None else (row.same and same)
            if r < warmup:
                continue
            step = statistics.median(res.costs)
            row.step.append(step)
            if base is not None:
                row.ratio.append(step / statistics.median(base.costs))
                row.total.append(sum(res.costs) / sum(base.costs))
            if ref is not None:
                row.own.append(step / statistics.median(ref.costs))
    return out


def _med(values: list[float], scale: float = 1.0) -> str:
    return f"{statistics.median(values) * scale:.3f}" if values else "–"


def table(size: Size, rows: dict[str, Row]) -> str:
    """One markdown table per size."""
    shape = "-".join(map(str, size.layers))
    lines = [
        f"**{size.name}**: MLP {shape}, batch {size.batch}, "
        f"{size.steps_per_epoch} steps x {size.epochs} epochs per run",
        "",
        "| contender | ms/step | × raw DataLoader | × own raw loop | × raw DataLoader, "
        "all steps | same numbers as raw |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for row in rows.values():
        same = "reference" if row.same is None else ("yes" if row.same else "**NO**")
        lines.append(
            f"| {row.label} | {_med(row.step, 1e3)} | {_med(row.ratio)} | {_med(row.own)} "
            f"| {_med(row.total)} | {same} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- work counts
def count_work(problem: Problem, run: Run) -> tuple[float, float, float]:
    """Deterministic work per optimizer step: (torch ops, Python calls, C calls).

    Every op that reaches torch's dispatcher is counted by a dispatch mode, every function
    call by a profile hook, over a whole run (epoch boundaries included). Unlike times,
    these do not depend on how busy the machine is.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            Ops.n += 1
            return func(*args, **(kwargs or {}))

    calls = {"call": 0, "c_call": 0}

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event in calls:
            calls[event] += 1

    timer = Timer(time.perf_counter)
    with Ops():
        steps = len(run(problem, timer).costs)
    sys.setprofile(hook)
    try:
        run(problem, Timer(time.perf_counter))
    finally:
        sys.setprofile(None)
    return Ops.n / steps, calls["call"] / steps, calls["c_call"] / steps


def count_table(size: Size, rows: dict[str, Contender]) -> str:
    """Markdown: work per step of each contender, and its excess over its raw loop."""
    problem = Problem.build(size)
    with contextlib.redirect_stdout(sys.stderr):
        work = {key: count_work(problem, c.run) for key, c in rows.items()}
    lines = [
        f"**{size.name}**: work per optimizer step (whole run, {size.epochs} epochs)",
        "",
        "| contender | torch ops | Python calls | C calls | vs own raw loop |",
        "|---|---:|---:|---:|---|",
    ]
    for key, c in rows.items():
        ops, py, cc = work[key]
        extra = ""
        if c.reference in work:
            r_ops, r_py, r_cc = work[c.reference]
            extra = f"{ops - r_ops:+.1f} ops, {py - r_py:+.1f} Python, {cc - r_cc:+.1f} C calls"
        lines.append(f"| {c.label} | {ops:.1f} | {py:.1f} | {cc:.1f} | {extra} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict[str, Row]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="tiny,medium", help="comma list of tiny, medium")
    parser.add_argument("--repeats", type=int, default=0,
                        help="counted runs per size (default: 7)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs first")
    parser.add_argument("--only", default="", help="comma list of contender keys")
    parser.add_argument("--no-lightning", action="store_true", help="leave Lightning out")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="thread CPU time (default) or wall time per step")
    parser.add_argument("--steps-per-epoch", type=int, default=0, help="override (smoke runs)")
    parser.add_argument("--epochs", type=int, default=0, help="override (smoke runs)")
    parser.add_argument("--count", action="store_true",
                        help="count torch ops and Python calls per step instead of timing")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # both sides: tiny models are fastest, and least noisy, on one
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    bar_label, _ = progress_callbacks(1)
    rows = contenders(bar_label)
    if args.only:
        keep = {"raw_dataloader", *args.only.split(",")}
        rows = {k: v for k, v in rows.items() if k in keep}
    if args.no_lightning or not peer_installed("lightning", "--no-lightning"):
        rows = {k: v for k, v in rows.items() if not v.lightning}
    results: dict[str, dict[str, Row]] = {}
    for name in args.sizes.split(","):
        size = SIZES[name]
        if args.steps_per_epoch or args.epochs:
            size = Size(size.name, size.layers, size.batch,
                        args.steps_per_epoch or size.steps_per_epoch,
                        args.epochs or size.epochs, size.task, size.repeats)  # fmt: skip
        if args.count:
            print(count_table(size, rows) + "\n", flush=True)
            continue
        results[name] = measure(size, rows, args.repeats or size.repeats, args.warmup, clock)
        print(table(size, results[name]) + "\n", flush=True)
    if args.count:
        return results
    print(
        "Contenders run in lockstep (one optimizer step each in turn). ms/step: median step "
        "cost, median over runs; × columns: ratios within a run, median over runs; all steps: "
        "sum of step costs (epoch boundaries included). "
        f"{args.repeats or 'default'} runs after {args.warmup} warm-up; clock: "
        + ("CPU time of the contender's thread" if args.clock == "cpu" else "wall time")
        + f". torch {torch.__version__}, torch.set_num_threads(1) on every side; "
        f"Adam lr {LR}; clip_grad_norm {CLIP_NORM}."
    )
    return results


if __name__ == "__main__":
    main()
