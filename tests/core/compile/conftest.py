"""Fixtures of the compiled step's tests: tracing without inductor, a probe of one's own."""

from __future__ import annotations

import pytest

from beyondfit.core.compile import graphs, probe, traced_optimizer


@pytest.fixture
def traced(monkeypatch):
    """Trace for real, run each graph's Python code instead of inductor's kernels."""
    monkeypatch.setattr(graphs, "inductor", lambda gm, example_inputs, patches: gm.forward)


@pytest.fixture
def fresh_probe():
    """The probe runs again in this test (after the test patched a feature away), and again
    after it (the next test sees this torch as it is)."""
    probe.reset()
    yield probe
    probe.reset()


@pytest.fixture(params=["graph", "kernel"])
def step_kind(request, monkeypatch):
    """Where the optimizer's step runs: inside the graph (a masked commit), or torch's fused
    kernel after it (what an optimizer of many values gets; here any size does)."""
    if request.param == "kernel":
        monkeypatch.setattr(traced_optimizer, "KERNEL_FROM", 0)
    return request.param
