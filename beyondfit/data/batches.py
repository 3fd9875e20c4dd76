"""In-memory data: batches by slicing tensors, and the user's own table files.

Slicing pre-shuffled tensors costs a fraction of a ``DataLoader`` per batch (no
per-sample indexing, no collation), which is what makes the built-in tasks faster than a
hand-written DataLoader loop.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.core.state.checks import FieldError, check_fields

log = logging.getLogger("beyondfit")
#: Fewer validation rows than this get a warning: their scores say little.
MIN_VAL_ROWS = 10


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
        check_number("batch_size", batch_size, integer=True, at_least=1)
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
        """Continue from a :meth:`state_dict` (checked first: whole numbers, a position
        within a pass)."""
        check_fields(state, {"pass": "count", "position": "count", "seed": "count"})
        if state.get("position", 0) > len(self):
            raise FieldError(f"position={state['position']!r} is beyond the {len(self)} "
                             "batches of a pass")
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
    if n_val < MIN_VAL_ROWS:
        log.warning(
            "validation on %d row(s) of %d: scores on so few rows are noise (an R2 on one row "
            "can be -1e11); give more rows, or a larger task.val_fraction", n_val, n,
        )
    return order[n_val:], order[:n_val]
