"""The step's objects: the accumulation window (feed/close) and the hooks after an update."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError, Engine, Update

from kit import mse, sum_data


def batches(n: int, size: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = sum_data(n * size, 3)
    return [(x[i : i + size], y[i : i + size]) for i in range(0, n * size, size)]


def test_the_window_says_when_a_step_completed_and_close_ends_a_short_one() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), 0.1), accumulate=2,
                    device="cpu")
    window = engine.window
    a, b, c = batches(3)
    assert window.close() is False  # nothing fed: nothing to close
    assert engine.train_step(a) is False and window.micro == 1
    assert engine.train_step(b) is True and engine.global_step == 1 and window.micro == 0
    before = model.weight.detach().clone()
    assert engine.train_step(c) is False
    assert window.close() is True and engine.global_step == 2  # the short window stepped
    assert not torch.equal(before, model.weight) and window.micro == 0
    assert all(s.applied == 0 and s.pending is None for s in window.slots)


def test_after_step_hooks_follow_their_own_optimizer_and_never_a_skipped_step() -> None:
    torch.manual_seed(0)
    model = nn.ModuleDict({"a": nn.Linear(3, 1), "b": nn.Linear(3, 1)})
    seen: list[tuple[str, int, bool]] = []
    last = {name: model[name].weight.detach().clone() for name in ("a", "b")}

    def note(update: Update) -> None:  # runs after its optimizer wrote the new weights
        weight = model[update.name].weight
        moved = not torch.equal(weight, last[update.name]) and weight.grad is None
        last[update.name] = weight.detach().clone()
        seen.append((update.name, update.steps, moved))

    def loss(name: str, poison_at: int | None = None):
        calls = [0]

        def fn(m: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            calls[0] += 1
            out = ((m[name](batch[0]) - batch[1]) ** 2).mean()
            return out * float("nan") if calls[0] == poison_at else out
        return fn

    updates = [
        Update("a", loss("a"), torch.optim.SGD(model["a"].parameters(), 0.1), after_step=[note]),
        Update("b", loss("b", poison_at=2), torch.optim.SGD(model["b"].parameters(), 0.1),
               after_step=[note]),
    ]
    engine = Engine(model, updates, device="cpu", on_nonfinite="skip")
    engine.fit(batches(3), epochs=1, verbose=False)
    assert [(n, s) for n, s, _ in seen] == [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("b", 2)]
    assert all(moved for _, _, moved in seen)  # after the step and its zero_grad
    assert engine.skipped_steps == 1  # b's second step: skipped, so no hook for it


def test_an_after_step_that_is_not_callable_is_one_clear_error() -> None:
    model = nn.Linear(3, 1)
    with pytest.raises(BeyondfitError, match="after_step holds int, not a callable"):
        Update("a", mse, torch.optim.SGD(model.parameters(), 0.1), after_step=[3])
