"""Stopping a run on Ctrl-C (SIGINT) or SIGTERM without losing it.

The first signal only sets a flag: the optimizer step in progress finishes (a whole
accumulation window), the engine stops without closing the epoch, the
:class:`~beyondfit.Checkpointer` writes its final checkpoint, and
:class:`TrainingInterrupted` leaves ``fit``; the command line prints where the checkpoint
is and how to resume, and exits 130 (SIGINT) or 143 (SIGTERM). A second signal exits at
once with the same status: every file beyondfit writes is replaced atomically (checkpoints,
the metrics file's truncation) or cut back on resume (metrics rows), so stopping anywhere
corrupts nothing; at worst a temporary file is left, which the next run removes.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.evaluation import EvaluationInterrupted

if TYPE_CHECKING:
    from beyondfit import Checkpointer
    from beyondfit.core.engine import Engine

#: Exit statuses a shell reports for a process killed by these signals (128 + number).
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class TrainingInterrupted(KeyboardInterrupt):
    """Raised out of :meth:`Engine.fit` once a signal stopped training and it was saved.

    A ``KeyboardInterrupt``, so a script that does not catch it ends the way Ctrl-C always
    ends a Python program. Attributes: ``signal_name`` (``"SIGINT"``), ``exit_code`` (130 or
    143), ``step`` (optimizer steps done), ``checkpoint`` (the file written, or ``None``
    without a checkpointer) and ``finished`` (training had already completed).
    """

    def __init__(
        self, signal_name: str, exit_code: int, step: int, checkpoint: Path | None, finished: bool
    ) -> None:
        self.signal_name = signal_name
        self.exit_code = exit_code
        self.step = step
        self.checkpoint = checkpoint
        self.finished = finished
        where = "after training finished" if finished else f"after optimizer step {step}"
        saved = f"; checkpoint written: {checkpoint}" if checkpoint else "; no checkpoint written"
        super().__init__(f"interrupted by {signal_name} {where}{saved}")


class GracefulInterrupt(Callback):
    """Turn SIGINT/SIGTERM into "finish this step, checkpoint, stop".

    Use it as a context manager around ``fit`` (the handlers are then restored even when
    ``fit`` raises) and put it last in the callback list, after the checkpointer, so every
    other callback has finished its ``on_fit_end`` when it raises.

    Args:
        checkpointer: writes the checkpoint when training stops; ``None`` just stops.
        signals: the signals to handle.

    Example:
        >>> ckpt = Checkpointer("run/checkpoints", every=100)
        >>> with GracefulInterrupt(ckpt) as stop:
        ...     Engine(model, loss_fn, opt, callbacks=[ckpt, stop]).fit(data, epochs=10)
    """

    def __init__(
        self,
        checkpointer: Checkpointer | None = None,
        signals: Iterable[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
    ) -> None:
        self.checkpointer = checkpointer
        self.signals = tuple(signals)
        self.received: signal.Signals | None = None
        self._engine: Engine | None = None  # the engine being fitted (is it evaluating?)
        self._previous: dict[signal.Signals, Any] = {}

    # ------------------------------------------------------------------ handlers
    def install(self) -> None:
        """Handle the signals (main thread only: Python delivers signals there)."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        self.received = None
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install`."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __enter__(self) -> GracefulInterrupt:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if self.received is not None:
            # Second signal: leave now. os.write, not print: a handler can interrupt a print.
            os.write(2, f"\nbeyondfit: {sig.name} again: exiting now\n".encode())
            os._exit(EXIT_CODES.get(sig, 128 + signum))
        self.received = sig
        engine = self._engine
        evaluating = engine is not None and engine.evaluation.running
        what = "stopping the evaluation" if evaluating else "finishing the current step"
        os.write(
            2,
            f"\nbeyondfit: {sig.name} received: {what}, then saving a checkpoint "
            f"({sig.name} again exits at once)\n".encode(),
        )
        if evaluating:
            # An evaluation changes no training state and may run long (games of a policy
            # that stalls): it ends here, and the run stops as after a step.
            engine.interrupted, engine.should_stop = sig.name, True
            raise EvaluationInterrupted(sig.name)

    # ------------------------------------------------------------------ hooks
    def on_fit_start(self, engine: Engine) -> None:
        """Install the handlers (if not already) and check the callback order."""
        self._engine = engine
        if self.checkpointer is not None and self.checkpointer in engine.callbacks:
            if engine.callbacks.index(self) < engine.callbacks.index(self.checkpointer):
                raise BeyondfitError(
                    "GracefulInterrupt comes before its Checkpointer in callbacks; put it "
                    "after (last), so the checkpoint is written before it stops the run"
                )
        self.install()

    def on_step_end(self, engine: Engine) -> None:
        """A step finished: if a signal came, stop here, leaving the epoch open."""
        if self.received is not None:
            engine.interrupted = self.received.name
            engine.should_stop = True

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Restore the handlers; after a signal, raise :class:`TrainingInterrupted`."""
        self.restore()
        self._engine = None
        if self.received is None:
            return
        sig, self.received = self.received, None
        checkpoint = self.checkpointer.last_path if self.checkpointer is not None else None
        raise TrainingInterrupted(
            sig.name,
            EXIT_CODES.get(sig, 128 + int(sig)),
            engine.global_step,
            checkpoint,
            finished=engine.interrupted is None,
        )
