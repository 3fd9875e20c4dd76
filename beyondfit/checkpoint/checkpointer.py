"""Checkpoints of a run, and finding the one to resume from.

:class:`Checkpointer` writes ``step-<global step>.pt`` files into ``RUN_DIR/checkpoints/``
every ``every`` optimizer steps and when training ends, keeps the newest ``keep`` of them,
and keeps ``best.pt``: the state at which a monitored metric was best. Every step file is a
complete :meth:`~beyondfit.core.engine.Engine.state_dict` (model, optimizer, scheduler, grad
scaler, counters, RNG states, data position, callback states such as the metrics file's row
count) plus the resolved config; ``best.pt`` is the same, less the state of a data source
that says it is bulky (``bulky_state``: the replay collector's buffer, gigabytes of frames),
since it keeps the model at its best. Every file is written atomically with a checksum: a
kill at any moment leaves the previous file intact, and damage to a file is detected when it
is read. A state
with NaN or inf in the weights or the optimizer's state is never written (a warning says
so): resuming would only bring the divergence back.

Finding the file to resume from is :mod:`beyondfit.checkpoint.resume`'s job.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback
from beyondfit.core.monitor import Monitor, check_mode
from beyondfit.core.options import check_option
from beyondfit.core.state.checks import check_fields
from beyondfit.core.state.serialization import nonfinite_entries

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")

CHECKPOINT_DIR = "checkpoints"
BEST_FILE = "best.pt"
_STEP_FILE = re.compile(r"^step-(\d+)\.pt$")


def step_file_name(step: int) -> str:
    """``step-00000120.pt``: zero-padded so that names sort like steps."""
    return f"step-{step:08d}.pt"


def file_step(path: str | Path) -> int | None:
    """The step a ``step-*.pt`` file is named for, or ``None`` for another name."""
    match = _STEP_FILE.match(Path(path).name)
    return int(match.group(1)) if match else None


def step_checkpoints(directory: str | Path) -> list[Path]:
    """The ``step-*.pt`` files in ``directory``, newest (highest step) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _STEP_FILE.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found, reverse=True)]


class Checkpointer(Callback):
    """Save the engine's state periodically, at the end, and at the best monitored value.

    Periodic and final checkpoints are taken between optimizer steps (never inside an
    accumulation window), after that step's log rows and evaluation, so a run resumed from
    any of them continues bitwise as if never stopped. Put it after the loggers in the
    callback list (the command line does) so that an epoch-end checkpoint counts that
    epoch's rows.

    Args:
        directory: where the files go, normally ``RUN_DIR/checkpoints``.
        every: optimizer steps between checkpoints; ``None`` saves only when training ends
            (or is interrupted).
        keep: how many of the newest ``step-*.pt`` files to keep (``best.pt`` is extra).
        monitor: keep ``best.pt`` at the best value of this logged metric (e.g.
            ``"val_loss"``); ``None`` keeps no best file.
        mode: ``"min"`` or ``"max"``: which direction of ``monitor`` is better.
        extra: plain data stored in every file, e.g. ``{"config": resolved_config}``.

    Example:
        >>> ckpt = Checkpointer("runs/a/checkpoints", every=100, keep=3, monitor="val_loss")
        >>> Engine(model, loss_fn, opt, callbacks=[ckpt]).fit(data, epochs=5, val_data=val)
    """

    # Under torchrun every rank holds the same state: rank 0 alone writes it.
    rank_zero_only = True

    def __init__(
        self,
        directory: str | Path,
        *,
        every: int | None = 500,
        keep: int = 3,
        monitor: str | None = "val_loss",
        mode: str = "min",
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        check_option("Checkpointer.every", every)  # optimizer steps; None: only at the end
        check_option("Checkpointer.keep", keep)
        # The best value so far of the monitored metric (saved in checkpoints).
        self.tracked = (Monitor(monitor, mode, owner="checkpoint", key="")
                        if monitor else None)
        self.directory = Path(directory)
        self.every = every
        self.keep = keep
        self.monitor = monitor or None
        self.mode = check_mode(mode)  # a wrong mode is a mistake even with no monitor
        self.extra = dict(extra or {})
        self.best_step: int | None = None
        self.last_path: Path | None = None  # the newest file this run wrote
        self._pending_best: float | None = None  # a new best seen, not yet saved

    @property
    def best(self) -> float | None:
        """The best monitored value so far (``None``: none yet, or no monitor)."""
        return self.tracked.best if self.tracked is not None else None

    @best.setter
    def best(self, value: float | None) -> None:
        if self.tracked is not None:
            self.tracked.best = value

    # ------------------------------------------------------------------ hooks
    def on_fit_start(self, engine: Engine) -> None:
        """Create the directory; drop temporary files a killed write left behind."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        self._set_aside_future(engine.global_step)

    def on_step_end(self, engine: Engine) -> None:
        """Every ``every`` optimizer steps; and a pending best after this step's evaluation."""
        new_best = self._take_best(engine)
        saved = None
        if self.every is not None and engine.global_step % self.every == 0:
            saved = self.save(engine)
        if new_best:
            self._save_best(engine, saved)

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """A training-metrics row may carry the monitored value (e.g. ``loss``)."""
        self._consider(logs)

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """An evaluation may set a new best; it is saved once the step or epoch completes."""
        self._consider(logs)

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Save a best value set by this epoch's closing evaluation or its history row."""
        self._consider(logs)
        if self._take_best(engine):
            self._save_best(engine, None)

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """The final checkpoint (also taken when a signal interrupted the run)."""
        new_best = self._take_best(engine)
        saved = self.save(engine)
        if new_best:
            self._save_best(engine, saved)
        if self.monitor and self.best is None:
            log.warning(
                "checkpoint monitor %r was never logged, so no %s was kept; monitor a "
                "metric the run logs (see metrics.jsonl) or none",
                self.monitor, BEST_FILE,
            )

    # ------------------------------------------------------------------ writing
    def save(self, engine: Engine) -> Path:
        """Write ``step-<global step>.pt`` now and prune old ones; returns its path.

        Call it only between optimizer steps (callback hooks are): a state taken inside an
        accumulation window cannot be resumed exactly.
        """
        path = self.directory / step_file_name(engine.global_step)
        if not self._write(engine, path):
            return None
        self.last_path = path
        self._prune(keep_also=path)
        return path

    def _write(self, engine: Engine, path: Path, data: bool = True) -> bool:
        # Never save poison: a file with NaN weights would be resumed from, and a resume
        # picks the newest file. One host sync per checkpoint, not per step.
        bad = nonfinite_entries(_weights(engine))
        if bad:
            log.warning(
                "not writing %s: non-finite values in %s; the checkpoints written before "
                "stay as they are", path.name, ", ".join(bad),
            )
            return False
        engine.save(path, extra=self.extra, data=data)
        return True

    def _consider(self, logs: Mapping[str, float]) -> None:
        if self.tracked is None or self.tracked.metric not in logs:
            return
        value = float(logs[self.tracked.metric])
        if self.tracked.beats(value, self._pending_best):  # (None: against the best so far)
            self._pending_best = value

    def _take_best(self, engine: Engine) -> bool:
        # Record a pending best before anything is written, so every file written from
        # now on (the periodic one, best.pt) carries the new record.
        if self._pending_best is None:
            return False
        self.best, self.best_step = self._pending_best, engine.global_step
        self._pending_best = None
        return True

    def _save_best(self, engine: Engine, saved: Path | None) -> None:
        # best.pt keeps the model at its best: a data source whose state is bulky (an RL
        # replay's gigabytes of frames: ``bulky_state``) is left out of it. Otherwise the
        # state just written is the same: a hard link costs no second write.
        target = self.directory / BEST_FILE
        bulky = bool(getattr(engine.train_data, "bulky_state", False))
        if not bulky and saved is not None and _link_over(saved, target):
            return
        self._write(engine, target, data=not bulky)

    def _prune(self, keep_also: Path) -> None:
        for old in step_checkpoints(self.directory)[self.keep :]:
            if old != keep_also:
                old.unlink(missing_ok=True)

    def _set_aside_future(self, step: int) -> None:
        # Files from beyond the step this run starts at belong to a run that was resumed
        # from an earlier point (or are the corrupt file a resume skipped). Left in place
        # they would be taken as "latest" by the next resume; renamed, nothing is lost.
        for path in step_checkpoints(self.directory):
            saved_step = int(_STEP_FILE.match(path.name).group(1))  # type: ignore[union-attr]
            if saved_step > step:
                aside = path.with_name(f"superseded-{path.name}")
                os.replace(path, aside)
                log.warning(
                    "%s is newer than the step this run continues from (%d); renamed it to %s",
                    path, step, aside.name,
                )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The best value so far and where it was, so a resumed run keeps comparing to it."""
        return {"best": self.best, "best_step": self.best_step, "monitor": self.monitor}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (ignored when the monitored metric changed)."""
        check_fields(state, {"best": "real_or_none", "best_step": "count_or_none"})
        if state.get("monitor") == self.monitor:
            self.best = state.get("best")
            self.best_step = state.get("best_step")
        self._pending_best = None


def _weights(engine: Engine) -> Iterator[tuple[str, Any]]:
    """The model's parameters and every optimizer's state tensors, by name.

    Not the buffers: a buffer may hold inf on purpose (an attention mask of -inf).
    """
    yield from engine.model.named_parameters()
    for update in engine.updates:
        which = f"optimizer {update.name!r}" if update.name else "optimizer"
        for index, param_state in enumerate(update.optimizer.state.values()):
            for key, value in param_state.items():
                yield f"{which} state {index}.{key}", value


def _link_over(source: Path, target: Path) -> bool:
    """Atomically make ``target`` a hard link to ``source``; False where links do not work."""
    tmp = target.with_name(f".{target.name}.link.tmp")
    try:
        tmp.unlink(missing_ok=True)
        os.link(source, tmp)
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True
