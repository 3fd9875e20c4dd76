"""Signals: the first one finishes the step and checkpoints; a second one exits at once, and
even in the middle of a checkpoint write it corrupts nothing; handlers are always restored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from beyondfit import BeyondfitError, Callback, Checkpointer, Engine, TensorBatches, resume
from beyondfit.checkpoint import step_checkpoints
from beyondfit.checkpoint.interrupt import GracefulInterrupt, TrainingInterrupted
from beyondfit.core.state.serialization import safe_load

import kit
from kit import SendSignal

TESTS = Path(__file__).resolve().parent


def engine_and_data(callbacks: list[Callback]) -> tuple[Engine, TensorBatches]:
    engine = kit.make_engine(lambda: kit.mlp(4, 16, dropout=0.2), callbacks=callbacks)
    return engine, kit.sum_batches(48, square=True)


def child(folder: str) -> None:
    """Run in a subprocess: Ctrl-C at step 4, and Ctrl-C again in the middle of writing the
    checkpoint it asked for. The process must exit 130 at once."""
    import beyondfit.core.state.serialization as checkpoint_module

    real_save = torch.save
    ckpt = Checkpointer(folder, every=2, keep=5, monitor=None)
    interrupt = GracefulInterrupt(ckpt)

    def save_then_second_signal(obj: object, f: object) -> None:
        if interrupt.received is None:
            real_save(obj, f)  # type: ignore[arg-type]
            return
        real_save(obj, f)  # type: ignore[arg-type]
        file = getattr(f, "file", f)  # the real file under the checksum's hashing writer
        file.truncate(file.tell() // 2)  # half written...
        os.kill(os.getpid(), signal.SIGINT)  # ...when the second Ctrl-C lands

    checkpoint_module.torch.save = save_then_second_signal  # type: ignore[assignment]
    engine, data = engine_and_data([SendSignal(4), ckpt, interrupt])
    with interrupt:
        engine.fit(data, epochs=3)
    print("fit returned: the second signal did not exit")  # never reached


@pytest.mark.e2e
def test_second_signal_exits_at_once_and_corrupts_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    code = f"import sys; sys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}]; " \
           "import test_interrupt as t; " \
           f"t.child({str(folder)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 130, done.stderr
    assert "SIGINT again: exiting now" in done.stderr
    assert "fit returned" not in done.stdout and "Traceback" not in done.stderr
    # The half-written file never took a checkpoint's name: step 2 is intact and loads.
    assert [p.name for p in step_checkpoints(folder)] == ["step-00000002.pt"]
    assert safe_load(folder / "step-00000002.pt")["counters"]["global_step"] == 2
    leftovers = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) <= 1

    # Resuming from what was left ends exactly like an uninterrupted run.
    reference, data = engine_and_data([])
    reference.fit(data, epochs=3)
    resumed, data = engine_and_data([Checkpointer(folder, every=2, monitor=None)])
    resume(resumed, tmp_path)
    resumed.fit(data, epochs=3)
    for a, b in zip(reference.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
    assert not any(p.name.endswith(".tmp") for p in folder.iterdir())  # cleaned on start


def test_first_signal_stops_after_the_step_and_restores_handlers(tmp_path: Path) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    ckpt = Checkpointer(tmp_path, every=None, monitor=None)
    interrupt = GracefulInterrupt(ckpt)
    engine, data = engine_and_data([SendSignal(3, signal.SIGTERM), ckpt, interrupt])
    with interrupt, pytest.raises(TrainingInterrupted) as info:
        engine.fit(data, epochs=3)
    assert isinstance(info.value, KeyboardInterrupt)  # uncaught, it ends a script like Ctrl-C
    assert (info.value.signal_name, info.value.exit_code, info.value.step) == ("SIGTERM", 143, 3)
    assert str(info.value) == (
        f"interrupted by SIGTERM after optimizer step 3; checkpoint written: "
        f"{tmp_path / 'step-00000003.pt'}"
    )
    assert (engine.global_step, engine.batch_in_epoch, engine.interrupted) == (3, 3, "SIGTERM")
    assert engine.history == []  # the open epoch was not closed
    assert {s: signal.getsignal(s) for s in before} == before


def test_handlers_are_restored_when_fit_raises() -> None:
    before = signal.getsignal(signal.SIGINT)

    class Boom(Callback):
        def on_step_end(self, engine: Engine) -> None:
            raise RuntimeError("boom")

    interrupt = GracefulInterrupt()
    engine, data = engine_and_data([Boom(), interrupt])
    with pytest.raises(RuntimeError), interrupt:
        assert signal.getsignal(signal.SIGINT) == interrupt._handle
        engine.fit(data, epochs=1)
    assert signal.getsignal(signal.SIGINT) is before


def test_without_a_checkpointer_it_only_stops() -> None:
    interrupt = GracefulInterrupt()
    engine, data = engine_and_data([SendSignal(2), interrupt])
    with interrupt, pytest.raises(TrainingInterrupted, match="no checkpoint written"):
        engine.fit(data, epochs=2)
    assert engine.global_step == 2


def test_interrupt_before_its_checkpointer_is_an_error(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, monitor=None)
    interrupt = GracefulInterrupt(ckpt)
    engine, data = engine_and_data([interrupt, ckpt])
    with interrupt, pytest.raises(BeyondfitError, match="put it after"):
        engine.fit(data, epochs=1)


@pytest.mark.e2e
def test_a_signal_after_training_before_the_report_names_the_checkpoint_and_the_resume(
        tmp_path: Path) -> None:
    """Issue 59: Ctrl-C in the moment after "stopped early" (the task's report, before a
    refit) printed only "interrupted"; it names the last checkpoint and the resume command,
    and that command finishes the run."""
    from kit import cli, cli_batch

    run = tmp_path / "run"
    args = ["+task=regression", "train.epochs=3", "plots=false", "logger=[]",
            "progress.bar=false", f"hydra.run.dir={run}"]
    patch = ("import beyondfit.cli.run as r\n"
             "def stop(*a, **k):\n    raise KeyboardInterrupt\n"
             "r.report_run = stop\n")
    (result,) = cli_batch([args], tmp_path, patch=patch)
    assert result["code"] == 130, result["stderr"]
    err = result["stderr"]
    assert "interrupted (SIGINT) after training; its last checkpoint: " in err
    assert f"resume={run}" in err and not (run / "result.json").exists()
    resumed = cli(*args, f"resume={run}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert (run / "result.json").exists()
