"""Test helper: run the real command line (``beyondfit.cli.app.main``) on many argument lists
in one child process, so each case costs its own work and not torch's and Hydra's import.

Each case gets the exit status, stderr and stdout that ``python -m beyondfit ARGS`` would
give (for errors before or during a run; Ctrl-C is tested with real processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# PATCH (optional) is Python run once in the child before the cases, e.g. to simulate a
# full disk by monkeypatching.
CHILD = r"""
import contextlib, io, json, os, sys, traceback
exec(os.environ.get("BEYONDFIT_TEST_PATCH", ""))
from hydra.core.global_hydra import GlobalHydra
from beyondfit.cli.app import main
results = []
for args in json.loads(sys.stdin.read()):
    GlobalHydra.instance().clear()
    sys.argv = ["beyondfit", *args]
    err, out = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            code = "escaped"
            traceback.print_exc(file=err)
    results.append({"code": code, "stderr": err.getvalue(), "stdout": out.getvalue()})
print("RESULTS " + json.dumps(results))
"""


def run_cli_batch(cases: list[list[str]], cwd: Path, patch: str = "") -> list[dict]:
    """Run each argument list through ``main()`` in one child; one result dict per case."""
    env = {**os.environ, "BEYONDFIT_TEST_PATCH": patch}
    done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(cases), cwd=cwd,
                          capture_output=True, text=True, timeout=900, env=env)
    marker = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert marker, f"the child failed: {done.stderr[-3000:]}"
    return json.loads(marker[-1][len("RESULTS "):])


def assert_one_clear_line(result: dict, expected: str, context: str = "") -> None:
    """Exit 2, at most two short lines on stderr, no traceback, and ``expected`` in them."""
    stderr = result["stderr"]
    lines = [line for line in stderr.splitlines() if line.strip()]
    where = f"{context}: {stderr!r}"
    assert result["code"] == 2, where
    assert "Traceback" not in stderr + result["stdout"], where
    assert 1 <= len(lines) <= 2, where
    assert all(len(line) <= 320 for line in lines), where
    # The error line; a warning before it is on stderr too (diagnostics never go to stdout).
    assert lines[0].startswith(("beyondfit: error: ", "WARNING: ")), where
    assert lines[-1].startswith("beyondfit: error: "), where
    assert expected in stderr, where
