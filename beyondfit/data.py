"""In-memory data: batches by slicing tensors, and the user's own table files.

Slicing pre-shuffled tensors costs a fraction of a ``DataLoader`` per batch (no
per-sample indexing, no collation), which is what makes the built-in tasks faster than a
hand-written DataLoader loop.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from beyondfit.errors import BeyondfitError


class TensorBatches:
    """Mini-batches of aligned tensors, reshuffled every epoch, with a resumable position.

    Each pass permutes all tensors once (seeded by ``seed`` and the pass number, so the
    order never depends on the global RNG) and yields contiguous slices, which are views.
    ``state_dict`` records the pass and how many batches of it were consumed, so a resumed
    run sees exactly the batches the interrupted one would have.

    Args:
        tensors: tensors with the same first dimension.
        batch_size: rows per batch.
        shuffle: permute the rows every pass.
        seed: seed of the permutations.
        drop_last: drop a final short batch.
    """

    def __init__(
        self,
        *tensors: torch.Tensor,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if not tensors:
            raise BeyondfitError("TensorBatches needs at least one tensor")
        n = len(tensors[0])
        if any(len(t) != n for t in tensors):
            raise BeyondfitError(
                f"tensors have different lengths {[len(t) for t in tensors]}; align them"
            )
        if n == 0:
            raise BeyondfitError("the data is empty (0 rows); give at least one row")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise BeyondfitError(f"batch_size={batch_size!r}; it must be a positive whole number")
        self.tensors = tensors
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self._pass = 0  # the pass in progress (or next)
        self._position = 0  # batches of it already handed out
        self._rank, self._world = 0, 1  # see shard()

    def shard(self, rank: int, world_size: int) -> None:
        """Keep only rank ``rank``'s share of every pass (for DDP; called by the engine).

        Every rank permutes the rows the same way (same seed), pads the order by wrapping
        around to a multiple of ``world_size`` (as ``DistributedSampler`` does), and takes
        rows ``rank, rank + world_size, ...``: disjoint shards of equal length, so every rank
        takes the same number of steps. ``batch_size`` stays per rank.
        """
        if not 0 <= rank < world_size:
            raise BeyondfitError(f"rank={rank} is not in a group of {world_size} processes")
        self._rank, self._world = int(rank), int(world_size)

    def __len__(self) -> int:
        n = -(-len(self.tensors[0]) // self._world)  # rows of this rank's shard
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def to(self, device: torch.device | str) -> TensorBatches:
        """Move the tensors to ``device`` once, so batches need no copy per step."""
        self.tensors = tuple(t.to(device) for t in self.tensors)
        return self

    def __iter__(self) -> Iterator[Any]:
        start = self._position
        tensors = self.tensors
        order = None
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self._pass)
            order = torch.randperm(len(tensors[0]), generator=generator)
        if self._world > 1:
            n = len(tensors[0])
            order = torch.arange(n) if order is None else order
            padded = -(-n // self._world) * self._world
            order = order.repeat(-(-padded // n))[:padded][self._rank :: self._world]
        if order is not None:
            order = order.to(tensors[0].device)
            tensors = tuple(t[order] for t in tensors)
        bs = self.batch_size
        for i in range(start, len(self)):
            self._position = i + 1
            batch = tuple([t[i * bs : (i + 1) * bs] for t in tensors])  # no generator
            yield batch[0] if len(batch) == 1 else batch
        self._pass += 1
        self._position = 0

    def state_dict(self) -> dict[str, int]:
        """The pass and position to continue from."""
        return {"pass": self._pass, "position": self._position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a :meth:`state_dict`."""
        self._pass = int(state["pass"])
        self._position = int(state["position"])
        self.seed = int(state.get("seed", self.seed))


def split(
    n: int, val_fraction: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded train/validation index split; both parts non-empty."""
    if not 0.0 < val_fraction < 1.0:
        raise BeyondfitError(
            f"val_fraction={val_fraction!r}; it must be strictly between 0 and 1 (e.g. 0.2)"
        )
    if n < 2:
        raise BeyondfitError(f"the data has {n} row(s); at least 2 are needed for a split")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    n_val = min(max(1, round(n * val_fraction)), n - 1)
    return order[n_val:], order[:n_val]


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
