"""Real data that ships on disk: scikit-learn's bundled diabetes and digits sets.

The files are read directly from scikit-learn's package folder, without importing
scikit-learn (its import alone costs seconds of start-up).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from beyondfit.core.errors import BeyondfitError


def _sklearn_data_dir() -> Path:
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise BeyondfitError(
            "the built-in data sets come with scikit-learn, which is not installed; "
            "pip install scikit-learn (or give your own file with task.data.path=...)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"


def diabetes() -> tuple[np.ndarray, np.ndarray]:
    """The diabetes regression set: 442 patients, 10 raw features, disease progression target."""
    folder = _sklearn_data_dir()
    x = np.loadtxt(folder / "diabetes_data_raw.csv.gz", dtype=np.float32)
    y = np.loadtxt(folder / "diabetes_target.csv.gz", dtype=np.float32).reshape(-1, 1)
    return x, y


def digits() -> tuple[np.ndarray, np.ndarray]:
    """The 8x8 digits set: 1797 images as 64 pixels in [0, 1], and their labels 0-9."""
    data = np.loadtxt(_sklearn_data_dir() / "digits.csv.gz", delimiter=",", dtype=np.float32)
    return data[:, :-1] / 16.0, data[:, -1].astype(np.int64)
