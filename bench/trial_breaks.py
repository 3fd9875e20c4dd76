"""Issue 29's adversarial trial, re-run: every break it listed, and its obvious neighbours.

The trial ran 323 adversarial cases against the command line and the API; 62 broke (a raw
traceback, a run that went on with exit 0 on state it should have refused, a silent hang, a
second line with no path). Its list is not kept; this catalogue rebuilds each listed break by
its category and adds the cases next to it. Each case runs as an adversarial user runs it:
``python -m beyondfit ...`` (``beyondfit.compare``, ``beyondfit.play``) or a short API script,
in a fresh process, from a temporary directory outside the checkout.

What each case must do (its "expected" column):

- ``refused``: exit status 2, exactly one line on stderr (``beyondfit...: error: ...``,
  naming what was wrong), no traceback, and every watched file byte-identical afterwards
  (a doctored checkpoint: its SHA-256 before and after; the run directory it sits in: every
  file but the log, the lock and ``.hydra/``).
- ``runs``: exit status 0, no traceback, and the case's own check of the result (the run
  trained what it should, the table came out).
- ``stopped``: a signal's status (130 for SIGINT, 143 for SIGTERM), one line (a signal that
  lands while training may say three: it finishes the step, saves a checkpoint, and gives the
  resume command), no traceback, and nothing written lost (every checkpoint there loads).

A full disk is a small tmpfs the run's directory is on (``unshare -Urm``: a mount namespace
of the case's own; skipped where that is not allowed). Every process is held to
:data:`MEMORY` of address space, so a size that escaped the bounds cannot take the machine.

A case that does anything else is a break; the script prints the markdown table and exits 1
when there is one.

    python bench/trial_breaks.py                        # the whole catalogue (~10 min)
    python bench/trial_breaks.py --small                # one case per kind (~1 min)
    python bench/trial_breaks.py --only sac-data-none,compare-result-fifo
    python bench/trial_breaks.py --out bench/results/trial-breaks.md

Off-policy checkpoints are doctored the way the trial did: loaded, edited, and sealed again
with :func:`beyondfit.core.state.serialization.atomic_save` (the checksum is integrity, not
authenticity), in a copy of a tiny run stopped after a middle checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["device=cpu", "progress.bar=false", "plots=false"]
# Tiny off-policy runs: SAC on Pendulum-v1 (one env, 200-step episodes), DQN on CartPole-v1.
OFFPOLICY = {
    "sac": ["+task=pendulum", "algo=sac", "task.total_env_steps=400", "task.hidden=[8]",
            "task.replay.learning_starts=100", "task.replay.batch_size=16",
            "task.eval_every_env_steps=100000", "task.eval_episodes=1",
            "task.confirm_episodes=0", "checkpoint.every=50", *QUIET],
    "dqn": ["+task=cartpole", "algo=dqn", "task.total_env_steps=600", "task.hidden=[8]",
            "task.replay.learning_starts=100", "task.replay.train_freq=4",
            "task.replay.gradient_steps=1", "task.replay.batch_size=16",
            "task.eval_every_env_steps=100000", "task.eval_episodes=1",
            "task.confirm_episodes=0", "checkpoint.every=20", *QUIET],
}
# The checkpoint a doctored resume starts from: SAC's step 150 is 250 env steps, 50 into its
# second episode; its step 100 is 200 env steps, the first episode just ended. DQN's step 60.
MIDDLE = {"sac": 150, "sac-episode-end": 100, "dqn": 60}
#: The address space every process of the trial may use (RLIMIT_AS, as ``ulimit -v``).
MEMORY = 8 << 30
REGRESSION = ["+task=regression", "train.epochs=2", "checkpoint.every=5", *QUIET]


# ------------------------------------------------------------------------------- one case
@dataclass
class Outcome:
    """What a case did: its exit status and output, and what it left."""

    code: int | None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    unchanged: bool | None = None  # every watched file byte-identical (None: none watched)
    problem: str = ""  # what the case's own check of the result found wrong
    skipped: str = ""  # why the case could not be tried here (no tmpfs to fill)


@dataclass
class Case:
    """One adversarial input: ``run(trial)`` does it and reports the :class:`Outcome`."""

    name: str
    category: str
    expect: str  # "refused", "runs" or "stopped"
    run: Callable[[Trial], Outcome]
    small: bool = False  # in the --small set (one case of each kind)
    says: tuple[str, ...] = ()  # what its one line must name (the key, the file)
    lines: int = 1  # at most this many lines on stderr (an interrupt in training says 3)

    def judge(self, out: Outcome) -> str:
        """``""`` when the case held (or was skipped), else why it broke."""
        if out.skipped:
            return ""
        said = [line for line in out.stderr.splitlines() if line.strip()]
        if "Traceback" in out.stderr + out.stdout:
            return "a traceback"
        if out.code is None:
            return "did not end (killed after its time limit)"
        if out.problem:
            return out.problem
        if out.unchanged is False:
            return "a watched file changed"
        if self.expect == "runs":
            return "" if out.code == 0 else f"exit {out.code}, not a correct run"
        wanted = (2,) if self.expect == "refused" else (130, 143)
        if out.code not in wanted:
            return f"exit {out.code}, not {' or '.join(map(str, wanted))}"
        if not 1 <= len(said) <= self.lines:
            return f"{len(said)} lines on stderr, not {'one' if self.lines == 1 else self.lines}"
        if not all(line.startswith("beyondfit") for line in said):
            return "a line that is not beyondfit's own"
        if self.expect == "refused" and ": error: " not in said[-1]:
            return "its line is no error line"
        missing = [word for word in self.says if word not in said[-1]]
        return f"its line does not name {', '.join(missing)}" if missing else ""


def line_count(out: Outcome) -> int:
    return len([line for line in out.stderr.splitlines() if line.strip()])


def last_line(out: Outcome, work: Path) -> str:
    """The last line on stderr, a case's own folder shown as ``$CASE``, cut at 230 characters."""
    said = [line.strip() for line in out.stderr.splitlines() if line.strip()]
    line = re.sub(re.escape(str(work)) + r"/\d{3}-[\w-]+", "$CASE", said[-1] if said else "")
    line = line.replace(str(work), "$WORK").replace("|", "\\|").replace("`", "'")
    return line if len(line) <= 230 else line[:227] + "..."


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(run: Path) -> dict[str, str]:
    """The SHA-256 of each file of a run directory but its log, lock and Hydra records."""
    return {str(p.relative_to(run)): sha256(p) for p in sorted(run.rglob("*"))
            if p.is_file() and ".hydra" not in p.parts
            and p.name not in ("beyondfit.log", ".beyondfit.lock")}


# ------------------------------------------------------------------------------- the trial
class Trial:
    """The work directory, the environment every process gets, and the tiny runs the cases
    start from (each made once, when a case first needs it)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
            "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self._sources: dict[str, Path] = {}
        self._count = 0

    def folder(self, name: str) -> Path:
        self._count += 1
        path = self.work / f"{self._count:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def process(self, command: list[str], cwd: Path, *, timeout: float = 300,
                limit_memory: int | None = MEMORY, limit_file: int | None = None,
                env: dict[str, str] | None = None) -> Outcome:
        """Run ``command``; ``limit_memory``/``limit_file``: RLIMIT_AS / RLIMIT_FSIZE bytes
        (every process is held to :data:`MEMORY` of address space: a case that allocates
        without bound must not take the machine with it)."""

        def limits() -> None:
            if limit_memory:
                resource.setrlimit(resource.RLIMIT_AS, (limit_memory, limit_memory))
            if limit_file:
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file, limit_file))

        start = time.monotonic()
        proc = subprocess.Popen(command, cwd=cwd, env=env or self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=limits, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            code = None
        return Outcome(code, stdout, stderr, time.monotonic() - start)

    def cli(self, *args: str, cwd: Path, module: str = "beyondfit", **kw: Any) -> Outcome:
        return self.process([sys.executable, "-m", module, *args], cwd, **kw)

    def script(self, source: str, cwd: Path, *args: str, **kw: Any) -> Outcome:
        """A user's API script: a BeyondfitError it catches is printed as the CLI would."""
        wrapped = ("import sys\nfrom beyondfit.core.errors import BeyondfitError\ntry:\n"
                   + "".join(f"    {line}\n" for line in source.strip().splitlines())
                   + "except BeyondfitError as exc:\n"
                   "    print(f'beyondfit: error: {exc}', file=sys.stderr)\n    sys.exit(2)\n")
        return self.process([sys.executable, "-c", wrapped, *args], cwd, **kw)

    # ---------------------------------------------------------------- the runs cases start from
    def source(self, kind: str) -> Path:
        """A finished tiny run of ``kind`` (``sac``, ``dqn``, ``regression``), made once."""
        if kind not in self._sources:
            run = self.work / "sources" / kind
            args = OFFPOLICY[kind] if kind in OFFPOLICY else REGRESSION
            done = self.cli(*args, "checkpoint.keep=100", f"hydra.run.dir={run}",
                            cwd=self.work)
            if done.code != 0:
                raise RuntimeError(f"the {kind} source run failed: {done.stderr[-2000:]}")
            self._sources[kind] = run
        return self._sources[kind]

    def stopped_run(self, kind: str, name: str, at: int | None = None) -> Path:
        """A copy of ``kind``'s run as if killed after its checkpoint of step ``at``: the
        later checkpoints and the final record gone."""
        at = MIDDLE[kind] if at is None else at
        run = self.folder(name) / "run"
        shutil.copytree(self.source(kind.split("-")[0]), run)
        (run / "result.json").unlink(missing_ok=True)
        for path in (run / "checkpoints").glob("*.pt"):
            if path.name == "best.pt" or int(path.stem.split("-")[1]) > at:
                path.unlink()
        return run


def newest(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("step-*.pt"))[-1]


# ------------------------------------------------------------------------------- case makers
def doctored(kind: str, edit: Callable[[dict[str, Any]], None], at: str | None = None
             ) -> Callable[[Trial], Outcome]:
    """Resume a stopped ``kind`` run whose newest checkpoint ``edit`` changed and re-sealed.

    Refused cases: the checkpoint and the run directory must be byte-identical afterwards.
    A correct run (``expect == "runs"``) must end its budget."""

    def run(trial: Trial) -> Outcome:
        import torch

        from beyondfit.core.state.serialization import atomic_save

        folder = trial.stopped_run(at or kind, f"{kind}-doctored")
        path = newest(folder)
        state = torch.load(path, weights_only=True)
        edit(state)
        atomic_save(state, path)
        before, digest = snapshot(folder), sha256(path)
        out = trial.cli(*OFFPOLICY[kind], f"resume={folder}", cwd=folder.parent)
        out.unchanged = snapshot(folder) == before and path.exists() and sha256(path) == digest
        if out.code == 0:  # it trained: it must have trained the whole budget on real rows
            out.unchanged = None  # a resumed run goes on writing, as it should
            out.problem = _trained_whole_budget(folder, kind)
        return out

    return run


def _trained_whole_budget(run: Path, kind: str) -> str:
    result = run / "result.json"
    if not result.exists():
        return "no result.json after exit 0"
    budget = int(next(a for a in OFFPOLICY[kind] if a.startswith("task.total_env_steps="))
                 .split("=")[1])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = max((r.get("env_steps", 0) for r in rows), default=0)
    if steps != budget:
        return f"exit 0 after {steps} env steps of a {budget}-step budget"
    return ""


def at_data(*keys: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit setting ``state["data"][k1][k2]... = value`` (``value(old)`` when callable;
    ``DELETE``: the entry removed)."""

    def edit(state: dict[str, Any]) -> None:
        target = state
        path = ("data", *keys)
        for key in path[:-1]:
            target = target[key]
        if value is DELETE:
            target.pop(path[-1])
        else:
            target[path[-1]] = value(target[path[-1]]) if callable(value) else value

    return edit


DELETE, KEEP = object(), object()


def forged(kind: str, *keys: Any, value: Any, name: str, says: str = "",
           at: str | None = None, small: bool = False, expect: str = "refused") -> Case:
    """The case of a ``kind`` checkpoint whose ``data`` entry at ``keys`` is ``value`` (see
    :func:`at_data`; ``KEEP``: untouched), resumed: refused in one line naming the entry."""
    key = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")
    label = "-".join(p for p in (kind, re.sub(r"[._\[\]]+", "-", key).strip("-"), name) if p)
    edit = (lambda state: None) if value is KEEP else at_data(*keys, value=value)
    return Case(label, f"off-policy checkpoint ({kind.upper()})", expect, doctored(kind, edit, at),
                small=small, says=(f"data: {says or key}",) if expect == "refused" else ())


def command(*args: str, timeout: float = 300, limit_memory: int = MEMORY,
            check: Callable[[Path, Outcome], str] | None = None) -> Callable[[Trial], Outcome]:
    """``python -m beyondfit ARGS`` in a fresh folder; ``check(folder, outcome)``: what is
    wrong with the result (``""``: nothing)."""

    def run(trial: Trial) -> Outcome:
        folder = trial.folder("cli")
        out = trial.cli(*args, cwd=folder, timeout=timeout, limit_memory=limit_memory)
        if check is not None:
            out.problem = check(folder, out)
        return out

    return run


def resumed_smaller(trial: Trial) -> Outcome:
    """Resume a stopped SAC run (250 env steps taken) with a budget of 200."""
    run = trial.stopped_run("sac", "sac-smaller-budget")
    path = newest(run)
    before, digest = snapshot(run), sha256(path)
    args = [a for a in OFFPOLICY["sac"] if not a.startswith("task.total_env_steps=")]
    out = trial.cli(*args, "task.total_env_steps=200", f"resume={run}", cwd=run.parent)
    out.unchanged = snapshot(run) == before and sha256(path) == digest
    if out.code == 2 and "total_env_steps" not in out.stderr:
        out.problem = "does not name task.total_env_steps"
    return out


# ------------------------------------------------------------------------------- compare
def compare_case(build: Callable[[Path], list[str]]) -> Callable[[Trial], Outcome]:
    """``python -m beyondfit.compare ARGS`` over runs ``build(folder)`` made (two runs of a
    regression, each a copy of the same finished run, then damaged by ``build``)."""

    def run(trial: Trial) -> Outcome:
        folder = trial.folder("compare")
        for name in ("a", "b"):
            shutil.copytree(trial.source("regression"), folder / name,
                            ignore=shutil.ignore_patterns("checkpoints"))
        args = build(folder)
        out = trial.cli(*args, cwd=folder, module="beyondfit.compare", timeout=120)
        if out.code == 0 and "compare.md" not in out.stdout:
            out.problem = "exit 0 without its table"
        return out

    return run


def fifo_result(folder: Path) -> list[str]:
    (folder / "a" / "result.json").unlink()
    os.mkfifo(folder / "a" / "result.json")
    return [str(folder / "a"), str(folder / "b")]


def fifo_metrics(folder: Path) -> list[str]:
    (folder / "a" / "metrics.jsonl").unlink()
    os.mkfifo(folder / "a" / "metrics.jsonl")
    return [str(folder / "a"), str(folder / "b")]


def deep_result(folder: Path) -> list[str]:
    (folder / "a" / "result.json").write_text("[" * 200_000 + "]" * 200_000)
    return [str(folder / "a"), str(folder / "b")]


def deep_row(folder: Path) -> list[str]:
    with (folder / "a" / "metrics.jsonl").open("a") as f:
        f.write('{"step": 99, "loss": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    return [str(folder / "a"), str(folder / "b")]


def row_not_object(value: str) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        with (folder / "a" / "metrics.jsonl").open("a") as f:
            f.write(value + "\n")
        return [str(folder / "a"), str(folder / "b")]

    return build


def huge_value(folder: Path) -> list[str]:
    result = json.loads((folder / "a" / "result.json").read_text())
    text = json.dumps(result)
    (folder / "a" / "result.json").write_text(text.replace("{", '{"val_loss": 1e400, ', 1))
    return [str(folder / "a"), str(folder / "b")]


def out_is_file(folder: Path) -> list[str]:
    (folder / "notes.txt").write_text("mine\n")
    return [str(folder / "a"), str(folder / "b"), "--out", str(folder / "notes.txt")]


def deep_hydra(folder: Path) -> list[str]:
    (folder / "a" / ".hydra" / "overrides.yaml").write_text("[" * 100_000 + "]" * 100_000)
    return [str(folder / "a"), str(folder / "b")]


def result_is_dir(folder: Path) -> list[str]:
    (folder / "a" / "result.json").unlink()
    (folder / "a" / "result.json").mkdir()
    return [str(folder / "a"), str(folder / "b")]


def no_runs(folder: Path) -> list[str]:
    (folder / "empty").mkdir()
    return [str(folder / "empty")]


# ------------------------------------------------------------------------------- tables
def wide_csv(columns: int, rows: int, task: str = "regression") -> Callable[[Trial], Outcome]:
    """A CSV wider than long: one line at once (the trial's: nothing printed for 5 minutes)."""

    def run(trial: Trial) -> Outcome:
        import numpy as np

        folder = trial.folder("wide")
        rng = np.random.default_rng(0)
        header = ",".join(f"c{i}" for i in range(columns)) + ",y"
        body = rng.integers(0, 9, size=(rows, columns + 1))
        if task == "classification":
            body[:, -1] %= 2
        lines = [header, *(",".join(map(str, r)) for r in body)]
        (folder / "wide.csv").write_text("\n".join(lines) + "\n")
        out = trial.cli(f"+task={task}", "task.data.path=wide.csv", "task.data.target=y",
                        "train.epochs=1", *QUIET, f"hydra.run.dir={folder / 'run'}",
                        cwd=folder, timeout=60)
        if out.seconds > 30:
            out.problem = f"took {out.seconds:.0f} s to answer"
        return out

    return run


# ------------------------------------------------------------------------------- signals
# The command line with a signal sent to itself at one moment of its run: right after a
# function returns (MODULE:NAME), e.g. the run directory's lock or Hydra's writing of .hydra/.
SIGNAL_AT = """
import importlib, os, signal, sys
where, signum = sys.argv.pop(1), int(sys.argv.pop(1))
module, name = where.split(":")
owner = importlib.import_module(module)
real = getattr(owner, name)
def then_signal(*args, **kwargs):
    result = real(*args, **kwargs)
    os.kill(os.getpid(), signum)
    return result
setattr(owner, name, then_signal)
from beyondfit.cli.app import main
main()
"""


def signal_at(where: str, signum: int) -> Callable[[Trial], Outcome]:
    """The regression run signalled right after ``where`` returned: it stops, one line."""

    def run(trial: Trial) -> Outcome:
        folder = trial.folder("signal")
        out = trial.process([sys.executable, "-c", SIGNAL_AT, where, str(signum), *REGRESSION,
                             f"hydra.run.dir={folder / 'run'}"], folder, timeout=300)
        out.problem = _checkpoints_load(folder / "run")
        return out

    return run


def signal_when(marker: str, signum: int, *, in_file: str | None = None,
                args: tuple[str, ...] = tuple(REGRESSION)) -> Callable[[Trial], Outcome]:
    """A real run, signalled as soon as ``marker`` shows (in its stdout, or in the run
    directory's ``in_file``), as a user watching it would."""

    def run(trial: Trial) -> Outcome:
        folder = trial.folder("signal")
        out_file, err_file = folder / "out.txt", folder / "err.txt"
        start = time.monotonic()
        with out_file.open("w") as out, err_file.open("w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "beyondfit", *args,
                                     f"hydra.run.dir={folder / 'run'}"], cwd=folder,
                                    env=trial.env, stdout=out, stderr=err,
                                    preexec_fn=_held_to_memory)
            watched = folder / "run" / in_file if in_file else out_file
            deadline = time.monotonic() + 300
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    seen = watched.read_text(errors="replace")  # OSError: not there yet
                    if marker in seen:  # no marker: the file's being there is the moment
                        break
                time.sleep(0.001)
            sent = proc.poll() is None
            if sent:
                proc.send_signal(signum)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        outcome = Outcome(proc.returncode, out_file.read_text(), err_file.read_text(),
                          time.monotonic() - start)
        if not sent:
            outcome.problem = "the run ended before the signal could be sent"
        else:
            outcome.problem = _checkpoints_load(folder / "run")
        return outcome

    return run


def _held_to_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _checkpoints_load(run: Path) -> str:
    from beyondfit.core.errors import BeyondfitError
    from beyondfit.core.state.serialization import safe_load

    for path in sorted((run / "checkpoints").glob("*.pt")) if (run / "checkpoints").is_dir() \
            else []:
        try:
            safe_load(path)
        except BeyondfitError as exc:
            return f"{path.name} does not load: {exc}"
    return ""


FULL_DISK = r"""
set -e
mount -t tmpfs -o size={size} tmpfs {mnt}
cd {mnt}
set +e
ulimit -v {kib}
"{python}" -m beyondfit {args} hydra.run.dir={mnt}/run > {folder}/out.txt 2> {folder}/err.txt
echo $? > {folder}/code.txt
cp -r {mnt}/run {folder}/left 2> /dev/null
"""


def full_disk(size: str, args: tuple[str, ...]) -> Callable[[Trial], Outcome]:
    """The run directory on a ``size`` tmpfs that fills during the run (a mount namespace of
    its own: ``unshare -Urm``); the line must name the path and the fix, the checkpoints
    written before the disk filled must still load."""

    def run(trial: Trial) -> Outcome:
        folder = trial.folder("full-disk")
        mnt = folder / "mnt"
        mnt.mkdir()
        shell = FULL_DISK.format(size=size, mnt=mnt, python=sys.executable, folder=folder,
                                 kib=MEMORY // 1024,
                                 args=" ".join(f"'{a}'" for a in args))
        start = time.monotonic()
        if shutil.which("unshare") is None:
            return Outcome(None, skipped="no unshare to mount a tmpfs")
        done = subprocess.run(["unshare", "-Urm", "sh", "-c", shell], env=trial.env,
                              capture_output=True, text=True, timeout=300)
        if not (folder / "code.txt").exists():
            return Outcome(None, "", done.stderr, 0.0,
                           skipped=f"no tmpfs: {done.stderr.strip()[:80]}")
        out = Outcome(int((folder / "code.txt").read_text()), (folder / "out.txt").read_text(),
                      (folder / "err.txt").read_text(), time.monotonic() - start)
        unloadable = _checkpoints_load(folder / "left")  # what the full disk kept
        if unloadable:
            out.problem = unloadable
        elif out.code == 2 and str(mnt) not in out.stderr:
            out.problem = "the line names no path"
        return out

    return run


def file_too_large(trial: Trial) -> Outcome:
    """RLIMIT_FSIZE below a checkpoint's size: writing one fails with EFBIG."""
    folder = trial.folder("file-too-large")
    out = trial.cli(*REGRESSION, "task.hidden=[256,256]", f"hydra.run.dir={folder / 'run'}",
                    cwd=folder, limit_file=200_000)
    if out.code == 2 and str(folder / "run") not in out.stderr:
        out.problem = "the line names no path"
    return out


# ------------------------------------------------------------------------------- the API
SCHEDULER_OF_ANOTHER = """
import torch
from beyondfit import Engine
model = torch.nn.Linear(2, 1)
other = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), 0.1)
engine = Engine(model, lambda m, b: m(b).pow(2).mean(), torch.optim.SGD(model.parameters(), 0.1),
                scheduler=torch.optim.lr_scheduler.StepLR(other, 2), device="cpu")
engine.fit([torch.ones(4, 2)] * 3, epochs=1, verbose=False)
"""

SAVE_TO = """
import torch, os
from beyondfit import Engine
model = torch.nn.Linear(2, 1)
engine = Engine(model, lambda m, b: m(b).pow(2).mean(), torch.optim.SGD(model.parameters(), 0.1),
                device="cpu")
engine.fit([torch.ones(4, 2)] * 3, epochs=1, verbose=False)
target = sys.argv[1]
os.makedirs("ckpt", exist_ok=True)
if target == "load-dir":
    engine.load("ckpt")
elif target == "load-missing":
    engine.load("nothing-here.pt")
else:
    engine.save(target)
"""


def api(source: str, *args: str, check: Callable[[Path], str] | None = None
        ) -> Callable[[Trial], Outcome]:
    def run(trial: Trial) -> Outcome:
        folder = trial.folder("api")
        out = trial.script(source, folder, *args)
        if check is not None:
            out.problem = check(folder)
        return out

    return run


def nothing_written(folder: Path) -> str:
    extra = [p.name for p in (folder / "ckpt").iterdir()] if (folder / "ckpt").is_dir() else []
    return f"left {extra} in the folder" if extra else ""


# ------------------------------------------------------------------------------- play
def play_case(edit: Callable[[Path], None]) -> Callable[[Trial], Outcome]:
    """``python -m beyondfit.play RUN`` on a copy of the SAC run whose policy ``edit`` changed."""

    def run(trial: Trial) -> Outcome:
        folder = trial.folder("play")
        shutil.copytree(trial.source("sac"), folder / "run",
                        ignore=shutil.ignore_patterns("checkpoints"))
        edit(folder / "run")
        policy = folder / "run" / "policy.pt"
        digest = sha256(policy) if policy.is_file() else None
        out = trial.cli(str(folder / "run"), "--episodes", "1", cwd=folder,
                        module="beyondfit.play", timeout=120)
        if digest is not None:
            out.unchanged = sha256(policy) == digest
        return out

    return run


def nan_policy(run: Path) -> None:
    import torch

    from beyondfit.core.state.serialization import atomic_save

    state = torch.load(run / "policy.pt", weights_only=True)
    weights = state["model"] if "model" in state else state
    for key, value in weights.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            weights[key] = value * math.nan
            break
    atomic_save(state, run / "policy.pt")


def policy_dir(run: Path) -> None:
    (run / "policy.pt").unlink()
    (run / "policy.pt").mkdir()


# ------------------------------------------------------------------------------- the checks
def trained(kind: str = "regression") -> Callable[[Path, Outcome], str]:
    def check(folder: Path, out: Outcome) -> str:
        runs = list(folder.glob("**/result.json"))
        return "" if runs else "exit 0 without a result.json"

    return check


def not_called(folder: Path, out: Outcome) -> str:
    return "os.system ran" if (folder / "PWNED").exists() else ""


GB = 1 << 30


def catalogue() -> list[Case]:
    """Every case: the trial's listed breaks and the inputs next to them."""
    import torch

    def nan_row(rows: torch.Tensor) -> torch.Tensor:
        return rows.index_fill(0, torch.tensor([7]), math.nan)

    cases = [
        # --- off-policy checkpoints: the replay collector's saved state --------------------
        forged("sac", "buffer", "position", value=10_000, name="past-size"),
        forged("sac", "buffer", "position", value=400, name="at-capacity"),
        forged("sac", "buffer", "position", value=-1, name="negative"),
        forged("sac", "buffer", "position", value=120, name="behind-size"),
        forged("sac", "buffer", "size", value=10**9, name="1e9"),
        forged("sac", "buffer", "size", value=-5, name="negative"),
        forged("sac", "buffer", "size", value="250", name="a-string"),
        forged("sac", "buffer", "width", value=11, name="another-env"),
        forged("sac", "buffer", "rows", value=nan_row, name="nan", says="buffer.rows holds"),
        forged("sac", "buffer", "rows", value=lambda t: t.index_fill(0, torch.tensor([3]),
                                                                     math.inf),
               name="inf", says="buffer.rows holds"),
        forged("sac", "buffer", "rows", value=lambda t: t.double(), name="float64"),
        forged("sac", "buffer", "rows", value=lambda t: t[:10], name="short"),
        forged("sac", "buffer", value=None, name="none", says="buffer.size=None"),
        forged("sac", "env_steps", value=-4, name="negative"),
        forged("sac", "env_steps", value=10**12, name="1e12"),
        forged("sac", "env_steps", value=250.0, name="a-float"),
        forged("sac", "yielded", value=-1, name="negative"),
        forged("sac", "yielded", value=10**9, name="1e9"),
        forged("sac", value=None, name="data-none", says="missing", small=True),
        forged("sac", value={}, name="data-empty", says="env_steps=None"),
        forged("sac", value=DELETE, name="data-deleted", says="missing"),
        forged("sac", "generator", value=torch.zeros(7, dtype=torch.uint8), name="wrong-size"),
        forged("sac", "generator", value="seed 0", name="a-string"),
        forged("sac", "generator", value=lambda t: t.float(), name="float"),
        forged("sac", "generator", value=DELETE, name="deleted", expect="runs"),
        forged("sac", "episode_rng", 0, value="not a state", name="a-string"),
        forged("sac", "episode_rng", 0, value={"bit_generator": "PCG64", "state": "no"},
               name="bad-inner-state"),
        forged("sac", "episode_rng", value=[], name="wrong-length"),
        forged("sac", "next_rng", value=DELETE, name="deleted"),
        forged("sac", "next_rng", 0, value=None, at="sac-episode-end",
               name="none-at-an-episode-end"),
        forged("sac", "episode_actions", 0, value=lambda t: t * 0 + 99.0, name="outside-space"),
        forged("sac", "episode_actions", 0, value=lambda t: t[:5], name="too-few"),
        forged("sac", "episode_actions", 0, value="left", name="a-string"),
        forged("sac", "obs", value=lambda t: t * math.nan, name="nan"),
        forged("sac", "ep_return", value=[math.nan], name="nan"),
        forged("sac", "prev_done", value=["yes"], name="not-bool"),
        forged("sac", "buffer", "rows", value=DELETE, name="deleted-resumes-empty",
               expect="runs"),
        forged("sac", value=KEEP, name="untouched-resumes", expect="runs"),
        forged("dqn", "buffer", "position", value=10_000, name="past-size"),
        forged("dqn", "env_steps", value=10**15, name="1e15"),
        forged("dqn", "yielded", value=10**9, name="1e9"),
        forged("dqn", value=None, name="data-none", says="missing"),
        forged("dqn", "generator", value=torch.zeros(7, dtype=torch.uint8), name="wrong-size"),
        forged("dqn", "buffer", "rows", value=nan_row, name="nan", says="buffer.rows holds"),
        forged("dqn", "exploration", value={"epsilon": 5.0}, name="epsilon-5"),
        forged("dqn", "exploration", value={"epsilon": 0.5}, name="off-schedule",
               says="the checkpoint's exploration"),
        forged("dqn", "episode_actions", 0, value=lambda t: t * 0 + 7, name="outside-space"),
        forged("dqn", value=KEEP, name="untouched-resumes", expect="runs"),
        Case("sac-resume-with-a-smaller-budget", "off-policy checkpoint (SAC)", "refused",
             resumed_smaller, says=("env_steps=250", "task.total_env_steps")),
        # --- sizes bounded before anything is built ---------------------------------------
        Case("regression-hidden-1e8", "sizes", "refused",
             command("+task=regression", "task.hidden=[100000000]", *QUIET), small=True,
             says=("task.hidden=[100000000]", "memory")),
        Case("classification-hidden-1e8", "sizes", "refused",
             command("+task=classification", "task.hidden=[100000000]", *QUIET),
             says=("task.hidden=[100000000]", "memory")),
        Case("autoencoder-hidden-1e8", "sizes", "refused",
             command("+task=autoencoder", "task.hidden=[100000000]", *QUIET),
             says=("task.hidden=[100000000]", "memory")),
        Case("cartpole-hidden-1e8", "sizes", "refused",
             command("+task=cartpole", "task.hidden=[100000000]", *QUIET),
             says=("task.hidden=[100000000]", "memory")),
        Case("sac-hidden-1e8", "sizes", "refused",
             command(*OFFPOLICY["sac"][:2], "task.hidden=[100000000]", *QUIET),
             says=("task.hidden=[100000000]",)),
        Case("sac-critics-1e6", "sizes", "refused",
             command(*OFFPOLICY["sac"][:2], "task.agent.critics=1000000", *QUIET),
             says=("task.agent.critics=1000000",)),
        Case("sac-batch-size-1e9", "sizes", "refused",
             command(*OFFPOLICY["sac"][:2], "task.replay.batch_size=1000000000", *QUIET),
             says=("task.replay.batch_size=1000000000",)),
        Case("dqn-batch-size-1e9", "sizes", "refused",
             command(*OFFPOLICY["dqn"][:2], "task.replay.batch_size=1000000000", *QUIET),
             says=("task.replay.batch_size=1000000000",)),
        Case("sac-buffer-1e12", "sizes", "refused",
             command(*OFFPOLICY["sac"][:2], "task.replay.buffer_size=1000000000000",
                     "task.total_env_steps=1000000000000", *QUIET),
             says=("task.replay.buffer_size",)),
        Case("cartpole-num-envs-1e6", "sizes", "refused",
             command("+task=cartpole", "task.num_envs=1000000", *QUIET),
             says=("task.num_envs",)),
        Case("regression-batch-size-1e12-is-the-whole-table", "sizes", "runs",
             command("+task=regression", "task.batch_size=1000000000000", "train.epochs=2",
                     *QUIET, check=trained())),
        Case("regression-hidden-past-ulimit-v", "sizes", "refused",
             command("+task=regression", "task.hidden=[20000,20000]", *QUIET,
                     limit_memory=3 * GB, timeout=180), says=("ulimit -v", "task.hidden")),
        Case("regression-hidden-out-of-memory-while-training", "sizes", "refused",
             command("+task=regression", "task.hidden=[12000,12000]", "train.epochs=2",
                     *QUIET, limit_memory=3 * GB, timeout=180), says=("out of memory",)),
        # --- compare reads run directories as untrusted data ------------------------------
        Case("compare-result-fifo", "compare", "runs", compare_case(fifo_result), small=True),
        Case("compare-metrics-fifo", "compare", "refused", compare_case(fifo_metrics),
             says=("metrics.jsonl", "not a regular file")),
        Case("compare-result-200000-deep", "compare", "runs", compare_case(deep_result)),
        Case("compare-row-200000-deep", "compare", "runs", compare_case(deep_row)),
        Case("compare-row-a-list", "compare", "runs", compare_case(row_not_object("[1, 2]"))),
        Case("compare-row-a-number", "compare", "runs", compare_case(row_not_object("7"))),
        Case("compare-row-not-json", "compare", "runs",
             compare_case(row_not_object("{not json"))),
        Case("compare-value-1e400", "compare", "runs", compare_case(huge_value)),
        Case("compare-hydra-record-deep", "compare", "runs", compare_case(deep_hydra)),
        Case("compare-result-a-directory", "compare", "runs", compare_case(result_is_dir)),
        Case("compare-out-a-file", "compare", "refused", compare_case(out_is_file),
             says=("notes.txt",)),
        Case("compare-no-runs", "compare", "refused", compare_case(no_runs)),
        # --- a table wider than long ------------------------------------------------------
        Case("regression-csv-100000-columns-50-rows", "tables", "refused",
             wide_csv(100_000, 50), small=True),
        Case("classification-csv-100000-columns-50-rows", "tables", "refused",
             wide_csv(100_000, 50, "classification")),
        Case("regression-csv-2000-columns-40-rows", "tables", "refused", wide_csv(2000, 40)),
        # --- loggers' and other targets go through Hydra's blocklist ----------------------
        Case("logger-target-os-system", "targets", "refused",
             command("+task=regression", "+logger.x._target_=os.system",
                     "+logger.x.command=touch PWNED", *QUIET, check=not_called), small=True),
        Case("logger-target-subprocess", "targets", "refused",
             command("+task=regression", "+logger.x._target_=subprocess.getoutput",
                     "+logger.x.cmd=touch PWNED", *QUIET, check=not_called)),
        Case("logger-target-builtins-exec", "targets", "refused",
             command("+task=regression", "+logger.x._target_=builtins.exec",
                     "+logger.x.source=open('PWNED','w')", *QUIET, check=not_called)),
        Case("logger-csv-target-replaced", "targets", "refused",
             command("+task=regression", "logger=csv", "logger.csv._target_=os.system",
                     *QUIET, check=not_called)),
        Case("task-target-os-system-with-options-left-out", "targets", "refused",
             command("+task=regression", "task._target_=os.system",
                     "+task.command=touch PWNED", *QUIET, check=not_called)),
        # --- signals and a full disk ------------------------------------------------------
        Case("ctrl-c-after-the-lock", "signals", "stopped",
             signal_at("beyondfit.cli.rundir:claim_run_dir", signal.SIGINT), small=True),
        Case("ctrl-c-while-hydra-writes-its-records", "signals", "stopped",
             signal_at("hydra.core.utils:_save_config", signal.SIGINT)),
        Case("ctrl-c-as-the-lock-appears", "signals", "stopped",
             signal_when("", signal.SIGINT, in_file=".beyondfit.lock")),
        Case("sigterm-as-the-last-epoch-ends", "signals", "stopped",
             signal_when("epoch 2/2", signal.SIGTERM), lines=3),
        Case("sigterm-in-the-report", "signals", "stopped",
             signal_at("beyondfit.cli.run:final_record", signal.SIGTERM)),
        Case("ctrl-c-as-the-last-epoch-ends", "signals", "stopped",
             signal_when("epoch 2/2", signal.SIGINT), lines=3),
        Case("full-disk-at-the-first-checkpoint", "signals", "refused",
             full_disk("64k", tuple(REGRESSION)),
             says=("checkpoints/step-00000005.pt", "No space left", "resume=")),
        Case("full-disk-at-a-later-checkpoint", "signals", "refused",
             full_disk("200k", tuple(REGRESSION)), small=True,
             says=("checkpoints/step-00000010.pt", "No space left", "resume=")),
        Case("full-disk-at-hydras-records", "signals", "refused",
             full_disk("12k", tuple(REGRESSION)), says=("/run'", "No space left")),
        Case("full-disk-at-a-sac-checkpoint", "signals", "refused",
             full_disk("40k", tuple(OFFPOLICY["sac"])), says=("checkpoints/step-", "No space")),
        Case("file-too-large", "signals", "refused", file_too_large,
             says=("checkpoints/step-00000005.pt", "ulimit -f")),
        # --- smaller ones --------------------------------------------------------------------
        Case("sac-init-alpha-0", "settings", "refused",
             command(*OFFPOLICY["sac"], "task.agent.init_alpha=0"), small=True),
        Case("sac-init-alpha-negative", "settings", "refused",
             command(*OFFPOLICY["sac"], "task.agent.init_alpha=-1")),
        Case("sac-init-alpha-nan", "settings", "refused",
             command(*OFFPOLICY["sac"], "task.agent.init_alpha=nan")),
        Case("sac-hidden-empty", "settings", "runs",
             command(*OFFPOLICY["sac"], "task.hidden=[]", check=trained())),
        Case("dqn-hidden-empty", "settings", "runs",
             command(*OFFPOLICY["dqn"], "task.hidden=[]", check=trained())),
        Case("sac-save-buffer-maybe", "settings", "refused",
             command(*OFFPOLICY["sac"], "task.replay.save_buffer=maybe")),
        Case("sac-save-buffer-2", "settings", "refused",
             command(*OFFPOLICY["sac"], "task.replay.save_buffer=2")),
        Case("api-scheduler-of-another-optimizer", "settings", "refused",
             api(SCHEDULER_OF_ANOTHER)),
        Case("api-engine-save-to-a-directory", "settings", "refused",
             api(SAVE_TO, "ckpt", check=nothing_written)),
        Case("api-engine-save-to-a-directory-slash", "settings", "refused",
             api(SAVE_TO, "ckpt/", check=nothing_written)),
        Case("api-engine-load-a-directory", "settings", "refused", api(SAVE_TO, "load-dir")),
        Case("api-engine-load-missing", "settings", "refused", api(SAVE_TO, "load-missing")),
        Case("play-nan-policy", "settings", "refused", play_case(nan_policy)),
        Case("play-policy-a-directory", "settings", "refused", play_case(policy_dir)),
    ]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names repeat"
    return cases


# ------------------------------------------------------------------------------- the table
def table(results: list[tuple[Case, Outcome, str]], work: Path) -> str:
    held = sum(1 for *_, broke in results if not broke)
    lines = [
        "| case | category | expected | exit | one line? | traceback? | file unchanged? | "
        "held? | stderr's last line |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case, out, broke in results:
        traceback = "Traceback" in out.stderr + out.stdout
        unchanged = {None: "-", True: "yes", False: "**NO**"}[out.unchanged]
        count = line_count(out)
        lines.append(
            f"| {case.name} | {case.category} | {case.expect} | "
            f"{'none (killed)' if out.code is None else out.code} | "
            f"{'yes' if count == 1 else f'no ({count})'} | {'**YES**' if traceback else 'no'} | "
            f"{unchanged} | {_held(out, broke)} | "
            f"`{last_line(out, work)}` |"
        )
    lines.append("")
    skipped = sum(1 for _, out, _ in results if out.skipped)
    lines.append(f"{held - skipped} of {len(results)} cases held; {len(results) - held} broke"
                 + (f"; {skipped} skipped (could not be tried here)." if skipped else "."))
    return "\n".join(lines)


def _held(out: Outcome, broke: str) -> str:
    return f"skipped: {out.skipped}" if out.skipped else "**BROKE**: " + broke if broke \
        else "yes"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="one case of each kind")
    parser.add_argument("--only", default="", help="comma list of case names")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    cases = catalogue()
    if args.list:
        for case in cases:
            print(f"{case.name}  ({case.category}; {case.expect})")
        return 0
    if args.small:
        cases = [c for c in cases if c.small]
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {c.name for c in cases})
        if unknown:
            parser.error(f"no such cases: {', '.join(unknown)}")
        cases = [c for c in cases if c.name in wanted]
    with contextlib.ExitStack() as stack:
        if args.work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trial-")))
        else:
            work = args.work.resolve()
            work.mkdir(parents=True, exist_ok=True)
        trial = Trial(work)
        results = []
        for case in cases:
            try:
                out = case.run(trial)
            except Exception as exc:  # the harness's own failure is a break too, said so
                out = Outcome(None, "", f"harness: {type(exc).__name__}: {exc}", problem=(
                    f"the harness failed: {type(exc).__name__}"))
            broke = case.judge(out)
            results.append((case, out, broke))
            print(f"{case.name}: {_held(out, broke).replace('**', '')} "
                  f"({out.seconds:.1f} s)", file=sys.stderr, flush=True)
        text = table(results, work)
    print(text)
    if args.out:
        args.out.write_text(
            "# Issue 29's adversarial trial, re-run\n\n"
            f"`python bench/trial_breaks.py{' --small' if args.small else ''}` "
            f"(commit {_commit()}; torch {_version('torch')}, "
            f"gymnasium {_version('gymnasium')}). What each column means: the script's "
            "docstring. A case's own folder is shown as `$CASE`.\n\n" + text + "\n")
    return 1 if any(broke for *_, broke in results) else 0


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


if __name__ == "__main__":
    sys.exit(main())
