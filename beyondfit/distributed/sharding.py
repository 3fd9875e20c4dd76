"""Each rank's part of the data: disjoint, and equally long for training (DDP needs it)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any


class ShardedBatches(Sequence):
    """Rank ``r`` of ``world`` takes batches ``r, r + world, ...`` of a sequence of batches.

    With ``pad`` (training) every rank gets ``ceil(len / world)`` batches, wrapping around to
    the start, because DDP needs equal step counts; without it (evaluation) the parts are
    disjoint and together exactly the sequence.
    """

    def __init__(self, batches: Sequence[Any], rank: int, world: int, pad: bool) -> None:
        self.batches, self.rank, self.world, self.pad = batches, rank, world, pad
        n = len(batches)
        if pad and n:
            self._indices = [(rank + i * world) % n for i in range(math.ceil(n / world))]
        else:
            self._indices = list(range(rank, n, world))

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.batches[j] for j in self._indices[i]]
        return self.batches[self._indices[i]]

    def __iter__(self) -> Iterator[Any]:
        return (self.batches[j] for j in self._indices)


class StridedIterable:
    """Every ``world``-th batch of any iterable, starting at ``rank`` (evaluation only)."""

    def __init__(self, data: Iterable[Any], rank: int, world: int) -> None:
        self.data, self.rank, self.world = data, rank, world

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self.data):
            if i % self.world == self.rank:
                yield batch


class _StridedBatchSampler:
    """Every ``world``-th batch of indices of a batch sampler: loads only this rank's batches."""

    def __init__(self, batch_sampler: Iterable[list[int]], rank: int, world: int) -> None:
        self.batch_sampler, self.rank, self.world = batch_sampler, rank, world

    def __iter__(self) -> Iterator[list[int]]:
        for i, indices in enumerate(self.batch_sampler):
            if i % self.world == self.rank:
                yield indices

    def __len__(self) -> int:
        n = len(self.batch_sampler)  # type: ignore[arg-type]
        return len(range(self.rank, n, self.world))


def _loader_kwargs(loader: Any) -> dict[str, Any]:
    kwargs = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    return kwargs


def _map_style_loader(data: Any) -> bool:
    from torch.utils.data import DataLoader, IterableDataset

    return isinstance(data, DataLoader) and not isinstance(data.dataset, IterableDataset)


def has_distributed_sampler(data: Any) -> bool:
    from torch.utils.data import DistributedSampler

    sampler = getattr(data, "sampler", None)
    inner = getattr(getattr(data, "batch_sampler", None), "sampler", None)
    return isinstance(sampler, DistributedSampler) or isinstance(inner, DistributedSampler)


def distributed_loader(
    data: Any, rank: int, world: int, seed: Callable[[], int]
) -> Any | None:
    """The same DataLoader over a ``DistributedSampler`` (``None`` if ``data`` is not one we
    can rebuild: not map-style, or a custom batch sampler)."""
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

    if not _map_style_loader(data) or data.batch_size is None:
        return None
    if not isinstance(data.sampler, RandomSampler | SequentialSampler):
        return None
    sampler = DistributedSampler(
        data.dataset, num_replicas=world, rank=rank,
        shuffle=isinstance(data.sampler, RandomSampler), seed=seed(), drop_last=data.drop_last,
    )
    return DataLoader(
        data.dataset, batch_size=data.batch_size, sampler=sampler, drop_last=data.drop_last,
        **_loader_kwargs(data),
    )


def strided_loader(data: Any, rank: int, world: int) -> Any | None:
    """A map-style DataLoader that loads only this rank's batches, in the original batches."""
    from torch.utils.data import DataLoader

    if not _map_style_loader(data):
        return None
    return DataLoader(
        data.dataset, batch_sampler=_StridedBatchSampler(data.batch_sampler, rank, world),
        **_loader_kwargs(data),
    )
