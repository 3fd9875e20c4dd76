"""Real data on disk: scikit-learn's bundled diabetes, digits, breast cancer and wine sets.

The files are read directly from scikit-learn's package folder, without importing
scikit-learn (its import alone costs seconds of start-up).
"""

from __future__ import annotations

import csv
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


def breast_cancer() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The Wisconsin breast cancer set: 569 tumours, 30 features, labels and class names.

    Labels are 0 (``malignant``) and 1 (``benign``), as scikit-learn's ``load_breast_cancer``.
    """
    return _labelled_csv("breast_cancer.csv")


def wine() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The wine recognition set: 178 wines, 13 chemical features, 3 cultivars (``class_0``...)."""
    return _labelled_csv("wine_data.csv")


def _labelled_csv(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-learn's format: a first line ``n_rows,n_features,class names...``, then rows of
    features followed by the integer label."""
    path = _sklearn_data_dir() / name
    with path.open(newline="") as f:
        head = next(csv.reader(f))
    n_rows, n_features, class_names = int(head[0]), int(head[1]), head[2:]
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    if data.shape != (n_rows, n_features + 1):
        raise BeyondfitError(f"{path} does not hold the {n_rows} x {n_features} table it announces")
    return data[:, :-1].astype(np.float32), data[:, -1].astype(np.int64), class_names
