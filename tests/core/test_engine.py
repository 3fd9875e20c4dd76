"""The engine's behaviours, each proven against an independent computation."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import namedtuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit import BeyondfitError, Callback, Engine, StopRule, TensorBatches
from beyondfit.core.device import move_to_device, resolve_device


def make_data(n: int = 64, d: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, x @ torch.randn(d, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)


def make_model(seed: int = 0, d: int = 5) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, 1))


def mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(model(x), y)


def batches(x: torch.Tensor, y: torch.Tensor, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]


# ---------------------------------------------------------------- parity with a raw loop
def test_engine_matches_hand_written_loop_bitwise() -> None:
    x, y = make_data()
    data = batches(x, y, 16)
    raw = make_model()
    opt = torch.optim.Adam(raw.parameters(), lr=1e-2)
    for _ in range(3):
        for xb, yb in data:
            loss = mse(raw, (xb, yb))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(raw.parameters(), 0.5)
            opt.step()
            opt.zero_grad(set_to_none=True)

    model = make_model()
    engine = Engine(model, mse, torch.optim.Adam(model.parameters(), lr=1e-2), clip_norm=0.5,
                    device="cpu")
    engine.fit(data, epochs=3)
    assert engine.global_step == 12
    for a, b in zip(raw.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)


def test_optimizer_factory_gets_only_trainable_parameters() -> None:
    model = make_model()
    model[0].weight.requires_grad_(False)
    seen: list[list[nn.Parameter]] = []

    def factory(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        seen.append(list(params))
        return torch.optim.SGD(params, lr=0.1)

    Engine(model, mse, factory, device="cpu")
    assert len(seen[0]) == 3 and all(p.requires_grad for p in seen[0])


# ---------------------------------------------------------------- what is updated
def test_frozen_parameters_are_bitwise_unchanged() -> None:
    x, y = make_data()
    model = make_model()
    model[0].requires_grad_(False)
    frozen = copy.deepcopy(model[0].state_dict())
    before_head = model[2].weight.clone()
    # AdamW with weight decay would shrink a frozen weight if it were handed to the optimizer.
    engine = Engine(model, mse, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5),
                    device="cpu")
    engine.fit(batches(x, y, 16), epochs=2)
    for key, value in model[0].state_dict().items():
        assert torch.equal(value, frozen[key])
    assert not torch.equal(model[2].weight, before_head)


def test_batchnorm_stats_move_in_train_and_not_in_eval() -> None:
    x, y = make_data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu")
    bn = model[1]
    start = bn.running_mean.clone()
    engine.fit(batches(x, y, 16), epochs=1)
    after_train = bn.running_mean.clone()
    assert not torch.equal(start, after_train)
    engine.evaluate(batches(x, y, 16))
    assert torch.equal(bn.running_mean, after_train)
    assert bn.num_batches_tracked.item() == 4


def test_dropout_active_only_in_training_and_eval_under_eval_mode() -> None:
    seen: list[tuple[bool, bool]] = []

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 1)
            self.drop = nn.Dropout(0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append((self.training, torch.is_inference_mode_enabled()))
            return self.linear(self.drop(x))

    def loss_fn(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        out = model(x)
        zeros = (model.drop(torch.ones(1000)) == 0).float().mean()
        return {"loss": out.pow(2).mean(), "dropped": zeros}

    engine = Engine(Probe(), loss_fn, lambda p: torch.optim.SGD(p, lr=0.1), device="cpu")
    data = [torch.ones(8, 4)] * 3
    history = engine.fit(data, epochs=1, val_data=data)
    assert seen[0] == (True, False) and seen[-1] == (False, True)
    assert 0.4 < history[0]["dropped"] < 0.6
    assert history[0]["val_dropped"] == 0.0
    assert engine.model.training  # back in train mode after evaluation


# ---------------------------------------------------------------- clipping
def _exploding_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return 1000.0 * mse(model, batch)


class GradProbe(Callback):
    """Records the gradients the optimizer saw (hooked on the optimizer's step)."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.maxima: list[float] = []

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        def record(opt: torch.optim.Optimizer, args: object, kwargs: object) -> None:
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            self.norms.append(torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(g) for g in grads])).item())
            self.maxima.append(max(g.abs().max().item() for g in grads))

        optimizer.register_step_pre_hook(record)


def test_clip_norm_bounds_applied_gradient_and_logs_preclip_norm() -> None:
    x, y = make_data()
    model = make_model()
    engine = Engine(model, _exploding_loss, torch.optim.SGD(model.parameters(), lr=1e-6),
                    clip_norm=1.0, device="cpu", log_every=1)
    probe = GradProbe()
    probe.attach(engine.optimizer)
    history = engine.fit(batches(x, y, 16), epochs=1)
    assert max(probe.norms) <= 1.0 + 1e-5
    assert history[0]["grad_norm"] > 10.0  # the logged norm is the one before clipping


def test_clip_value_bounds_every_gradient_element() -> None:
    x, y = make_data()
    model = make_model()
    engine = Engine(model, _exploding_loss, torch.optim.SGD(model.parameters(), lr=1e-6),
                    clip_value=0.01, device="cpu")
    probe = GradProbe()
    probe.attach(engine.optimizer)
    engine.fit(batches(x, y, 16), epochs=1)
    assert max(probe.maxima) <= 0.01 + 1e-9
    assert "grad_norm" not in engine.history[0]


def test_both_clips_apply() -> None:
    x, y = make_data()
    model = make_model()
    engine = Engine(model, _exploding_loss, torch.optim.SGD(model.parameters(), lr=1e-6),
                    clip_norm=1.0, clip_value=0.001, device="cpu")
    probe = GradProbe()
    probe.attach(engine.optimizer)
    engine.fit(batches(x, y, 16), epochs=1)
    assert max(probe.norms) <= 1.0 + 1e-5 and max(probe.maxima) <= 0.001 + 1e-9


# ---------------------------------------------------------------- accumulation
def test_accumulation_equals_one_larger_batch() -> None:
    x, y = make_data(n=64)
    big = make_model()
    Engine(big, mse, torch.optim.SGD(big.parameters(), lr=0.1), device="cpu").fit(
        batches(x, y, 32), epochs=2
    )
    small = make_model()
    engine = Engine(small, mse, torch.optim.SGD(small.parameters(), lr=0.1), accumulate=4,
                    device="cpu")
    engine.fit(batches(x, y, 8), epochs=2)
    assert engine.global_step == 4  # 8 micro-batches per epoch / 4
    for a, b in zip(big.parameters(), small.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_accumulation_counts_scheduler_and_clipping_once_per_step() -> None:
    x, y = make_data(n=64)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    engine = Engine(model, _exploding_loss, opt, accumulate=4, clip_norm=1.0, device="cpu",
                    scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5))
    probe = GradProbe()
    probe.attach(opt)
    engine.fit(batches(x, y, 8), epochs=1)
    assert len(probe.norms) == 2  # two optimizer steps, each clipped once
    assert max(probe.norms) <= 1.0 + 1e-5
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)


def test_partial_accumulation_window_is_applied_at_epoch_end() -> None:
    x, y = make_data(n=40)
    model = make_model()
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.1), accumulate=4,
                    device="cpu")
    engine.fit(batches(x, y, 8), epochs=1)  # 5 micro-batches: one full window + one partial
    assert engine.global_step == 2
    assert all(p.grad is None for p in model.parameters())


# ---------------------------------------------------------------- metrics
def test_metrics_are_per_epoch_means_and_reset_between_epochs() -> None:
    counter = {"calls": 0}

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict:
        counter["calls"] += 1
        return {"loss": mse(model, batch), "calls": torch.tensor(float(counter["calls"]))}

    x, y = make_data(n=32)
    model = make_model()
    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu")
    history = engine.fit(batches(x, y, 8), epochs=2)
    assert history[0]["calls"] == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert history[1]["calls"] == pytest.approx((5 + 6 + 7 + 8) / 4)  # not a running mean
    assert [h["epoch"] for h in history] == [1.0, 2.0]
    assert [h["step"] for h in history] == [4.0, 8.0]


def test_epoch_loss_is_mean_of_batch_losses() -> None:
    x, y = make_data(n=32)
    model = make_model()
    losses: list[float] = []

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        loss = mse(model, batch)
        losses.append(loss.item())
        return loss

    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu")
    history = engine.fit(batches(x, y, 8), epochs=1)
    assert history[0]["loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-6)


def test_val_keys_come_from_evaluation() -> None:
    x, y = make_data(n=32)
    model = make_model()
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu")
    history = engine.fit(batches(x, y, 8), epochs=1, val_data=batches(x, y, 32))
    with torch.no_grad():
        expected = mse(model.eval(), (x, y)).item()
    assert history[0]["val_loss"] == pytest.approx(expected, rel=1e-6)
    assert engine.evaluate(batches(x, y, 32)) == {"val_loss": pytest.approx(expected, rel=1e-6)}


def test_evaluator_callable_results_are_prefixed() -> None:
    model = make_model()
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu")

    def evaluator(m: nn.Module) -> dict[str, float]:
        assert not m.training and torch.is_inference_mode_enabled()
        return {"return": 1.5, "val_length": 3}

    assert engine.evaluate(evaluator) == {"val_return": 1.5, "val_length": 3.0}


def test_eval_every_and_log_every_count_optimizer_steps() -> None:
    events: list[tuple[str, int]] = []

    class Recorder(Callback):
        def on_log(self, engine: Engine, logs: dict) -> None:
            events.append(("log", engine.global_step))

        def on_eval_end(self, engine: Engine, logs: dict) -> None:
            events.append(("eval", engine.global_step))

    x, y = make_data(n=64)
    model = make_model()
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.01), accumulate=2,
                    log_every=2, callbacks=[Recorder()], device="cpu")
    engine.fit(batches(x, y, 8), epochs=1, val_data=batches(x, y, 64), eval_every=3)
    assert ("log", 2) in events and ("log", 4) in events
    assert ("eval", 3) in events and ("eval", 4) in events  # every 3 steps, and at epoch end
    assert engine.global_step == 4


# ---------------------------------------------------------------- stopping
def test_stop_rule_ends_training_early() -> None:
    x, y = make_data(n=64)
    model = make_model()
    engine = Engine(model, mse, torch.optim.Adam(model.parameters(), lr=1e-2), device="cpu",
                    callbacks=[StopRule("val_loss<=10")])
    history = engine.fit(batches(x, y, 16), epochs=50, val_data=batches(x, y, 64))
    assert len(history) == 1
    assert engine.stopped_by is not None and "val_loss" in engine.stopped_by


@pytest.mark.parametrize("rule", ["val_loss", "val_loss => 3", "loss<=abc", ""])
def test_bad_stop_rule_is_a_clear_error(rule: str) -> None:
    with pytest.raises(BeyondfitError, match="stop rule"):
        StopRule(rule)


def test_max_steps_stops_mid_epoch() -> None:
    x, y = make_data(n=64)
    model = make_model()
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu")
    engine.fit(batches(x, y, 8), epochs=10, max_steps=5)
    assert engine.global_step == 5 and engine.epoch == 0 and engine.batch_in_epoch == 5


def test_fit_accepts_generators_and_dataloaders() -> None:
    x, y = make_data(n=32)
    model = make_model()
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu")
    engine.fit(((x[i : i + 8], y[i : i + 8]) for i in range(0, 32, 8)), epochs=1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    engine.fit(loader, epochs=2)  # two more epochs, as Keras' fit does
    assert engine.global_step == 4 + 8 and engine.epoch == 3


# ---------------------------------------------------------------- devices
Pair = namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Holder:
    tensor: torch.Tensor
    label: str


def test_nested_batch_lands_on_the_chosen_device() -> None:
    # The meta device stands in for an accelerator: every tensor must be moved.
    meta = torch.device("meta")
    batch = {
        "x": torch.ones(2),
        "pair": Pair(torch.ones(1), [torch.zeros(3), (torch.ones(2), "keep")]),
        "holder": Holder(torch.ones(4), "name"),
        "n": 3,
    }
    moved = move_to_device(batch, meta)
    assert moved["x"].device == meta
    assert isinstance(moved["pair"], Pair) and moved["pair"].a.device == meta
    assert moved["pair"].b[0].device == meta and moved["pair"].b[1][0].device == meta
    assert moved["pair"].b[1][1] == "keep"
    assert isinstance(moved["holder"], Holder) and moved["holder"].tensor.device == meta
    assert moved["holder"].label == "name" and moved["n"] == 3


def test_engine_moves_model_and_batches() -> None:
    seen: list[torch.device] = []

    def loss_fn(model: nn.Module, batch: dict) -> torch.Tensor:
        seen.append(batch["x"].device)
        return model(batch["x"]).pow(2).mean()

    model = make_model()
    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu")
    engine.fit([{"x": torch.ones(4, 5)}], epochs=1)
    assert engine.device == torch.device("cpu") and seen == [torch.device("cpu")]


def test_device_resolution() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        with pytest.raises(BeyondfitError, match="CUDA is not available"):
            resolve_device("cuda")
        with pytest.raises(BeyondfitError, match="CUDA is not available"):
            resolve_device("cuda:1")
    with pytest.raises(BeyondfitError, match="not a device"):
        resolve_device("gpu-please")


# ---------------------------------------------------------------- determinism
def _seeded_run(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    x, y = make_data(n=96, seed=seed)
    model = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
    engine = Engine(model, mse, torch.optim.Adam(model.parameters(), lr=1e-2), device="cpu")
    engine.fit(TensorBatches(x, y, batch_size=16, seed=seed), epochs=3)
    return model.state_dict()


def test_seeded_cpu_run_is_bitwise_reproducible() -> None:
    a, b, c = _seeded_run(1), _seeded_run(1), _seeded_run(2)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


# ---------------------------------------------------------------- bad closures and options
@pytest.mark.parametrize(
    ("result", "message"),
    [
        (lambda loss: loss.expand(3), "shape"),
        (lambda loss: {"mae": loss}, "without 'loss'"),
        (lambda loss: "loss", "returned str"),
        (lambda loss: {"loss": loss, "vector": torch.ones(3)}, "'vector' with shape"),
        (lambda loss: {"loss": loss, "note": "text"}, "'note' of type str"),
        (lambda loss: loss.detach(), "does not require grad"),
    ],
)
def test_bad_closure_results_are_clear_errors(result, message: str) -> None:
    model = make_model()
    engine = Engine(model, lambda m, b: result(mse(m, b)), torch.optim.SGD(model.parameters(), 0.1),
                    device="cpu")
    x, y = make_data(n=8)
    with pytest.raises(BeyondfitError, match=message):
        engine.fit([(x, y)])


def test_all_frozen_model_is_a_clear_error() -> None:
    model = make_model().requires_grad_(False)
    with pytest.raises(BeyondfitError, match="requires_grad=False"):
        Engine(model, mse, lambda p: torch.optim.SGD(p, lr=0.1), device="cpu")


def test_frozen_parameters_under_a_loss_are_a_clear_error() -> None:
    model = make_model()

    def loss_fn(model: nn.Module, batch: tuple) -> torch.Tensor:
        with torch.no_grad():
            return mse(model, batch)

    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), 0.1), device="cpu")
    with pytest.raises(BeyondfitError, match="does not require grad"):
        engine.train_step(make_data(n=8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clip_norm": -1.0}, "clip_norm"),
        ({"accumulate": 0}, "accumulate"),
        ({"precision": "8"}, "precision"),
        ({"on_nonfinite": "panic"}, "on_nonfinite"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_bad_engine_options_are_clear_errors(kwargs: dict, message: str) -> None:
    model = make_model()
    with pytest.raises(BeyondfitError, match=message):
        Engine(model, mse, torch.optim.SGD(model.parameters(), 0.1), **kwargs)


def test_empty_training_data_is_a_clear_error() -> None:
    model = make_model()
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), 0.1), device="cpu")
    with pytest.raises(BeyondfitError, match="no batches"):
        engine.fit([])


def test_log_rows_hold_the_interval_since_the_last_row_and_epoch_rows_the_epochs_mean(
        tmp_path) -> None:
    """Issue 58: a value logged every 2 steps describes those 2 steps (k = 1..10 logs 1.5,
    3.5, ...), not the running mean from the epoch's start (1.5, 2.5, ...); the epoch row
    keeps the epoch's mean, as Keras and Lightning report it; metrics.jsonl holds the same."""
    from beyondfit import MetricsFile

    model = torch.nn.Linear(1, 1)
    steps = iter(range(1, 11))

    def loss_fn(m, batch):
        return {"loss": (m(batch) ** 2).mean(), "k": torch.tensor(float(next(steps)))}

    seen = []

    class Rows(Callback):
        def on_log(self, engine, logs):
            seen.append(logs["k"])

    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), 0.0), device="cpu",
                    log_every=2, callbacks=[Rows(), MetricsFile(tmp_path / "metrics.jsonl")])
    history = engine.fit([torch.ones(1, 1)] * 10, epochs=1, verbose=False)
    intervals = [(k + k + 1) / 2 for k in range(1, 11, 2)]  # by hand: each pair's mean
    assert seen == intervals == [1.5, 3.5, 5.5, 7.5, 9.5]
    assert history[-1]["k"] == 5.5
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["k"] for r in rows if r["kind"] == "train"] == intervals
    assert [r["k"] for r in rows if r["kind"] == "epoch"] == [5.5]
