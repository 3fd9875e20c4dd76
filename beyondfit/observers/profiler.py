"""Where a step's time goes: a torch.profiler trace of a few steps, and a short table.

``StepProfiler(folder, steps=5)`` (the command line: ``+debug=profile``) skips one warm-up
step, then records ``steps`` optimizer steps with :mod:`torch.profiler` into ``folder``
(``*.pt.trace.json``: ``tensorboard --logdir FOLDER`` with the profiler plugin, or
``chrome://tracing``) and logs a table of each step's time, split into

- waiting for data (the rest of the step: fetching the next batch; for RL, stepping the envs),
- the closure and backward (``Engine.train_step`` less the optimizer),
- the optimizer (each optimizer's ``step``, timed by torch's optimizer hooks),
- evaluation (``Engine.evaluate``), and callbacks and logging (the rest after the step).

It times the engine from outside: public methods wrapped on the instance and hooks, only
during the window, all removed after; add it as the last callback (the time of callbacks
after it counts as waiting for data). Without it nothing is wrapped: it costs nothing off.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from beyondfit.core.callbacks import Callback

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")

#: The table's rows, in order.
PHASES = (
    "waiting for data (or the env)",
    "closure and backward",
    "optimizer",
    "evaluation",
    "callbacks and logging",
)


class StepProfiler(Callback):
    """Record ``steps`` optimizer steps (after ``warmup``) and log where their time went.

    Args:
        folder: where the trace files go (created).
        steps: optimizer steps recorded.
        warmup: steps skipped first (the first step builds optimizer state and caches).
        stop: stop training once the window is recorded (the command line's
            ``+debug=profile``); ``False``: training goes on, unprofiled.

    After the window, :attr:`table` maps each of :data:`PHASES` to seconds per step and
    :attr:`trace` is the trace file written.
    """

    rank_zero_only = True

    def __init__(
        self, folder: str | Path, steps: int = 5, warmup: int = 1, stop: bool = False
    ) -> None:
        self.folder = Path(folder)
        self.steps, self.warmup, self.stop = int(steps), int(warmup), stop
        self.table: dict[str, float] = {}
        self.trace: Path | None = None
        self._profiler: Any = None
        self._undo: list[Callable[[], None]] = []
        self._sums = dict.fromkeys(("train", "optimizer", "eval", "after", "total"), 0.0)
        self._recorded = 0
        self._seen = 0
        self._mark = 0.0
        self._step_end = 0.0

    # ---------------------------------------------------------------- the window
    def on_fit_start(self, engine: Engine) -> None:
        """Start the profiler (its schedule waits out the warm-up steps)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if engine.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._profiler = torch.profiler.profile(
            activities=activities,
            # The profiler's own warm-up is the last skipped step (it warns without one).
            schedule=torch.profiler.schedule(wait=max(self.warmup - 1, 0),
                                             warmup=min(self.warmup, 1), active=self.steps,
                                             repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(self.folder)),
        )
        self._profiler.start()
        if self.warmup == 0:
            self._instrument(engine)

    def on_step_end(self, engine: Engine) -> None:
        """Close one step's accounts; start timing after the warm-up, stop after the window."""
        if self._profiler is None:
            return
        now = self._now(engine)
        if self._undo:  # a recorded step ends here
            self._sums["after"] += now - self._step_end
            self._sums["total"] += now - self._mark
            self._recorded += 1
        self._seen += 1
        self._profiler.step()
        if self._recorded >= self.steps:
            self._finish(engine)
            engine.should_stop = engine.should_stop or self.stop
            return
        if self._seen >= self.warmup and not self._undo:
            self._instrument(engine)
        self._mark = self._now(engine)

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """A run shorter than the window: report what was recorded."""
        if self._profiler is not None:
            self._finish(engine)

    # ---------------------------------------------------------------- timing
    def _now(self, engine: Engine) -> float:
        if engine.device.type == "cuda":
            torch.cuda.synchronize(engine.device)  # only inside the window: honest host times
        return time.perf_counter()

    def _instrument(self, engine: Engine) -> None:
        """Wrap ``train_step`` and ``evaluate`` on the instance; hook every optimizer."""
        sums = self._sums

        def timed(name: str, key: str) -> None:
            method = getattr(engine, name)

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                start = self._now(engine)
                with torch.profiler.record_function(f"beyondfit.{name}"):
                    try:
                        return method(*args, **kwargs)
                    finally:
                        end = self._now(engine)
                        sums[key] += end - start
                        if key == "train":
                            self._step_end = end

            setattr(engine, name, wrapper)
            self._undo.append(lambda: delattr(engine, name))

        timed("train_step", "train")
        timed("evaluate", "eval")
        for update in engine.updates:
            started: list[float] = []

            def before(*_: Any, started: list[float] = started) -> None:
                started.append(self._now(engine))

            def after(*_: Any, started: list[float] = started) -> None:
                if started:
                    sums["optimizer"] += self._now(engine) - started.pop()

            handles = (update.optimizer.register_step_pre_hook(before),
                       update.optimizer.register_step_post_hook(after))
            self._undo += [h.remove for h in handles]
        self._mark = self._now(engine)

    def _finish(self, engine: Engine) -> None:
        profiler, self._profiler = self._profiler, None
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        profiler.stop()
        traces = sorted(self.folder.glob("*.pt.trace.json"), key=lambda p: p.stat().st_mtime)
        self.trace = traces[-1] if traces else None
        if not self._recorded:
            log.warning("profile: no step was recorded (the run ended within the warm-up)")
            return
        self.table = phase_table(self._sums, self._recorded)
        for line in format_table(self.table, self._recorded, self.trace):
            log.info("%s", line)


def phase_table(sums: Mapping[str, float], steps: int) -> dict[str, float]:
    """Seconds per step of each phase from the summed timings of ``steps`` steps."""
    train, optimizer, evaluation = sums["train"], sums["optimizer"], sums["eval"]
    after, total = sums["after"], sums["total"]
    values = (
        max(total - train - after, 0.0),
        max(train - optimizer, 0.0),
        optimizer,
        evaluation,
        max(after - evaluation, 0.0),
    )
    return {phase: value / steps for phase, value in zip(PHASES, values)}


def format_table(table: Mapping[str, float], steps: int, trace: Path | None) -> list[str]:
    """The table as console lines: milliseconds per step and shares."""
    total = sum(table.values()) or 1.0
    lines = [f"profile: {steps} steps, {1000 * sum(table.values()):.2f} ms per step; "
             f"trace {trace if trace is not None else '(none written)'}"]
    width = max(len(p) for p in table)
    for phase, seconds in table.items():
        lines.append(f"  {phase:<{width}}  {1000 * seconds:9.3f} ms  {100 * seconds / total:5.1f}%")
    return lines
