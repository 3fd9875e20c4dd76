"""The optimizer as the compiled step runs it (``beyondfit.core.compile.traced_optimizer``): a
user's step hooks (per optimizer and global, pre and post) fire under ``compile=True`` exactly
as they do eagerly, also when registered between two ``fit`` calls; the user's optimizer is
never edited (the graphs step a private twin); a compiled run's checkpoint loads into an eager
run and back."""

from __future__ import annotations

import copy
import logging
import math

import pytest
import torch
from torch import nn
from torch.optim import optimizer as optim_module

from beyondfit import Engine, TensorBatches
from beyondfit.core.compile import traced_optimizer

from kit import sum_data


def _loss(model, batch):
    x, y = batch
    err = model(x) - y
    return {"loss": (err * err).mean(), "mae": err.abs().mean()}


def _data():
    x, y = sum_data(128)
    return TensorBatches(x, y, batch_size=32, seed=0)  # 4 steps an epoch


def _engine(compile, **adam):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    return Engine(model, _loss, torch.optim.Adam(model.parameters(), 1e-2, **adam),
                  device="cpu", compile=compile)


def _weights(engine):
    return [p.detach().clone() for p in engine.model.parameters()]


def _close(a, b):
    return all(math.isclose(ra[k], rb[k], rel_tol=1e-4, abs_tol=1e-6)
               for ra, rb in zip(a, b, strict=True) for k in ra if isinstance(ra[k], float))


REGISTER = {
    "pre": lambda opt, hook: opt.register_step_pre_hook(hook),
    "post": lambda opt, hook: opt.register_step_post_hook(hook),
    "global pre": lambda opt, hook: optim_module.register_optimizer_step_pre_hook(hook),
    "global post": lambda opt, hook: optim_module.register_optimizer_step_post_hook(hook),
}


def _hooked_run(compile, kind, when):
    """Two fits of 2 epochs; the hook registered before the first or between the two. A pre
    hook sets the learning rate to 0 (the adversarial trial's): from then on no weight moves."""
    engine = _engine(compile)
    opt, calls = engine.optimizer, []

    def hook(optimizer, args, kwargs):
        # torch passes step's own arguments: the optimizer (self), then none
        calls.append((optimizer is opt, args[0] is opt, args[1:], kwargs,
                      optimizer.param_groups[0]["lr"]))
        if kind.endswith("pre"):
            optimizer.param_groups[0]["lr"] = 0.0

    handle = REGISTER[kind](opt, hook) if when == "before" else None
    try:
        first = engine.fit(_data(), epochs=2, verbose=False)
        after_first = _weights(engine)
        if when == "between":
            handle = REGISTER[kind](opt, hook)
        second = engine.fit(_data(), epochs=2, verbose=False)  # 2 more epochs
    finally:
        handle.remove()
    return engine, calls, first + second, after_first, _weights(engine)


@pytest.mark.parametrize("when", ["before", "between"])
@pytest.mark.parametrize("kind", list(REGISTER))
def test_a_step_hook_fires_compiled_as_it_fires_eagerly(traced, kind, when, caplog) -> None:
    _, eager_calls, h_eager, eager_first, eager_last = _hooked_run(False, kind, when)
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        comp, calls, h_comp, comp_first, comp_last = _hooked_run(True, kind, when)
    # The same calls: as many, each given the user's optimizer, no args, the same lr.
    assert len(eager_calls) == (16 if when == "before" else 8)
    assert calls == eager_calls
    assert all(given and itself for given, itself, *_ in calls)
    assert _close(h_comp, h_eager)
    if kind.endswith("pre"):  # lr 0 from the hook's first call on: nothing moves after it
        assert all(torch.equal(a, b) for a, b in zip(comp_first, comp_last, strict=True))
        assert all(torch.equal(a, b) for a, b in zip(eager_first, eager_last, strict=True))
    for a, b in zip(eager_last, comp_last, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    said = comp.compile_report.eager["the optimizer's step"]
    assert said == ("a global optimizer step hook is registered" if kind.startswith("global")
                    else "it has a step hook") + "; it steps eagerly while so"
    assert any(said in r.getMessage() for r in caplog.records
               if r.getMessage().startswith("compiled:"))


def test_a_step_replaced_on_the_instance_is_called_as_eagerly(traced) -> None:
    counts = []
    for compile in (False, True):
        engine, calls = _engine(compile), []
        engine.fit(_data(), epochs=1, verbose=False)
        own = engine.optimizer.step

        def step(*args, own=own, calls=calls, **kwargs):
            calls.append(args)
            return own(*args, **kwargs)

        engine.optimizer.step = step
        engine.fit(_data(), epochs=2, verbose=False)
        counts.append(len(calls))
    assert counts == [8, 8]
    assert engine.compile_report.eager["the optimizer's step"] == (
        "its step is replaced on the instance; it steps eagerly while so")


def test_a_removed_hook_gives_the_step_back_to_the_graph(traced) -> None:
    engine = _engine(True)
    handle = engine.optimizer.register_step_post_hook(lambda *a: None)
    engine.fit(_data(), epochs=1, verbose=False)
    handle.remove()
    program = engine.window.slots[0].program
    whole = program.run_whole
    graphed = []
    program.run_whole = lambda batch: graphed.append(whole(batch) is not None) or None
    engine.fit(_data(), epochs=2, verbose=False)
    assert graphed == [True] * 8


def _settings(optimizer):
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


@pytest.mark.parametrize("fused", [None, True])
def test_the_users_optimizer_is_not_edited(traced, step_kind, fused) -> None:
    # The graphs step a twin: the switch to the traced foreach form (fused=True) or to the
    # fused kernel (step_kind "kernel"), found_inf and the learning-rate tensors are its own.
    engine = _engine(True, fused=fused)
    opt = engine.optimizer
    settings, attributes = _settings(opt), dict(opt.__dict__)
    engine.fit(_data(), epochs=2, verbose=False)
    program = engine.window.slots[0].program
    assert engine.compile_report.eager == {} and program.kernel == (step_kind == "kernel")
    assert _settings(opt) == settings
    assert opt.__dict__.keys() == attributes.keys()  # no found_inf, no amp-scaling switch
    assert all(opt.__dict__[k] is v for k, v in attributes.items())
    twin = program.twin.optimizer
    assert twin.state is opt.state  # moments and step counts: the user's, trained
    assert twin.param_groups[0]["fused"] is (step_kind == "kernel")
    assert all(float(s["step"]) == 8 for s in opt.state.values())


def test_the_twin_follows_the_users_settings_and_a_loaded_state() -> None:
    params = [torch.zeros(3, requires_grad=True)]
    opt = torch.optim.Adam(params, 1e-2, betas=(0.8, 0.9))
    twin = traced_optimizer.Twin(opt)
    twin.switch(fused=False, capturable=True, no_such_setting=1)
    opt.param_groups[0]["lr"] = 0.5  # a scheduler
    opt.param_groups[0]["betas"] = (0.7, 0.9)  # OneCycle's momentum
    mine = twin.follow().param_groups[0]
    assert (mine["lr"], mine["betas"], mine["fused"], mine["capturable"]) == (
        0.5, (0.7, 0.9), False, True)
    assert "no_such_setting" not in mine and opt.param_groups[0]["capturable"] is False
    saved = copy.deepcopy(opt.state_dict())
    opt.load_state_dict(saved)  # a new state object, new groups
    assert twin.follow().state is opt.state and twin.optimizer.param_groups[0]["capturable"]


def _trained(compile, path=None, epochs=2):
    engine = _engine(compile)
    if path is not None:
        engine.load(path)
    history = engine.fit(_data(), epochs=epochs, verbose=False)
    return engine, history


def test_a_compiled_checkpoint_loads_into_an_eager_run_and_back(traced, step_kind,
                                                                tmp_path) -> None:
    eager, _ = _trained(False)
    comp, _ = _trained(True)
    eager.save(tmp_path / "eager.pt")
    comp.save(tmp_path / "compiled.pt")
    by_eager = torch.load(tmp_path / "eager.pt", weights_only=True)["updates"][""]["optimizer"]
    by_comp = torch.load(tmp_path / "compiled.pt", weights_only=True)["updates"][""]["optimizer"]
    assert by_comp["param_groups"] == by_eager["param_groups"]  # the user's settings, floats
    # compiled -> eager -> compiled, beside eager all along
    middle, h_middle = _trained(False, tmp_path / "compiled.pt", epochs=4)
    middle.save(tmp_path / "middle.pt")
    last, h_last = _trained(True, tmp_path / "middle.pt", epochs=6)
    ref_middle, h_ref_middle = _trained(False, tmp_path / "eager.pt", epochs=4)
    ref_middle.save(tmp_path / "ref.pt")
    ref_last, h_ref_last = _trained(False, tmp_path / "ref.pt", epochs=6)
    assert _close(h_middle, h_ref_middle) and _close(h_last, h_ref_last)
    assert last.compile_report.eager == {}
    for a, b in zip(_weights(last), _weights(ref_last), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
