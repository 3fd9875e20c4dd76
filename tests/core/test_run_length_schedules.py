"""A scheduler factory that takes ``total_steps`` (``beyondfit.core.schedules.cosine``, the
command line's ``scheduler=cosine``) is built when ``fit`` starts, after the data is sharded, and
told the fit's optimizer steps; a resumed run continues its schedule bitwise."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch

from beyondfit import BeyondfitError, Callback, Checkpointer, Engine, resume
from beyondfit.core.schedules import cosine

from kit import make_engine, sum_batches

SCHEDULE = functools.partial(cosine, warmup_steps=2)


class StopAt(Callback):
    """Stop the run after optimizer step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, engine: Engine) -> None:
        if engine.global_step == self.step:
            engine.should_stop = True


def test_the_schedule_spans_the_fit_it_is_given() -> None:
    data = sum_batches(40, batch_size=8)  # 5 batches: 3 steps an epoch with accumulate=2
    engine = make_engine(scheduler=SCHEDULE, accumulate=2)
    assert engine.scheduler is None  # not yet: the run's length is known at fit
    engine.fit(data, epochs=4, verbose=False)
    assert engine.global_step == 12
    lambdas = engine.scheduler.lr_lambdas[0]
    assert lambdas(12) == pytest.approx(0.0) and lambdas(7) == pytest.approx(0.5)  # 12 steps
    assert engine.optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_max_steps_sets_the_length_and_data_without_len_needs_it() -> None:
    engine = make_engine(scheduler=SCHEDULE)
    engine.fit(sum_batches(40, batch_size=8), max_steps=7, verbose=False)
    assert engine.scheduler.lr_lambdas[0](7) == pytest.approx(0.0)
    endless = make_engine(scheduler=SCHEDULE)
    with pytest.raises(BeyondfitError, match=r"no len\(\), so pass max_steps=N"):
        endless.fit(iter(sum_batches(40, batch_size=8)), epochs=1, verbose=False)


def test_a_resumed_schedule_continues_exactly(tmp_path: Path) -> None:
    def data():  # fresh each time: TensorBatches keeps its place and shuffling state
        return sum_batches(48, batch_size=8)

    straight = make_engine(scheduler=SCHEDULE)
    straight.fit(data(), epochs=3, verbose=False)

    first = make_engine(scheduler=SCHEDULE, callbacks=[
        Checkpointer(tmp_path, every=4, keep=9, monitor=None), StopAt(5)])
    first.fit(data(), epochs=3, verbose=False)  # stopped after step 5: step 4 as if killed there
    again = make_engine(scheduler=SCHEDULE)
    resume(again, tmp_path / "step-00000004.pt")
    assert again.scheduler is None  # its state waits for fit to build it
    again.fit(data(), epochs=3, verbose=False)
    for p, q in zip(straight.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert again.scheduler.state_dict() == straight.scheduler.state_dict()
    assert math.isclose(again.optimizer.param_groups[0]["lr"],
                        straight.optimizer.param_groups[0]["lr"])
