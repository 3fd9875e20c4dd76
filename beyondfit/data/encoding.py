"""From table columns to model inputs: text one-hot encoded, gaps filled, learnt on training rows.

Every choice is fitted on the training rows only, so nothing about the validation rows leaks
into the inputs: the categories of a text column (a validation value never seen in training
is encoded as all zeros) and the value a missing number is replaced with (the training
median). A :class:`FeatureEncoding` is plain data (:meth:`FeatureEncoding.to_dict`), saved
with a run so that the same encoding can be applied to new rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from beyondfit.core.errors import BeyondfitError
from beyondfit.data.tables import Column, Table

#: What ``missing=`` accepts: fill gaps (with a logged note) or refuse the table.
MISSING_POLICIES = ("impute", "refuse")


@dataclass
class ColumnEncoding:
    """How one source column becomes inputs.

    Attributes:
        name: the column's name.
        kind: ``"number"`` (one input) or ``"category"`` (one 0/1 input per category).
        fill: for numbers, the value put in missing cells (the training median).
        categories: for text, the categories seen in the training rows, in input order.
    """

    name: str
    kind: str
    fill: float | None = None
    categories: list[str] = field(default_factory=list)


@dataclass
class FeatureEncoding:
    """The encoding of every feature column, in order."""

    columns: list[ColumnEncoding]

    def names(self) -> list[str]:
        """The model's input names: ``age``, ``city=Paris``, ..."""
        out: list[str] = []
        for c in self.columns:
            out += [c.name] if c.kind == "number" else [f"{c.name}={k}" for k in c.categories]
        return out

    def transform(self, columns: Sequence[Column]) -> np.ndarray:
        """The input matrix (float32) of ``columns``, read as the encoded ones were."""
        parts: list[np.ndarray] = []
        for encoding, column in zip(self.columns, columns, strict=True):
            if encoding.kind == "number":
                values = column.values.astype(np.float64, copy=True)
                values[np.isnan(values)] = encoding.fill if encoding.fill is not None else np.nan
                parts.append(values.reshape(-1, 1))
            else:
                index = {k: i for i, k in enumerate(encoding.categories)}
                onehot = np.zeros((len(column.values), len(encoding.categories)))
                for row, value in enumerate(column.values):
                    i = index.get(value)  # missing (None) or unseen: all zeros
                    if i is not None:
                        onehot[row, i] = 1.0
                parts.append(onehot)
        return np.concatenate(parts, axis=1).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (what ``preprocessing.json`` of a run holds)."""
        return {"columns": [asdict(c) for c in self.columns], "inputs": self.names()}


def fit_encoding(
    table: Table, train_rows: np.ndarray, missing: str = "impute"
) -> tuple[FeatureEncoding, list[str]]:
    """Fit the encoding of ``table``'s features on ``train_rows``; returns it and notes to log.

    ``missing="refuse"`` makes any missing feature cell an error naming the column and the
    row; ``"impute"`` fills numbers with the training median and leaves a missing category
    as all zeros, and says so in the notes.
    """
    if missing not in MISSING_POLICIES:
        raise BeyondfitError(
            f"task.data.missing={missing!r}; use one of {', '.join(MISSING_POLICIES)}"
        )
    train_rows = np.asarray(train_rows)
    columns: list[ColumnEncoding] = []
    filled: list[str] = []
    for column in table.features:
        gaps = np.nonzero(column.missing())[0]
        if len(gaps) and missing == "refuse":
            raise table.error(
                f"has a missing value in column {column.name!r} at {table.where(int(gaps[0]))} "
                f"({len(gaps)} in all); fill those cells, or set task.data.missing=impute"
            )
        if column.numeric:
            present = column.values[train_rows]
            present = present[~np.isnan(present)]
            if len(gaps) and not len(present):
                raise table.error(
                    f"column {column.name!r} has no value in any training row, nothing to "
                    "impute from; drop the column"
                )
            fill = float(np.median(present)) if len(gaps) else None
            columns.append(ColumnEncoding(column.name, "number", fill=fill))
            if len(gaps):
                filled.append(f"{column.name} {len(gaps)} (training median {fill:.4g})")
        else:
            seen = {v for v in column.values[train_rows] if v is not None}
            columns.append(ColumnEncoding(column.name, "category", categories=sorted(seen)))
            if len(gaps):
                filled.append(f"{column.name} {len(gaps)} (no category)")
    notes = []
    if filled:
        total = sum(int(np.count_nonzero(c.missing())) for c in table.features)
        notes.append(
            f"{table.path.name}: filled {total} missing value(s): {', '.join(filled)}; "
            "task.data.missing=refuse makes them an error"
        )
    return FeatureEncoding(columns), notes
