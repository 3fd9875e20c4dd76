"""What a run shows while it trains: a progress bar in a terminal, Keras-style lines elsewhere.

:func:`progress_callback` picks one of the two. In a terminal it is a :class:`ProgressBar`
(tqdm): optimizer steps, steps/s, the loss and a few key metrics, redrawn at most every
``refresh`` seconds. When stdout is not a terminal (CI, a file, a Hydra multirun) it is a
plain :class:`~beyondfit.core.console.ConsoleLogger`: one line per epoch or mid-epoch evaluation,
``epoch 3/10 - loss: 0.1234 - val_loss: 0.1301 - 2.1s``. Both read the numbers the engine
already synchronised for ``on_log``/``on_eval_end``: neither ever waits on the device.

In a Jupyter notebook the bar is the one progress display (no epoch lines beside it): a
widget while the fit runs, replaced when it ends by its final state as plain text, which a
notebook saved afterwards shows as it is (a viewer without the widget's state, GitHub's
included, would otherwise show a bar stuck at its first drawing, 0%).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback
from beyondfit.core.logs import visible_logs
from beyondfit.core.options import check_option

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")



def format_logs(logs: Mapping[str, float], skip: tuple[str, ...] = ("epoch", "step")) -> str:
    """``loss: 0.1234 - val_loss: 0.1301`` (4 significant digits).

    Learning rates (``lr``, ``NAME/lr``) stay in the history and metrics files, off the line.
    """
    return " - ".join(
        f"{k}: {v:.4g}" for k, v in logs.items() if k not in skip and not _is_lr(k)
    )


def _is_lr(name: str) -> bool:
    return name == "lr" or name.endswith("/lr")


class ConsoleLogger(Callback):
    """Keras-style lines through ``logging``: one per epoch, one per mid-epoch evaluation.

    ``epoch 3/10 - loss: 0.1234 - val_loss: 0.1301 - 2.1s``. Lines go to the
    ``beyondfit`` logger, so Hydra's job log captures them too.
    """

    rank_zero_only = True  # under DDP: one writer (rank 0), not one per rank

    #: Seconds between progress lines inside an epoch when no bar is drawn (stdout is a file,
    #: a job's log): SB3's logger prints at an interval too, so a long run is never silent.
    PROGRESS_SECONDS = 60.0

    def __init__(self, epochs: int | None = None, every: int = 1,
                 progress_seconds: float | None = PROGRESS_SECONDS) -> None:  # fmt: skip
        self.epochs = epochs
        self.every = max(1, int(every))
        self.progress_seconds = progress_seconds
        self._start = time.perf_counter()
        self._last: tuple[float, int, float | None] = (self._start, 0, None)

    def on_fit_start(self, engine: Engine) -> None:
        """Start the clock."""
        self._start = time.perf_counter()
        self._last = (self._start, engine.global_step, None)

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Every ``progress_seconds`` (at a log row): ``step N (R/s) - env_steps E (R/s) -
        KEY VALUES - ETA``, from the row's values, so a run whose output is a file still says
        how far it is and how fast it goes."""
        if self.progress_seconds is None:
            return
        now = time.perf_counter()
        since, step, env_steps = self._last
        if now - since < self.progress_seconds:
            return
        seconds, done = now - since, engine.global_step - step
        parts = [f"step {engine.global_step} ({done / seconds:.1f}/s)"]
        count = logs.get("env_steps")
        if count is not None:
            rate = "" if env_steps is None else f" ({(count - env_steps) / seconds:.0f}/s)"
            parts.append(f"env_steps {int(count)}{rate}")
        shown = {k: v for k, v in logs.items() if k in _key_metrics(logs) or k == "epsilon"}
        if shown:
            parts.append(format_logs(shown))
        total = planned_steps(engine, self.epochs)
        if total and done:
            left = (total - engine.global_step) * seconds / done
            parts.append(f"ETA {_duration(left)}")
        log.info("%s", " - ".join(parts))
        self._last = (now, engine.global_step, count)

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Print evaluations that happen inside an epoch (RL, long epochs)."""
        if not self._at_epoch_end(engine):  # epoch-end evaluations go on the epoch line
            log.info("step %d - %s - %.1fs", engine.global_step, format_logs(logs),
                     time.perf_counter() - self._start)

    def _at_epoch_end(self, engine: Engine) -> bool:
        try:
            return engine.batch_in_epoch >= len(engine.train_data)
        except TypeError:  # no length (a generator, an RL collector): never at a known end
            return False

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """One line per ``every`` epochs (and always the last)."""
        epoch = int(logs.get("epoch", engine.epoch))
        if epoch % self.every and epoch != self.epochs:
            return
        total = f"/{self.epochs}" if self.epochs else ""
        log.info("epoch %d%s - %s - %.1fs", epoch, total, format_logs(logs),
                 time.perf_counter() - self._start)


def planned_steps(engine: Engine, epochs: int | None, max_steps: int | None = None
                  ) -> int | None:  # fmt: skip
    """The optimizer steps a fit will take, when its data has a length (``None`` otherwise)."""
    if max_steps:
        return int(max_steps)
    try:
        batches = len(engine.train_data)
    except TypeError:  # a generator or a collector without a length
        return None
    if not epochs:
        return None
    return -(-batches // engine.accumulate) * int(epochs)  # a partial window still steps


def _duration(seconds: float) -> str:
    """``42s``, ``12m``, ``3h05m``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def wants_bar(bar: bool | str, stream: IO[str] | None = None) -> bool:
    """Resolve ``progress.bar``: ``auto`` means "stdout is a terminal, or a Jupyter
    notebook's output"; true/false force it."""
    choice = str(check_option("progress_callback.bar", bar)).lower()
    if choice != "auto":
        return choice == "true"
    if stream is None and in_notebook():
        return True
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_callback(
    epochs: int | None,
    *,
    bar: bool | str = "auto",
    every: int = 1,
    refresh: float = 0.5,
    max_steps: int | None = None,
    metrics: Sequence[str] | None = None,
    stream: IO[str] | None = None,
    interval: float | None = ConsoleLogger.PROGRESS_SECONDS,
) -> ConsoleLogger:
    """The console callback for a run: a :class:`ProgressBar` in a terminal, else a ConsoleLogger.

    Args:
        epochs: passes over the data (for ``epoch 3/10``).
        bar: ``"auto"`` (a bar when ``stream`` is a terminal), ``True`` or ``False``.
        every: epoch lines once per this many epochs (the last one always).
        refresh: seconds between bar redraws.
        max_steps: the run's step limit, if any (the bar's total).
        metrics: names shown beside the bar; ``None``: the loss and up to three more.
        stream: where the bar goes (default ``sys.stdout``, where Hydra's console log goes).
        interval: without a bar, seconds between progress lines (``None``: none).
    """
    _check_refresh(refresh)
    check_option("progress_callback.every", every)
    check_option("progress_callback.interval", interval)
    if wants_bar(bar, stream):
        return ProgressBar(
            epochs, every=every, refresh=refresh, max_steps=max_steps, metrics=metrics,
            stream=stream,
        )  # fmt: skip
    # No bar: the plain logger alone, so not even a no-op hook runs per step.
    return ConsoleLogger(epochs=epochs, every=every, progress_seconds=interval)


@contextlib.contextmanager
def fit_progress(callbacks: list[Callback], verbose: bool | str, epochs: int | None,
                 max_steps: int | None, is_main: bool) -> Iterator[None]:
    """``fit(verbose=...)``: while the fit runs, a progress callback for its length (unless
    ``callbacks`` already show progress) and its log lines shown; bars closed on Ctrl-C."""
    added = None
    if verbose and is_main and not any(isinstance(cb, ConsoleLogger) for cb in callbacks):
        added = progress_callback(epochs, bar=verbose if verbose == "auto" else True,
                                  max_steps=max_steps)
        callbacks.append(added)
    try:
        with visible_logs() if added is not None else contextlib.nullcontext():
            yield
    except BaseException as exc:  # a notebook's "interrupt kernel", an error: no bar left open
        note = "interrupted" if isinstance(exc, KeyboardInterrupt) else "stopped by an error"
        for bar in [c for c in callbacks if isinstance(c, ProgressBar)]:
            bar.close(note)
        raise
    finally:
        if added is not None:
            callbacks.remove(added)


def _check_refresh(refresh: Any) -> None:
    check_option("progress_callback.refresh", refresh)


class ProgressBar(ConsoleLogger):
    """A tqdm bar over the run's optimizer steps, above which the epoch lines still appear.

    In a notebook (``stream`` left ``None``) it is an ipywidgets bar (tqdm.notebook's), or
    tqdm's text bar when ipywidgets is not installed, and no epoch lines are printed: the
    bar shows the epoch and the values. When the fit ends (or is interrupted, or fails) the
    widget is closed and its output replaced by the final text line, e.g. ``epoch 2/2:
    100%|██████████| 32/32 [00:00<00:00, 85.3step/s, loss=0.05488]``, so that the saved
    notebook reads correctly without widget state.

    The step counter is advanced from ``on_step_end`` only when ``refresh`` seconds have
    passed (one clock read per step, no device sync); the numbers beside it come from
    ``on_log`` and ``on_eval_end``. While the bar is open, console log records are written
    through ``tqdm.write`` so they do not tear it; log files are left alone.

    Args:
        epochs: passes over the data.
        every: epoch lines once per this many epochs.
        refresh: seconds between redraws (must be positive).
        max_steps: the run's step limit (the bar's total when set).
        metrics: names shown beside the bar; ``None``: ``loss``, then ``val_loss``, then
            other validation and training values, four in all.
        stream: the bar's stream (default ``sys.stdout``).
    """

    def __init__(
        self,
        epochs: int | None = None,
        every: int = 1,
        *,
        refresh: float = 0.5,
        max_steps: int | None = None,
        metrics: Sequence[str] | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        super().__init__(epochs=epochs, every=every)
        _check_refresh(refresh)
        self.refresh = float(refresh)
        self.max_steps = max_steps
        self.metrics = list(metrics) if metrics else None
        self.stream = stream
        self.bar: Any = None
        self.notebook = False  # set when the fit starts: a notebook shows no epoch lines
        self._display: Any = None  # the notebook output the bar is shown in
        self._engine: Engine | None = None  # the fit being shown, for its last step
        self._shown: dict[str, float] = {}
        self._last_draw = 0.0
        self._redirect: contextlib.ExitStack | None = None

    # -------------------------------------------------------------- lifecycle
    def on_fit_start(self, engine: Engine) -> None:
        """Open the bar (at the resumed step, if any) and route console logs around it."""
        super().on_fit_start(engine)
        from tqdm import tqdm  # a dependency; imported here so `import beyondfit` stays light

        self.close()
        self.notebook = self.stream is None and in_notebook()
        if self.notebook and has_widgets():
            self.bar, self._display = widget_bar(self._total(engine), engine.global_step,
                                                  self.refresh)
        else:
            stream = self.stream if self.stream is not None else sys.stdout
            size = _terminal_size(stream)
            self.bar = tqdm(
                total=self._total(engine),
                initial=engine.global_step,
                unit="step",
                dynamic_ncols=size is None,  # follow the terminal when it reports a size
                ncols=None if size is None else size[0],
                nrows=None if size is None else size[1],  # tqdm hides every bar when told 0 rows
                file=stream,
                mininterval=self.refresh,
                leave=True,
            )
        self._engine = engine
        self._describe(engine)
        self._redirect = _redirect_console_logs()
        self._last_draw = time.monotonic()

    def _total(self, engine: Engine) -> int | None:
        return planned_steps(engine, self.epochs, self.max_steps)

    def on_epoch_start(self, engine: Engine) -> None:
        """Show the epoch being run."""
        self._describe(engine)

    def on_step_end(self, engine: Engine) -> None:
        """Advance the bar when ``refresh`` seconds have passed (a clock read, nothing more)."""
        now = time.monotonic()
        if now - self._last_draw >= self.refresh:
            self._last_draw = now
            self._advance(engine)

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Take the training values the engine just synchronised."""
        self._shown.update(logs)
        self._advance(engine)

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Take the evaluation's values; print a line for a mid-epoch evaluation (not in a
        notebook, where the bar shows them)."""
        self._shown.update(logs)
        self._advance(engine)
        if not self.notebook:
            super().on_eval_end(engine, logs)

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Take the epoch's values and print the epoch line above the bar (not in a
        notebook, where the bar shows them)."""
        self._shown.update(logs)
        self._advance(engine)
        if not self.notebook:
            super().on_epoch_end(engine, logs)

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Draw the final state and close the bar."""
        if engine.interrupted:
            self.close(f"interrupted ({engine.interrupted})")
        else:
            self.close("stopped early" if engine.stopped_by else "")

    def close(self, note: str = "") -> None:
        """Close the bar and restore console logging (safe to call twice, e.g. after an error).

        In a notebook the widget's output becomes the bar's final text line, followed by
        ``note`` (``stopped early``, ``interrupted``) when one is given.
        """
        if self._engine is not None:  # an interrupt may come between two redraws
            self._advance(self._engine)
            self._engine = None
        bar, self.bar = self.bar, None
        if bar is not None and self._display is not None:
            end_widget_bar(bar, self._display, str(bar) + (f" - {note}" if note else ""))
            self._display = None
        elif bar is not None:
            bar.close()
        if self._redirect is not None:
            self._redirect.close()
            self._redirect = None

    # -------------------------------------------------------------- drawing
    def _describe(self, engine: Engine) -> None:
        if self.bar is not None:
            total = f"/{self.epochs}" if self.epochs else ""
            self.bar.set_description_str(f"epoch {engine.epoch + 1}{total}", refresh=False)

    def _advance(self, engine: Engine) -> None:
        bar = self.bar
        if bar is None:
            return
        bar.set_postfix_str(self.postfix(), refresh=False)
        if engine.global_step > bar.n:
            bar.update(engine.global_step - bar.n)  # redraws, rate-limited by mininterval
        else:
            bar.refresh()

    def postfix(self) -> str:
        """``loss=0.1234, val_loss=0.1301, ...``: the values shown beside the bar."""
        names = self.metrics or _key_metrics(self._shown)
        return ", ".join(f"{n}={self._shown[n]:.4g}" for n in names if n in self._shown)


#: Shown first when logged: the losses and the returns (RL).
_FIRST = ("loss", "val_loss", "val_return", "episode_return")


def _key_metrics(values: Mapping[str, float], limit: int = 4) -> list[str]:
    """The loss, validation loss and returns first, then other validation values, then the rest.

    Bookkeeping (``epoch``, ``step``, ``env_steps``) and episode lengths are left out: they
    say little a glance at the bar needs.
    """

    def shown(name: str) -> bool:
        return (name not in ("epoch", "step", "env_steps") and not name.endswith("_length")
                and not _is_lr(name))

    names = [n for n in _FIRST if n in values]
    names += [n for n in values if n.startswith("val_") and n not in names and shown(n)]
    names += [n for n in values if n not in names and shown(n)]
    return names[:limit]


def _terminal_size(stream: IO[str]) -> tuple[int, int] | None:
    """None when the terminal reports a full size (tqdm then follows it), else a fixed one.

    Pseudo-terminals without a size (``script``, some CI runners) report 0 columns or 0
    rows, with which tqdm draws nothing at all; the reported columns are kept when known.
    """
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return 100, 20
    if size.columns > 0 and size.lines > 0:
        return None
    return (size.columns or 100), 20


def _redirect_console_logs() -> contextlib.ExitStack:
    """Send console log records through ``tqdm.write`` while a bar is open.

    Only loggers that have a console handler are redirected (the root, where Hydra puts
    one, and ``beyondfit`` if a user gave it its own): redirecting a logger without one
    would add a second console output.
    """
    from tqdm.contrib.logging import logging_redirect_tqdm

    stack = contextlib.ExitStack()
    loggers = [
        logger
        for logger in (logging.getLogger(), logging.getLogger("beyondfit"))
        if any(_is_console(h) for h in logger.handlers)
    ]
    if loggers:
        stack.enter_context(logging_redirect_tqdm(loggers=loggers))
    return stack


def _is_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) in (
        sys.stdout,
        sys.stderr,
    )


# ------------------------------------------------------------------ in a Jupyter notebook
# A notebook saved afterwards keeps each output as it was last drawn; a widget is drawn from its
# state, which viewers without it (GitHub's included) do not have, so they show the bar stuck at
# its first drawing, 0%. Replacing the widget's output by the bar's final text line, and closing
# the widget with its children, leaves a saved notebook that reads correctly anywhere.
def in_notebook() -> bool:
    """True inside a Jupyter kernel: stdout is no terminal there, but a bar can be drawn."""
    if "ipykernel" not in sys.modules:  # never imports IPython itself
        return False
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return type(get_ipython() if get_ipython else None).__name__ == "ZMQInteractiveShell"


def has_widgets() -> bool:
    """True when tqdm can draw its ipywidgets bar (ipywidgets is installed)."""
    try:
        from tqdm.notebook import IProgress
    except ImportError:
        return False
    return IProgress is not None


def widget_bar(total: int | None, initial: int, refresh: float) -> tuple[Any, Any]:
    """A tqdm.notebook bar shown in an output that can be replaced later: the bar, and the
    display handle (``IPython.display.DisplayHandle``) of that output."""
    from IPython.display import display
    from tqdm.notebook import tqdm as notebook_tqdm

    bar = notebook_tqdm(total=total, initial=initial, unit="step", mininterval=refresh,
                        leave=True, display=False)
    handle = display(bar.container, display_id=True)
    bar.displayed = True
    return bar, handle


def close_widget(widget: Any) -> None:
    """Close an ipywidgets widget with its children, layouts and styles (``close`` alone
    leaves those open, and a saved notebook keeps the state of every open one)."""
    for child in getattr(widget, "children", ()):
        close_widget(child)
    for part in ("layout", "style"):
        owned = getattr(widget, part, None)
        if owned is not None and hasattr(owned, "close"):
            owned.close()
    widget.close()


def end_widget_bar(bar: Any, handle: Any, final: str) -> None:
    """Replace the bar's output by ``final`` (plain text), then close the bar and its widget
    (shown nowhere now: its models are let go)."""
    handle.update({"text/plain": final}, raw=True)
    bar.close()
    close_widget(bar.container)
