"""A checkpoint's stop record (``stopped_by``) ends the resumed run with no step more, so it must
be one the run's own logs show: a stop rule's record for a logged value that satisfies the rule,
or early stopping's once its restored count reached its patience. A record edited into a
checkpoint and sealed again (issue 47: a DQN run ended at step 320 of 1,952 as "stopped early"
by a rule that never fired) is refused whole, in one line naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from beyondfit import BeyondfitError, EarlyStopping, StopRule

from kit import make_engine, sum_batches


def run(*callbacks: Any, epochs: int = 3) -> tuple[Any, dict[str, Any]]:
    engine = make_engine(callbacks=list(callbacks))
    engine.fit(sum_batches(), epochs=epochs, val_data=sum_batches(n=16), verbose=False)
    return engine, copy.deepcopy(engine.state_dict())


def refused(state: dict[str, Any], *callbacks: Any) -> str:
    fresh = make_engine(callbacks=list(callbacks))
    with pytest.raises(BeyondfitError) as caught:
        fresh.load_state_dict(state, source="checkpoint 'x.pt'")
    message = str(caught.value)
    assert "\n" not in message and "nothing was changed: stopped_by: stopped_by=" in message
    assert fresh.global_step == 0 and not fresh.position.loaded and fresh.stopped_by is None
    return message


def test_a_stop_rule_that_fired_is_restored_and_the_run_trains_no_more() -> None:
    engine, state = run(StopRule("val_loss<=1e9"))
    assert engine.stopped_by is not None and engine.global_step == 5
    resumed = make_engine(callbacks=[StopRule("val_loss<=1e9")])
    resumed.load_state_dict(state)
    resumed.fit(sum_batches(), epochs=3, val_data=sum_batches(n=16), verbose=False)
    assert resumed.global_step == 5 and resumed.stopped_by == engine.stopped_by


def test_a_stop_rule_on_a_training_value_at_an_epoch_end_is_restored() -> None:
    engine, state = run(StopRule("loss<=1e9"))
    assert engine.stopped_by is not None and engine.stopped_by.startswith("loss<=1e9 (loss=")
    make_engine(callbacks=[StopRule("loss<=1e9")]).load_state_dict(state)


@pytest.mark.parametrize("record,words", [
    ("val_loss<=0.001 (val_loss=0.0005)", "(the logged val_loss="),
    ("val_loss<=0.001 (val_loss=0.0005) ", "(the logged val_loss="),
    ("loss>=0 (loss=1)", "no callback of this run wrote it"),
    ("SIGINT", "no callback of this run wrote it"),
    ("", "no callback of this run wrote it"),
])
def test_a_stop_the_logs_do_not_show_is_refused(record: str, words: str) -> None:
    engine, state = run(StopRule("val_loss<=0.001"))
    assert engine.stopped_by is None and engine.global_step == 15  # it never fired
    state["stopped_by"] = record
    message = refused(state, StopRule("val_loss<=0.001"))
    assert words in message and "resume from another checkpoint" in message


def test_a_stop_rule_record_with_another_value_than_the_logged_one_is_refused() -> None:
    _, state = run(StopRule("val_loss<=1e9"))
    rule = state["stopped_by"].split(" (")[0]
    state["stopped_by"] = f"{rule} (val_loss=0.0001)"
    assert "the logged val_loss is" in refused(state, StopRule("val_loss<=1e9"))


@pytest.mark.parametrize("record", [7, ["val_loss<=1"], {"rule": "x"}])
def test_a_stop_record_that_is_not_text_is_refused(record: Any) -> None:
    _, state = run()
    state["stopped_by"] = record
    assert "is not a stop record (text) or null" in refused(state)


def test_early_stopping_that_fired_is_restored_and_one_that_did_not_is_refused() -> None:
    def stopper() -> EarlyStopping:
        return EarlyStopping("val_loss", patience=1, min_delta=1e9)  # nothing improves by 1e9

    engine, state = run(stopper(), epochs=5)
    assert engine.stopped_by is not None and "did not improve for 1 evaluations" in \
        engine.stopped_by
    make_engine(callbacks=[stopper()]).load_state_dict(copy.deepcopy(state))

    state["callbacks"]["EarlyStopping"]["wait"] = 0  # the count says it never ran out
    message = refused(state, stopper())
    assert "(early stopping counted 0 of its 1 evaluations without improvement" in message

    patient = lambda: EarlyStopping("val_loss", patience=50)  # noqa: E731
    _, state = run(patient())
    state["stopped_by"] = "val_loss did not improve for 50 evaluations (best 1 at epoch 1)"
    refused(state, patient())
