"""The CUDA paths: device placement, non-blocking copies, bf16/fp16 autocast with a CUDA GradScaler,
and DDP over NCCL. Skipped without CUDA; ``bench/gpu_check.sh`` runs them on a GPU machine.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from beyondfit import Engine, TensorBatches
from beyondfit.core.device import move_to_device, resolve_device
from beyondfit.distributed import DistributedModel, shutdown

from kit import Recorder, mse, sum_data

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA: run bench/gpu_check.sh on a GPU machine"
)


def test_auto_picks_the_gpu_and_the_engine_keeps_everything_there() -> None:
    assert resolve_device("auto").type == "cuda"
    seen = []

    def loss_fn(model, batch):
        x, y = batch
        seen.append((x.device.type, y.device.type, next(model.parameters()).device.type))
        return mse(model, batch)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    engine = Engine(model, loss_fn, torch.optim.Adam(model.parameters(), 1e-2), device="auto")
    x, y = sum_data()
    history = engine.fit(TensorBatches(x, y, batch_size=32), epochs=2, val_data=[(x, y)])
    assert engine.device.type == "cuda" and engine.window.non_blocking
    assert set(seen) == {("cuda", "cuda", "cuda")}
    assert all(isinstance(v, float) for v in history[-1].values())
    assert history[-1]["val_loss"] < history[0]["val_loss"]
    # The checkpointed state is on the GPU's tensors but loads anywhere.
    state = engine.state_dict()
    assert all(t.device.type == "cuda" for t in state["model"].values())


def test_nested_batches_copy_non_blocking_from_pinned_memory() -> None:
    batch = {
        "x": torch.randn(4096, 64).pin_memory(),
        "pair": (torch.arange(10).pin_memory(), [torch.ones(3)]),
    }
    moved = move_to_device(batch, torch.device("cuda"), non_blocking=True)
    torch.cuda.synchronize()  # non-blocking: the values are only final after a sync
    assert moved["x"].device.type == "cuda" and moved["pair"][0].device.type == "cuda"
    assert moved["pair"][1][0].device.type == "cuda"
    assert torch.equal(moved["x"].cpu(), batch["x"])
    assert torch.equal(moved["pair"][0].cpu(), batch["pair"][0])
    again = move_to_device(moved, torch.device("cuda"), non_blocking=True)
    assert again["x"] is moved["x"]  # already there: no copy


def test_bf16_autocast_on_cuda_trains() -> None:
    dtypes = []

    def loss_fn(model, batch):
        out = model(batch[0])
        dtypes.append(out.dtype)
        return ((out.float() - batch[1]) ** 2).mean()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    engine = Engine(model, loss_fn, torch.optim.Adam(model.parameters(), 1e-2), device="cuda",
                    precision="bf16")
    x, y = sum_data()
    history = engine.fit(TensorBatches(x, y, batch_size=32), epochs=3, val_data=[(x, y)])
    assert set(dtypes) == {torch.bfloat16} and engine.precision.scaler is None
    assert history[-1]["val_loss"] < history[0]["val_loss"]


def test_fp16_grad_scaler_on_cuda_skips_and_counts_overflow() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), 0.01), device="cuda",
                    precision="16")
    scaler = engine.precision.scaler
    assert isinstance(scaler, torch.amp.GradScaler) and scaler._device == "cuda"
    engine.precision.scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40)
    x, y = sum_data()
    data = TensorBatches(x, y, batch_size=32, shuffle=False)
    before = [p.detach().clone() for p in model.parameters()]
    engine.fit(data, epochs=1, max_steps=1)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    # From 2**40 the scale halves on each overflow: ~26 skipped steps (6-7 epochs of 4) before
    # it fits fp16, then clean epochs (measured on an H200: 8 epochs left 2 skips in the last).
    engine.fit(data, epochs=12)
    skipped = sum(row["overflow_steps"] for row in engine.history[1:])
    assert skipped == pytest.approx(math.log2(2.0**40 / engine.precision.scaler.get_scale()))
    assert 1 < skipped < engine.global_step and engine.history[-1]["overflow_steps"] == 0.0


def test_fp16_on_cuda_clips_the_unscaled_gradients() -> None:
    clip = 0.05
    norms = {}
    for precision in ("32", "16"):
        torch.manual_seed(0)
        model = nn.Linear(8, 1)
        before = torch.cat([p.detach().flatten() for p in model.parameters()])
        rows = Recorder()
        engine = Engine(model, mse, torch.optim.SGD(model.parameters(), 1.0), device="cuda",
                        precision=precision, clip_norm=clip, callbacks=[rows], log_every=1)
        if precision == "16":
            engine.precision.scaler = torch.amp.GradScaler("cuda", init_scale=2.0**4)
        x, y = sum_data(16)
        engine.fit([(x * 3, y + 5)], epochs=1)
        # (before: on the CPU, where the model was built; the engine moved it to CUDA)
        after = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
        assert (after - before).norm().item() == pytest.approx(clip, rel=1e-3)
        norms[precision] = rows.logs[0]["grad_norm"]
    assert norms["16"] == pytest.approx(norms["32"], rel=2e-2) and norms["32"] > 10 * clip


def test_ddp_over_nccl_with_one_process() -> None:
    try:
        x, y = sum_data()
        results = []
        for strategy in ("none", "ddp"):
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
            engine = Engine(model, mse, torch.optim.SGD(model.parameters(), 0.05),
                            device="cuda", strategy=strategy, accumulate=2)
            history = engine.fit(TensorBatches(x, y, batch_size=32), epochs=2,
                                 val_data=[(x, y)])
            results.append(history[-1]["val_loss"])
            if strategy == "ddp":
                assert isinstance(engine.forward_model, DistributedModel)
                assert engine.device == torch.device("cuda", 0)
                assert "nccl" in str(torch.distributed.get_backend()).lower()
        assert results[1] == pytest.approx(results[0], rel=1e-5)
    finally:
        shutdown()
