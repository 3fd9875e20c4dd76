"""A strategy name is resolved above the core (issue 46): the core alone knows one process;
the distributed layer puts its resolver in place, and ``from beyondfit import Engine`` has it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kit import ROOT

PROBE = """
import os, sys, torch
from torch import nn
import beyondfit.core.engine as core
model = nn.Linear(2, 1)
opt = lambda p: torch.optim.SGD(p, 0.1)
assert type(core.Engine(model, lambda m, b: m(b).sum(), opt).strategy).__name__ == "Strategy"
try:
    core.Engine(model, lambda m, b: m(b).sum(), opt, strategy="ddp")
except Exception as exc:
    print("core:", exc)
assert "beyondfit.distributed" not in sys.modules
from beyondfit import Engine
assert "beyondfit.distributed.connector" in sys.modules
from beyondfit.core.strategy import resolve
from beyondfit.distributed.connector import resolve_strategy
import beyondfit.core.strategy as s
print("resolver:", s._resolve is resolve_strategy)
"""


@pytest.mark.e2e  # a fresh interpreter: which modules are imported is the point
def test_the_core_resolves_names_to_one_process_and_the_package_to_its_launch() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("core: the 'ddp' strategy under a launch of several processes "
                               "needs beyondfit.distributed")
    assert lines[1] == "resolver: True"
