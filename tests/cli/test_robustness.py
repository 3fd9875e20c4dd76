"""Nothing lost, one clear line: two runs on one directory, file-system failures, foreign and
poisoned checkpoints, and Ctrl-C during start-up, each tried as a hostile user would."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit import BeyondfitError, Checkpointer, resume
from beyondfit.checkpoint import step_checkpoints
from beyondfit.cli.rundir import LOCK_FILE, claim_run_dir, os_error_line, release_run_dir
from beyondfit.core.state.serialization import nonfinite_entries, safe_load

import kit
from kit import cli_batch, one_line_exit_2

QUIET = ["plots=false", "progress.bar=false", "device=cpu"]
REGRESSION = ["+task=regression", "train.epochs=2", "engine.log_every=1", "checkpoint.every=5",
              *QUIET]

# The real CLI, whose training waits while the file named by $HOLD exists: the test decides
# when the first run may finish.
HELD_RUN = """
import os, sys, time
import beyondfit.core.engine as engine_module
from beyondfit.cli.app import main
step = engine_module.Engine.train_step
def held(self, batch):
    while os.path.exists(os.environ["HOLD"]):
        time.sleep(0.01)
    return step(self, batch)
engine_module.Engine.train_step = held
main()
"""


def start_held(args: list[str], hold: Path, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "HOLD": str(hold)}
    return subprocess.Popen([sys.executable, "-c", HELD_RUN, *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(condition, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def metrics_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- one run per directory
def race(tmp_path: Path, round_: int, together: bool) -> None:
    """Two runs on one directory: one refuses in one line, the other finishes intact."""
    run_dir = tmp_path / f"shared-{round_}"
    hold = tmp_path / f"hold-{round_}"
    hold.write_text("")
    first_args = [*REGRESSION, "seed=1", f"hydra.run.dir={run_dir}"]
    second_args = [*REGRESSION, "seed=2", f"hydra.run.dir={run_dir}"]
    first = start_held(first_args, hold, tmp_path)
    if not together:  # a few seconds apart: the first is already training
        wait_for(lambda: (run_dir / LOCK_FILE).exists() and "pid" in
                 (run_dir / LOCK_FILE).read_text(), "the first run's lock")
    second = start_held(second_args, hold, tmp_path)
    procs = [first, second]
    # Whichever lost the lock refuses while the winner is held in its first step.
    wait_for(lambda: any(p.poll() is not None for p in procs), "a refusal")
    loser = next(p for p in procs if p.poll() is not None)
    winner = second if loser is first else first
    hold.unlink()
    _, winner_err = winner.communicate(timeout=600)
    _, loser_err = loser.communicate(timeout=60)
    context = f"round {round_}: {loser_err!r} / {winner_err!r}"
    assert loser.returncode == 2 and winner.returncode == 0, context
    one_line_exit_2({"code": 2, "stderr": loser_err, "stdout": ""},
                          f"run directory '{run_dir}' is in use by another run (pid "
                          f"{winner.pid} on ")
    # The winner's files are its own and complete.
    seed = "seed: 1" if winner is first else "seed: 2"
    assert seed in (run_dir / ".hydra" / "config.yaml").read_text(), context
    rows = metrics_rows(run_dir)
    train_steps = [r["step"] for r in rows if r["kind"] == "train"]
    assert train_steps == list(range(1, len(train_steps) + 1)) and train_steps, context
    assert [r["epoch"] for r in rows if r["kind"] == "epoch"] == [1, 2], context
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert not any(n.startswith("superseded-") for n in names), context
    final = step_checkpoints(run_dir / "checkpoints")[0]
    assert safe_load(final)["counters"]["global_step"] == train_steps[-1], context


@pytest.mark.e2e
def test_two_runs_on_one_directory_one_refuses_cleanly(tmp_path: Path) -> None:
    race(tmp_path, 0, together=False)


@pytest.mark.slow
def test_two_runs_on_one_directory_five_of_five(tmp_path: Path) -> None:
    for round_ in range(5):
        race(tmp_path, round_, together=round_ % 2 == 1)


@pytest.mark.e2e
def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    """flock dies with its process: a kill -9 leaves the file, never the lock."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from beyondfit.cli.rundir import claim_run_dir;"
        "claim_run_dir(sys.argv[2], resuming=False); print('locked', flush=True);"
        "time.sleep(600)"), str(Path(__file__).resolve().parents[2]), str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(BeyondfitError, match=rf"in use by another run \(pid {holder.pid} on "):
        claim_run_dir(tmp_path, resuming=False)
    holder.kill()
    holder.wait()
    assert f"pid {holder.pid}" in (tmp_path / LOCK_FILE).read_text()  # the stale record
    assert claim_run_dir(tmp_path, resuming=False)
    assert f"pid {os.getpid()}" in (tmp_path / LOCK_FILE).read_text()
    release_run_dir(tmp_path)


@pytest.mark.e2e
def test_a_finished_run_directory_is_not_reused_without_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first, again, resumed = cli_batch([
        [*REGRESSION, f"hydra.run.dir={run_dir}"],
        [*REGRESSION, "seed=5", f"hydra.run.dir={run_dir}"],
        [*REGRESSION, f"resume={run_dir}"],
    ], tmp_path)
    assert first["code"] == 0, first["stderr"]
    rows = (run_dir / "metrics.jsonl").read_text()
    one_line_exit_2(again, f"run directory '{run_dir}' already holds a run (metrics.jsonl"
                                 f", checkpoints/); continue it with resume={run_dir}")
    assert resumed["code"] == 0, resumed["stderr"]
    assert (run_dir / "metrics.jsonl").read_text() == rows  # nothing mixed in
    assert "seed: 0" in (run_dir / ".hydra" / "config.yaml").read_text()


# ---------------------------------------------------------------- the file system
# Paths whose name says which error the simulated file system gives (root ignores chmod).
FS_PATCH = """
import errno, os
_mkdir, _open = os.mkdir, os.open
CODES = {"ro-fs": errno.EROFS, "no-perm": errno.EACCES}
def _refuse(path):
    for marker, code in CODES.items():
        if marker in str(path):
            raise OSError(code, os.strerror(code), str(path))
def mkdir(path, *args, **kwargs):
    _refuse(path)
    return _mkdir(path, *args, **kwargs)
def open_(path, flags, *args, **kwargs):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
        _refuse(path)
    return _open(path, flags, *args, **kwargs)
os.mkdir, os.open = mkdir, open_
"""


@pytest.mark.e2e
def test_file_system_errors_are_one_line_naming_the_path(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    blocked_ckpt = tmp_path / "ckpt-is-a-file"
    blocked_ckpt.mkdir()
    (blocked_ckpt / "checkpoints").write_text("a file")
    blocked_metrics = tmp_path / "metrics-is-a-folder"
    (blocked_metrics / "metrics.jsonl").mkdir(parents=True)
    cases = {
        f"'{a_file}': File exists (a file is where a folder should be":
            f"hydra.run.dir={a_file}",
        f"'{a_file / 'run'}': Not a directory (a file is where a folder should be":
            f"hydra.run.dir={a_file / 'run'}",
        f"'{blocked_ckpt / 'checkpoints'}': File exists":
            f"hydra.run.dir={blocked_ckpt}",
        f"'{blocked_metrics / 'metrics.jsonl'}': Is a directory (a folder is where a file":
            f"hydra.run.dir={blocked_metrics}",
        f"'{tmp_path / 'ro-fs'}': Read-only file system (the file system is read-only":
            f"hydra.run.dir={tmp_path / 'ro-fs'}",
        f"'{tmp_path / 'no-perm'}': Permission denied (no permission":
            f"hydra.run.dir={tmp_path / 'no-perm'}",
    }
    results = cli_batch([[*REGRESSION, arg] for arg in cases.values()], tmp_path,
                            patch=FS_PATCH)
    for expected, result in zip(cases, results, strict=True):
        one_line_exit_2(result, f"cannot use {expected}")


DISK_FULL_PATCH = """
import errno, os, torch
import beyondfit.observers.files as files
_save, calls = torch.save, [0]
def save(obj, f, *args, **kwargs):
    calls[0] += 1
    if calls[0] == int(os.environ.get("FULL_AT_SAVE", 0)):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # like write(2): no file name
    return _save(obj, f, *args, **kwargs)
torch.save = save
_write_row, rows = files.MetricsFile.write_row, [0]
def write_row(self, row):
    rows[0] += 1
    if rows[0] == int(os.environ.get("FULL_AT_ROW", 0)):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _write_row(self, row)
files.MetricsFile.write_row = write_row
"""


@pytest.mark.e2e
@pytest.mark.parametrize(("variable", "file"), [("FULL_AT_SAVE", "checkpoints/step-00000010.pt"),
                                                ("FULL_AT_ROW", "metrics.jsonl")])
def test_a_full_disk_is_one_line_and_the_previous_checkpoint_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, file: str
) -> None:
    monkeypatch.setenv(variable, "2" if variable == "FULL_AT_SAVE" else "8")  # both at step 8-10
    run_dir = tmp_path / "run"
    (result,) = cli_batch([[*REGRESSION, f"hydra.run.dir={run_dir}"]], tmp_path,
                              patch=DISK_FULL_PATCH)
    one_line_exit_2(result, f"cannot use '{run_dir / file}': No space left on device "
                                  "(the disk is full: free space, then continue with resume=")
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-00000005.pt"]
    assert safe_load(run_dir / "checkpoints" / "step-00000005.pt")["counters"]["global_step"] == 5


#: Hydra writing .hydra/ on a full disk: the write fails without naming a file.
RECORDS_FULL_PATCH = """
import errno, os
import hydra.core.utils as utils
def save_config(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
utils._save_config = save_config
"""


@pytest.mark.e2e
def test_a_full_disk_as_hydra_writes_its_records_names_the_run_directory(
        tmp_path: Path) -> None:  # fmt: skip
    """Issue 29's full disk: two lines (Hydra's "Error executing job" and ours) and no path."""
    run_dir = tmp_path / "run"
    (result,) = cli_batch([[*REGRESSION, f"hydra.run.dir={run_dir}"]], tmp_path,
                          patch=RECORDS_FULL_PATCH)
    one_line_exit_2(result, f"cannot use '{run_dir}': No space left on device (the disk is "
                            "full: free space, then continue with resume=")


def _on_a_small_disk(size: str, args: list[str], folder: Path) -> tuple[int, str, list[str]]:
    """Run the command line with its run directory on a ``size`` tmpfs of its own (a mount
    namespace, ``unshare -Urm``): its exit status, stderr and the checkpoints it left."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare to mount a small file system")
    mount = folder / "mnt"
    mount.mkdir()
    script = (f"mount -t tmpfs -o size={size} tmpfs {mount} || exit 99\n"
              f'"{sys.executable}" -m beyondfit "$@" hydra.run.dir={mount}/run; code=$?\n'
              f"cp -r {mount}/run {folder}/left 2>/dev/null; exit $code\n")
    env = {**os.environ, "PYTHONPATH": str(kit.ROOT)}
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", *args], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=300)
    if done.returncode == 99 or "unshare:" in done.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()[:200]}")
    left = sorted(p.name for p in (folder / "left" / "checkpoints").glob("*.pt"))
    return done.returncode, done.stderr, left


@pytest.mark.e2e
@pytest.mark.parametrize(("size", "failed", "kept"), [
    ("12k", "run", []),  # Hydra's records
    ("64k", "run/checkpoints/step-00000005.pt", []),
    ("200k", "run/checkpoints/step-00000010.pt", ["step-00000005.pt"])])
def test_a_real_full_disk_is_one_line_naming_the_file_and_the_checkpoints_load(
        tmp_path: Path, size: str, failed: str, kept: list[str]) -> None:  # fmt: skip
    """Not a simulated one: a tmpfs of ``size`` fills at Hydra's records, at the first or at a
    later checkpoint (torch's zip writer said "unexpected pos", a RuntimeError, over the
    ENOSPC). One line naming the file; each checkpoint written before still loads."""
    code, stderr, left = _on_a_small_disk(size, REGRESSION, tmp_path)
    one_line_exit_2({"code": code, "stderr": stderr, "stdout": ""},
                    f"cannot use '{tmp_path / 'mnt' / failed}': No space left on device")
    assert left == kept, left
    for name in left:
        assert safe_load(tmp_path / "left" / "checkpoints" / name)["counters"]["global_step"] == 5


@pytest.mark.e2e
def test_a_checkpoint_past_the_file_size_limit_is_one_line_naming_it(tmp_path: Path) -> None:
    """``ulimit -f`` below a checkpoint's size: EFBIG under torch's writer, as a full disk."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(kit.ROOT)}
    done = subprocess.run([sys.executable, "-m", "beyondfit", *REGRESSION,
                           "task.hidden=[256,256]", f"hydra.run.dir={run_dir}"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=limit)  # fmt: skip
    one_line_exit_2(done, f"cannot use '{run_dir / 'checkpoints' / 'step-00000005.pt'}': File "
                          "too large (the file grew past this process's file-size limit "
                          "(ulimit -f): raise it, then continue with resume=RUN_DIR)")
    assert not list((run_dir / "checkpoints").iterdir())  # no half-written or temporary file


def test_os_error_line_names_the_path_and_the_fix() -> None:
    import errno

    line = os_error_line(OSError(errno.ENOSPC, "No space left on device", "/runs/a/x.pt"))
    assert line == ("cannot use '/runs/a/x.pt': No space left on device (the disk is full: "
                    "free space, then continue with resume=RUN_DIR)")


@pytest.mark.e2e
# ---------------------------------------------------------------- foreign checkpoints
def test_foreign_and_broken_resume_targets_are_one_line_before_training(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    notes = tmp_path / "notes.txt"
    notes.write_text("these are not weights\n")
    noise = tmp_path / "noise.pt"
    noise.write_bytes(os.urandom(3000))
    weights = tmp_path / "weights.pt"
    results = cli_batch([
        [*REGRESSION, f"hydra.run.dir={run_dir}"],
        # The run finished: only an extension would load its checkpoint.
        [*REGRESSION, "optimizer=sgd", f"resume={run_dir}", "resume_extend=true"],
        ["+task=autoencoder", *QUIET, f"resume={run_dir}", "resume_extend=true"],
        [*REGRESSION, f"resume={notes}", f"hydra.run.dir={tmp_path / 'r1'}"],
        [*REGRESSION, f"resume={noise}", f"hydra.run.dir={tmp_path / 'r2'}"],
        [*REGRESSION, f"resume={weights}", f"hydra.run.dir={tmp_path / 'r3'}"],
    ], tmp_path, patch=(
        "import torch; torch.save({'model': {'w': torch.zeros(1)}}, "
        f"{str(weights)!r})"
    ))
    assert results[0]["code"] == 0, results[0]["stderr"]
    one_line_exit_2(results[1], "was written with optimizer._target_='torch.optim.AdamW', "
                                      "this run has 'torch.optim.SGD'")
    one_line_exit_2(results[2], "was written with task._target_="
                                      "'beyondfit.tasks.regression.build'")
    one_line_exit_2(results[3], f"checkpoint '{notes}' is truncated or corrupt, or not a "
                                      "checkpoint")
    one_line_exit_2(results[4], f"checkpoint '{noise}' is truncated or corrupt")
    # A file without a checksum warns so first (a diagnostic, on stderr too), then the error.
    one_line_exit_2(results[5], "is not a whole training checkpoint (no updates, "
                                "counters, metrics)", lines=2)


def engine_and_data(optimizer: str = "adam", callbacks: tuple = (), nan_at: int | None = None):
    calls = [0]

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        loss = F.mse_loss(model(batch[0]), batch[1])
        if nan_at is not None and calls[0] >= nan_at:
            # A finite loss whose gradient is NaN: sqrt at 0.
            loss = loss + torch.sqrt(model[0].weight.sum() * 0.0)
        return loss

    opt = torch.optim.Adam if optimizer == "adam" else functools.partial(torch.optim.SGD,
                                                                           momentum=0.9)
    engine = kit.make_engine(lambda: kit.mlp(4, 8), loss_fn, optimizer=opt,
                             on_nonfinite="ignore", callbacks=callbacks)
    return engine, kit.sum_batches()


def test_another_optimizer_is_refused_before_anything_is_loaded(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path / "checkpoints", every=5, monitor=None)
    engine, data = engine_and_data("adam", (ckpt,))
    engine.fit(data, max_steps=5)
    other, _ = engine_and_data("sgd")
    before = {k: v.clone() for k, v in other.model.state_dict().items()}
    with pytest.raises(BeyondfitError, match=r"holds the state of another optimizer \(settings "
                                             r"amsgrad, betas"):
        resume(other, tmp_path)
    assert all(torch.equal(other.model.state_dict()[k], v) for k, v in before.items())
    assert other.global_step == 0



def test_a_scheduled_optimizer_resumes_into_a_fresh_engine(tmp_path: Path) -> None:
    """A scheduler writes ``initial_lr`` into the saved groups; a fresh engine builds its own
    scheduler only after ``load``, so that key is scheduler bookkeeping, not another optimizer."""
    engine, data = engine_and_data("adam")
    optimizer = engine.updates[0].optimizer
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    engine.fit(data, max_steps=3)
    path = engine.save(tmp_path / "ckpt.pt")
    fresh, _ = engine_and_data("adam")
    fresh.load(path)
    assert fresh.global_step == 3

# ---------------------------------------------------------------- never save poison
def test_a_checkpoint_with_non_finite_weights_is_never_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A NaN gradient from a finite loss poisons the weights at step 3 (on_nonfinite=ignore
    lets it through): steps 1-2 are saved, nothing after, and the log says why."""
    ckpt = Checkpointer(tmp_path, every=1, keep=10, monitor="loss")
    engine, data = engine_and_data("adam", (ckpt,), nan_at=3)
    with caplog.at_level(logging.WARNING, logger="beyondfit"):
        engine.fit(data, max_steps=5)
    names = sorted(p.name for p in tmp_path.glob("*.pt"))
    assert "step-00000001.pt" in names and "step-00000002.pt" in names
    assert not any(n in names for n in ("step-00000003.pt", "step-00000004.pt",
                                        "step-00000005.pt"))
    assert "not writing step-00000003.pt: non-finite values in 0.weight" in caplog.text
    for path in tmp_path.glob("*.pt"):  # best.pt included
        state = safe_load(path)
        assert nonfinite_entries(state["model"].items()) == [], path
        tensors = [(f"{i}.{k}", v) for i, s in state["updates"][""]["optimizer"]["state"].items()
                   for k, v in s.items()]
        assert nonfinite_entries(tensors) == [], path


@pytest.mark.e2e
# ---------------------------------------------------------------- Ctrl-C during start-up
@pytest.mark.parametrize(("after", "signum"), [
    ("beyondfit", signal.SIGINT), ("torch", signal.SIGINT), ("hydra", signal.SIGINT),
    ("beyondfit.cli.app", signal.SIGINT), ("beyondfit", signal.SIGTERM),
    ("beyondfit.cli.app", signal.SIGTERM)])
def test_ctrl_c_during_start_up_is_one_line_and_130(tmp_path: Path, after: str,
                                                    signum: signal.Signals) -> None:
    """SIGINT (or SIGTERM) right after a given module finished importing (``-X importtime``
    says when), i.e. before beyondfit's handler exists: one line, exit status 130 (143), no
    traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "beyondfit", *REGRESSION,
         f"hydra.run.dir={tmp_path / 'run'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )
    assert proc.stderr is not None
    finished = re.compile(rf"^import time:.*\|\s*{re.escape(after)}$")
    for line in proc.stderr:
        if finished.match(line.rstrip()):
            break
    proc.send_signal(signum)
    rest = proc.stderr.read()
    proc.wait(timeout=120)
    lines = [ln for ln in rest.splitlines() if ln.strip() and not ln.startswith("import time:")]
    assert proc.returncode == 128 + signum, rest[-2000:]
    assert lines == [f"beyondfit: interrupted ({signum.name})"], rest[-2000:]


#: The command line with its report slowed down: the moment after the last epoch.
SLOW_REPORT = """
import sys, time
import beyondfit.cli.run as run_module
real = run_module.final_record
def slow(*args, **kwargs):
    print("REPORTING", file=sys.stderr, flush=True)
    time.sleep(120)
    return real(*args, **kwargs)
run_module.final_record = slow
from beyondfit.cli.app import main
main()
"""


@pytest.mark.e2e
def test_sigterm_after_the_last_epoch_names_the_checkpoint_and_the_resume_and_143(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_REPORT, *REGRESSION,
                             f"hydra.run.dir={run}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("REPORTING"):
            break
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    proc.wait(timeout=120)
    assert proc.returncode == 143, rest[-2000:]
    # The run has its checkpoints by now: the lines name the last and the command that
    # finishes the run (issue 59: "interrupted" alone left the user to find both).
    said = [ln for ln in rest.splitlines() if ln.strip()]
    assert len(said) == 2, rest[-2000:]
    assert said[0].startswith("beyondfit: interrupted (SIGTERM) after training; its last "
                              f"checkpoint: {run / 'checkpoints'}/step-"), said
    assert said[1].startswith("beyondfit: resume with: python -m beyondfit ") and said[
        1].endswith(f"resume={run}"), said
    assert (run / "metrics.jsonl").exists() and not (run / "result.json").exists()


#: The command line with a Ctrl-C sent to itself at a moment of start-up: right after the run
#: directory is locked, or as Hydra sets up logging or writes .hydra/ into it.
CTRL_C_AT = """
import importlib, os, signal, sys
module, name = sys.argv.pop(1).split(":")
owner = importlib.import_module(module)
real = getattr(owner, name)
def interrupted(*args, **kwargs):
    result = real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGINT)
    return result
setattr(owner, name, interrupted)
from beyondfit.cli.app import main
main()
"""


@pytest.mark.e2e
@pytest.mark.parametrize("moment", ["beyondfit.cli.rundir:claim_run_dir",
                                    "hydra.core.utils:configure_log",
                                    "hydra.core.utils:_save_config"])
def test_ctrl_c_between_the_lock_and_training_is_one_line_and_130(tmp_path: Path,
                                                                  moment: str) -> None:
    """Not swallowed: the run stops there (no training, no result), one line, status 130."""
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", CTRL_C_AT, moment, *REGRESSION,
                           f"hydra.run.dir={run}"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 130, done.stderr[-2000:]
    assert [ln for ln in done.stderr.splitlines() if ln.strip()] == [
        "beyondfit: interrupted (SIGINT)"], done.stderr[-2000:]
    assert not (run / "metrics.jsonl").exists() and not (run / "result.json").exists()
