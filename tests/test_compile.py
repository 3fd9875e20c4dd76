"""``engine.compile=true``: torch.compile of the model the closure sees, with an eager fallback.

The real compilations are slow (inductor builds C++ kernels: about a minute and a half on two
busy CPU cores), so they are marked ``slow``; the fallback is tested fast with a stand-in
backend that fails the way a missing compiler does.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from beyondfit import Engine, TensorBatches
from beyondfit.distributed import DistributedModel, shutdown

from kit import mse, sum_data


def _train(compile: bool, strategy: str = "none", epochs: int = 3) -> tuple[list[float], Engine]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    engine = Engine(model, mse, torch.optim.Adam(model.parameters(), 1e-2), device="cpu",
                    compile=compile, strategy=strategy)
    x, y = sum_data()
    history = engine.fit(TensorBatches(x, y, batch_size=32, seed=0), epochs=epochs,
                         val_data=[(x, y)])
    return [row["loss"] for row in history] + [history[-1]["val_loss"]], engine


class _BrokenBackend(nn.Module):
    """What torch.compile returns when its backend cannot build: fails at the first call."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        raise RuntimeError("InductorError: CppCompileError: C++ compile error\nno compiler 'g++'")


@pytest.fixture
def broken_compile(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda model, **kw: _BrokenBackend(model))


def test_compile_falls_back_to_eager_with_a_clear_message(broken_compile, caplog) -> None:
    eager, _ = _train(compile=False)
    with caplog.at_level(logging.WARNING, logger="beyondfit"):
        fallback, engine = _train(compile=True)
    messages = [r.getMessage() for r in caplog.records if "torch.compile" in r.getMessage()]
    assert len(messages) == 1  # said once, at the first call, not per step
    assert "torch.compile failed (RuntimeError: InductorError: CppCompileError" in messages[0]
    assert "continuing without compilation" in messages[0]
    assert engine.forward_model is engine.model
    assert fallback == eager


def test_compile_fallback_keeps_the_ddp_wrapper(broken_compile, caplog) -> None:
    try:
        eager, _ = _train(compile=False)
        with caplog.at_level(logging.WARNING, logger="beyondfit"):
            fallback, engine = _train(compile=True, strategy="ddp")
        assert isinstance(engine.forward_model, DistributedModel)  # still synchronised
        assert any("continuing without compilation" in r.getMessage() for r in caplog.records)
        assert fallback == pytest.approx(eager, rel=1e-6)
    finally:
        shutdown()


@pytest.mark.slow
def test_compiled_run_gives_the_eager_losses() -> None:
    eager, _ = _train(compile=False)
    compiled, engine = _train(compile=True)
    assert type(engine.forward_model).__name__ == "OptimizedModule"  # it did compile
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-6)
    # Checkpoints hold the plain module's names (no "_orig_mod." prefix).
    assert set(engine.state_dict()["model"]) == set(engine.model.state_dict())
    assert not any(k.startswith("_orig_mod") for k in engine.state_dict()["model"])


@pytest.mark.slow
def test_compiled_model_inside_ddp_gives_the_eager_losses() -> None:
    try:
        eager, _ = _train(compile=False, epochs=2)
        compiled, engine = _train(compile=True, strategy="ddp", epochs=2)
        assert isinstance(engine.forward_model, DistributedModel)
        # DDP's forward calls the compiled module (no fallback happened).
        assert type(engine.forward_model.ddp.module.target).__name__ == "OptimizedModule"
        assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-6)
    finally:
        shutdown()
