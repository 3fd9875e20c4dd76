"""A table task's network is bounded once the table's columns are known, before it is built:
``task.hidden=[100000000]`` over diabetes' 10 columns grew past 16 GB before the system stopped
it in issue 29's trial (the command line's bound takes every input one value wide, 25 times
less here). Now it is one line naming the widths and the memory, at once."""

from __future__ import annotations

import time

import pytest

from beyondfit import BeyondfitError
from beyondfit.core import device
from beyondfit.tasks import autoencoder, classification, regression

GB = 10**9


@pytest.mark.parametrize(("build", "columns"), [(regression.build, 10),
                                                (classification.build, 64),
                                                (autoencoder.build, 64)])
def test_a_network_past_the_memory_is_refused_before_it_is_built(
        monkeypatch: pytest.MonkeyPatch, build, columns: int) -> None:  # fmt: skip
    monkeypatch.setattr(device, "machine_memory", lambda where: (24 * GB, "this machine"))
    start = time.monotonic()
    with pytest.raises(BeyondfitError) as info:
        build(hidden=[100_000_000])
    assert time.monotonic() - start < 30  # no allocation of gigabytes first
    message = str(info.value)
    assert message.startswith(f"task.hidden=[100000000] over {columns} input values needs at "
                              "least "), message
    assert "more than this machine has (24.0 GB); choose smaller widths" in message
    assert "\n" not in message


def test_a_network_that_fits_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    # 10 -> 2000 -> 2000 -> 1: 4.0M weights, 64 MB with gradients and moments; 100 MB is enough.
    monkeypatch.setattr(device, "machine_memory", lambda where: (10**8, "this machine"))
    assert regression.build(hidden=[2000, 2000]).model is not None
    with pytest.raises(BeyondfitError, match=r"^task\.hidden=\[4000, 4000\] over 10 input"):
        regression.build(hidden=[4000, 4000])  # 16M weights: 256 MB


def test_an_ensemble_is_bounded_by_all_its_members(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight members of a network that fits alone are refused, the members named."""
    monkeypatch.setattr(device, "machine_memory", lambda where: (3 * 10**8, "this machine"))
    assert classification.build(hidden=[2000, 2000], members=1).model is not None
    with pytest.raises(BeyondfitError, match=r"^task\.hidden=\[2000, 2000\] over 64 input") as info:
        classification.build(hidden=[2000, 2000], members=8)
    assert "counts 8 ensemble members: fewer, e.g. task.members=1" in str(info.value)
