"""A checkpoint's stop record, edited and sealed again, cannot end a resumed run: issue 47's trial
ended a DQN run at step 320 of 1,952 as "stopped early" by a rule that never fired (exit 0).
The record must be one the run's own logs show, or the resume is one line naming
``stopped_by``, exit 2, the run directory as it was; a stop that did happen still ends the
resumed run with no step more."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from beyondfit.core.state.serialization import atomic_save

from kit import QUIET, cli, one_line_exit_2

pytestmark = pytest.mark.e2e  # every test here starts a command line

DQN = ("+task=cartpole", "algo=dqn", *QUIET, "task.total_env_steps=800",
       "task.replay.learning_starts=100", "task.eval_episodes=2", "task.eval_every_env_steps=200",
       "task.hidden=[32,32]", "task.confirm_episodes=2", "task.loss.target_every=50",
       "checkpoint.every=8", "checkpoint.keep=100")
REGRESSION = ("+task=regression", "train.epochs=3", *QUIET, "task.early_stopping=null")


def checkpoints(run: Path) -> list[Path]:
    return sorted((run / "checkpoints").glob("step-*.pt"))


def cut_back(run: Path, which: str = "first") -> Path:
    """The run as if killed after its ``which`` (first or middle) checkpoint: the later ones
    and the final record gone."""
    found = checkpoints(run)
    kept = found[0] if which == "first" else found[len(found) // 2]
    for path in found:
        if path > kept:
            path.unlink()
    (run / "result.json").unlink()
    return kept


def forge_stop(path: Path, record: str) -> None:
    state = torch.load(path, weights_only=True)
    state["stopped_by"] = record
    atomic_save(state, path)


def files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and ".hydra" not in p.parts
            and p.name not in ("beyondfit.log", ".beyondfit.lock")}


@pytest.mark.parametrize("which,why", [
    ("middle", "the logged val_return="), ("first", "no val_return was logged yet")])
def test_a_dqn_run_is_not_ended_by_a_stop_rule_that_never_fired(tmp_path: Path, which: str,
                                                                why: str) -> None:
    run = tmp_path / "run"
    done = cli(*DQN, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((run / "result.json").read_text())["finished"] == "ran its budget"
    kept = cut_back(run, which)
    forge_stop(kept, "val_return>=475 (val_return=500)")
    before = files(run)
    refused = cli(*DQN, f"resume={run}", cwd=tmp_path)
    one_line_exit_2(refused, "stopped_by='val_return>=475 (val_return=500)' is not a stop this "
                             f"run's logs show ({why}")
    assert "resumed from" not in refused.stdout + refused.stderr
    assert files(run) == before


def test_a_regression_run_is_not_ended_by_a_record_of_its_own_kind(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rule = "'train.stop=\"val_loss<=0.00001\"'"[1:-1]  # as a shell passes it
    done = cli(*REGRESSION, rule, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    first = cut_back(run)
    forge_stop(first, "val_loss<=0.00001 (val_loss=1e-06)")
    refused = cli(*REGRESSION, rule, f"resume={first}", cwd=tmp_path)
    one_line_exit_2(refused, "nothing was changed: stopped_by: stopped_by=")


def test_a_stop_that_did_happen_still_ends_the_resumed_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rule = 'train.stop="val_loss<=1e9"'  # fires at the first evaluation
    done = cli(*REGRESSION, rule, "checkpoint.every=1000", f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((run / "result.json").read_text())
    assert result["finished"] == "stopped early"
    kept = shutil.copytree(run, tmp_path / "kept")
    (kept / "result.json").unlink()
    again = cli(*REGRESSION, rule, f"resume={kept}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = json.loads((kept / "result.json").read_text())
    assert resumed["finished"] == "stopped early" and resumed["step"] == result["step"]


def test_a_confirmed_rl_stop_still_ends_the_resumed_run(tmp_path: Path) -> None:
    """A stop rule that fired and that the confirming episodes confirmed: the record is the
    training-time evaluation's, the final values the confirmation's; the resume agrees."""
    run = tmp_path / "run"
    rule = 'train.stop="val_return>=5"'  # any CartPole episode lasts 8 steps or more
    done = cli(*DQN, rule, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((run / "result.json").read_text())
    assert result["finished"] == "stopped early", result
    (run / "result.json").unlink()  # killed after its last checkpoint
    again = cli(*DQN, rule, f"resume={run}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = json.loads((run / "result.json").read_text())
    assert resumed["finished"] == "stopped early" and resumed["step"] == result["step"]
    assert resumed["stopped_by"] == result["stopped_by"]
