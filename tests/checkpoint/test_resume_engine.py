"""In-process exact resume: a crashed or interrupted Engine.fit, resumed from its checkpoint,
ends bitwise equal to a run that was never stopped (mid-epoch, dropout, accumulation,
scheduler, evaluation inside the epoch), and its metrics file has each row exactly once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from torch import nn

from beyondfit import Callback, Checkpointer, Engine, MetricsFile, TensorBatches, resume
from beyondfit.checkpoint import step_checkpoints
from beyondfit.checkpoint.interrupt import GracefulInterrupt, TrainingInterrupted

from kit import SendSignal, rows

EPOCHS = 3
N, D, BATCH = 72, 6, 8  # 9 micro-batches per epoch: with accumulate=2 the last window is partial


class Crash(Callback):
    """Simulates a process dying right after optimizer step ``at`` (after any checkpoint)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, engine: Engine) -> None:
        if engine.global_step == self.at:
            raise RuntimeError(f"crash after step {self.at}")


def make_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=g)
    return x, torch.sin(x.sum(1, keepdim=True)) + 0.1 * torch.randn(N, 1, generator=g)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(D, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    x, y = batch
    err = model(x) - y
    return {"loss": (err**2).mean(), "mae": err.abs().mean()}


def build(
    run_dir: Path, extra: list[Callback], plain_list: bool = False, every: int | None = 4
) -> tuple[Engine, object, list]:
    """A fresh engine as a fresh process would build it: same seed, same construction."""
    torch.manual_seed(0)
    model = make_model()
    x, y = make_data()
    data: object = TensorBatches(x, y, batch_size=BATCH, seed=3)
    if plain_list:
        data = [(x[i : i + BATCH], y[i : i + BATCH]) for i in range(0, N, BATCH)]
    val = [make_data(seed=1)]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    callbacks: list[Callback] = [MetricsFile(run_dir / "metrics.jsonl")]
    checkpointer = Checkpointer(run_dir / "checkpoints", every=every, keep=2, monitor="val_loss")
    callbacks.append(checkpointer)
    callbacks += extra
    engine = Engine(
        model, loss_fn, opt, accumulate=2, clip_norm=1.0, device="cpu", log_every=1,
        scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=5, gamma=0.7),
        callbacks=callbacks,
    )
    return engine, data, val


def fit(engine: Engine, data: object, val: list) -> list[dict[str, float]]:
    return engine.fit(data, epochs=EPOCHS, val_data=val, eval_every=3)


def assert_same_run(a: Engine, b: Engine) -> None:
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), name
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    for key in sa:
        for field in sa[key]:
            assert torch.equal(sa[key][field], sb[key][field]), (key, field)
    assert a.scheduler.state_dict() == b.scheduler.state_dict()
    assert (a.global_step, a.epoch) == (b.global_step, b.epoch)
    assert a.history == b.history


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Engine, list[dict]]:
    run_dir = tmp_path_factory.mktemp("reference")
    engine, data, val = build(run_dir, [])
    fit(engine, data, val)
    return engine, rows(run_dir)


def check_rows(got: list[dict], expected: list[dict]) -> None:
    assert got == expected
    steps = [r["step"] for r in got if r["kind"] == "train"]
    assert steps == list(range(1, steps[-1] + 1))  # one train row per step: no gap, no repeat
    assert [r["epoch"] for r in got if r["kind"] == "epoch"] == list(range(1, EPOCHS + 1))


# Steps per epoch: ceil(9 / 2) = 5 (the 5th is a one-batch window); evaluations every 3
# steps. Checkpoint every 4, crash after steps 6 or 7: resumed mid-epoch, from before rows
# the checkpoint did not count. Checkpoint every 5: the checkpoint is taken at an epoch's
# last step, before its epoch row; at step 15 that step also evaluated (no second one).
@pytest.mark.parametrize("every, crash_at", [(4, 6), (4, 7), (5, 10), (5, 15)])
def test_crash_and_resume_equals_uninterrupted(
    tmp_path: Path, reference: tuple[Engine, list[dict]], every: int, crash_at: int
) -> None:
    engine, data, val = build(tmp_path, [Crash(crash_at)], every=every)
    with pytest.raises(RuntimeError, match="crash"):
        fit(engine, data, val)
    assert len(rows(tmp_path)) > 0

    resumed, data, val = build(tmp_path, [], every=every)
    path, _ = resume(resumed, tmp_path)
    assert path == step_checkpoints(tmp_path / "checkpoints")[0]
    assert resumed.global_step == crash_at // every * every  # the newest periodic checkpoint
    fit(resumed, data, val)
    assert_same_run(reference[0], resumed)
    check_rows(rows(tmp_path), reference[1])


def test_resume_with_a_plain_list_of_batches(tmp_path: Path) -> None:
    ref_dir = tmp_path / "ref"
    ref, data, val = build(ref_dir, [], plain_list=True)
    fit(ref, data, val)

    run_dir = tmp_path / "run"
    engine, data, val = build(run_dir, [Crash(7)], plain_list=True)
    with pytest.raises(RuntimeError):
        fit(engine, data, val)
    resumed, data, val = build(run_dir, [], plain_list=True)
    resume(resumed, run_dir)
    assert resumed.batch_in_epoch > 0  # mid-epoch: the list is skipped forward, not re-read
    fit(resumed, data, val)
    assert_same_run(ref, resumed)
    assert rows(run_dir) == rows(ref_dir)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_checkpoints_and_resume_equals_uninterrupted(
    tmp_path: Path, reference: tuple[Engine, list[dict]], signum: int, code: int
) -> None:
    before = signal.getsignal(signum)
    engine, data, val = build(tmp_path, [], every=None)
    interrupt = GracefulInterrupt(engine.callbacks[-1])  # type: ignore[arg-type]
    engine.callbacks = [SendSignal(8, signum), *engine.callbacks, interrupt]
    with interrupt, pytest.raises(TrainingInterrupted) as info:
        fit(engine, data, val)
    assert signal.getsignal(signum) is before  # handlers restored
    exc = info.value
    assert (exc.exit_code, exc.step, exc.finished) == (code, 8, False)
    assert exc.checkpoint == tmp_path / "checkpoints" / "step-00000008.pt"
    assert exc.checkpoint.is_file()
    assert engine.history == reference[0].history[:1]  # the open epoch wrote no history row

    resumed, data, val = build(tmp_path, [])
    resume(resumed, exc.checkpoint)
    assert (resumed.global_step, resumed.epoch) == (8, 1)
    fit(resumed, data, val)
    assert_same_run(reference[0], resumed)
    check_rows(rows(tmp_path), reference[1])


def test_signal_after_the_last_step_still_saves_and_reports(tmp_path: Path) -> None:
    engine, data, val = build(tmp_path, [], every=None)
    interrupt = GracefulInterrupt(engine.callbacks[-1])  # type: ignore[arg-type]

    class LateSignal(Callback):
        def on_epoch_end(self, engine: Engine, logs: object) -> None:
            if engine.epoch == EPOCHS:
                os.kill(os.getpid(), signal.SIGINT)

    engine.callbacks = [*engine.callbacks[:-1], LateSignal(), engine.callbacks[-1], interrupt]
    with interrupt, pytest.raises(TrainingInterrupted) as info:
        fit(engine, data, val)
    assert info.value.finished
    assert "after training finished" in str(info.value)
    assert info.value.checkpoint == tmp_path / "checkpoints" / "step-00000015.pt"


def test_resuming_a_finished_run_changes_nothing(
    tmp_path: Path, reference: tuple[Engine, list[dict]]
) -> None:
    engine, data, val = build(tmp_path, [])
    fit(engine, data, val)
    again, data, val = build(tmp_path, [])
    resume(again, tmp_path)
    fit(again, data, val)
    assert_same_run(reference[0], again)
    check_rows(rows(tmp_path), reference[1])


class StopBelow(Callback):
    """A stop rule of a user's own, not a StopRule: stop once an evaluation's loss is below a
    bound, and answer for the record it writes on resume."""

    def __init__(self, bound: float) -> None:
        self.bound = bound

    def record(self, value: float) -> str:
        return f"my rule: val_loss {value:.6f} below {self.bound}"

    def on_eval_end(self, engine: Engine, logs) -> None:
        if logs["val_loss"] < self.bound:
            engine.should_stop, engine.stopped_by = True, self.record(logs["val_loss"])

    def explains_stop(self, record: str, rows) -> bool | str | None:
        if not record.startswith("my rule:"):
            return None
        shown = [row["val_loss"] for row in rows if "val_loss" in row]
        if shown and shown[0] < self.bound and record == self.record(shown[0]):
            return True
        return f"the logged val_loss is not below {self.bound}"


class Silent(StopBelow):
    """The same stop, from a callback that does not answer for its records."""

    def explains_stop(self, record: str, rows) -> bool | str | None:
        return Callback.explains_stop(self, record, rows)


def test_a_users_own_stop_rule_stops_and_its_resume_continues_the_stopped_run(
        tmp_path: Path, reference: tuple[Engine, list[dict]]) -> None:
    bound = reference[0].last_val["val_loss"] + 1.0  # below it from the first evaluation
    engine, data, val = build(tmp_path, [StopBelow(bound)], every=1)
    fit(engine, data, val)
    assert engine.stopped_by.startswith("my rule:") and engine.global_step == 3
    again, data, val = build(tmp_path, [StopBelow(bound)], every=1)
    resume(again, tmp_path)
    fit(again, data, val)
    assert again.global_step == 3 and again.stopped_by == engine.stopped_by  # nothing trained

    # A forged record of the user's kind, and a callback that does not answer: refused.
    from beyondfit.core.state.serialization import safe_load

    saved = safe_load(tmp_path / "checkpoints" / "step-00000003.pt")
    for callbacks, record, words in (
            ([StopBelow(bound)], "my rule: val_loss 0.000001 below 9", "is not below"),
            ([Silent(bound)], engine.stopped_by, "explains_stop")):
        forged, data, val = build(tmp_path / "forged", callbacks, every=1)
        with pytest.raises(Exception, match=words):
            forged.load_state_dict({**saved, "stopped_by": record})
