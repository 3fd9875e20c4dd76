"""Mixed precision on the CPU: bf16 autocast, fp16 with ``torch.amp.GradScaler("cpu")``.

The GPU side of the same paths runs in ``tests/core/test_cuda.py`` (via ``bench/gpu_check.sh``).
"""

from __future__ import annotations

import math

import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import nn

from beyondfit import BeyondfitError, Engine, TensorBatches
from beyondfit.cli.run import CONF_DIR, run
from beyondfit.tasks.regression import build

from kit import Recorder


def _val_loss(precision: str, epochs: int = 40) -> tuple[float, Engine]:
    torch.manual_seed(0)
    task = build(seed=0)
    engine = Engine(task.model, task.loss_fn, torch.optim.AdamW(task.model.parameters(), 1e-3,
                    weight_decay=1.0), device="cpu", precision=precision)
    history = engine.fit(task.train_data, epochs=epochs, val_data=task.val_data)
    return history[-1]["val_loss"], engine


def test_bf16_on_cpu_trains_regression_within_5_percent_of_fp32() -> None:
    fp32, _ = _val_loss("32")
    bf16, engine = _val_loss("bf16")
    assert engine.precision.dtype is torch.bfloat16 and engine.precision.scaler is None
    assert abs(bf16 - fp32) <= 0.05 * fp32, (bf16, fp32)


def test_bf16_autocast_reaches_the_closure_and_metrics_stay_float32() -> None:
    seen = []

    def loss_fn(model, batch):
        out = model(batch)
        seen.append(out.dtype)
        return {"loss": out.float().pow(2).mean(), "raw": out.mean()}

    model = nn.Linear(4, 1)
    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), 0.01), device="cpu",
                    precision="bf16")
    history = engine.fit([torch.randn(8, 4) for _ in range(3)], epochs=1)
    assert set(seen) == {torch.bfloat16}
    assert isinstance(history[-1]["raw"], float) and math.isfinite(history[-1]["raw"])
    assert model.weight.dtype == torch.float32  # autocast, not a cast of the weights


def test_fp16_on_cpu_uses_a_cpu_grad_scaler_and_trains() -> None:
    fp32, _ = _val_loss("32", epochs=20)
    fp16, engine = _val_loss("16", epochs=20)
    assert isinstance(engine.precision.scaler, torch.amp.GradScaler)
    assert engine.precision.scaler._device == "cpu"
    assert abs(fp16 - fp32) <= 0.05 * fp32, (fp16, fp32)


def test_fp16_overflow_skips_the_update_and_is_counted() -> None:
    # A scale of 2**40 overflows fp16 activations' gradients: the scaler skips the step and
    # halves the scale, again and again, until the gradients fit.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    rows = Recorder()
    engine = Engine(model, lambda m, b: (m(b[0]).float() - b[1]).pow(2).mean(),
                    torch.optim.SGD(model.parameters(), 0.01), device="cpu", precision="16",
                    callbacks=[rows], log_every=1)
    engine.precision.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(64, 4)
    data = TensorBatches(x, x.sum(1, keepdim=True), batch_size=8, shuffle=False)
    engine.fit(data, epochs=1, max_steps=1)
    assert rows.logs[0]["overflow_steps"] == 1.0
    for a, b in zip(before, model.parameters(), strict=True):
        assert torch.equal(a, b)  # skipped: the weights did not move
    engine.fit(data, epochs=6)  # continues the open epoch: its count includes that skip
    skipped = sum(row["overflow_steps"] for row in engine.history[1:])  # counts per epoch
    # Each skip halved the scale once (no growth within 2000 steps): the count matches.
    assert skipped == pytest.approx(math.log2(2.0**40 / engine.precision.scaler.get_scale()))
    assert 1 < skipped < engine.global_step
    assert not any(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert engine.history[-1]["overflow_steps"] == 0.0  # later epochs fit in fp16


def test_fp16_clips_the_unscaled_gradients() -> None:
    # SGD with lr=1: the update is minus the clipped gradient. Clipping before unscaling would
    # shrink it to clip_norm divided by the scale (16), not to clip_norm.
    clip = 0.05
    grads = {}
    for precision, scale in (("32", None), ("16", 2.0**4)):
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        before = torch.cat([p.detach().flatten() for p in model.parameters()])
        rows = Recorder()
        engine = Engine(model, lambda m, b: (m(b[0]).float() - b[1]).pow(2).mean(),
                        torch.optim.SGD(model.parameters(), 1.0), device="cpu",
                        precision=precision, clip_norm=clip, callbacks=[rows], log_every=1)
        if scale is not None:
            engine.precision.scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        x = torch.randn(16, 4) * 3
        engine.fit([(x, x.sum(1, keepdim=True) + 5)], epochs=1)
        after = torch.cat([p.detach().flatten() for p in model.parameters()])
        grads[precision] = rows.logs[0]["grad_norm"]
        assert (after - before).norm().item() == pytest.approx(clip, rel=1e-3)
        assert rows.logs[0].get("overflow_steps", 0.0) == 0.0
    # The logged pre-clip norm is the real one (fp16 rounding aside), not the scaled one.
    assert grads["16"] == pytest.approx(grads["32"], rel=2e-2)
    assert grads["32"] > 10 * clip


def test_fp16_with_accumulation_unscales_once_per_step() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    engine = Engine(model, lambda m, b: m(b).float().pow(2).mean(),
                    torch.optim.SGD(model.parameters(), 0.01), device="cpu", precision="16",
                    accumulate=3)
    history = engine.fit([torch.randn(4, 4) for _ in range(6)], epochs=1)
    # unscale_ twice in one step would raise inside the GradScaler.
    assert engine.global_step == 2 and history[-1]["overflow_steps"] == 0.0


@pytest.mark.e2e
def test_precision_from_the_command_line_config(tmp_path) -> None:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose(config_name="config", overrides=[
            "+task=regression", "engine.precision=bf16", "device=cpu", "train.epochs=2"])
    history = run(cfg, tmp_path)
    assert math.isfinite(history[-1]["val_loss"])
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose(config_name="config", overrides=[
            "+task=regression", "engine.precision=fp8", "device=cpu"])
    with pytest.raises(BeyondfitError, match=r"precision='fp8'; use 32, bf16 or 16"):
        run(cfg, tmp_path / "bad")
