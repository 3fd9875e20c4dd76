"""Where logged numbers go: a JSON-lines metrics file, a CSV table and Keras-style console lines."""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback
from beyondfit.core.errors import with_path
from beyondfit.core.metrics import finite_or_none
from beyondfit.core.state.checks import check_fields

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")


class RowWriter(Callback):
    """Base of the metrics files: one row per event, and a row count saved in checkpoints.

    Events: ``train`` at log intervals, ``val`` after an evaluation, ``epoch`` at epoch end.
    Subclasses write :meth:`make_row`'s dict in their format (``write_row``) and cut their
    file back to a checkpoint's row count (``cut_back``) when the resumed fit starts, so a
    resumed run never duplicates or loses a row, and a restore that another part of the
    checkpoint refuses changes no file.
    """

    rank_zero_only = True  # under DDP: one writer (rank 0), not one per rank
    rows: int = 0

    @staticmethod
    def make_row(engine: Engine, kind: str, logs: Mapping[str, float]) -> dict[str, Any]:
        """``kind``, ``epoch``, ``step`` and the values (NaN/inf as ``None``)."""
        epoch = int(logs["epoch"]) if kind == "epoch" else engine.epoch + 1
        step = int(logs["step"]) if kind == "epoch" and "step" in logs else engine.global_step
        row: dict[str, Any] = {"kind": kind, "epoch": epoch, "step": step}
        for key, value in logs.items():
            if key not in ("epoch", "step"):
                row[key] = finite_or_none(float(value))
        return row

    def write_row(self, row: dict[str, Any]) -> None:
        """Append one row to the file."""
        raise NotImplementedError

    path: Path

    def _write(self, engine: Engine, kind: str, logs: Mapping[str, float]) -> None:
        try:
            self.write_row(self.make_row(engine, kind, logs))
        except OSError as exc:  # a full disk names no file: this is the one
            raise with_path(exc, self.path) from exc
        self.rows += 1

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """A ``train`` row with the running means."""
        self._write(engine, "train", logs)

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """A ``val`` row with the evaluation."""
        self._write(engine, "val", logs)

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """An ``epoch`` row: the history entry."""
        self._write(engine, "epoch", logs)

    def state_dict(self) -> dict[str, int]:
        """Rows written so far."""
        return {"rows": self.rows}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take the row count a checkpoint saved: the file is cut back to it when the
        resumed fit starts (:meth:`on_fit_start`), once the whole checkpoint is accepted."""
        check_fields(state, {"rows": "count"})
        self._cut_to = int(state["rows"])

    def cut_back(self, keep: int) -> None:
        """Cut the file back to its first ``keep`` rows; set :attr:`missing`."""
        raise NotImplementedError

    #: Rows a checkpoint counted that the file no longer holds (truncated or deleted).
    missing: int = 0
    _cut_to: int | None = None  # a loaded checkpoint's row count, until the fit starts
    _branch = False  # the loaded checkpoint was written by a run in another directory
    _source: Path | None = None  # that run's file of this name, when it is known

    def resumed_from(self, run_dir: Path | None) -> None:
        """The checkpoint just loaded was written by the run in ``run_dir`` (``None``: a
        checkpoint file outside any run directory; :func:`beyondfit.resume` says). When this
        file is in another directory, the run is a branch: its file begins with that run's
        rows up to the checkpoint, copied when the fit starts, instead of being cut back."""
        own = self.path.parent.resolve()
        self._branch = run_dir is None or Path(run_dir).resolve() != own
        self._source = Path(run_dir) / self.path.name if self._branch and run_dir else None

    def begin_from(self, source: Path | None, keep: int) -> None:
        """A branch's file: ``source`` (the file of the run the checkpoint came from) cut
        back to its first ``keep`` rows; without one, an empty file."""
        try:
            if source is not None and source.is_file():
                tmp = self.path.with_name(self.path.name + ".tmp")
                shutil.copyfile(source, tmp)
                os.replace(tmp, self.path)
            else:
                self.path.unlink(missing_ok=True)
        except OSError as exc:
            raise with_path(exc, self.path) from exc
        self.reopen()
        self.cut_back(keep)

    def reopen(self) -> None:
        """Read what the file holds again after it was replaced (a CSV's header)."""

    def epoch_rows(self) -> int:
        """How many ``epoch`` rows the file holds."""
        raise NotImplementedError

    def on_fit_start(self, engine: Engine) -> None:
        """After a resume: the file cut back to the rows the checkpoint counted (a branch
        into another directory: the rows of the run it came from, up to the checkpoint).
        Rows the file (or that run's) lost are said, and the epoch rows the checkpoint's
        history holds written back (the train and val rows it does not keep are lost)."""
        if self._cut_to is not None:
            keep, self._cut_to = self._cut_to, None
            if self._branch:
                self.begin_from(self._source, keep)
            else:
                self.cut_back(keep)
        branch, source, self._branch, self._source = self._branch, self._source, False, None
        if not self.missing:
            return
        lost, self.missing = self.missing, 0
        back = engine.history[self.epoch_rows():]
        for logs in back:
            self._write(engine, "epoch", logs)
        unknown = max(0, lost - len(back))
        if branch and source is None:  # a loose checkpoint: no run's rows to copy
            log.info("%s begins with the %d epoch rows of the checkpoint's history (it is no "
                     "run directory's: its %d train/val rows are not known here)",
                     self.path, len(back), unknown)
            return
        log.warning(
            "%s holds %d fewer rows than the checkpoint counted (it was truncated or deleted): "
            "kept the %d rows left, wrote back %d epoch rows from the checkpoint's history; "
            "%d train/val rows are lost", source or self.path, lost, self.rows - len(back),
            len(back), unknown,
        )


class MetricsFile(RowWriter):
    """Append one JSON object per event to ``path`` (``metrics.jsonl`` in a run directory).

    Each row has ``kind`` (``train`` at log intervals, ``val`` after an evaluation,
    ``epoch`` at epoch end), ``epoch``, ``step`` and the values (NaN/inf written as null).
    Its state is the number of rows written, saved in checkpoints: a resumed run first
    cuts the file back to that many rows, so rows are never duplicated or lost.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.rows = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            with self.path.open() as f:
                self.rows = sum(1 for _ in f)

    def write_row(self, row: dict[str, Any]) -> None:
        """One JSON object per line."""
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def cut_back(self, keep: int) -> None:
        """Cut the file back to the rows that existed when the checkpoint was written; rows
        it lost (a truncated last line is dropped) are reported by :meth:`on_fit_start`."""
        try:
            lines = self.path.read_text().splitlines(keepends=True) if self.path.exists() else []
            while lines and not _whole_row(lines[-1]):
                lines.pop()  # a row cut short: not data that can be trusted
            lines = lines[:keep]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(lines))
            os.replace(tmp, self.path)
        except OSError as exc:
            raise with_path(exc, self.path) from exc
        self.rows = len(lines)
        self.missing = keep - self.rows
        self._epoch_rows = sum(1 for line in lines if _whole_row(line, "epoch"))

    def epoch_rows(self) -> int:
        """How many ``epoch`` rows the file holds (counted when it was cut back)."""
        return self._epoch_rows


def _whole_row(line: str, kind: str | None = None) -> bool:
    """A complete JSON row (of ``kind``, when given)."""
    if not line.endswith("\n"):
        return False
    try:
        row = json.loads(line)
    except ValueError:
        return False
    return isinstance(row, dict) and (kind is None or row.get("kind") == kind)


class CsvFile(RowWriter):
    """The rows of :class:`MetricsFile` as one CSV table (``metrics.csv``, ``logger=csv``).

    Columns: ``kind``, ``epoch``, ``step``, then every logged name in the order it first
    appeared (empty where a row has no value), ready for ``pandas.read_csv`` or a
    spreadsheet. Rows are appended as they come; when a new name appears (the first
    evaluation, say), the file is rewritten once with the wider header. Like the JSONL
    file, its state is the number of rows written, and a resumed run cuts it back.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.columns: list[str] = ["kind", "epoch", "step"]
        self.rows = 0
        if self.path.exists():
            with self.path.open(newline="") as f:
                reader = csv.reader(f)
                self.columns = next(reader, self.columns)
                self.rows = sum(1 for _ in reader)

    def write_row(self, row: dict[str, Any]) -> None:
        """Append the row; widen the header first when it brings a new name."""
        new = [key for key in row if key not in self.columns]
        if new or not self.path.exists():
            self._rewrite(self.columns + new)
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, self.columns).writerow(row)

    def _rewrite(self, columns: list[str], keep: int | None = None) -> None:
        """Write the file again with ``columns`` as header, keeping its first ``keep`` rows."""
        old: list[dict[str, str]] = []
        if self.path.exists():
            with self.path.open(newline="") as f:
                old = list(csv.DictReader(f))
        if keep is not None:
            old = old[:keep]
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(old)
        os.replace(tmp, self.path)
        self.columns = columns
        self.rows = len(old)

    def reopen(self) -> None:
        """Take the header of the table as it is now."""
        self.columns = ["kind", "epoch", "step"]
        if self.path.exists():
            with self.path.open(newline="") as f:
                self.columns = next(csv.reader(f), self.columns)

    def cut_back(self, keep: int) -> None:
        """Cut the table back to the rows that existed when the checkpoint was written."""
        try:
            self._rewrite(self.columns, keep=keep)
        except OSError as exc:
            raise with_path(exc, self.path) from exc
        self.missing = keep - self.rows

    def epoch_rows(self) -> int:
        """How many ``epoch`` rows the table holds."""
        if not self.path.exists():
            return 0
        with self.path.open(newline="") as f:
            return sum(1 for row in csv.DictReader(f) if row.get("kind") == "epoch")
