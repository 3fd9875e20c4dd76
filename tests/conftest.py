"""Shared test set-up: one CPU thread (tiny models run fastest and most repeatably on one), the
kit of ``tests/kit.py`` as fixtures, and the line between unit and end-to-end tests.

A test that starts a process (a command line, torchrun, a vector env's workers), or runs an
example or bench script the way its user does, is an end-to-end test and says so with
``@pytest.mark.e2e`` (or a module's ``pytestmark``); any other test that starts a process
fails, naming the mark. So the unit tests alone,
``python -m pytest -m "not e2e and not slow" -n 2``, never wait for a process.
"""

import multiprocessing.process
import os
import platform
import subprocess
import sys
from pathlib import Path

# Inductor compiles in the process that asks, not in a pool of worker processes it would
# start in every test worker and every command line the tests run: on two cores the pool buys
# nothing, and its processes are one more thing that can outlive or block a run. Set before
# torch is imported (its config reads the variable once); the processes tests start inherit it.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import kit` from any test

from kit import Recorder

torch.set_num_threads(1)
# Asked once here, then cached: a library asking for it (mlflow's import does) would otherwise
# run `uname -p` in a process inside a unit test, and fail only where nothing asked before.
platform.processor()


class StartsAProcess(BaseException):
    """Raised (past ``except Exception``) when an unmarked test starts a process."""


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest,
                                 monkeypatch: pytest.MonkeyPatch):
    """Refuse processes in tests without the ``e2e`` mark (``slow`` runs are never unit runs:
    they may start processes unmarked)."""
    if any(request.node.get_closest_marker(m) is not None for m in ("e2e", "slow")):
        yield
        return
    started: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        started.append(repr(args[1:2])[:200])
        raise StartsAProcess(f"{request.node.nodeid} starts a process: mark it "
                             "@pytest.mark.e2e")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    yield
    if started:
        pytest.fail(f"this test starts a process ({started[0]}): mark it @pytest.mark.e2e")


@pytest.fixture
def recorder() -> Recorder:
    """A fresh :class:`kit.Recorder` callback."""
    return Recorder()


def pytest_unconfigure(config: pytest.Config) -> None:
    """A process that does not exit within two minutes of deciding to (a library's thread or
    atexit handler waiting on something that never comes) prints every thread's stack and
    exits: no test is running then, so neither ``timeout`` nor ``faulthandler_timeout`` fires,
    and an xdist run would otherwise wait on that worker until CI's clock runs out. Armed when
    the interpreter starts shutting down (before it joins the threads left running), not at the
    end of the tests: an xdist worker that is done waits for the others, however long."""
    import faulthandler
    import threading

    arm = lambda: faulthandler.dump_traceback_later(120, exit=True)  # noqa: E731
    getattr(threading, "_register_atexit", __import__("atexit").register)(arm)
