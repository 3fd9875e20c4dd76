"""Smoke run of bench/collect.py (Atari collection speed per ``task.vectorization``): its
docstring's smoke line as typed there, into a temporary folder; the table from the kept file.

Nothing here looks at a timing: the benchmark reports them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "collect.py"


@pytest.mark.runs("nice -n 5 python bench/collect.py")
def test_docstring_smoke_line_measures_both_tables_and_keeps_them(tmp_path: Path) -> None:
    pytest.importorskip("ale_py")
    pytest.importorskip("envpool")
    text = SCRIPT.read_text().split('"""')[1].replace("\\\\\n", " ")
    (line,) = [" ".join(x.split()) for x in text.splitlines()
               if x.strip().startswith("python bench/collect.py") and "/tmp/collect" in x]
    # As docs/how-to/pixels.md types it (nice -n 5), with the smoke line's tiny budgets.
    argv = ["nice", "-n", "5", *(a.replace("/tmp/collect", str(tmp_path / "c"))
                                 for a in shlex.split(line))]
    argv = [sys.executable if a == "python" else a for a in argv]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    kept = json.loads((tmp_path / "c" / "collect.json").read_text())
    (step,), (ppo,) = kept["runs"]["step"]["envpool"], kept["runs"]["ppo"]["envpool"]
    assert step["envs"] == ppo["envs"] == "EnvPoolVectorEnv", (step, ppo)
    assert step["env_steps"] == 16 * 8 and ppo["env_steps"] == 1024
    assert step["cpu_seconds"] > 0 and ppo["cpu_seconds"] > 0
    assert "| envpool |" in done.stdout and kept["versions"]["envpool"]
    again = subprocess.run([sys.executable, str(SCRIPT), "--table", "--results",
                            str(tmp_path / "c")], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and again.stdout == done.stdout
