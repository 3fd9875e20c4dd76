"""``compile=True``: each optimizer's whole step compiled (``beyondfit.core.compile.compiled``).

Most tests trace with dynamo but run the traced graphs as they are (the ``traced`` fixture
swaps inductor for the graph's own forward): what is checked is ours, what the graphs contain
and how the engine drives them, in seconds. Inductor's C++ kernels (a minute on two busy
cores) run in the tests marked ``slow``, which compare a compiled run with the eager one.
"""

from __future__ import annotations

import copy
import logging
import math
import shlex

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit import BeyondfitError, Engine, TensorBatches, Update
from beyondfit.core.compile import graphs, inductor_options, traced_optimizer
from beyondfit.core.schedules import cosine
from beyondfit.core.target import SlowCopy
from beyondfit.distributed import DistributedModel, shutdown

from kit import ROOT, cli, gan_d_loss, mse, rows, sum_data


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))


def _mse_logs(model, batch):
    x, y = batch
    err = model(x) - y
    return {"loss": (err * err).mean(), "mae": err.abs().mean()}


def _train(compile, epochs=3, n=140, eval_every=None, **options):
    model = _model()
    engine = Engine(model, _mse_logs, torch.optim.Adam(model.parameters(), 1e-2),
                    device="cpu", compile=compile, **options)
    x, y = sum_data(n)
    history = engine.fit(TensorBatches(x, y, batch_size=32, seed=0), epochs=epochs,
                         val_data=[(x, y)], eval_every=eval_every, verbose=False)
    return history, engine


def _close(a, b, tol=1e-4):
    keys = [k for k in a[-1] if isinstance(a[-1][k], float)]
    return all(math.isclose(ra[k], rb[k], rel_tol=tol, abs_tol=1e-6)
               for ra, rb in zip(a, b, strict=True) for k in keys)


def test_whole_step_is_one_graph_and_matches_eager(traced, caplog) -> None:
    eager, _ = _train(False, clip_norm=0.5, scheduler=lambda o: torch.optim.lr_scheduler
                      .StepLR(o, 2, 0.5))
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        compiled_run, engine = _train(True, clip_norm=0.5, scheduler=lambda o: torch.optim
                                      .lr_scheduler.StepLR(o, 2, 0.5))
    assert _close(eager, compiled_run)
    report = engine.compile_report
    # The whole update (check and masked step included), the evaluation closure; one
    # recompile for the short last batch (140 = 4 x 32 + 12), none for the changing
    # learning rate or the evaluations.
    assert (report.graphs, report.recompiles, report.eager) == (2, 1, {})
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiled:")]
    assert lines == ["compiled: 2 graphs, 1 recompile, 0 parts left eager"]
    # The graph reads the learning rate as a tensor only while it runs: the user's optimizer
    # and checkpoints keep the float the scheduler wrote.
    assert type(engine.optimizer.param_groups[0]["lr"]) is float
    saved = engine.updates[0].state_dict()["optimizer"]["param_groups"][0]["lr"]
    assert type(saved) is float and saved == 0.01 * 0.5**7  # 15 steps, halved every 2
    assert all(p.grad is None for p in engine.model.parameters())


def test_recompiles_stay_bounded_over_epochs_and_evaluations(traced) -> None:
    _, engine = _train(True, epochs=6, eval_every=2)
    assert engine.compile_report.recompiles <= 1


def test_without_the_check_the_step_is_inside_the_one_graph(traced) -> None:
    eager, _ = _train(False, on_nonfinite="ignore")
    compiled_run, engine = _train(True, on_nonfinite="ignore")
    assert _close(eager, compiled_run)
    assert engine.compile_report.graphs == 2  # the whole update, the evaluation closure


def test_accumulation_and_a_short_window_compile_the_step(traced) -> None:
    eager, _ = _train(False, accumulate=3, clip_value=0.05)
    compiled_run, engine = _train(True, accumulate=3, clip_value=0.05)
    assert _close(eager, compiled_run)
    assert engine.compile_report.eager == {}
    assert engine.compile_report.graphs == 3  # closure, clip-check-step, evaluation


def test_skip_never_applies_a_nan_batch(traced) -> None:
    x, y = sum_data(96)
    y_bad = y.clone()
    y_bad[40] = float("nan")  # the second batch of 32
    batches = [(x[i:i + 32], y_bad[i:i + 32]) for i in range(0, 96, 32)]

    def run(compile):
        model = _model()
        engine = Engine(model, _mse_logs, torch.optim.Adam(model.parameters(), 1e-2),
                        device="cpu", compile=compile, on_nonfinite="skip", clip_norm=1.0)
        history = engine.fit(batches * 2, epochs=1, verbose=False)
        return engine, history

    eager, h_eager = run(False)
    comp, h_comp = run(True)
    assert comp.state.skipped_steps == eager.state.skipped_steps == 2
    assert comp.updates[0].steps == eager.updates[0].steps == 4
    for a, b in zip(eager.model.parameters(), comp.model.parameters(), strict=True):
        assert torch.isfinite(b).all()
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    state = comp.optimizer.state_dict()["state"]
    assert all(float(s["step"]) == 4 for s in state.values())  # the undone step is not counted
    assert h_comp[0]["skipped_steps"] == h_eager[0]["skipped_steps"]


def test_a_loaded_state_is_what_the_masked_commit_keeps(traced, step_kind) -> None:
    # The optimizer's load_state_dict gives it new state tensors after the graph was built:
    # a NaN step after the load must leave those (not the replaced ones) as they were.
    x, y = sum_data(96)
    good = [(x[i:i + 32], y[i:i + 32]) for i in range(0, 96, 32)]
    y_bad = y[:32].clone()
    y_bad[5] = float("nan")

    def run(compile):
        model = _model()
        engine = Engine(model, _mse_logs, torch.optim.Adam(model.parameters(), 1e-2),
                        device="cpu", compile=compile, on_nonfinite="skip")
        engine.fit(good, epochs=1, verbose=False)
        weights = copy.deepcopy(model.state_dict())
        moments = copy.deepcopy(engine.optimizer.state_dict())
        engine.fit(good, epochs=2, verbose=False)
        model.load_state_dict(weights)
        engine.optimizer.load_state_dict(moments)  # new state tensors
        engine.fit([(x[:32], y_bad), *good[1:]], epochs=2, verbose=False)
        return engine

    eager, comp = run(False), run(True)
    assert comp.state.skipped_steps == eager.state.skipped_steps == 2
    for mine, theirs in zip(eager.optimizer.state.values(), comp.optimizer.state.values(),
                            strict=True):
        assert float(mine["step"]) == float(theirs["step"])
        assert torch.isfinite(theirs["exp_avg"]).all()
        assert torch.allclose(mine["exp_avg"], theirs["exp_avg"], rtol=1e-3, atol=1e-6)
    for a, b in zip(eager.model.parameters(), comp.model.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_the_fused_kernel_steps_after_the_graph_as_the_eager_step_would(traced, step_kind
                                                                        ) -> None:
    eager, _ = _train(False, clip_norm=0.5, accumulate=1)
    compiled_run, engine = _train(True, clip_norm=0.5)
    assert _close(eager, compiled_run)
    (slot,) = engine.window.slots
    assert slot.program.kernel == (step_kind == "kernel")
    # The switch is the twin's; the user's optimizer keeps its own setting.
    assert bool(slot.program.twin.optimizer.param_groups[0]["fused"]) == (step_kind == "kernel")
    assert engine.optimizer.param_groups[0]["fused"] is None
    assert (engine.compile_report.graphs, engine.compile_report.eager) == (2, {})
    # Accumulation's split path: the same step after the rescale-clip-check graph.
    eager, _ = _train(False, accumulate=3, clip_value=0.05)
    compiled_run, engine = _train(True, accumulate=3, clip_value=0.05)
    assert _close(eager, compiled_run) and engine.compile_report.eager == {}


def _scheduled(compile, path=None, accumulate=1):
    model = _model()
    engine = Engine(model, _mse_logs, torch.optim.Adam(model.parameters(), 1e-2),
                    device="cpu", compile=compile, scheduler=cosine, accumulate=accumulate)
    if path is not None:
        engine.load(path)
    return engine


@pytest.mark.parametrize("accumulate", [1, 3])
def test_a_compiled_run_saves_what_an_eager_run_loads(traced, step_kind, accumulate,
                                                       tmp_path) -> None:
    # The graphs read each learning rate as a tensor; none may stay in the user's optimizer,
    # its scheduler or a checkpoint (a scheduler's _last_lr held one, and no run compiled
    # with a schedule could be resumed from its own checkpoints).
    x, y = sum_data(96)
    data = TensorBatches(x, y, batch_size=16, seed=0)
    engine = _scheduled(True, accumulate=accumulate)
    engine.fit(data, epochs=2, verbose=False)
    assert engine.compile_report.eager == {}
    group = engine.optimizer.param_groups[0]
    assert type(group["lr"]) is float
    assert all(type(lr) is float for lr in engine.updates[0].scheduler.state_dict()["_last_lr"])
    engine.save(tmp_path / "c.pt")
    saved = torch.load(tmp_path / "c.pt", weights_only=True)
    assert "Tensor" not in repr(saved["updates"][""]["scheduler"]["_last_lr"])
    for compile in (False, True):  # the checkpoint loads and trains on, eager or compiled
        again = _scheduled(compile, tmp_path / "c.pt")
        again.fit(data, epochs=3, verbose=False)
        assert type(again.optimizer.param_groups[0]["lr"]) is float


@pytest.mark.e2e  # inductor builds kernels (a compiler process)
def test_a_compiled_run_resumed_from_its_checkpoint_is_bitwise_the_uninterrupted_one(
        tmp_path) -> None:
    # A fresh run takes its first step eagerly (the optimizer's state is built then) and the
    # rest compiled. A resumed run once did the same: its first step was eager where the
    # uninterrupted run's was compiled, and the weights differed in the last bits from there.
    def engine():
        model = _model()
        return Engine(model, _mse_logs, torch.optim.RMSprop(model.parameters(), 1e-2,
                                                            centered=True),
                      device="cpu", compile=True)

    x, y = sum_data(96)
    whole, data = engine(), TensorBatches(x, y, batch_size=16, seed=0)
    whole.fit(data, epochs=1, verbose=False)
    whole.save(tmp_path / "epoch1.pt")
    whole.fit(data, epochs=1, verbose=False)  # (each call: that many more)
    resumed, data = engine(), TensorBatches(x, y, batch_size=16, seed=0)
    resumed.load(tmp_path / "epoch1.pt")
    resumed.fit(data, epochs=2, verbose=False)  # after a load: counted from the start
    assert resumed.compile_report.eager == {}
    for key, value in whole.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key


def test_raise_names_the_step_as_eager_does(traced) -> None:
    x, y = sum_data(64)
    y[40] = float("nan")
    model = _model()
    engine = Engine(model, _mse_logs, torch.optim.Adam(model.parameters(), 1e-2),
                    device="cpu", compile=True)
    before = None
    with pytest.raises(BeyondfitError, match=r"non-finite loss, mae at optimizer step 2"):
        before = [p.detach().clone() for p in model.parameters()]
        engine.fit([(x[:32], y[:32]), (x[32:], y[32:])], verbose=False)
    assert before is not None and all(torch.isfinite(p).all() for p in model.parameters())


class _Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.g = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 2))
        self.d = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))
        self.d_slow = SlowCopy(self.d, rate=0.1)


def _g_loss(model, batch):
    _, z = batch
    logit = model.d_slow(model.g(z))  # through the target network: a submodule call
    return F.binary_cross_entropy_with_logits(logit, torch.ones_like(logit))


def _gan(compile, every_g=2, precision="32", nan_batch=None):
    model = _Pair()
    engine = Engine(model, [
        Update("d", gan_d_loss, torch.optim.Adam(model.d.parameters(), 1e-3), clip_norm=1.0,
               after_step=[model.d_slow.update]),
        Update("g", _g_loss, torch.optim.Adam(model.g.parameters(), 1e-3), every=every_g),
    ], device="cpu", compile=compile, precision=precision, log_every=1,
        on_nonfinite="raise" if nan_batch is None else "skip")
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(16, 2, generator=g) + 2.0, torch.randn(16, 3, generator=g))
            for _ in range(10)]
    if nan_batch is not None:  # only the discriminator's loss reads the real samples
        data[nan_batch][0][3, 1] = float("nan")
    history = engine.fit(data, epochs=2, verbose=False)
    return engine, history


def test_several_optimizers_a_ratio_and_a_slow_copy(traced) -> None:
    eager, h_eager = _gan(False)
    comp, h_comp = _gan(True)
    assert _close(h_eager, h_comp)
    assert comp.model.d_slow.calls == eager.model.d_slow.calls == 20
    for a, b in zip(eager.model.state_dict().values(), comp.model.state_dict().values(),
                    strict=False):
        if isinstance(a, torch.Tensor):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    report = comp.compile_report
    assert report.eager == {} and report.recompiles == 0
    assert report.graphs == 2  # per optimizer: the whole update, its check and masked step


def test_a_nan_step_moves_no_weight_moment_or_target(traced, step_kind) -> None:
    # The masked commit: the graph steps, then keeps the old parameters, Adam's moments and
    # step count, and the target network, because the flag said non-finite.
    eager, _ = _gan(False, nan_batch=4)
    comp, _ = _gan(True, nan_batch=4)
    assert comp.state.skipped_steps == eager.state.skipped_steps == 2  # once per epoch
    assert comp.model.d_slow.calls == eager.model.d_slow.calls == 18
    assert comp.updates[0].steps == eager.updates[0].steps == 18
    for a, b in zip(eager.model.state_dict().values(), comp.model.state_dict().values(),
                    strict=False):
        if isinstance(a, torch.Tensor):
            assert torch.isfinite(b).all() and torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    for mine, theirs in zip(eager.updates[0].optimizer.state.values(),
                            comp.updates[0].optimizer.state.values(), strict=True):
        assert float(mine["step"]) == float(theirs["step"]) == 18
        assert torch.allclose(mine["exp_avg_sq"], theirs["exp_avg_sq"], rtol=1e-4, atol=1e-9)
    assert comp.compile_report.eager == {}
    assert [s.program.kernel for s in comp.window.slots] == [step_kind == "kernel"] * 2
    assert not hasattr(comp.updates[0].optimizer, "found_inf")


def test_bf16_autocast_is_compiled_inside_the_step(traced) -> None:
    _, h_eager = _gan(False, precision="bf16")
    comp, h_comp = _gan(True, precision="bf16")
    assert comp.compile_report.eager == {}
    assert _close(h_eager, h_comp, tol=5e-2)


class _WorstError:
    """A metric object of the user's own: its ``update`` reads values on the host."""

    def __init__(self) -> None:
        self.value = 0.0

    def update(self, pred, target) -> None:
        self.value = max(self.value, *(pred - target).abs().flatten().tolist())

    def compute(self) -> torch.Tensor:
        return torch.tensor(self.value)

    def reset(self) -> None:
        self.value = 0.0


def _metric_run(compile):
    metric = _WorstError()

    def loss_fn(model, batch):
        x, y = batch
        pred = model(x)
        metric.update(pred.detach(), y)
        return {"loss": F.mse_loss(pred, y), "worst": metric}

    model = _model()
    x, y = sum_data(96)
    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), 1e-2), device="cpu",
                    compile=compile)
    return engine, engine.fit(TensorBatches(x, y, batch_size=32, seed=0), epochs=2,
                              verbose=False)


def test_a_metric_object_is_left_outside_and_reported_once(traced, caplog) -> None:
    _, eager = _metric_run(False)
    with caplog.at_level(logging.WARNING, logger="beyondfit"):
        engine, history = _metric_run(True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "whole step runs eagerly" in warnings[0]
    assert "the closure is compiled with graph breaks" in warnings[0]
    assert _close(eager, history)  # the metric object updated outside the graphs, as eager
    assert engine.compile_report.graphs >= 2  # the closure's pieces and the step


def test_a_python_hook_runs_eagerly_after_the_graph(traced) -> None:
    seen = []
    model = _model()
    engine = Engine(model, [Update("net", _mse_logs, torch.optim.Adam(model.parameters()),
                                   after_step=[lambda u: seen.append(u.steps)])],
                    device="cpu", compile=True)
    engine.fit([sum_data(32)] * 4, verbose=False)
    assert seen == [1, 2, 3, 4]
    assert list(engine.compile_report.eager) == ["optimizer 'net''s after_step hooks "
                                                 "test_a_python_hook_runs_eagerly_after_the_graph"
                                                 ".<locals>.<lambda>"]


class _BrokenBackend(nn.Module):
    """What torch.compile returns when its backend cannot build: fails at the first call."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        raise RuntimeError("InductorError: CppCompileError: C++ compile error\nno compiler 'g++'")


@pytest.fixture
def broken_compile(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: _BrokenBackend(fn))


def test_compile_falls_back_to_eager_with_one_line_per_part(broken_compile, caplog) -> None:
    eager, _ = _train(False)
    with caplog.at_level(logging.WARNING, logger="beyondfit"):
        fallback, engine = _train(True)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert messages == [
        "compile: the optimizer's whole step runs eagerly (RuntimeError: InductorError: "
        "CppCompileError: C++ compile error; the closure is compiled with graph breaks, its "
        "backward runs eagerly)",
        "compile: the optimizer's closure runs eagerly (RuntimeError: InductorError: "
        "CppCompileError: C++ compile error)",
        "compile: the optimizer's step runs eagerly (RuntimeError: InductorError: "
        "CppCompileError: C++ compile error)",
        "compile: the optimizer's closure in evaluation runs eagerly (RuntimeError: "
        "InductorError: CppCompileError: C++ compile error)",
    ]
    assert fallback == eager  # the eager step, bitwise
    assert all(isinstance(g["lr"], float) for g in engine.optimizer.param_groups)


def test_compile_fallback_keeps_the_ddp_wrapper(broken_compile, caplog) -> None:
    try:
        eager, _ = _train(False)
        with caplog.at_level(logging.WARNING, logger="beyondfit"):
            fallback, engine = _train(True, strategy="ddp")
        assert isinstance(engine.forward_model, DistributedModel)  # still synchronised
        assert any("continuing without compilation" in r.getMessage() for r in caplog.records)
        assert _close(eager, fallback, tol=1e-6)
    finally:
        shutdown()


def test_compile_option_is_checked() -> None:
    model = _model()
    with pytest.raises(BeyondfitError, match=r"compile='fast'; use false, true or max"):
        Engine(model, mse, torch.optim.SGD(model.parameters(), 0.1), compile="fast")


def test_compile_max_without_cuda_says_so_and_compiles(traced, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="beyondfit"):
        _, engine = _train("max", epochs=1)
    assert any("CUDA graphs need a CUDA device" in r.getMessage() for r in caplog.records)
    assert engine.compile_report.graphs == 2  # the whole update, the evaluation closure


def test_cuda_graphs_are_asked_for_evaluation_graphs_only(monkeypatch) -> None:
    """``compile="max"`` on a GPU: inductor's CUDA graphs for the evaluation closure, never
    for a training graph (it writes weights in place: CUDA graphs refuse it, and torch 2.11
    crashed after refusing). The choice is made on the host; here on a CPU, with the flag a
    CUDA device would set."""
    from beyondfit.core.compile import compiled

    patches: list[object] = []
    monkeypatch.setattr(graphs, "inductor",
                        lambda gm, example_inputs, asked: patches.append(asked) or gm.forward)
    real = compiled.compile_steps

    def as_on_cuda(*args):
        report, programs = real(*args)
        for program in programs:
            program.cuda_graphs = True
        return report, programs

    monkeypatch.setattr("beyondfit.core.engine.compile_steps", as_on_cuda)
    _, engine = _train("max", epochs=1)
    # The whole update, its recompile for the short last batch, then the evaluation closure.
    assert engine.compile_report.graphs == 2 and len(patches) == 3
    cpu = inductor_options.patches([torch.ones(1)], cuda_graphs=False)
    assert patches == [cpu, cpu, {"triton.cudagraphs": True, **cpu}]


def test_max_on_cuda_says_cuda_graphs_are_for_evaluation_only(monkeypatch, caplog) -> None:
    from types import SimpleNamespace

    from beyondfit.core.compile import compiled

    made = []
    monkeypatch.setattr(compiled, "CompiledUpdate", lambda *args: made.append(args))
    strategy = SimpleNamespace(is_distributed=False)
    for device in ("cuda", "cpu"):
        with caplog.at_level(logging.WARNING, logger="beyondfit"):
            compiled.compile_steps("max", ["update"], _model(), None, True, 1, strategy,
                                   torch.device(device))
    assert [args[6] for args in made] == [True, False]  # cuda_graphs
    said = [r.getMessage() for r in caplog.records]
    assert any("CUDA graphs for evaluation only" in m for m in said)
    assert any("CUDA graphs need a CUDA device" in m for m in said)


def test_cuda_graphs_go_to_inductor_as_a_config_patch(monkeypatch) -> None:
    asked = []
    monkeypatch.setattr(graphs, "inductor",
                        lambda gm, example_inputs, patches: asked.append(patches) or gm.forward)
    report = graphs.CompileReport()
    cpu = inductor_options.patches([torch.ones(1)], cuda_graphs=False)
    for cuda_graphs, expected in ((False, cpu), (True, {"triton.cudagraphs": True, **cpu})):
        fn = graphs.CountedCompile(lambda x: x * 2, report, cuda_graphs=cuda_graphs,
                                   fullgraph=True)
        assert torch.equal(fn(torch.ones(2)), torch.full((2,), 2.0))
        assert asked[-1] == expected


# ---------------------------------------------------------------------- inductor, for real
@pytest.mark.slow
def test_compiled_run_reaches_the_eager_validation_loss() -> None:
    eager, _ = _train(False, epochs=6, clip_norm=1.0)
    comp, engine = _train(True, epochs=6, clip_norm=1.0)
    assert engine.compile_report.eager == {}
    assert comp[-1]["val_loss"] == pytest.approx(eager[-1]["val_loss"], rel=1e-3)


@pytest.mark.slow
def test_compiled_gan_with_a_slow_copy_matches_eager() -> None:
    _, h_eager = _gan(False)
    comp, h_comp = _gan(True)
    assert comp.compile_report.eager == {}
    assert _close(h_eager, h_comp, tol=1e-3)


@pytest.mark.e2e
@pytest.mark.slow
def test_compiled_autoencoder_reaches_the_eager_validation_loss(tmp_path) -> None:
    finals = []
    for i, compile in enumerate(("false", "true")):
        done = cli("+task=autoencoder", "train.epochs=3", f"engine.compile={compile}",
                   "plots=false", f"hydra.run.dir={tmp_path / str(i)}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        finals.append([r["val_loss"] for r in rows(tmp_path / str(i)) if "val_loss" in r][-1])
    assert finals[1] == pytest.approx(finals[0], rel=0.02)  # the stated tolerance: 2%


@pytest.mark.slow
def test_compiled_sac_update_reaches_the_eager_losses() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from offpolicy import build

    scores = []
    for compile in ("false", "true"):
        task, engine = build("pendulum", ["algo=sac", "task.total_env_steps=3000",
                                          "task.replay.learning_starts=1000",
                                          f"engine.compile={compile}"])
        engine.train_step(next(iter(task.train_data)))  # fills the buffer: the same rows
        buffer, g = task.train_data.buffer, torch.Generator().manual_seed(0)
        for _ in range(150):
            engine.train_step(buffer.sample(256, g))
        held_out = [buffer.sample(256, torch.Generator().manual_seed(1)) for _ in range(4)]
        scores.append(engine.evaluate(held_out))
        if compile == "true":
            assert engine.compile_report.eager == {}
    eager, compiled_run = scores
    for key in ("val_critic/loss", "val_actor/loss"):  # the stated tolerance: 10%
        assert compiled_run[key] == pytest.approx(eager[key], rel=0.1, abs=0.05), key


@pytest.mark.slow
def test_compiled_model_inside_ddp_gives_the_eager_losses() -> None:
    try:
        eager, _ = _train(False, epochs=2)
        comp, engine = _train(True, strategy="ddp", epochs=2)
        assert isinstance(engine.forward_model, DistributedModel)
        assert type(engine.forward_model.ddp.module.target).__name__ == "OptimizedModule"
        assert _close(eager, comp)
    finally:
        shutdown()


#: The README's compile commands, each with the overrides that make it tiny.
README_COMPILE = {
    "python -m beyondfit +task=regression engine.compile=true": ("train.epochs=2",),
    "python -m beyondfit +task=pendulum algo=sac engine.compile=true": (
        "task.total_env_steps=1200", "task.replay.learning_starts=600",
        "task.confirm_episodes=1", "plots=false"),
}


@pytest.mark.e2e
@pytest.mark.slow  # inductor builds each graph's C++ kernels: about a minute a command
@pytest.mark.runs(*README_COMPILE)
def test_readme_compile_commands_compile_every_step(tmp_path) -> None:
    for i, (line, tiny) in enumerate(README_COMPILE.items()):
        args = shlex.split(line)[3:]
        done = cli(*args, *tiny, f"hydra.run.dir={tmp_path / str(i)}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "0 parts left eager" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
        assert "compile:" not in done.stderr  # no part fell back


def test_step_counts_stay_where_they_are_off_a_gpu() -> None:
    # On a CPU the optimizer is traced as it is; the move to the device is for CUDA only.
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    model(torch.ones(2, 8)).sum().backward()
    optimizer.step()
    steps = [s["step"] for s in optimizer.state.values()]
    twin = traced_optimizer.Twin(optimizer)
    traced_optimizer.step_counts_on_device(twin)
    assert all(s["step"] is t for s, t in zip(optimizer.state.values(), steps, strict=True))
    assert twin.optimizer.param_groups[0]["capturable"] is False
    assert optimizer.param_groups[0]["capturable"] is False


def test_the_fused_kernel_is_taken_only_where_torch_has_one(monkeypatch) -> None:
    monkeypatch.setattr(traced_optimizer, "KERNEL_FROM", 0)
    model = _model()

    class MyAdam(torch.optim.Adam):  # a subclass may change what step does
        pass

    kinds = {"adam": torch.optim.Adam(model.parameters(), 1e-2),
             "rmsprop": torch.optim.RMSprop(model.parameters(), 1e-2),
             "differentiable": torch.optim.SGD(model.parameters(), 0.1, differentiable=True),
             "subclass": MyAdam(model.parameters(), 1e-2)}
    taken = {name: traced_optimizer.kernel_for(o) for name, o in kinds.items()}
    assert taken == {"adam": (True, None), "rmsprop": (False, None),
                     "differentiable": (False, None), "subclass": (False, None)}
    assert kinds["adam"].param_groups[0]["fused"] is None  # the twin is switched, not it
    monkeypatch.setattr(traced_optimizer, "KERNEL_FROM", 10**9)  # small: inside the graph
    assert traced_optimizer.kernel_for(torch.optim.Adam(model.parameters(), 1e-2)) == (False,
                                                                                       None)
