"""Reading a user's table: a CSV or an ``.npz`` into named columns, or a one-line reason why not.

A table is read into :class:`Column` objects: numbers (``float64``, NaN where a cell is
missing) or categories (strings, ``None`` where missing). What becomes of them (one-hot
encoding, imputation, standardization) is :mod:`beyondfit.data.encoding`'s job, and what
the target must look like is the task's. Every failure here is a :class:`BeyondfitError`
that names the file and the reason in one line: a missing or unreadable file, text that is
not UTF-8, binary data, a ragged row, a number column with a word in it, infinities,
complex values. A UTF-8 byte-order mark (Excel writes one) is dropped.
"""

from __future__ import annotations

import csv
import io
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import FLOAT32_MAX

#: Cells read as missing (compared stripped and lower-cased).
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "none", "?"})
_SNIFF_BYTES = 8192  # a NUL byte in the first 8 KiB: binary data, not text


@dataclass
class Column:
    """One column of a table.

    Attributes:
        name: the header name (``x0``, ``x1``, ... for an ``.npz``).
        values: ``float64`` array with NaN for missing cells (numbers), or an object array of
            stripped strings with ``None`` for missing cells (categories). An ``.npz`` target
            may be 2-D (several regression outputs).
        numeric: which of the two it is.
    """

    name: str
    values: np.ndarray
    numeric: bool

    def missing(self) -> np.ndarray:
        """Boolean mask of the missing cells (rows with any missing value, for 2-D values)."""
        if self.numeric:
            mask = np.isnan(self.values)
            return mask.reshape(len(mask), -1).any(axis=1)
        return np.array([v is None for v in self.values], dtype=bool)


@dataclass
class Table:
    """A table read from ``path``: feature columns, the target column, and where rows came from.

    Attributes:
        path: the file.
        features: the feature columns, in file order.
        target: the target column.
        row_labels: for messages, where each row is in the file (``"line 7"``, ``"row 3"``).
    """

    path: Path
    features: list[Column]
    target: Column
    row_labels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.target.values)

    def where(self, row: int) -> str:
        """Where row ``row`` (0-based) is in the file, e.g. ``line 7``."""
        return self.row_labels[row] if self.row_labels else f"row {row + 1}"

    def error(self, reason: str) -> BeyondfitError:
        """A :class:`BeyondfitError` about this table: ``data file 'PATH' REASON``."""
        return BeyondfitError(f"data file {str(self.path)!r} {reason}")


def read_table(path: str | Path, target: str | None = None, *, narrow: bool = False) -> Table:
    """Read a CSV (header row; ``target`` names the target column) or an ``.npz`` (``x``, ``y``).

    Raises :class:`BeyondfitError` naming the file and the reason for any file that cannot
    be read as a table. ``narrow``: refuse, before a cell is parsed, a table with at least as
    many feature columns as rows (a model needs more rows than inputs: the supervised tasks'
    rule), so that a very wide table is one line at once, not minutes of parsing.
    """
    path = Path(path)
    if not path.exists():
        raise BeyondfitError(f"data file {str(path)!r} does not exist; check task.data.path")
    if path.is_dir():
        raise BeyondfitError(
            f"data file {str(path)!r} is a directory, not a file; check task.data.path"
        )
    if not path.is_file():  # reading a FIFO would wait forever, a device without end
        raise BeyondfitError(
            f"data file {str(path)!r} is not a regular file (a FIFO, device or socket); give a "
            ".csv or .npz file with task.data.path"
        )
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _read_npz(path, narrow)
    if suffix in (".csv", ".txt"):
        return _read_csv(path, target, narrow)
    raise BeyondfitError(
        f"data file {str(path)!r} has suffix {suffix!r}; use a .csv (with task.data.target) "
        "or an .npz with arrays x and y"
    )


def load_table(
    path: str | Path, target: str | None = None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Numbers only: ``(x, y, feature_names)`` as float32 arrays, ``y`` of shape ``(n, k)``.

    The strict form of :func:`read_table` for callers that want plain arrays: a text
    feature column or a missing value is an error here (the built-in tasks instead one-hot
    encode text and impute missing values, see :mod:`beyondfit.data.encoding`).
    """
    table = read_table(path, target)
    for column in [*table.features, table.target]:
        if not column.numeric:
            first = next(i for i, v in enumerate(column.values) if v is not None)
            raise table.error(
                f"column {column.name!r} holds text ({_show(column.values[first])} at "
                f"{table.where(first)}); encode it numerically or drop the column"
            )
        missing = np.nonzero(column.missing())[0]
        if len(missing):
            raise table.error(
                f"has a missing value in column {column.name!r} at {table.where(missing[0])} "
                f"({len(missing)} row(s) in all); fill or drop those rows"
            )
    x = np.stack([c.values for c in table.features], axis=1).astype(np.float32)
    y = table.target.values.reshape(len(table), -1).astype(np.float32)
    return x, y, [c.name for c in table.features]


# ------------------------------------------------------------------------- CSV
def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise BeyondfitError(
            f"data file {str(path)!r} cannot be read ({reason}); check its permissions"
        ) from None
    if b"\x00" in raw[:_SNIFF_BYTES]:
        raise BeyondfitError(
            f"data file {str(path)!r} is binary data, not CSV text (it contains NUL bytes); "
            "export the table as a UTF-8 CSV"
        )
    try:
        return raw.decode("utf-8-sig")  # -sig: drops Excel's byte-order mark
    except UnicodeDecodeError as exc:
        raise BeyondfitError(
            f"data file {str(path)!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
            f"offset {exc.start}); save it as UTF-8 (e.g. 'CSV UTF-8' in a spreadsheet)"
        ) from None


def _check_shape(path: Path, rows: int, features: int, targets: int) -> None:
    """``narrow``'s rule: fewer feature columns than rows."""
    if features >= rows:
        raise BeyondfitError(
            f"data file {str(path)!r} is {rows} rows x {features + targets} columns: {features} "
            f"feature columns for {rows} rows; a model needs more rows than columns: add rows "
            "or drop columns"
        )


def _read_csv(path: Path, target: str | None, narrow: bool = False) -> Table:
    text = _read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        for row in reader:
            if any(cell.strip() for cell in row):  # blank lines are not rows
                rows.append(row)
                lines.append(reader.line_num)
    except csv.Error as exc:
        raise BeyondfitError(
            f"data file {str(path)!r} is not a readable CSV (line {reader.line_num}: {exc})"
        ) from None
    if not rows:
        raise BeyondfitError(f"data file {str(path)!r} is empty; it needs a header row and data")
    header = [h.strip() for h in rows[0]]
    shown = ", ".join(_show(h, quote=False) for h in header[:30])
    if len(header) > 30:
        shown += f", ... ({len(header)} in all)"
    if len(rows) < 2:
        raise BeyondfitError(f"data file {str(path)!r} has a header but no data rows")
    if target is None:
        raise BeyondfitError(
            f"data file {str(path)!r} is a CSV: name its target column with "
            f"task.data.target=COLUMN (columns: {shown})"
        )
    target = str(target)
    if target not in header:
        raise BeyondfitError(
            f"target column {_show(target)} is not in {str(path)!r} (columns: {shown}); "
            "set task.data.target to one of them"
        )
    duplicated = sorted(h for h, n in Counter(header).items() if n > 1)
    if duplicated:
        raise BeyondfitError(
            f"data file {str(path)!r} has the column name(s) {duplicated} more than once; "
            "give every column its own name"
        )
    if len(header) < 2:
        raise BeyondfitError(f"data file {str(path)!r} has no feature columns besides the target")
    if narrow:
        _check_shape(path, len(rows) - 1, len(header) - 1, 1)
    for row, line in zip(rows[1:], lines[1:]):
        if len(row) != len(header):
            raise BeyondfitError(
                f"data file {str(path)!r} line {line} has {len(row)} fields, the header "
                f"{len(header)}"
            )
    labels = [f"line {line}" for line in lines[1:]]
    cells = list(zip(*rows[1:]))  # column-major
    columns = [_parse_column(path, name, col, labels) for name, col in zip(header, cells)]
    t = header.index(target)
    return Table(path, [c for j, c in enumerate(columns) if j != t], columns[t], labels)


def _parse_column(path: Path, name: str, cells: tuple[str, ...], labels: list[str]) -> Column:
    """Numbers if every present cell is one; categories if most are not; else an error."""
    stripped = [cell.strip() for cell in cells]
    present = [s.lower() not in MISSING_MARKERS for s in stripped]
    numbers = np.full(len(cells), np.nan)
    bad: list[int] = []
    for i, (cell, here) in enumerate(zip(stripped, present)):
        if not here:
            continue
        try:
            numbers[i] = float(cell)
        except ValueError:
            bad.append(i)
    n_present = sum(present)
    if not bad:
        infinite = np.nonzero(np.abs(numbers) > FLOAT32_MAX)[0]  # NaN compares False
        if len(infinite):
            i = int(infinite[0])
            what = ("an infinity" if np.isinf(numbers[i]) else
                    f"beyond float32's range (|x| <= {FLOAT32_MAX:.3g}), where training runs")
            raise BeyondfitError(
                f"data file {str(path)!r} {labels[i]} column {_show(name)} holds "
                f"{_show(stripped[i])}, {what}; give a finite number or leave it empty"
            )
        return Column(name, numbers, numeric=True)
    if 2 * len(bad) < n_present:  # mostly numbers: a typo, not a category column
        i = bad[0]
        raise BeyondfitError(
            f"data file {str(path)!r} {labels[i]} column {_show(name)} holds "
            f"{_show(stripped[i])}, not a number (the column is otherwise numeric); fix the "
            "cell, or leave it empty to mark it missing"
        )
    values = np.array([s if here else None for s, here in zip(stripped, present)], dtype=object)
    return Column(name, values, numeric=False)


# ------------------------------------------------------------------------- .npz
def _read_npz(path: Path, narrow: bool = False) -> Table:
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
    except PermissionError as exc:
        raise BeyondfitError(
            f"data file {str(path)!r} cannot be read ({exc.strerror}); check its permissions"
        ) from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        reason = str(exc).split(". ")[0][:120]
        raise BeyondfitError(f"data file {str(path)!r} is not a readable .npz ({reason})") from None
    if x.ndim == 0 or y.ndim == 0:
        raise BeyondfitError(
            f"data file {str(path)!r}: x and y must be arrays with one row per sample"
        )
    if len(x) == 0:
        raise BeyondfitError(f"data file {str(path)!r} is empty (0 rows)")
    if len(x) != len(y):
        raise BeyondfitError(
            f"data file {str(path)!r}: x has {len(x)} rows but y has {len(y)}; align them"
        )
    x = x.reshape(len(x), -1)
    if narrow:
        _check_shape(path, len(x), x.shape[1], int(np.prod(y.shape[1:], dtype=np.int64)))
    labels = [f"row {i + 1}" for i in range(len(x))]
    features = [_npz_column(path, f"x{j}", "x", x[:, j], labels) for j in range(x.shape[1])]
    y = y.reshape(len(y), -1)
    # Several numeric outputs (multi-output regression) stay one 2-D column.
    target = _npz_column(path, "y", "y", y[:, 0] if y.shape[1] == 1 else y, labels)
    return Table(path, features, target, labels)


def _npz_column(path: Path, name: str, array: str, values: np.ndarray, labels: list[str]) -> Column:
    kind = values.dtype.kind
    if kind == "c":
        raise BeyondfitError(
            f"data file {str(path)!r}: array {array} holds complex numbers; give real values "
            "(e.g. the real and imaginary parts as two columns)"
        )
    if kind in "biuf":
        numbers = values.astype(np.float64)
        with np.errstate(invalid="ignore"):
            too_big = np.abs(numbers.reshape(len(numbers), -1)) > FLOAT32_MAX
        infinite = np.nonzero(too_big.any(axis=1))[0]
        if len(infinite):
            raise BeyondfitError(
                f"data file {str(path)!r} {labels[infinite[0]]} of {array} ({name}) is infinite "
                f"or beyond float32's range (|x| <= {FLOAT32_MAX:.3g}); give finite numbers "
                "(NaN marks a missing value)"
            )
        return Column(name, numbers, numeric=True)
    if kind in "US":
        if values.ndim != 1:
            raise BeyondfitError(f"data file {str(path)!r}: array {array} of text must be 1-D")
        text = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]
        return _parse_column(path, name, tuple(text), labels)
    raise BeyondfitError(
        f"data file {str(path)!r}: array {array} has dtype {values.dtype}; give numbers or text"
    )


def printable(value: object, limit: int = 40) -> str:
    """A name from a data file (a class label, a column) as a report may print it: terminal
    escapes, bidi overrides and other control characters shown as escapes, never raw."""
    return _show(value, quote=False, limit=limit)


def _show(value: object, quote: bool = True, limit: int = 40) -> str:
    """A cell or name for a message: quoted, cut to ``limit`` characters, no raw control bytes."""
    text = str(value)
    # repr escapes control characters (a binary cell's bytes) and keeps printable Unicode.
    text = repr(text) if quote else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
