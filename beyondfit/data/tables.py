"""Reading a user's table: CSV or ``.npz`` into feature and target arrays."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from beyondfit.core.errors import BeyondfitError


def load_table(
    path: str | Path, target: str | None = None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features and targets from a CSV (header row, numeric columns) or an ``.npz`` (``x``, ``y``).

    Returns ``(x, y, feature_names)`` as float32 arrays, ``y`` of shape ``(n, k)``.
    Every problem (missing file or column, empty file, text or NaN/inf values) is a
    :class:`BeyondfitError` naming the file and what to fix.
    """
    path = Path(path)
    if not path.is_file():
        raise BeyondfitError(f"data file {str(path)!r} does not exist; check task.data.path")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        x, y, names = _load_npz(path)
    elif suffix in (".csv", ".txt"):
        x, y, names = _load_csv(path, target)
    else:
        raise BeyondfitError(
            f"data file {str(path)!r} has suffix {suffix!r}; use a .csv (with task.data.target) "
            "or an .npz with arrays x and y"
        )
    for label, array in (("features", x), ("targets", y)):
        if not np.isfinite(array).all():
            rows = np.nonzero(~np.isfinite(array.reshape(len(array), -1)).all(axis=1))[0]
            raise BeyondfitError(
                f"data file {str(path)!r} has NaN or inf {label} in {len(rows)} row(s) "
                f"(first: row {int(rows[0]) + 1}); clean or drop those rows"
            )
    return x, y, names


def _load_npz(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in ("x", "y") if k not in archive.files]
            if missing:
                raise BeyondfitError(
                    f"data file {str(path)!r} lacks array(s) {missing} (has {archive.files}); "
                    "save it with np.savez(path, x=features, y=targets)"
                )
            x, y = archive["x"], archive["y"]
    except BeyondfitError:
        raise
    except (ValueError, OSError) as exc:
        raise BeyondfitError(f"data file {str(path)!r} is not a readable .npz ({exc})") from None
    try:
        x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y, dtype=np.float32)
    except (TypeError, ValueError):
        raise BeyondfitError(f"data file {str(path)!r}: x and y must be numeric") from None
    if len(x) == 0:
        raise BeyondfitError(f"data file {str(path)!r} is empty (0 rows)")
    if len(x) != len(y):
        raise BeyondfitError(
            f"data file {str(path)!r}: x has {len(x)} rows but y has {len(y)}; align them"
        )
    x = x.reshape(len(x), -1)
    y = y.reshape(len(y), -1)
    return x, y, [f"x{i}" for i in range(x.shape[1])]


def _load_csv(path: Path, target: str | None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        raise BeyondfitError(f"data file {str(path)!r} is empty; it needs a header row and data")
    header = [h.strip() for h in rows[0]]
    if len(rows) < 2:
        raise BeyondfitError(f"data file {str(path)!r} has a header but no data rows")
    if target is None:
        raise BeyondfitError(
            f"data file {str(path)!r} is a CSV: name its target column with "
            f"task.data.target=COLUMN (columns: {', '.join(header)})"
        )
    if target not in header:
        raise BeyondfitError(
            f"target column {target!r} is not in {str(path)!r} (columns: {', '.join(header)}); "
            "set task.data.target to one of them"
        )
    if len(header) < 2:
        raise BeyondfitError(f"data file {str(path)!r} has no feature columns besides the target")
    values = np.empty((len(rows) - 1, len(header)), dtype=np.float32)
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise BeyondfitError(
                f"data file {str(path)!r} line {i} has {len(row)} fields, the header {len(header)}"
            )
        for j, cell in enumerate(row):
            try:
                values[i - 2, j] = float(cell)
            except ValueError:
                raise BeyondfitError(
                    f"data file {str(path)!r} line {i} column {header[j]!r} holds {cell!r}, "
                    "not a number; encode it numerically or drop the column"
                ) from None
    t = header.index(target)
    features = [j for j in range(len(header)) if j != t]
    return values[:, features], values[:, [t]], [header[j] for j in features]
