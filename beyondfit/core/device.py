"""Choosing a device and moving nested batches onto it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Turn ``"auto"|"cpu"|"cuda[:i]"|"mps"`` (or a ``torch.device``) into a usable device.

    ``"auto"`` picks CUDA, then MPS, then the CPU. Asking for an accelerator that is not
    there is a :class:`BeyondfitError`, not a silent fallback: a run meant for a GPU should
    not quietly take a week on a CPU.
    """
    if isinstance(device, torch.device):
        name = str(device)
    else:
        name = str(device).strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise BeyondfitError(
            f"device={device!r} is not a device; use auto, cpu, cuda, cuda:N or mps"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BeyondfitError(f"device={name!r} but CUDA is not available here; use device=cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise BeyondfitError(
                f"device={name!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
    elif dev.type == "mps" and not _mps_available():
        raise BeyondfitError(f"device={name!r} but MPS is not available here; use device=cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise BeyondfitError(f"device={name!r} is not supported; use auto, cpu, cuda[:N] or mps")
    return dev


def machine_memory(device: str = "auto") -> tuple[int, str]:
    """``(bytes, name)`` of the memory a run on ``device`` has: the GPU's when training on
    CUDA, else the RAM within a container's limit and this process's address-space limit
    (``ulimit -v``)."""
    if str(device) in ("auto", "cuda") or str(device).startswith("cuda:"):
        if torch.cuda.is_available():
            index = int(str(device).split(":")[1]) if ":" in str(device) else 0
            return torch.cuda.get_device_properties(index).total_memory, "the GPU"
    ram, where = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine"
    try:  # cgroup v2: a container's own limit, when it has one
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        ram = min(ram, int(limit)) if limit.isdigit() else ram
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return ram, where
    space = resource.getrlimit(resource.RLIMIT_AS)[0]
    if space != resource.RLIM_INFINITY and 0 <= space < ram:
        ram, where = space, "this process (ulimit -v)"
    return ram, where


def gigabytes(size: float) -> str:
    """``1,248.0 GB`` (or ``12.5 MB`` below 0.1 GB)."""
    return f"{size / 1e9:,.1f} GB" if size >= 1e8 else f"{size / 1e6:,.1f} MB"


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def move_to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor inside ``batch`` to ``device``, keeping the structure.

    Handles tensors inside tuples, lists, dicts (any Mapping), named tuples and dataclass
    instances, to any depth; anything else is returned as it is. Tensors already on the
    device are not copied.
    """
    if isinstance(batch, torch.Tensor):
        if batch.device == device:
            return batch
        return batch.to(device, non_blocking=non_blocking)
    if type(batch) is tuple or type(batch) is list:  # the usual batch: no recursive calls
        moved = [
            v if type(v) is torch.Tensor and v.device == device
            else move_to_device(v, device, non_blocking)
            for v in batch
        ]  # fmt: skip
        return tuple(moved) if type(batch) is tuple else moved
    if isinstance(batch, Mapping):
        moved = {k: move_to_device(v, device, non_blocking) for k, v in batch.items()}
        if type(batch) is dict:
            return moved
        try:  # keep the user's mapping type (OrderedDict, TensorDict-like) where it allows
            return type(batch)(moved)
        except TypeError:
            return moved
    if isinstance(batch, tuple):
        moved = [move_to_device(v, device, non_blocking) for v in batch]
        if hasattr(batch, "_fields"):  # a named tuple takes fields positionally
            return type(batch)(*moved)
        return type(batch)(moved)
    if isinstance(batch, list):
        return [move_to_device(v, device, non_blocking) for v in batch]
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            f.name: move_to_device(getattr(batch, f.name), device, non_blocking)
            for f in dataclasses.fields(batch)
            if f.init
        }
        return dataclasses.replace(batch, **changes)
    return batch
