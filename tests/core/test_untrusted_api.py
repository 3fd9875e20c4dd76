"""The Python API refuses, in one line, what would train nothing or fail later without a word:
an optimizer holding none of the model's parameters, a re-entrant fit, a complex loss, an
evaluator that returns no mapping, a model on the meta device; Engine.load refuses NaN weights."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError, Callback, Engine

from kit import mse, sum_data


def data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = sum_data(64)
    return [(x[i : i + 16], y[i : i + 16]) for i in range(0, 64, 16)]


def one_line(info: pytest.ExceptionInfo[BaseException], *words: str) -> None:
    assert "\n" not in str(info.value), str(info.value)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_an_optimizer_of_other_parameters_is_refused() -> None:
    model, other = nn.Linear(8, 1), nn.Linear(3, 2)
    with pytest.raises(BeyondfitError) as info:
        Engine(model, mse, torch.optim.SGD(other.parameters(), 0.1))
    one_line(info, "holds none of the model's parameters", "shapes (2, 3), (2,)")


def test_an_optimizer_with_the_models_and_extra_parameters_is_kept() -> None:
    # A parameter of the loss closure's own (a learned scale) may train beside the model.
    model, scale = nn.Linear(8, 1), nn.Parameter(torch.ones(()))
    engine = Engine(model, lambda m, b: mse(m, b) * scale,
                    torch.optim.SGD([*model.parameters(), scale], 0.01))
    before = model.weight.detach().clone()
    engine.fit(data(), epochs=1, verbose=False)
    assert not torch.equal(before, model.weight)


def test_a_reentrant_fit_is_refused() -> None:
    class Again(Callback):
        def on_step_end(self, engine: Engine) -> None:
            engine.fit(data(), epochs=1, verbose=False)

    engine = Engine(nn.Linear(8, 1), mse, functools.partial(torch.optim.SGD, lr=0.01),
                    callbacks=[Again()])
    with pytest.raises(BeyondfitError) as info:
        engine.fit(data(), epochs=1, verbose=False)
    one_line(info, "fit was called while this engine's fit is running")
    engine.callbacks.clear()
    engine.fit(data(), epochs=1, verbose=False)  # the engine is usable after the refusal


def test_a_complex_loss_is_refused() -> None:
    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        return (mse(model, batch) * (1 + 1j)).to(torch.complex64)

    engine = Engine(nn.Linear(8, 1), loss, functools.partial(torch.optim.SGD, lr=0.01))
    with pytest.raises(BeyondfitError) as info:
        engine.fit(data(), epochs=1, verbose=False)
    one_line(info, "complex loss (torch.complex64)")


@pytest.mark.parametrize(("result", "words"), [
    (0.5, "the evaluator returned float; return a mapping"),
    ([("val_acc", 0.5)], "the evaluator returned list"),
    ({"val_acc": "high"}, "'val_acc': str"),
    ({"val_acc": torch.ones(3)}, "'val_acc': Tensor"),
])
def test_an_evaluator_returning_no_mapping_of_numbers_is_refused(result: Any,
                                                                 words: str) -> None:
    engine = Engine(nn.Linear(8, 1), mse, functools.partial(torch.optim.SGD, lr=0.01))
    with pytest.raises(BeyondfitError) as info:
        engine.evaluate(lambda model: result)
    one_line(info, words)


def test_a_model_on_the_meta_device_is_refused() -> None:
    with torch.device("meta"):
        model = nn.Linear(8, 1)
    with pytest.raises(BeyondfitError) as info:
        Engine(model, mse, functools.partial(torch.optim.SGD, lr=0.01))
    one_line(info, "weight, bias are on the meta device", "to_empty")


def test_engine_load_refuses_nan_weights(tmp_path: Path) -> None:
    engine = Engine(nn.Linear(8, 1), mse, functools.partial(torch.optim.SGD, lr=0.01))
    engine.fit(data(), epochs=1, verbose=False)
    with torch.no_grad():
        engine.model.weight[0, 0] = math.nan
    engine.save(tmp_path / "nan.pt")  # the API's save writes what it is given
    fresh = Engine(nn.Linear(8, 1), mse, functools.partial(torch.optim.SGD, lr=0.01))
    before = fresh.model.weight.detach().clone()
    with pytest.raises(BeyondfitError) as info:
        fresh.load(tmp_path / "nan.pt")
    one_line(info, "model: weight", "not finite")
    assert torch.equal(before, fresh.model.weight)  # nothing was loaded


def test_engine_save_to_a_directory_names_it_and_asks_for_a_file(tmp_path: Path) -> None:
    from kit import make_engine

    engine = make_engine()
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "mine.txt").write_text("kept")
    for target in (tmp_path / "ckpt", str(tmp_path / "ckpt") + "/"):
        with pytest.raises(BeyondfitError) as info:  # was a raw IsADirectoryError
            engine.save(target)
        one_line(info, repr(str(tmp_path / "ckpt")), "is a directory", "give a file path",
                 "ckpt/engine.pt")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["ckpt", "mine.txt"]  # no temp file
    assert engine.save(tmp_path / "ckpt" / "engine.pt").is_file()
