"""One seed for every random generator a run draws from."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from beyondfit.core.state.checks import fail


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and every GPU).

    Environments and data loaders take their own seeds derived from the same number.
    """
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def rank_seed(seed: int, rank: int) -> int:
    """The seed of data-parallel rank ``rank``'s own randomness (its environments): ``seed``
    itself on rank 0, so one process reproduces a single-process run; far apart on the
    others, because a vector env seeds its copy ``i`` with ``seed + i``."""
    return int(seed) + 1_000_003 * int(rank)


def rng_state() -> dict[str, Any]:
    """The state of every random generator a run draws from, as checkpoint-safe data."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Any) -> None:
    """Restore what :func:`rng_state` captured. Each state is first set on a scratch
    generator, so that one that does not fit raises :class:`FieldError` naming it before any
    global generator changes."""
    if not isinstance(state, Mapping):
        raise fail("rng", state, "a mapping of generator states")
    python = random.Random()
    try:
        version, internal, gauss = state["python"]
        python.setstate((version, tuple(internal), gauss))
    except Exception:
        raise fail("python", state.get("python"), "Python's random state") from None
    numpy = np.random.RandomState()
    try:
        saved = state["numpy"]
        keys = saved["keys"]
        if not isinstance(keys, torch.Tensor) or keys.shape != (624,):
            raise ValueError
        numpy.set_state((saved["kind"], keys.numpy().astype(np.uint32), saved["pos"],
                         saved["has_gauss"], saved["cached"]))
    except Exception:
        raise fail("numpy", type(state.get("numpy")).__name__, "NumPy's random state") from None
    value = state.get("torch")
    if not (isinstance(value, torch.Tensor) and value.dtype == torch.uint8
            and value.shape == torch.get_rng_state().shape):
        raise fail("torch", value, "torch's CPU generator state")
    cuda = state.get("cuda", [])
    if not isinstance(cuda, list | tuple) or not all(
            isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda):
        raise fail("cuda", cuda, "a list of CUDA generator states")
    random.setstate(python.getstate())
    np.random.set_state(numpy.get_state())
    torch.set_rng_state(value)
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
