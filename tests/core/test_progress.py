"""Progress output: a tqdm bar in a terminal, Keras-style lines otherwise, never a host sync."""

from __future__ import annotations

import io
import logging
import re

import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError, Engine, StopRule, TensorBatches
from beyondfit.core.console import ConsoleLogger, ProgressBar, progress_callback, wants_bar
from beyondfit.core.logs import ConsoleFormatter

from kit import SendSignal, make_engine


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def loss_and_mae(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict:
    err = model(batch[0]) - batch[1]
    return {"loss": (err**2).mean(), "mae": err.abs().mean()}


def linear_engine(callbacks: list, log_every: int = 2, on_nonfinite: str = "raise") -> Engine:
    return make_engine(lambda: nn.Linear(3, 1), loss_and_mae, optimizer=torch.optim.SGD,
                       lr=0.05, callbacks=callbacks, log_every=log_every,
                       on_nonfinite=on_nonfinite)


def data() -> TensorBatches:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g)
    return TensorBatches(x, x.sum(1, keepdim=True), batch_size=8, seed=0)


def val() -> list:
    x = torch.ones(4, 3)
    return [(x, x.sum(1, keepdim=True))]


def test_bar_choice_follows_the_stream_unless_forced() -> None:
    assert wants_bar("auto", io.StringIO()) is False
    assert wants_bar("auto", FakeTerminal()) is True
    assert wants_bar(True, io.StringIO()) is True
    assert wants_bar("false", FakeTerminal()) is False


def test_bad_bar_and_refresh_values_name_the_argument() -> None:
    with pytest.raises(BeyondfitError, match=r"^bar='sometimes'; use auto, true or false"):
        wants_bar("sometimes")
    with pytest.raises(BeyondfitError, match=r"^refresh=0"):
        progress_callback(2, bar=False, refresh=0)
    with pytest.raises(BeyondfitError, match=r"^refresh='fast'"):
        ProgressBar(2, refresh="fast")  # type: ignore[arg-type]


def test_without_a_terminal_it_is_the_plain_logger_with_no_step_hook() -> None:
    callback = progress_callback(3, bar="auto", stream=io.StringIO())
    assert type(callback) is ConsoleLogger  # no per-step hook at all, not even a no-op
    assert isinstance(progress_callback(3, bar=True, stream=io.StringIO()), ProgressBar)


def test_plain_lines_are_keras_style_one_per_epoch(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="beyondfit")
    engine = linear_engine([progress_callback(3, bar=False)])
    engine.fit(data(), epochs=3, val_data=val())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch")]
    assert len(lines) == 3
    num = r"[-\d.e]+"
    pattern = rf"epoch 3/3 - loss: {num} - mae: {num} - val_loss: {num} - val_mae: {num} - \d+\.\ds"
    assert re.fullmatch(pattern, lines[-1]), lines[-1]


def test_bar_shows_steps_rate_and_key_metrics(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="beyondfit")
    screen = FakeTerminal()
    bar = progress_callback(2, bar="auto", stream=screen, refresh=0.01)
    assert isinstance(bar, ProgressBar)
    engine = linear_engine([bar])
    engine.fit(data(), epochs=2, val_data=val())
    text = screen.getvalue()
    assert "10/10" in text  # 5 batches x 2 epochs, counted in optimizer steps
    assert "step/s" in text
    assert re.search(r"loss=[-\d.e]+, val_loss=[-\d.e]+, val_mae=[-\d.e]+, mae=", text), text
    assert "epoch 2/2" in text
    assert bar.bar is None  # closed at fit end
    # The Keras-style epoch lines still go to the log (and so to Hydra's job log).
    assert any(r.getMessage().startswith("epoch 2/2 - loss:") for r in caplog.records)


def test_chosen_metrics_are_shown_in_order() -> None:
    screen = FakeTerminal()
    engine = linear_engine([ProgressBar(1, metrics=["val_mae", "loss"], stream=screen)])
    engine.fit(data(), epochs=1, val_data=val())
    assert re.search(r"val_mae=[-\d.e]+, loss=[-\d.e]+\]", screen.getvalue())


def test_bar_total_follows_max_steps_and_resumed_step() -> None:
    screen = FakeTerminal()
    engine = linear_engine([ProgressBar(5, max_steps=7, stream=screen)])
    engine.fit(data(), epochs=5, max_steps=7)
    assert "7/7" in screen.getvalue()


def test_the_bar_adds_no_host_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a tensor's value is the only way to sync; the bar must read none of its own."""
    calls = {"n": 0}
    for name in ("item", "tolist", "cpu"):
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: object, _original=original, **kwargs: object):
            calls["n"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    def syncs(callback: ConsoleLogger) -> int:
        calls["n"] = 0
        linear_engine([callback], log_every=3, on_nonfinite="ignore").fit(data(), epochs=2)
        return calls["n"]

    plain = syncs(ConsoleLogger(2))
    with_bar = syncs(ProgressBar(2, refresh=1e-9, stream=FakeTerminal()))
    assert with_bar == plain


def test_console_logging_is_restored_after_the_bar(caplog: pytest.LogCaptureFixture) -> None:
    root = logging.getLogger()
    handler = logging.StreamHandler(__import__("sys").stdout)
    root.addHandler(handler)
    try:
        before = list(root.handlers)
        bar = ProgressBar(1, stream=FakeTerminal())
        engine = linear_engine([bar])
        engine.fit(data(), epochs=1)
        assert root.handlers == before
        bar.close()  # a second close is harmless
    finally:
        root.removeHandler(handler)


def test_console_formatter_keeps_info_bare_and_labels_warnings() -> None:
    formatter = ConsoleFormatter()

    def record(level: int) -> logging.LogRecord:
        return logging.LogRecord("beyondfit", level, __file__, 1, "epoch 1/2 - loss: 1", (), None)

    assert formatter.format(record(logging.INFO)) == "epoch 1/2 - loss: 1"
    assert formatter.format(record(logging.WARNING)) == "WARNING: epoch 1/2 - loss: 1"


def test_default_bar_metrics_put_losses_and_returns_first() -> None:
    bar = ProgressBar(1)
    bar._shown = {
        "loss": 1.0, "policy_loss": 0.5, "env_steps": 4096.0, "episode_length": 30.0,
        "episode_return": 30.0, "val_return": 47.0, "val_length": 47.0, "epoch": 1.0,
    }  # fmt: skip
    assert bar.postfix() == "loss=1, val_return=47, episode_return=30, policy_loss=0.5"


# ------------------------------------------------------------------ in a Jupyter notebook
class Output:
    """An IPython display handle: what the notebook's output holds after each update."""

    def __init__(self) -> None:
        self.shown: list[object] = []

    def update(self, obj: object, raw: bool = False) -> None:
        self.shown.append(obj)


@pytest.fixture
def notebook(monkeypatch: pytest.MonkeyPatch) -> list[Output]:
    """A notebook kernel as the bar sees it: the outputs it displays, one per bar."""
    pytest.importorskip("ipywidgets")
    outputs: list[Output] = []

    def display(obj: object, display_id: bool = False) -> Output:
        assert display_id, "a bar's output must be replaceable"
        outputs.append(Output())
        outputs[-1].shown.append(obj)
        return outputs[-1]

    monkeypatch.setattr("beyondfit.core.console.in_notebook", lambda: True)
    monkeypatch.setattr("IPython.display.display", display)
    return outputs


def test_in_a_notebook_the_bar_is_the_one_display_and_ends_as_plain_text(
    notebook: list[Output], caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="beyondfit")
    engine = linear_engine([])
    engine.fit(data(), epochs=2, val_data=val())  # verbose="auto": the notebook's bar
    (output,) = notebook
    widget, final = output.shown  # the widget while it ran, then its last state as text
    assert type(widget).__name__ == "TqdmHBox" and widget.comm is None  # closed
    assert re.fullmatch(r"epoch 2/2: 100%\|█+\| 10/10 \[.*step/s, loss=.*\]", final["text/plain"])
    assert set(final) == {"text/plain"}  # nothing that needs the widget's state
    assert not [r for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert "epoch" not in capsys.readouterr().out


def test_a_notebook_bar_says_how_the_fit_ended(notebook: list[Output]) -> None:
    linear_engine([StopRule("loss<1e9")]).fit(data(), epochs=5, val_data=val())
    with pytest.raises(KeyboardInterrupt):
        linear_engine([SendSignal(3)]).fit(data(), epochs=1)
    early, interrupted = (output.shown[-1]["text/plain"] for output in notebook)
    assert re.fullmatch(r"epoch 1/5:  20%.*\| 5/25 \[.*\] - stopped early", early), early
    assert re.fullmatch(r"epoch 1/1:  60%.*\| 3/5 \[.*\] - interrupted", interrupted), interrupted


def test_a_notebook_without_ipywidgets_gets_the_text_bar_alone(
    notebook: list[Output], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="beyondfit")
    monkeypatch.setattr("beyondfit.core.console.has_widgets", lambda: False)
    linear_engine([]).fit(data(), epochs=2)
    assert notebook == []  # no widget
    shown = capsys.readouterr().out
    assert "10/10" in shown and not re.search(r"epoch \d/2 - loss", shown)
    assert not [r for r in caplog.records if r.getMessage().startswith("epoch ")]


@pytest.mark.e2e
def test_without_a_terminal_a_long_run_prints_progress_lines(tmp_path) -> None:
    """Issue 58: stdout a file, no bar: a line every ``progress.interval`` seconds with the
    step and its rate, the env steps and theirs, the key values, epsilon, and the ETA."""
    from kit import cli

    done = cli("+task=cartpole", "algo=dqn", "task.total_env_steps=2500", "progress.interval=0.5",
               "plots=false", "logger=[]", "task.eval_episodes=1", "task.confirm_episodes=1",
               "engine.log_every=16", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) >= 2, done.stdout
    num = r"[-\d.e]+"
    assert re.fullmatch(rf"step \d+ \({num}/s\) - env_steps \d+ \(\d+/s\) - .*epsilon: {num}"
                        rf".* - ETA \d+[smh].*", lines[-1]), lines[-1]
    assert progress_callback(1, bar=False, interval=None).progress_seconds is None
    with pytest.raises(BeyondfitError, match="interval"):
        progress_callback(1, bar=False, interval=0)
