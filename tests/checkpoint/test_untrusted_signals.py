"""Two Ctrl-C in quick succession end a run with status 130 and a line or two, never a
traceback, wherever the second one lands: during the checkpoint, or while Python shuts down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit import ROOT

pytestmark = pytest.mark.e2e  # every test here starts a command line


def wait_for(path: Path, text: str, run: subprocess.Popen[bytes], limit: float = 120) -> None:
    """Until ``text`` appears in the file ``path`` (or the run ends)."""
    end = time.monotonic() + limit
    while time.monotonic() < end and run.poll() is None:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.01)


@pytest.mark.parametrize("gap", [0.02, "after the resume line"])
def test_a_second_ctrl_c_soon_after_the_first_exits_130_without_traceback(
    tmp_path: Path, gap: float | str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-m", "beyondfit", "+task=regression", "train.epochs=100000",
             "task.early_stopping=null", "plots=false", "hydra.run.dir=run"],
            cwd=tmp_path, env=env, stdout=stdout, stderr=stderr,
        )
        try:
            wait_for(tmp_path / "run" / "metrics.jsonl", '"kind": "epoch"', run)  # training
            run.send_signal(signal.SIGINT)
            if gap == "after the resume line":  # the run is over: Python is shutting down
                wait_for(err, "resume with:", run)
            else:
                time.sleep(float(gap))
            if run.poll() is None:
                run.send_signal(signal.SIGINT)
            code = run.wait(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
    said = err.read_text()
    assert code == 130, said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said


LATE_CTRL_C = """
import os, signal, sys, time, types

class Late:  # torn down with the modules, after every atexit hook: Python's last moments
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)

holder = types.ModuleType("late_holder")
holder.late = Late()
sys.modules["late_holder"] = holder
sys.argv = ["beyondfit", "+task=no_such_task"]
from beyondfit.cli.app import main
main()
"""


def test_a_ctrl_c_in_the_last_moments_of_shutdown_is_ignored_not_fatal(tmp_path: Path) -> None:
    # Python's finalization puts SIG_DFL back for a Python SIGINT handler; a Ctrl-C landing
    # after that (torch's C++ teardown) killed the process with -2 instead of its status. The
    # command line's last atexit hook ignores SIGINT, which finalization leaves ignored.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", LATE_CTRL_C], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    # The run's own status (an unknown task): not -2 (killed), nor 130 (the SIGINT handled).
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
