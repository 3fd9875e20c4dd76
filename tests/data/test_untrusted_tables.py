"""A table from elsewhere is data that must fit float32, be a file, and say enough: a cell
beyond float32 is named by line and column, a FIFO or device is refused (not read forever),
a table with too few validation rows is warned about, and its text labels never reach the
terminal raw (escape sequences, bidi overrides)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from beyondfit import BeyondfitError
from beyondfit.data.tables import read_table

from kit import cli

pytestmark = pytest.mark.e2e  # every test here starts a command line

RUN = ("train.epochs=1", "plots=false", "hydra.run.dir=run")


def test_a_cell_beyond_float32_is_named_by_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "big.csv").write_text("a,y\n1,3\n4,1e39\n7,9\n")
    done = cli("+task=regression", "task.data.path=big.csv", "task.data.target=y", *RUN,
               cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "line 3 column 'y' holds '1e39', beyond float32's range" in done.stderr
    assert "learning rate" not in done.stderr + done.stdout
    np.savez(tmp_path / "big.npz", x=np.array([[1.0], [1e300]]), y=np.array([1.0, 2.0]))
    with pytest.raises(BeyondfitError, match=r"row 2 of x \(x0\) is infinite or beyond float32"):
        read_table(tmp_path / "big.npz")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_is_not_a_table(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "data.csv"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    done = cli("+task=regression", f"task.data.path={path}", "task.data.target=y", *RUN,
               cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is not a regular file (a FIFO, device or socket)" in done.stderr


def test_a_table_with_a_handful_of_validation_rows_is_warned_about(tmp_path: Path) -> None:
    rows = "".join(f"{i},{2 * i + (i % 3)}\n" for i in range(12))
    (tmp_path / "small.csv").write_text("x,y\n" + rows)
    done = cli("+task=regression", "task.data.path=small.csv", "task.data.target=y", *RUN,
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "validation on 2 row(s) of 12: scores on so few rows are noise" in said


def test_text_labels_are_printed_with_their_control_characters_escaped(tmp_path: Path) -> None:
    labels = ["\x1b[31mred", "\u202eevil"]
    rows = "".join(f"{i % 7},{(i * 3) % 5},{labels[i % 2]}\n" for i in range(60))
    (tmp_path / "labels.csv").write_text("a,b,label\n" + rows, encoding="utf-8")
    done = cli("+task=classification", "task.data.path=labels.csv", "task.data.target=label",
               *RUN, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "per-class validation recall:" in said
    assert "\x1b" not in said and "\u202e" not in said  # escaped, not interpreted
    assert "\\x1b[31mred" in said and "\\u202eevil" in said
