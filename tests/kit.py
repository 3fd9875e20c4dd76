"""The shared test kit: a command-line runner, a tiny regression problem, a recording callback
and a signal sender. Plain functions and classes (import them); ``conftest.py`` offers the
recorder as a fixture too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from beyondfit import Callback, Engine

ROOT = Path(__file__).resolve().parent.parent


def cli(
    *args: str,
    cwd: Path | None = None,
    module: str = "beyondfit",
    exe: tuple[str, ...] | None = None,
    timeout: float = 600,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command line as a user would: ``python -m MODULE ARGS`` (or ``exe ARGS``).

    The checkout is put first on ``PYTHONPATH``, so the subprocess imports this tree even from
    another directory (``cwd``) and whatever else is installed.
    """
    command = [*(exe or (sys.executable, "-m", module)), *args]
    environ = dict(os.environ if env is None else env)
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), environ.get("PYTHONPATH", "")) if p
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=environ)


def wait_for_file(path: Path, timeout: float = 120.0) -> bool:
    """True once ``path`` is a file: the command line draws ``curves.png`` in a separate
    process after it returns (``CurvesPlot(background=True)``)."""
    deadline = time.monotonic() + timeout
    while not Path(path).is_file():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def sum_data(n: int = 128, d: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A tiny regression problem: ``y = x.sum(1)`` for Gaussian ``x`` of shape ``(n, d)``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, x.sum(1, keepdim=True)


def mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The plainest loss closure: mean squared error of ``model(x)`` against ``y``, in fp32."""
    x, y = batch
    return ((model(x).float() - y) ** 2).mean()


class Recorder(Callback):
    """Keeps every ``on_log`` row, every evaluation and every epoch row, as plain dicts."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []
        self.evals: list[dict[str, float]] = []
        self.epochs: list[dict[str, float]] = []

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Record a running row."""
        self.logs.append(dict(logs))

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Record an evaluation."""
        self.evals.append(dict(logs))

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Record an epoch row."""
        self.epochs.append(dict(logs))


class SendSignal(Callback):
    """Sends this process ``signum`` at the end of optimizer step ``at``, as Ctrl-C would."""

    def __init__(self, at: int, signum: int = signal.SIGINT) -> None:
        self.at, self.signum = at, signum

    def on_step_end(self, engine: Engine) -> None:
        """Send the signal once the engine has counted step ``at``."""
        if engine.global_step == self.at:
            os.kill(os.getpid(), self.signum)
