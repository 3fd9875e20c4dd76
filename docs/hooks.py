"""MkDocs hook: a page's ``<!-- help: MODULE -->`` line becomes ``python -m MODULE --help``'s
output, run at build time, so the command-line reference cannot drift from the parsers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- help: ([\w.]+) -->$", flags=re.M)


def help_text(module: str) -> str:
    """``python -m MODULE --help`` as a user's 100-column terminal shows it."""
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"python -m {module} --help failed: {done.stderr.strip()}")
    return done.stdout.rstrip()


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each help marker by a ``text`` block of that module's help."""
    return MARKER.sub(lambda m: f"```text\n{help_text(m.group(1))}\n```", markdown)
