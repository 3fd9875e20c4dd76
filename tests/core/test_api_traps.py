"""The Python API's traps a new user hit (issue 13), each fixed or turned into a clear message."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError, Engine, Update

from kit import ROOT, make_engine, mse, sum_data


def linear_engine(**options) -> Engine:
    return make_engine(lambda: nn.Linear(8, 1), optimizer=torch.optim.SGD, lr=0.01, **options)


def batches(n: int = 8, size: int = 16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = sum_data(n * size)
    return [(x[i : i + size], y[i : i + size]) for i in range(0, n * size, size)]


def test_a_second_fit_trains_more_epochs_as_keras_does() -> None:
    engine = linear_engine()
    first = list(engine.fit(batches(), epochs=2, verbose=False))
    weights = engine.model.weight.detach().clone()
    second = engine.fit(batches(), epochs=3, verbose=False)
    assert len(first) == 2 and len(second) == 5 and engine.epoch == 5
    assert engine.global_step == 5 * 8
    assert not torch.equal(weights, engine.model.weight)


def test_max_steps_alone_trains_across_epochs() -> None:
    engine = linear_engine()
    engine.fit(batches(n=4), max_steps=10, verbose=False)
    assert engine.global_step == 10 and engine.epoch == 2


def test_a_one_shot_generator_is_named_as_the_cause() -> None:
    engine = linear_engine()
    data = iter(batches())
    with pytest.raises(BeyondfitError, match=r"epoch 2: it is a one-shot iterator \(list_iterator"):
        engine.fit(data, epochs=2, verbose=False)
    engine = linear_engine()
    gen = (b for b in batches())
    with pytest.raises(BeyondfitError, match=r"val_data yielded no batches: it is a one-shot"):
        engine.fit(batches(), epochs=2, val_data=gen, verbose=False)


def test_reduce_lr_on_plateau_steps_on_the_validation_value() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), 0.0)  # nothing improves: the plateau is certain
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    opt.param_groups[0]["lr"] = 1.0
    engine = Engine(model, lambda m, b: mse(m, b) + 0 * m.weight.sum(), opt, scheduler=plateau,
                    device="cpu")
    # lr 1.0 would move the weights: freeze them by zeroing gradients through a hook.
    for p in model.parameters():
        p.register_hook(torch.zeros_like)
    history = engine.fit(batches(), epochs=4, val_data=batches(n=2), verbose=False)
    # The lr each epoch trained with: the first evaluation sets the best, each later one halves.
    assert [row["lr"] for row in history] == [1.0, 1.0, 0.5, 0.25]
    assert plateau.get_last_lr() == [0.125]
    with pytest.raises(BeyondfitError, match="ReduceLROnPlateau scheduler steps on a validation"):
        engine.fit(batches(), epochs=1, verbose=False)


def test_plateau_on_a_name_never_logged_says_which_names_exist() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), 0.01)
    engine = Engine(model, [Update("", mse, opt, monitor="val_acc",
                                   scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau(opt))],
                    device="cpu")
    with pytest.raises(BeyondfitError, match=r"monitors 'val_acc'.*it logs: val_loss"):
        engine.fit(batches(), val_data=batches(n=1), verbose=False)


def test_a_short_last_window_is_the_mean_of_its_micro_batches() -> None:
    data = batches(n=6)
    engine = linear_engine(accumulate=4)
    engine.fit(data, epochs=1, verbose=False)

    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), 0.01)
    for window in (data[:4], data[4:]):
        for batch in window:
            (mse(model, batch) / len(window)).backward()
        opt.step()
        opt.zero_grad()
    assert engine.global_step == 2
    torch.testing.assert_close(engine.model.weight, model.weight, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(engine.model.bias, model.bias, rtol=1e-6, atol=1e-7)


def test_the_learning_rate_is_in_the_history() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    engine = Engine(model, mse, opt, scheduler=torch.optim.lr_scheduler.StepLR(opt, 8, 0.1),
                    device="cpu")
    history = engine.fit(batches(), epochs=2, verbose=False)
    assert history[0]["lr"] == pytest.approx(0.01) and history[1]["lr"] == pytest.approx(0.001)


SCRIPT = textwrap.dedent("""
    import torch
    from torch import nn
    from beyondfit import Engine
    torch.manual_seed(0)
    x = torch.randn(64, 3); y = x.sum(1, keepdim=True)
    data = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    model = nn.Linear(3, 1)
    engine = Engine(model, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(),
                    torch.optim.SGD(model.parameters(), 0.1), device="cpu")
    engine.fit(data, epochs=2, val_data=data{verbose})
""")


@pytest.mark.e2e
@pytest.mark.parametrize("verbose", ["", ", verbose=False"])
def test_fit_shows_progress_by_default_like_keras(verbose: str) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(verbose=verbose)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    if verbose:
        assert done.stdout == ""
    else:
        lines = done.stdout.splitlines()
        assert lines[0].startswith("epoch 1/2 - loss: ") and "val_loss: " in lines[0]
        assert lines[1].startswith("epoch 2/2 - ")
