"""A checkpoint edited and re-sealed with a correct checksum (the checksum is integrity, not
authenticity) is refused in one line naming the field, before "resumed from" is printed and
before anything in the run directory changes; a metrics file that lost rows is reported and
repaired from the checkpoint; a pickle that would call os.system is named unsafe."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from beyondfit.core.state.serialization import atomic_save

from kit import cli

pytestmark = pytest.mark.e2e  # every test here starts a command line

BASE = ("+task=regression", "train.epochs=2", "plots=false")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-epoch regression run, the source of every forgery."""
    root = tmp_path_factory.mktemp("untrusted")
    done = cli(*BASE, "hydra.run.dir=run", cwd=root)
    assert done.returncode == 0, done.stderr
    return root / "run"


def unfinished(finished: Path, to: Path) -> Path:
    """A copy of the run as if killed after its last checkpoint: no final record yet."""
    run = Path(shutil.copytree(finished, to))
    (run / "result.json").unlink(missing_ok=True)
    return run


def newest(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("step-*.pt"))[-1]


def snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and ".hydra" not in p.parts
            and p.name not in ("beyondfit.log", ".beyondfit.lock")}


def forge(run: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit the newest checkpoint and seal it again, as a forger would."""
    path = newest(run)
    state = torch.load(path, weights_only=True)
    edit(state)
    atomic_save(state, path)


def setter(*keys: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        target = state
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value(target[keys[-1]]) if callable(value) else value
    return edit


ADAM = ("updates", "", "optimizer", "state", 0)
FORGERIES = {
    "string step": (setter("counters", "global_step", value="24"),
                    "counters.global_step='24'"),
    "negative step": (setter("counters", "global_step", value=-1), "counters.global_step=-1"),
    "step of 1e15": (setter("counters", "global_step", value=10**15),
                     "counters.global_step=1000000000000000"),
    "string epoch": (setter("counters", "epoch", value="2"), "counters: epoch='2' is not"),
    "huge epoch": (setter("counters", "epoch", value=10**15), "counters: epoch=1000000000000000"),
    "garbage torch rng": (setter("rng", "torch", value=torch.zeros(7, dtype=torch.uint8)),
                          "rng: torch="),
    "garbage python rng": (setter("rng", "python", value=(3, (1, 2), None)), "rng: python="),
    "data position 1e9": (setter("data", "position", value=10**9),
                          "data: position=1000000000 is beyond the"),
    "float data position": (setter("data", "position", value=1e9), "data: position=1000000000.0"),
    "adam state of the wrong shape": (setter(*ADAM, "exp_avg", value=lambda t: t.flatten()[:3]),
                                      "exp_avg=(3,) is not the parameter's shape"),
    "nan adam state": (setter(*ADAM, "exp_avg_sq", value=lambda t: t * math.nan),
                       "exp_avg_sq holds values that are not finite"),
    "string learning rate": (setter("updates", "", "optimizer", "param_groups", 0, "lr",
                                    value="0.1"), "param_groups[0].lr='0.1' is not a number"),
    # Settings the optimizer and scheduler would take from the file instead of the run's
    # configuration (issue 47: these trained, silently wrong, with exit 0).
    "negative learning rate": (setter("updates", "", "optimizer", "param_groups", 0, "lr",
                                      value=-1.0), "param_groups[0].lr=-1.0 is not a learning"),
    "maximize": (setter("updates", "", "optimizer", "param_groups", 0, "maximize", value=True),
                 "param_groups[0].maximize=True but this run's AdamW was built with False"),
    "negative eps": (setter("updates", "", "optimizer", "param_groups", 0, "eps", value=-1.0),
                     "param_groups[0].eps=-1.0 but this run's AdamW was built with 1e-08"),
    "scheduler's base learning rate": (setter("updates", "", "scheduler", "base_lrs",
                                              value=[1.0]), "scheduler.base_lrs=[1.0] but"),
    "string best": (setter("callbacks", "EarlyStopping", "best", value="0.5"),
                    "callbacks.EarlyStopping: best='0.5' is not a number"),
    "string checkpointer best": (setter("callbacks", "Checkpointer", "best", value="low"),
                                 "callbacks.Checkpointer: best='low'"),
    "nan weights": (setter("model", "linear.weight", value=lambda t: t * math.nan),
                    "model: linear.weight holds values that are not finite"),
    "negative metrics rows": (setter("callbacks", "MetricsFile", "rows", value=-5),
                              "callbacks.MetricsFile: rows=-5"),
    "string history": (setter("history", value=["epoch 1"]), "history: row 0='epoch 1'"),
}


@pytest.mark.parametrize("case", list(FORGERIES))
def test_a_forged_field_is_refused_in_one_line_and_nothing_changes(
    finished: Path, tmp_path: Path, case: str
) -> None:
    edit, words = FORGERIES[case]
    run = unfinished(finished, tmp_path / "run")
    forge(run, edit)
    before = snapshot(run)
    done = cli(*BASE, "train.epochs=3", f"resume={run}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    refused = ("was refused", "cannot be restored, nothing was changed")
    assert any(w in done.stderr for w in refused) and "Traceback" not in done.stderr
    assert "resumed from" not in done.stdout + done.stderr
    assert snapshot(run) == before  # no file renamed, cut back or written


@pytest.mark.parametrize("loss", ["truncated", "deleted"])
def test_a_metrics_file_that_lost_rows_is_reported_and_repaired(finished: Path, tmp_path: Path,
                                                                loss: str) -> None:
    run = unfinished(finished, tmp_path / "run")
    metrics = run / "metrics.jsonl"
    rows = metrics.read_text().splitlines(keepends=True)
    if loss == "truncated":
        metrics.write_text("".join(rows[:2]) + rows[2][:10])  # two whole rows, one cut short
    else:
        metrics.unlink()
    done = cli(*BASE, "train.epochs=3", f"resume={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    kept, back = (2, 1) if loss == "truncated" else (0, 2)  # row 1 is epoch 1's row
    said = done.stdout + done.stderr  # the run's log goes where its console goes
    assert "fewer rows than the checkpoint counted" in said, said
    assert f"kept the {kept} rows left, wrote back {back} epoch rows" in said
    after = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert after[:kept] == [json.loads(r) for r in rows[:kept]]
    epochs = [r for r in after if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [1, 2, 3]  # written back, then the new epoch
    old_epochs = [json.loads(r) for r in rows if json.loads(r)["kind"] == "epoch"]
    assert epochs[:2] == old_epochs  # the kept and the written-back rows are the lost ones


def test_a_pickle_that_would_call_os_system_is_named_unsafe(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return os.system, (f"touch {tmp_path / 'PWNED'}",)

    torch.save({"model": {}, "x": Evil()}, tmp_path / "evil.pt")  # no checksum trailer
    done = cli(*BASE, f"resume={tmp_path / 'evil.pt'}", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "refused as unsafe" in done.stderr and "posix.system" in done.stderr
    assert "truncated or corrupt" not in done.stderr and not (tmp_path / "PWNED").exists()
