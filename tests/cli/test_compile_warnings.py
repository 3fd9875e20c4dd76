"""A compiled run prints none of torch's compiler warnings (dynamo's and inductor's, several
lines each about torch's internals): what matters is said once, in one line of ours (issue 47:
``engine.compile=true debug.anomaly=true`` printed 28 lines of dynamo warnings, a closure whose
constant changes each step 10 before our one line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit import cli

QUIET = ["plots=false", "logger=[]", "progress.bar=false", "device=cpu"]

# A task of one's own whose loss reads a Python number that changes every step. The limit is
# lowered from torch's 8 so that it is reached in a few steps, not a minute of compiling.
DRIFT = '''
import torch
from torch import nn

from beyondfit import Task

torch._dynamo.config.recompile_limit = 2
STEP = [0]


def build(seed: int = 0):
    torch.manual_seed(seed)
    x = torch.randn(96, 3)
    batches = [(x[i:i + 16], x[i:i + 16].sum(1, keepdim=True)) for i in range(0, 96, 16)]

    def loss_fn(model, batch):
        inputs, target = batch
        STEP[0] += 1
        scale = 1.0 + 0.001 * STEP[0]
        return ((model(inputs) * scale - target) ** 2).mean()

    return Task(model=nn.Linear(3, 1), loss_fn=loss_fn, train_data=batches, val_data=None)
'''


def torch_lines(stderr: str) -> list[str]:
    """The lines torch's own logging or warnings would print."""
    return [line for line in stderr.splitlines()
            if "torch/_" in line or "torch._dynamo" in line or line.startswith(("W1", "W0"))
            or "TORCH_LOGS" in line or "Graph break" in line]


@pytest.mark.e2e
def test_compile_under_debug_anomaly_says_once_why_it_gains_nothing(tmp_path: Path) -> None:
    done = cli("+task=regression", "engine.compile=true", "debug.anomaly=true", "train.epochs=1",
               *QUIET, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert torch_lines(done.stderr) == [], done.stderr
    said = [line for line in done.stderr.splitlines() if "debug.anomaly checks every" in line]
    assert len(said) == 1 and "engine.compile=false" in said[0], done.stderr
    assert len(done.stderr.splitlines()) <= 4, done.stderr


@pytest.mark.e2e
def test_a_closure_recompiled_every_step_is_one_line_naming_its_value(tmp_path: Path) -> None:
    (tmp_path / "drift.py").write_text(DRIFT)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "drift.yaml").write_text("_target_: drift.build\nseed: 0\n")
    done = cli("--config-dir", "conf", "+task=drift", "engine.compile=true", "train.epochs=2",
               "checkpoint.monitor=null", *QUIET, f"hydra.run.dir={tmp_path / 'run'}",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert torch_lines(done.stderr) == [], done.stderr
    lines = done.stderr.strip().splitlines()
    assert all(line.startswith("WARNING: compile: ") for line in lines), done.stderr
    # Both graphs that read the value (the whole step, then the closure alone) hit the limit:
    # said once, as the reason the step runs eagerly.
    (limit,) = [line for line in lines if "torch's limit" in line]
    assert limit.startswith("WARNING: compile: the optimizer's whole step runs eagerly "
                            "(recompiled 2 times, torch's limit: a value changed at "
                            "drift.py:18 in loss_fn (G["), limit
    assert "keep a Python number that changes between steps" in limit
