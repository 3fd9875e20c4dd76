"""What a checkpoint restores into an optimizer or a scheduler is what the run built: each
setting of a parameter group equal to the optimizer's own, the learning rate a finite number
> 0 that the scheduler's state stands for, the scheduler's settings, ``base_lrs``,
``last_epoch`` and ``_last_lr`` those of the run's scheduler. A checkpoint edited and saved
again (a re-sealed one: the checksum is integrity, not authenticity) that says otherwise is
refused whole, in one line naming the field, and the engine is left as it was; every
checkpoint an unedited run writes loads (issue 47)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch

from beyondfit import BeyondfitError, Callback
from beyondfit.core.schedules import cosine

from kit import make_engine, sum_batches

lr_scheduler = torch.optim.lr_scheduler

OPTIMIZERS: dict[str, tuple[Callable[..., torch.optim.Optimizer], Any]] = {
    "adam": (torch.optim.Adam, None),
    "adamw": (partial(torch.optim.AdamW, weight_decay=0.05), None),
    "sgd": (partial(torch.optim.SGD, momentum=0.9, nesterov=True), None),
    "rmsprop": (partial(torch.optim.RMSprop, alpha=0.95, momentum=0.5), None),
    "adam+steplr": (torch.optim.Adam, lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=0.5)),
    "sgd+lambdalr": (partial(torch.optim.SGD, momentum=0.9),
                     lambda o: lr_scheduler.LambdaLR(o, lambda k: 0.9 ** k)),
    "adamw+cosine": (torch.optim.AdamW, partial(cosine, warmup_steps=2, min_ratio=0.1)),
    "rmsprop+plateau": (torch.optim.RMSprop,
                        lambda o: lr_scheduler.ReduceLROnPlateau(o, factor=0.5, patience=0)),
    "sgd+onecycle": (partial(torch.optim.SGD, momentum=0.9),
                     partial(lr_scheduler.OneCycleLR, max_lr=0.05)),
    "adam+sequential": (torch.optim.Adam, lambda o: lr_scheduler.SequentialLR(
        o, [lr_scheduler.ConstantLR(o, 0.5, total_iters=3), lr_scheduler.StepLR(o, 4)], [3])),
}


def engine(kind: str) -> Any:
    optimizer, scheduler = OPTIMIZERS[kind]
    return make_engine(optimizer=optimizer, scheduler=scheduler)


def trained(kind: str, epochs: int = 2) -> tuple[Any, dict[str, Any]]:
    """An engine of ``kind`` after ``epochs`` epochs (evaluated: a plateau steps), its state."""
    e = engine(kind)
    e.fit(sum_batches(), epochs=epochs, val_data=sum_batches(n=16), verbose=False)
    return e, e.state_dict()


def group(state: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return state["updates"][""]["optimizer"]["param_groups"][index]


def schedule(state: dict[str, Any]) -> dict[str, Any]:
    return state["updates"][""]["scheduler"]


def refused(kind: str, state: dict[str, Any], *words: str) -> str:
    """Load ``state`` into a fresh engine of ``kind``: one line naming the field, the engine
    as it was."""
    fresh = engine(kind)
    before = copy.deepcopy(fresh.state_dict())
    with pytest.raises(BeyondfitError) as caught:
        fresh.load_state_dict(state, source="checkpoint 'x.pt'")
    message = str(caught.value)
    assert "\n" not in message and "nothing was changed" in message, message
    for word in words:
        assert word in message, message
    after = fresh.state_dict()
    assert after["updates"][""]["optimizer"]["param_groups"] == \
        before["updates"][""]["optimizer"]["param_groups"]
    assert after["counters"] == before["counters"] and not fresh.position.loaded
    return message


class Keep(Callback):
    """Keeps the engine's state at the end of its first epoch: a checkpoint of the run."""

    def __init__(self) -> None:
        self.state: dict[str, Any] | None = None

    def on_epoch_end(self, engine: Any, logs: Any) -> None:
        if self.state is None:
            self.state = copy.deepcopy(engine.state_dict())


@pytest.mark.parametrize("kind", list(OPTIMIZERS))
def test_every_checkpoint_an_unedited_run_writes_loads_and_goes_on_as_saved(kind: str) -> None:
    optimizer, scheduler = OPTIMIZERS[kind]
    keep = Keep()
    whole = make_engine(optimizer=optimizer, scheduler=scheduler, callbacks=[keep])
    whole.fit(sum_batches(), epochs=3, val_data=sum_batches(n=16), verbose=False)
    resumed = engine(kind)
    assert keep.state is not None
    resumed.load_state_dict(keep.state)
    resumed.fit(sum_batches(), epochs=3, val_data=sum_batches(n=16), verbose=False)
    for p, q in zip(whole.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert group(whole.state_dict()) == group(resumed.state_dict())
    resumed.load_state_dict(resumed.state_dict())  # its own state again, after training on


FORGED_GROUPS = {  # kind: (group key, forged value, words of the refusal)
    "adam": [("lr", -1.0, "param_groups[0].lr=-1.0 is not a learning rate"),
             ("maximize", True, "param_groups[0].maximize=True but this run's Adam was built "
                                "with False"),
             ("eps", -1.0, "param_groups[0].eps=-1.0 but this run's Adam was built with 1e-08"),
             ("betas", (0.5, 0.999), "param_groups[0].betas=(0.5, 0.999)"),
             ("amsgrad", True, "param_groups[0].amsgrad=True"),
             ("weight_decay", 0.5, "param_groups[0].weight_decay=0.5"),
             ("lr", 0.0, "param_groups[0].lr=0.0 is not a learning rate"),
             ("fused", "yes", "param_groups[0].fused='yes' is not true, false or null")],
    "adamw": [("weight_decay", 0.0, "param_groups[0].weight_decay=0.0 but this run's AdamW "
                                    "was built with 0.05"),
              ("eps", 1.0, "param_groups[0].eps=1.0")],
    "sgd": [("momentum", 0.0, "param_groups[0].momentum=0.0 but this run's SGD was built "
                              "with 0.9"),
            ("nesterov", False, "param_groups[0].nesterov=False"),
            ("dampening", 0.5, "param_groups[0].dampening=0.5"),
            ("maximize", True, "param_groups[0].maximize=True"),
            ("lr", math.inf, "param_groups[0].lr=inf is not a finite number")],
    "rmsprop": [("alpha", 0.5, "param_groups[0].alpha=0.5 but this run's RMSprop"),
                ("centered", True, "param_groups[0].centered=True"),
                ("momentum", -1.0, "param_groups[0].momentum=-1.0")],
}


@pytest.mark.parametrize("kind,key,value,words", [
    (kind, *case) for kind, cases in FORGED_GROUPS.items() for case in cases])
def test_an_optimizer_setting_other_than_the_runs_is_refused(kind: str, key: str, value: Any,
                                                              words: str) -> None:
    _, state = trained(kind, epochs=1)
    group(state)[key] = value
    refused(kind, state, "updates['']: " + words)


def test_settings_the_optimizer_itself_refuses_are_refused() -> None:
    """Two flags each fine alone, together what Adam's constructor refuses (its first step
    would have)."""
    _, state = trained("adam", epochs=1)
    group(state).update(fused=True, differentiable=True)
    refused("adam", state, "param_groups[0] holds settings Adam refuses", "differentiable")


def lr_everywhere(state: dict[str, Any], lr: float) -> None:
    """The learning rate forged where a careful forger would: the group and ``_last_lr``."""
    group(state)["lr"] = lr
    schedule(state)["_last_lr"] = [lr]


FORGED_SCHEDULES: dict[str, list[tuple[Callable[[dict[str, Any]], None], str]]] = {
    "adam+steplr": [
        (lambda s: lr_everywhere(s, 0.5), "param_groups[0].lr=0.5 is not 0.0003125, what "
                                          "this run's StepLR gives at step 10"),
        (lambda s: group(s).update(lr=0.5), "scheduler._last_lr[0]=0.0003125 is not "
                                            "param_groups[0].lr=0.5"),
        (lambda s: schedule(s).update(gamma=10.0), "scheduler.gamma=10.0 but this run's "
                                                   "StepLR was built with 0.5"),
        (lambda s: schedule(s).update(step_size=1), "scheduler.step_size=1"),
        (lambda s: schedule(s).update(base_lrs=[1.0]), "scheduler.base_lrs=[1.0]"),
        (lambda s: schedule(s).update(last_epoch=2), "scheduler.last_epoch=2 is not 10"),
        (lambda s: schedule(s).update(optimizer={}), "scheduler.optimizer={} is not a setting"),
        (lambda s: s["updates"][""].pop("scheduler"), "scheduler: missing, but this run's "
                                                      "learning rate follows a StepLR"),
    ],
    "sgd+lambdalr": [
        (lambda s: lr_everywhere(s, 0.3), "param_groups[0].lr=0.3 is not 0.00348678, what this "
                                          "run's LambdaLR gives at step 10"),
        (lambda s: group(s).update(initial_lr=0.2), "param_groups[0].initial_lr=0.2"),
    ],
    "adamw+cosine": [
        (lambda s: lr_everywhere(s, 0.5), "param_groups[0].lr=0.5 is not 0.00", "LambdaLR"),
        (lambda s: lr_everywhere(s, -1.0), "param_groups[0].lr=-1.0 is not a learning rate"),
        (lambda s: schedule(s).update(base_lrs=[1.0]), "scheduler.base_lrs=[1.0] but this "
                                                       "run's LambdaLR was built with [0.01]"),
        (lambda s: schedule(s).update(last_epoch=3), "scheduler.last_epoch=3 is not 10"),
        (lambda s: s["updates"][""].update(schedule_steps=-4), "schedule_steps=-4 is not"),
        (lambda s: s["updates"][""].pop("scheduler"), "scheduler: missing"),
    ],
    "rmsprop+plateau": [
        (lambda s: lr_everywhere(s, 0.5), "param_groups[0].lr=0.5 is not between the "
                                          "plateau's floor 0 and the configured 0.01"),
        (lambda s: schedule(s).update(factor=2.0), "scheduler.factor=2.0 but this run's "
                                                   "ReduceLROnPlateau was built with 0.5"),
        (lambda s: schedule(s).update(min_lrs=[1.0]), "scheduler.min_lrs=[1.0]"),
        (lambda s: schedule(s).update(mode="max"), "scheduler.mode='max'"),
        (lambda s: schedule(s).update(num_bad_epochs=-3), "scheduler.num_bad_epochs=-3"),
    ],
    "sgd+onecycle": [
        (lambda s: group(s).update(momentum=0.99), "param_groups[0].momentum=0.99 is not "
                                                   "between the scheduler's base_momentum"),
        (lambda s: schedule(s).update(total_steps=10**6), "scheduler.total_steps=1000000"),
    ],
    "adam+sequential": [
        (lambda s: schedule(s)["_schedulers"][1].update(gamma=3.0), "scheduler._schedulers="),
    ],
}


@pytest.mark.parametrize("kind,case", [
    (kind, i) for kind, cases in FORGED_SCHEDULES.items() for i in range(len(cases))])
def test_a_scheduler_state_other_than_the_runs_is_refused(kind: str, case: int) -> None:
    edit, *words = FORGED_SCHEDULES[kind][case]
    _, state = trained(kind, epochs=2)
    edit(state)
    refused(kind, state, *words)


def test_an_extended_cosine_run_goes_on_along_the_longer_schedule_and_its_checkpoints_load(
        ) -> None:
    """``resume_extend``'s case: the schedule is built again over more steps; the run goes on at
    the rate the longer schedule gives there, and a checkpoint written before its next step
    (a Ctrl-C at once) loads."""
    _, state = trained("adamw+cosine", epochs=1)  # 5 steps, scheduled over 5
    longer = engine("adamw+cosine")
    longer.load_state_dict(state)
    update = longer.updates[0]
    update.schedule_over(15)  # what fit(epochs=3) does first
    factor = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 3 / 13))  # step 5 of 15, 2 warm-up
    assert update.lr() == pytest.approx(0.01 * factor, rel=1e-12)
    assert update.scheduler.state_dict()["_last_lr"] == [update.lr()]
    engine("adamw+cosine").load_state_dict(longer.state_dict())
    longer.fit(sum_batches(), epochs=3, verbose=False)
    assert longer.global_step == 15
    engine("adamw+cosine").load_state_dict(longer.state_dict())


def test_a_checkpoint_before_the_first_step_of_a_run_length_schedule_loads() -> None:
    state = engine("adamw+cosine").state_dict()  # not built yet: no scheduler state
    engine("adamw+cosine").load_state_dict(state)
    group(state)["lr"] = 0.5
    refused("adamw+cosine", state, "scheduler: missing")
