"""Start-up cost: from launching a process to its first optimizer step.

Each contender is a fresh ``python`` process doing the same small job (diabetes data read
with numpy, standardized; an MLP; one optimizer step on a batch of 32) and printing a stamp
right after its first optimizer step:

- ``raw script``: torch only, a hand-written step.
- ``beyondfit API``: the same script with ``Engine(...).fit(TensorBatches(...), max_steps=1)``.
- ``beyondfit CLI``: ``python -m beyondfit +task=regression train.max_steps=1`` (its own
  diabetes task), stamped by torch's global optimizer-step hook
  (``register_optimizer_step_post_hook``) installed just before the CLI's ``main()`` runs
  (importing torch first, which the CLI imports before its first step anyway).
- ``Lightning``: ``Trainer(max_steps=1)`` with no logger, checkpointing, bar or summary.
- ``import torch``: the floor every contender stands on.

Two commands that must answer without loading torch are timed to their exit:
``python -m beyondfit --help`` and a mistake (``+task=nope``, one line and status 2); the
target is under 1.5 s, and for ``--help`` at most 0.45x the CPU time of ``import torch`` to
its exit (the median over rounds of the ratio in the same round: the contenders share the
machine's load alike). A command named in ``--only`` brings ``import torch`` along.

The contenders run round-robin for ``--repeats`` rounds (after one uncounted warm-up round
that fills the page cache) and the table gives medians and the median over rounds of the
ratio to the raw script in the same round. Two clocks: the CPU time the process used until
the stamp (first: on a busy machine, time spent waiting for a core is not the program's
cost), and wall time from just before the process is spawned (what a user waits on a quiet
machine, where the two agree). "to exit" is the CPU time of the whole process (the CLI
also evaluates, writes its metrics and plots after the step).

    python bench/startup.py               # 5 rounds, markdown tables on stdout
    python bench/startup.py --repeats 3 --no-lightning
    python bench/startup.py --repeats 1 --warmup 0 --only cli,help   # a tiny smoke run
    python bench/startup.py --repeats 5 --only help      # --help against import torch alone
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

MARK = "FIRST_STEP"

# Shared by the scripts: read diabetes the way beyondfit does (no sklearn import).
_DATA = """
import importlib.util
import pathlib
import numpy as np
import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(0)
spec = importlib.util.find_spec("sklearn")
folder = pathlib.Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
x = torch.from_numpy(np.loadtxt(folder / "diabetes_data_raw.csv.gz", dtype=np.float32))
y = torch.from_numpy(np.loadtxt(folder / "diabetes_target.csv.gz", dtype=np.float32))
y = y.reshape(-1, 1)
x = (x - x.mean(0)) / x.std(0)
y = (y - y.mean(0)) / y.std(0)
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))


def stamp():
    print("FIRST_STEP", time.time(), time.process_time(), flush=True)
"""

SCRIPTS = {
    "import_torch": """
import time
import torch
print("FIRST_STEP", time.time(), time.process_time(), flush=True)
""",
    "raw": "import time\n" + _DATA + """
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
order = torch.randperm(len(x))
xs, ys = x[order], y[order]
for i in range(0, len(xs), 32):
    loss = nn.functional.mse_loss(model(xs[i : i + 32]), ys[i : i + 32])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    stamp()
    break
""",
    "api": "import time\n" + _DATA + """
from beyondfit import Callback, Engine, TensorBatches


class Stamp(Callback):
    def on_step_end(self, engine):
        if engine.global_step == 1:
            stamp()


def loss_fn(model, batch):
    features, target = batch
    return nn.functional.mse_loss(model(features), target)


engine = Engine(model, loss_fn, torch.optim.AdamW(model.parameters(), lr=1e-3),
                device="cpu", callbacks=[Stamp()])
engine.fit(TensorBatches(x, y, batch_size=32), max_steps=1, verbose=False)
""",
    "cli": """
import sys
import time

# What `python -m beyondfit` does first (beyondfit/__main__.py): the garbage collector paused
# until the run is built (beyondfit/cli/startup_gc.py), torch's import included.
from beyondfit.cli import startup_gc

startup_gc.pause()
from torch.optim.optimizer import register_optimizer_step_post_hook

_seen = []


def _stamp(optimizer, args, kwargs):
    if not _seen:  # the first optimizer step of the run, whichever optimizer makes it
        _seen.append(True)
        print("FIRST_STEP", time.time(), time.process_time(), flush=True)


register_optimizer_step_post_hook(_stamp)
# A fresh run directory per launch (a directory that holds a run is refused).
run_dir = f"{RUN_DIR}/{time.time_ns()}"
sys.argv = ["beyondfit", "+task=regression", "train.max_steps=1", "hydra.run.dir=" + run_dir]
from beyondfit.cli.app import main

main()
""",
    "lightning": "import time\n" + _DATA + """
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = model

    def training_step(self, batch, batch_idx):
        features, target = batch
        return nn.functional.mse_loss(self.model(features), target)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=1e-3)


class Stamp(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 1:
            stamp()


trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[Stamp()])
trainer.fit(Module(), DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True))
""",
}

LABELS = {
    "import_torch": "`import torch` alone (the floor)",
    "raw": "raw script (torch only)",
    "api": "beyondfit Python API",
    "cli": "beyondfit CLI `+task=regression train.max_steps=1`",
    "lightning": "Lightning Trainer (minimal config)",
}
TARGETS = {"api": 1.10, "cli": 1.25}
# Commands timed to their exit (no first step): argv after ``python -m beyondfit``, the exit
# status they must end with, a label and the target in seconds.
COMMANDS = {
    "help": (["--help"], 0, "`python -m beyondfit --help`"),
    "mistake": (["+task=nope"], 2, "a mistake: `python -m beyondfit +task=nope`"),
}
COMMAND_TARGET_S = 1.5
#: A command's CPU time to its exit, at most this times ``import torch``'s (issue 47).
COMMAND_TORCH_TARGETS = {"help": 0.45}


@dataclass
class Samples:
    wall: list[float] = field(default_factory=list)  # spawn -> first step, seconds
    cpu: list[float] = field(default_factory=list)  # the process's CPU time at its stamp
    exit: list[float] = field(default_factory=list)  # spawn -> process exit, seconds
    exit_cpu: list[float] = field(default_factory=list)  # the process's CPU time in all
    wall_ratio: list[float] = field(default_factory=list)
    cpu_ratio: list[float] = field(default_factory=list)
    torch_ratio: list[float] = field(default_factory=list)  # exit CPU / import torch's, a round


def run_once(key: str, folder: Path) -> tuple[float, float, float, float]:
    """Launch one contender: wall and CPU time to its first step, wall and CPU to its exit
    (a command of ``COMMANDS``: its exit, four times)."""
    if key in COMMANDS:
        args, status, _ = COMMANDS[key]
        command = [sys.executable, "-m", "beyondfit", *args]
    else:
        command = [sys.executable, str(folder / f"start_{key}.py")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        check=False,
    )
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_all = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if key in COMMANDS:
        if proc.returncode != status:
            raise RuntimeError(f"{command} exited {proc.returncode}, not {status}:\n{proc.stderr}")
        return ended - start, cpu_all, ended - start, cpu_all
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            _, t, cpu = line.split()
            return float(t) - start, float(cpu), ended - start, cpu_all
    raise RuntimeError(
        f"{key} printed no {MARK} line (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    )


def write_scripts(folder: Path, keys: list[str]) -> None:
    for key in (k for k in keys if k in SCRIPTS):
        text = textwrap.dedent(SCRIPTS[key])
        if key == "cli":
            text = f"RUN_DIR = {str(folder / 'runs')!r}\n" + text
        # "start_": a script named lightning.py would shadow the lightning package.
        (folder / f"start_{key}.py").write_text(text)


def measure(keys: list[str], repeats: int, warmup: int = 1) -> dict[str, Samples]:
    """Round-robin launches; per-round samples and ratios to the raw script."""
    out = {key: Samples() for key in keys}
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        folder = Path(tmp)
        write_scripts(folder, keys)
        for r in range(warmup + repeats):
            shift = r % len(keys)
            got = {key: run_once(key, folder) for key in keys[shift:] + keys[:shift]}
            if r < warmup:
                continue
            for key, (wall, cpu, ended, cpu_all) in got.items():
                s = out[key]
                s.wall.append(wall)
                s.cpu.append(cpu)
                s.exit.append(ended)
                s.exit_cpu.append(cpu_all)
                if "raw" in got:
                    s.wall_ratio.append(wall / got["raw"][0])
                    s.cpu_ratio.append(cpu / got["raw"][1])
                if "import_torch" in got:
                    s.torch_ratio.append(cpu_all / got["import_torch"][3])
    return out


def table(results: dict[str, Samples]) -> str:
    med = statistics.median

    def ratio(values: list[float]) -> str:
        return f"{med(values):.2f}" if values else "–"

    lines = [
        "| launch -> first optimizer step | CPU s | × raw (CPU) | wall s | × raw (wall) "
        "| to exit: CPU s | to exit: wall s | target (× raw) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for key, s in results.items():
        if key in COMMANDS:
            continue
        target = f"<= {TARGETS[key]:.2f}" if key in TARGETS else ""
        lines.append(
            f"| {LABELS[key]} | {med(s.cpu):.2f} | {ratio(s.cpu_ratio)} | {med(s.wall):.2f} "
            f"| {ratio(s.wall_ratio)} | {med(s.exit_cpu):.2f} | {med(s.exit):.2f} | {target} |"
        )
    commands = [key for key in results if key in COMMANDS]
    if commands:
        lines += [
            "",
            "| command, launch -> exit (torch never loaded) | CPU s | × `import torch` (CPU) "
            "| wall s | target |",
            "|---|---:|---:|---:|---|",
        ]
        for key in commands:
            s = results[key]
            target = f"< {COMMAND_TARGET_S} s"
            if key in COMMAND_TORCH_TARGETS:
                target += f", <= {COMMAND_TORCH_TARGETS[key]:.2f}x `import torch`"
            lines.append(f"| {COMMANDS[key][2]} | {med(s.exit_cpu):.2f} "
                         f"| {ratio(s.torch_ratio)} | {med(s.exit):.2f} | {target} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Samples]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="counted rounds")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted rounds first")
    parser.add_argument("--only", default="",
                        help="comma list of " + ", ".join([*SCRIPTS, *COMMANDS]))
    parser.add_argument("--no-lightning", action="store_true", help="leave Lightning out")
    args = parser.parse_args(argv)
    keys = [*SCRIPTS, *COMMANDS]
    if args.only:
        wanted = {"raw", *args.only.split(",")}
        if wanted & set(COMMANDS):  # a command's time is read against import torch's
            wanted.add("import_torch")
        keys = [k for k in keys if k in wanted]
    if args.no_lightning:
        keys = [k for k in keys if k != "lightning"]
    results = measure(keys, args.repeats, args.warmup)
    print(table(results))
    print(
        f"\nmedians over {args.repeats} round-robin rounds after {args.warmup} warm-up; "
        "× raw: median over rounds of the ratio to the raw script in the same round. "
        f"python {sys.version.split()[0]}; one torch thread everywhere."
    )
    return results


if __name__ == "__main__":
    main()
