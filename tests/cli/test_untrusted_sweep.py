"""A multirun sweep runs every job: a job whose settings fail fails alone, and the sweep ends
with a summary of the failed jobs on stderr and a non-zero exit."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit import cli


@pytest.mark.e2e
def test_a_failing_job_fails_alone_and_the_sweep_reports_it(tmp_path: Path) -> None:
    done = cli("-m", "+task=regression", "task.val_fraction=0.2,7,0.3", "train.epochs=1",
               "plots=false", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    for job in ("0", "2"):  # the jobs before and after the bad one both ran to the end
        assert (tmp_path / "sweep" / job / "metrics.jsonl").is_file(), done.stderr
    assert not (tmp_path / "sweep" / "1" / "metrics.jsonl").exists()
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 2, done.stderr
    assert lines[0].startswith("beyondfit: error: job 1 (") and "val_fraction=7" in lines[0]
    assert lines[1].startswith("beyondfit: error: 1 job(s) of the sweep failed")
    assert "job 1 (+task=regression task.val_fraction=7" in lines[1]


@pytest.mark.e2e
def test_a_sweep_without_failures_exits_0(tmp_path: Path) -> None:
    done = cli("-m", "+task=regression", "seed=0,1", "train.epochs=1", "plots=false",
               "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert done.returncode == 0 and "failed" not in done.stderr, done.stderr
