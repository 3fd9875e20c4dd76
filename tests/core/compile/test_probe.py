"""The probe (``beyondfit.core.compile.probe``): which private torch features this torch has,
asked once per process. Each feature patched away on torch's side (a torch that renamed or
dropped it) turns the part it serves eager, or leaves its optimization out, with the reason on
the ``compiled:`` line, never silently; and the run's numbers stay the eager run's (bitwise
where nothing is compiled; as close as a compiled run is otherwise)."""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
import types
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.optim import optimizer as optim_module
from torch.utils.hooks import RemovableHandle

from beyondfit import Engine, TensorBatches
from beyondfit.core.compile import inductor_options, probe, traced_optimizer
from beyondfit.core.compile.probe import FEATURES

from kit import sum_data


def _loss(model, batch):
    x, y = batch
    err = model(x) - y
    return {"loss": (err * err).mean(), "mae": err.abs().mean()}


def _run(compile, caplog=None, optimizer=torch.optim.Adam, scheduler=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    engine = Engine(model, _loss, optimizer(model.parameters(), 1e-2), device="cpu",
                    compile=compile, scheduler=scheduler)
    x, y = sum_data(96)
    with caplog.at_level(logging.INFO, logger="beyondfit") if caplog else _nothing():
        history = engine.fit(TensorBatches(x, y, batch_size=32, seed=0), epochs=2,
                             verbose=False)
    weights = [p.detach().clone() for p in model.parameters()]
    return engine, history, weights


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _close(a, b):
    return all(math.isclose(ra[k], rb[k], rel_tol=1e-4, abs_tol=1e-6)
               for ra, rb in zip(a, b, strict=True) for k in ra if isinstance(ra[k], float))


def _line(caplog):
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiled:")]
    return line


def _as_eager(compiled_run, eager_run, bitwise=False):
    (_, h_comp, w_comp), (_, h_eager, w_eager) = compiled_run, eager_run
    if bitwise:
        assert h_comp == h_eager
        assert all(torch.equal(a, b) for a, b in zip(w_comp, w_eager, strict=True))
    else:
        assert _close(h_comp, h_eager)
        assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6)
                   for a, b in zip(w_comp, w_eager, strict=True))


def test_this_torch_has_every_feature_and_is_probed_once(traced, fresh_probe, monkeypatch
                                                        ) -> None:
    calls = []
    counted = {name: probe.Feature(f.name, f.serves, f.eager,
                                   lambda check=f.check: calls.append(1) or check())
               for name, f in FEATURES.items()}
    monkeypatch.setattr(probe, "FEATURES", counted)
    assert probe.findings() == {}
    for _ in range(2):
        _run(True)  # two compiled engines, many steps
    assert len(calls) == len(FEATURES)  # each check once in the process


def test_without_inductor_nothing_compiles(fresh_probe, monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "torch._inductor.compile_fx", None)  # gone
    compiled_run = _run(True, caplog)
    assert compiled_run[0].compile_report.eager == {
        "every graph": "this torch: no torch._inductor.compile_fx"}
    assert "every graph: this torch: no torch._inductor.compile_fx" in _line(caplog)
    _as_eager(compiled_run, _run(False), bitwise=True)


def test_without_autograd_in_a_graph_the_backward_runs_eagerly(traced, fresh_probe, monkeypatch,
                                                               caplog) -> None:
    monkeypatch.delattr(torch._dynamo.config, "trace_autograd_ops")
    compiled_run = _run(True, caplog)
    report = compiled_run[0].compile_report
    assert report.eager == {"the optimizer's whole step": (
        "this torch: no torch._dynamo.config.trace_autograd_ops; the closure is compiled, its "
        "backward runs eagerly")}
    assert "no torch._dynamo.config.trace_autograd_ops" in _line(caplog)
    assert report.graphs == 2  # the closure, the clip-check-step graph
    _as_eager(compiled_run, _run(False))


def _unmarked(real):
    """A wrapper as a torch that does not mark its wrappers would put around ``step``."""
    def step(self, *args, **kwargs):
        return real(self, *args, **kwargs)

    step.hooked = True  # torch's own mark that the class's step is wrapped already
    return step


def test_wrappers_without_wrapped_keep_every_step_eager(traced, fresh_probe, monkeypatch,
                                                        caplog) -> None:
    monkeypatch.setattr(torch.optim.SGD, "step", _unmarked(torch.optim.SGD.step))
    compiled_run = _run(True, caplog)
    why = compiled_run[0].compile_report.eager["the optimizer's step"]
    assert why.startswith("this torch: Optimizer.step's wrappers carry no __wrapped__")
    assert "Optimizer.step's wrappers carry no __wrapped__" in _line(caplog)
    _as_eager(compiled_run, _run(False))


def test_a_step_wrapped_without_wrapped_stays_eager(traced, fresh_probe, monkeypatch) -> None:
    monkeypatch.setattr(torch.optim.Adam, "step", _unmarked(torch.optim.Adam.step))
    compiled_run = _run(True)
    assert compiled_run[0].compile_report.eager["the optimizer's step"].startswith(
        "Adam.step is wrapped by something that does not say what it wraps")
    _as_eager(compiled_run, _run(False))


def _elsewhere(self, hook):
    """A torch that keeps an optimizer's step hooks under another name."""
    hooks = self.__dict__.setdefault("_renamed_hooks", OrderedDict())
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


_GLOBAL_ELSEWHERE: OrderedDict = OrderedDict()


def _global_elsewhere(hook):
    handle = RemovableHandle(_GLOBAL_ELSEWHERE)
    _GLOBAL_ELSEWHERE[handle.id] = hook
    return handle


@pytest.mark.parametrize(("owner", "name", "replacement", "where"), [
    (torch.optim.Optimizer, "register_step_pre_hook", _elsewhere,
     "Optimizer._optimizer_step_pre_hooks"),
    (torch.optim.Optimizer, "register_step_post_hook", _elsewhere,
     "Optimizer._optimizer_step_post_hooks"),
    (optim_module, "register_optimizer_step_pre_hook", _global_elsewhere,
     "torch.optim.optimizer._global_optimizer_pre_hooks"),
    (optim_module, "register_optimizer_step_post_hook", _global_elsewhere,
     "torch.optim.optimizer._global_optimizer_post_hooks"),
])  # fmt: skip
def test_hooks_the_engine_cannot_see_keep_every_step_eager(traced, fresh_probe, monkeypatch,
                                                           caplog, owner, name, replacement,
                                                           where) -> None:
    monkeypatch.setattr(owner, name, replacement)
    compiled_run = _run(True, caplog)
    why = compiled_run[0].compile_report.eager["the optimizer's step"]
    assert why == f"this torch: a step hook registered with torch's API is not in {where}"
    assert why in _line(caplog)
    _as_eager(compiled_run, _run(False))


def test_an_optimizer_without_its_hooks_dict_is_not_stepped_in_a_graph() -> None:
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    assert traced_optimizer.step_hooks(opt) is None
    del opt.__dict__["_optimizer_step_post_hooks"]  # fail closed: not "no hooks"
    assert traced_optimizer.step_hooks(opt) == (
        "its step hooks cannot be seen (it has no _optimizer_step_post_hooks)")


def test_a_scheduler_whose_step_counter_is_unmarked_keeps_the_step_eager(
        traced, fresh_probe, monkeypatch, caplog) -> None:  # fmt: skip
    real = torch.optim.lr_scheduler.StepLR.__init__

    def init(self, optimizer, *args, **kwargs):  # a torch whose counter carries no mark
        real(self, optimizer, *args, **kwargs)
        counted = optimizer.step
        optimizer.step = lambda *a, **k: counted(*a, **k)

    monkeypatch.setattr(torch.optim.lr_scheduler.StepLR, "__init__", init)
    schedule = lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5)  # noqa: E731
    with pytest.warns(UserWarning, match="overridden after learning rate scheduler"):
        compiled_run = _run(True, caplog, scheduler=schedule)
    why = compiled_run[0].compile_report.eager["the optimizer's step"]
    assert why.startswith("its step is replaced on the instance (the step a learning-rate "
                          "scheduler installs carries no _wrapped_by_lr_sched")
    assert why in _line(caplog)
    with pytest.warns(UserWarning, match="overridden after learning rate scheduler"):
        _as_eager(compiled_run, _run(False, scheduler=schedule))


def _realize_key_gone(tmp_path: Path) -> types.ModuleType:
    """torch._inductor.graph as a torch would have it that renamed the key."""
    spec = importlib.util.find_spec("torch._inductor.graph")
    source = Path(spec.origin).read_text(encoding="utf-8")
    (tmp_path / "graph.py").write_text(source.replace(probe.REALIZE, "renamed_key"))
    module = types.ModuleType("torch._inductor.graph")
    module.__spec__ = importlib.util.spec_from_file_location("torch._inductor.graph",
                                                             tmp_path / "graph.py")
    return module


SCALARS = FEATURES["realize_key"].serves


@pytest.mark.parametrize("gone", ["realize_key", "graph_pass"])
def test_without_the_realize_key_or_custom_passes_scalars_are_not_marked(
        traced, fresh_probe, monkeypatch, caplog, tmp_path, gone) -> None:  # fmt: skip
    from torch._inductor import config

    if gone == "realize_key":
        with monkeypatch.context() as only_while_probing:
            only_while_probing.setitem(sys.modules, "torch._inductor.graph",
                                       _realize_key_gone(tmp_path))
            probe.findings()
        reason = ("this torch: inductor's lowering (torch._inductor.graph) reads no FX meta "
                  "key 'inductor_realize_to_strides'")
    else:
        monkeypatch.delattr(config, "post_grad_custom_post_pass")
        reason = "this torch: no torch._inductor.config.post_grad_custom_post_pass"
    compiled_run = _run(True, caplog)
    assert compiled_run[0].compile_report.without == {SCALARS: reason}
    assert compiled_run[0].compile_report.eager == {}
    assert f"; without {SCALARS} ({reason})" in _line(caplog)
    assert "post_grad_custom_post_pass" not in inductor_options.patches([torch.ones(2)], False)
    _as_eager(compiled_run, _run(False))


@pytest.mark.parametrize("key", ["fallback_random", "size_asserts", "alignment_asserts"])
def test_an_inductor_setting_this_torch_lacks_is_said(traced, fresh_probe, monkeypatch, caplog,
                                                      key) -> None:
    from torch._inductor import config

    monkeypatch.delattr(config, key)
    compiled_run = _run(True, caplog)
    reason = f"this torch: no torch._inductor.config.{key}"
    assert compiled_run[0].compile_report.without == {FEATURES[key].serves: reason}
    assert f"without {FEATURES[key].serves} ({reason})" in _line(caplog)
    assert key not in inductor_options.patches([torch.ones(2)], cuda_graphs=False)
    _as_eager(compiled_run, _run(False))


def test_a_fused_kernel_that_ignores_found_inf_is_not_used(traced, fresh_probe, monkeypatch,
                                                            caplog) -> None:
    import torch.optim.adam as adam

    real = adam._fused_adam
    monkeypatch.setattr(adam, "_fused_adam", lambda *a, found_inf=None, **k: real(
        *a, found_inf=None, **k))  # a torch whose kernel ignores the flag
    monkeypatch.setattr(traced_optimizer, "KERNEL_FROM", 0)  # this MLP would take the kernel
    compiled_run = _run(True, caplog)
    engine = compiled_run[0]
    assert not engine.window.slots[0].program.kernel  # its update runs inside the graph
    reason = ("Adam: its fused kernel ignores found_inf (a skipped step moved the weights); "
              "its update runs inside the graph")
    assert engine.compile_report.without == {
        "the optimizer's fused kernel after the graph": reason}
    assert reason in _line(caplog)
    _as_eager(compiled_run, _run(False))
