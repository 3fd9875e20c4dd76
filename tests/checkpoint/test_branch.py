"""Branching a run into a new directory (docs/how-to/resume.md: ``resume=runs/a/checkpoints/best.pt
hydra.run.dir=runs/b``): the new directory's metrics files begin with the rows of the run the
checkpoint came from, up to the checkpoint, then the branch's own, each row once and no
warning (issue 47: it warned that rows "are lost" in the fresh directory). Rows that are truly
not there (the source's file lost them) are still said; a checkpoint from outside any run
directory starts the branch with the epoch rows its history holds, said in one line."""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch

from kit import cli, rows

pytestmark = pytest.mark.e2e  # every test here starts a command line

QUIET = ("device=cpu", "progress.bar=false", "plots=false")  # the run's own log_every kept
PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "resume.md"


def documented(word: str) -> list[str]:
    """The command of the page's first bash block that holds ``word``, as typed there."""
    block = PAGE.read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [re.sub(r"\s+#\s.*$", "", line).strip() for line in block.splitlines()]
    (line,) = [line for line in lines if word in line]
    args = shlex.split(line)
    assert args[:3] == ["python", "-m", "beyondfit"], line
    return args[3:]


def counted(checkpoint: Path) -> int:
    """The metrics rows a checkpoint counted."""
    return torch.load(checkpoint, weights_only=True)["callbacks"]["MetricsFile"]["rows"]


def csv_rows(run: Path) -> list[dict[str, str]]:
    with (run / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def assert_branch(source: Path, branch: Path, checkpoint: Path, said: str) -> None:
    """The branch's rows: the source's up to the checkpoint, then its own, each step once."""
    keep = counted(checkpoint)
    got = rows(branch, timeless=True)
    assert got[:keep] == rows(source, timeless=True)[:keep]
    assert csv_rows(branch)[:keep] == csv_rows(source)[:keep]
    epochs = [r["epoch"] for r in got if r["kind"] == "epoch"]
    assert epochs == list(range(1, len(epochs) + 1))  # every epoch once, in order
    assert len(csv_rows(branch)) == len(got)
    assert "WARNING" not in said and "lost" not in said, said


@pytest.fixture(scope="module")
def run_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's first command, as typed: runs/a with a checkpoint every 100 steps."""
    root = tmp_path_factory.mktemp("branch")
    done = cli(*documented("hydra.run.dir=runs/a"), cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    return root / "runs" / "a"


@pytest.mark.runs("python -m beyondfit +task=regression resume=runs/a/checkpoints/best.pt "
                  "hydra.run.dir=runs/b")
def test_the_documented_branch_command_copies_the_rows_up_to_the_checkpoint(run_a: Path
                                                                            ) -> None:
    root = run_a.parent.parent
    done = cli(*documented("hydra.run.dir=runs/b"), cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_branch(run_a, root / "runs" / "b", run_a / "checkpoints" / "best.pt",
                  done.stdout + done.stderr)
    assert json.loads((root / "runs" / "b" / "result.json").read_text())["status"] == "finished"


def test_a_branch_from_a_step_checkpoint_or_a_run_directory_does_the_same(run_a: Path) -> None:
    root = run_a.parent.parent
    step = run_a / "checkpoints" / "step-00000100.pt"
    for given, into in ((step, "runs/c"), (run_a, "runs/d")):
        done = cli("+task=regression", *QUIET, f"resume={given}", f"hydra.run.dir={into}",
                   cwd=root)
        assert done.returncode == 0, done.stderr[-2000:]
        newest = step if given == step else sorted(run_a.glob("checkpoints/step-*.pt"))[-1]
        assert_branch(run_a, root / into, newest, done.stdout + done.stderr)


def test_rows_the_source_run_lost_are_still_said(run_a: Path, tmp_path: Path) -> None:
    source = Path(shutil.copytree(run_a, tmp_path / "a"))
    (source / "metrics.jsonl").unlink()
    done = cli("+task=regression", *QUIET, f"resume={source / 'checkpoints' / 'best.pt'}",
               f"hydra.run.dir={tmp_path / 'b'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout + done.stderr
    keep = counted(source / "checkpoints" / "best.pt")
    assert f"WARNING: {source / 'metrics.jsonl'} holds {keep} fewer rows than the checkpoint " \
        "counted" in said, said
    assert f"{source / 'metrics.csv'} holds" not in said  # the table was there to copy


def test_a_checkpoint_from_no_run_directory_starts_with_its_epoch_rows(run_a: Path,
                                                                      tmp_path: Path) -> None:
    loose = Path(shutil.copy(run_a / "checkpoints" / "best.pt", tmp_path / "model.pt"))
    done = cli("+task=regression", *QUIET, f"resume={loose}", "hydra.run.dir=runs/e",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout + done.stderr
    assert "WARNING" not in said and "lost" not in said, said
    epochs = torch.load(loose, weights_only=True)["history"]
    assert f"begins with the {len(epochs)} epoch rows of the checkpoint's history" in said
    got = rows(tmp_path / "runs" / "e")
    assert [r["kind"] for r in got[:len(epochs)]] == ["epoch"] * len(epochs)
    assert [r["epoch"] for r in got if r["kind"] == "epoch"][:len(epochs) + 1] == \
        list(range(1, len(epochs) + 2))
