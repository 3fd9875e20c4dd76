"""Shared test set-up: one CPU thread (tiny models run fastest and most repeatably on one), and
the kit of ``tests/kit.py`` as fixtures."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import kit` from any test

from kit import Recorder

torch.set_num_threads(1)


@pytest.fixture
def recorder() -> Recorder:
    """A fresh :class:`kit.Recorder` callback."""
    return Recorder()
