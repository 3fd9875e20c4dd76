"""A restore is whole or nothing: when any part refuses its checkpoint entry, every part the
restore had already loaded is put back, and the failure is one line naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from beyondfit import BeyondfitError, Callback
from beyondfit.core.state.serialization import safe_load

from kit import make_engine, sum_batches


class Picky(Callback):
    """A stateful callback of a user's own: it checks its entry in its own load_state_dict."""

    def __init__(self) -> None:
        self.seen = 0

    def on_step_end(self, engine: Any) -> None:
        self.seen += 1

    def state_dict(self) -> dict[str, int]:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state.get("seen"), int) or state["seen"] < 0:
            raise ValueError(f"seen={state.get('seen')!r} is not a count")
        self.seen = state["seen"]


def snapshot(engine: Any) -> dict[str, Any]:
    state = engine.state_dict()
    state.pop("rng")  # the global generators: compared apart
    return state


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_a_part_refusing_its_entry_leaves_the_whole_engine_as_it_was(tmp_path: Path) -> None:
    saved = make_engine(callbacks=[Picky()])
    saved.fit(sum_batches(), epochs=2)
    saved.save(tmp_path / "run.pt")
    state = safe_load(tmp_path / "run.pt")
    state["callbacks"]["Picky"] = {"seen": -3}  # a doctored entry: only the callback can tell

    engine = make_engine(callbacks=[Picky()])
    engine.fit(sum_batches(), epochs=1)  # another position than the checkpoint's
    before, rng = snapshot(engine), torch.get_rng_state()
    with pytest.raises(BeyondfitError) as caught:
        engine.load_state_dict(state, source="checkpoint 'run.pt'")
    assert str(caught.value) == ("checkpoint 'run.pt' cannot be restored, nothing was changed: "
                                 "callbacks.Picky: ValueError: seen=-3 is not a count")
    # The model, optimizer, counters and metrics had been loaded before the callback: all back.
    assert same(snapshot(engine), before) and torch.equal(torch.get_rng_state(), rng)
    assert engine.global_step == 5 and not engine.position.loaded

    state["callbacks"]["Picky"] = {"seen": 10}
    engine.load_state_dict(state)  # the same engine takes a good checkpoint afterwards
    assert engine.global_step == 10 and engine.callbacks[0].seen == 10


def test_a_checkpoint_without_the_data_position_of_a_stateful_source_is_refused() -> None:
    saved = make_engine()
    data = sum_batches()
    saved.fit(data, epochs=1)
    state = saved.state_dict()
    assert "data" in state  # TensorBatches keeps its position
    state["data"] = None
    engine = make_engine()
    engine.train_data = sum_batches()
    with pytest.raises(BeyondfitError, match=r"data: missing, but this run's training data "
                                             r"\(TensorBatches\) keeps its position"):
        engine.load_state_dict(state)
    assert engine.global_step == 0


def test_an_engine_whose_own_state_fails_the_checks_says_it_could_not_be_put_back(
        tmp_path: Path) -> None:
    """A diverged engine (NaN weights) given a doctored checkpoint: its own state cannot pass
    the checks it would be put back through, and the one line says so instead of a traceback."""
    saved = make_engine(callbacks=[Picky()])
    saved.fit(sum_batches(), epochs=1)
    saved.save(tmp_path / "run.pt")
    state = safe_load(tmp_path / "run.pt")
    state["callbacks"]["Picky"] = {"seen": -3}

    engine = make_engine(callbacks=[Picky()])
    with torch.no_grad():
        next(engine.model.parameters()).fill_(float("nan"))
    with pytest.raises(BeyondfitError) as caught:
        engine.load_state_dict(state, source="checkpoint 'run.pt'")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("checkpoint 'run.pt' cannot be restored: callbacks.Picky: ")
    assert "could not be put back (model: " in message and "not finite" in message
