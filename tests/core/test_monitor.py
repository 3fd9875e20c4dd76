"""One "best so far" for everything that keeps one: early stopping, the best checkpoint, a
search's objective and a ReduceLROnPlateau scheduler all read their metric through
:class:`beyondfit.core.monitor.Monitor`."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from beyondfit import BeyondfitError, Checkpointer, EarlyStopping, Update
from beyondfit.cli.run import objective
from beyondfit.core.monitor import Monitor


def test_min_and_max_with_a_margin_and_nan_never_best() -> None:
    low = Monitor("val_loss", "min", min_delta=0.1)
    assert low.update(1.0) and low.best == 1.0  # anything beats nothing
    assert not low.update(0.95)  # within the margin
    assert low.update(0.8) and low.best == 0.8
    assert not low.update(float("nan")) and low.best == 0.8
    high = Monitor("val_return", "max")
    assert high.worst == -math.inf and low.worst == math.inf
    assert high.update(3.0) and not high.update(2.0) and high.update(4.0)
    assert high.beats(5.0, reference=4.5) and not high.beats(4.0, reference=4.5)


@pytest.mark.parametrize(("args", "message"), [
    (("", "min"), "early stopping monitor=''; name a logged metric"),
    (("val_loss", "down"), "early stopping mode='down'; use min or max"),
    (("val_loss", "min", -1.0), "early stopping min_delta=-1.0; it must be a number >= 0"),
])
def test_bad_settings_are_one_clear_error(args: tuple, message: str) -> None:
    with pytest.raises(BeyondfitError, match=message.replace("(", r"\(")):
        Monitor(*args, owner="early stopping")


def test_a_metric_never_logged_names_the_owner_and_what_was_logged() -> None:
    tracked = Monitor("val_acc", owner="early stopping")
    with pytest.raises(BeyondfitError, match=r"early stopping monitors 'val_acc', which the "
                                             r"evaluation does not log \(it logs: val_loss\)"):
        tracked.read({"val_loss": 1.0})
    assert tracked.read({"val_acc": 0.5}) == 0.5
    assert tracked.last([{"val_acc": 0.1}, {"val_acc": None}, {"loss": 2.0}]) == 0.1
    assert tracked.last([{"loss": 2.0}]) is None


def test_every_keeper_of_a_best_holds_a_monitor(tmp_path) -> None:
    model = nn.Linear(2, 1)
    keepers = [
        EarlyStopping("val_acc", mode="max").tracked,
        Checkpointer(tmp_path, monitor="val_acc", mode="max").tracked,
    ]
    opt = torch.optim.SGD(model.parameters(), 0.1)
    plateau = Update("", lambda m, b: m(b).sum(), opt, monitor="val_acc",
                     scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau(opt))
    plateau.bind(None)
    keepers.append(plateau.tracked)
    assert all(isinstance(k, Monitor) and k.metric == "val_acc" for k in keepers)
    with pytest.raises(BeyondfitError, match=r"^mode='avg'; use min or max"):
        Checkpointer(tmp_path, monitor=None, mode="avg")  # wrong even when unused


def test_the_search_objective_is_the_last_value_or_the_worst() -> None:
    cfg = OmegaConf.create({"objective": {"metric": "val_return", "mode": "max"}})
    assert objective(cfg, [{"val_return": 1.0}, {"loss": 0.5}, {"val_return": 2.0}]) == 2.0
    assert objective(cfg, [{"val_return": float("nan")}]) == -math.inf
    assert objective(cfg, [{"loss": 1.0}]) == -math.inf
    with pytest.raises(BeyondfitError, match=r"objective\.mode='down'; use min or max"):
        objective(OmegaConf.create({"objective": {"mode": "down"}}), [])
