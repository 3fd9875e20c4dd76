"""Resuming a run that finished (it stopped early, solved, or ran its budget) says so and changes
nothing, byte for byte, unless the user asks to extend it with ``resume_extend=true``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kit import cli


def tree_hashes(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha256), and every folder (-> "dir")."""
    found = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.mark.e2e
def test_resume_of_an_early_stopped_run_changes_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = cli("+task=regression", "task.early_stopping.patience=2", "train.epochs=60",
               f"hydra.run.dir={run_dir}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run_dir / "result.json").read_text())
    assert record["status"] == "finished" and record["finished"] == "stopped early"
    before = tree_hashes(run_dir)
    for target in (run_dir, run_dir / "checkpoints", sorted(run_dir.glob("checkpoints/*.pt"))[0]):
        again = cli("+task=regression", "task.early_stopping.patience=2", "train.epochs=60",
                    f"resume={target}", cwd=tmp_path)  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        (line,) = [x for x in again.stdout.splitlines() if "already finished" in x]
        assert line.startswith(f"beyondfit: {run_dir} already finished (stopped early at step "
                               f"{record['step']}: val_loss ")
        assert str(run_dir / "result.json") in line and "resume_extend=true" in line
        assert tree_hashes(run_dir) == before  # byte-identical, nothing added
    assert not (tmp_path / "outputs").exists()  # no new run directory either


@pytest.mark.e2e
def test_a_finished_cartpole_run_extends_only_when_asked(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    common = ("+task=cartpole", "task.confirm_episodes=5", "plots=false")
    done = cli(*common, "task.total_env_steps=1024", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads((run_dir / "result.json").read_text())
    assert first["finished"] in ("ran its budget", "solved")
    before = tree_hashes(run_dir)
    # A larger budget alone does not train a finished run on.
    again = cli(*common, "task.total_env_steps=2048", f"resume={run_dir}", cwd=tmp_path)
    assert again.returncode == 0 and "already finished" in again.stdout, again.stderr[-3000:]
    assert tree_hashes(run_dir) == before
    # Asked explicitly: it continues from its last checkpoint to the new budget (an RL run's
    # one epoch ended with its env steps: a second epoch takes it to the new total).
    more = cli(*common, "task.total_env_steps=2048", "train.epochs=2", "resume_extend=true",
               f"resume={run_dir}", cwd=tmp_path)  # fmt: skip
    assert more.returncode == 0, more.stderr[-3000:]
    assert "resumed from" in more.stdout + more.stderr
    extended = json.loads((run_dir / "result.json").read_text())
    assert extended["step"] > first["step"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("env_steps", 0) for r in rows) == 2048


@pytest.mark.e2e
def test_a_kill_after_the_last_checkpoint_of_a_stopped_run_resumes_to_the_same_result(
    tmp_path: Path,
) -> None:
    # Killed after the final checkpoint, before the run wrote its result: a resume trains no
    # more (the checkpoint recorded the stop) and ends with the same model and values.
    run_dir = tmp_path / "run"
    args = ("+task=regression", "task.early_stopping.patience=2", "train.epochs=60",
            "plots=false")
    done = cli(*args, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads((run_dir / "result.json").read_text())
    rows = (run_dir / "metrics.jsonl").read_bytes()
    (run_dir / "result.json").unlink()
    again = cli(*args, f"resume={run_dir}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads((run_dir / "result.json").read_text())
    assert (second["step"], second["values"], second["finished"]) == (
        first["step"], first["values"], "stopped early")
    assert (run_dir / "metrics.jsonl").read_bytes() == rows  # no step trained, no row added


@pytest.mark.e2e
def test_resume_of_a_checkpoint_file_that_does_not_exist_is_one_line_not_finished(
        tmp_path: Path) -> None:
    """Issue 47: a missing checkpoint file inside a finished run's checkpoints/ answered "already
    finished", exit 0; it is the missing file, named, exit 2, and the run as it was."""
    from kit import one_line_exit_2

    run_dir = tmp_path / "runs" / "a"
    common = ("+task=regression", "train.epochs=2", "plots=false")
    done = cli(*common, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir / "checkpoints" / "best.pt").unlink()  # deleted by hand since
    before = tree_hashes(run_dir)
    kept = sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
    cases = {  # resume= as typed: what the line must say
        "runs/a/checkpoints/step-99999999.pt": f"'runs/a/checkpoints' holds {', '.join(kept)}",
        "runs/a/checkpoints/best.pt": "give one of them, or resume='runs/a' for its newest",
        "runs/a/checkpoint/step-00000024.pt": "give a checkpoint file or a run directory",
        "runs/aa": "give a checkpoint file or a run directory",
    }
    for missing, words in cases.items():
        again = cli(*common, f"resume={missing}", cwd=tmp_path)
        one_line_exit_2(again, f"resume={missing!r} does not exist; ", words)
        assert "already finished" not in again.stdout + again.stderr
        assert tree_hashes(run_dir) == before
