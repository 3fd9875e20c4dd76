"""TensorBoard event files: the run's scalars, its config as text, and its hyperparameters.

``tensorboard`` is an optional extra (``pip install "beyondfit[tensorboard]"``); it is
imported only when a :class:`TensorBoardLogger` is made, and its absence is a
:class:`~beyondfit.core.errors.BeyondfitError` that says how to install it. On the command line:
``python -m beyondfit +task=regression +logger=tensorboard``, then
``tensorboard --logdir outputs``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback
from beyondfit.core.errors import BeyondfitError
from beyondfit.observers.axis import x_step

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

_MISSING = (
    "logger=tensorboard needs the tensorboard package, which is not installed; "
    'pip install "beyondfit[tensorboard]" (or pip install tensorboard), '
    "or leave tensorboard out of logger=..."
)
# Logged values that are bookkeeping, not curves.
_NOT_SCALARS = ("epoch", "step")


def summary_writer_class() -> Any:
    """``torch.utils.tensorboard.SummaryWriter``, or a BeyondfitError saying how to install it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch's module imports tensorboard itself
        raise BeyondfitError(_MISSING) from None
    return SummaryWriter


class TensorBoardLogger(Callback):
    """Write every logged value as a TensorBoard scalar, under the name the run logs it by.

    Tags are the names of ``metrics.jsonl`` and the history (``loss``, ``val_loss``,
    ``episode_return``, ``val_return``, ...), at the optimizer step; ``lr`` (``NAME/lr`` with
    several optimizers) is the first parameter group's learning rate. Training values come
    from each ``on_log`` and from the epoch end (running means of the epoch so far),
    validation values from each evaluation.
    At the end the hyperparameters go to TensorBoard's HParams tab, scored by the final
    ``val_`` values. A resumed run purges the events logged after its checkpoint's step.

    Args:
        log_dir: the event file folder (``RUN_DIR/tensorboard`` from the CLI).
        hparams: flat ``{name: number | str | bool}`` shown in the HParams tab.
        config_text: the resolved config (YAML), shown in the Text tab.
        flush_secs: seconds between flushes of pending events to disk.
    """

    rank_zero_only = True  # under DDP: one writer (rank 0), not one per rank

    def __init__(
        self,
        log_dir: str | Path,
        hparams: Mapping[str, Any] | None = None,
        config_text: str | None = None,
        flush_secs: float = 30,
    ) -> None:
        self._writer_class = summary_writer_class()  # fail before training, not after
        if (
            isinstance(flush_secs, bool)
            or not isinstance(flush_secs, (int, float))
            or not (flush_secs > 0)
        ):
            raise BeyondfitError(
                f"logger.tensorboard.flush_secs={flush_secs!r}; it must be a positive number"
            )
        self.log_dir = Path(log_dir)
        self.hparams = dict(hparams or {})
        self.config_text = config_text
        self.flush_secs = flush_secs
        self.writer: Any = None
        self._last_train_step = -1
        self._final: dict[str, float] = {}

    def on_fit_start(self, engine: Engine) -> None:
        """Open the writer; on resume, drop events logged after the checkpoint's step."""
        self.close()
        self.writer = self._writer_class(
            log_dir=str(self.log_dir),
            # Steps up to the checkpoint's were logged before it was written: keep them.
            purge_step=x_step(engine) + 1 if engine.global_step else None,
            flush_secs=self.flush_secs,
        )
        if self.config_text and engine.global_step == 0:
            # Four-space indent: TensorBoard renders the text tab as markdown (code block).
            indented = "\n".join("    " + line for line in self.config_text.splitlines())
            self.writer.add_text("config", indented, 0)

    def _scalars(self, logs: Mapping[str, float], step: int, keep: Any = None) -> None:
        writer = self.writer
        if writer is None:
            return
        for name, value in logs.items():
            if name in _NOT_SCALARS or (keep is not None and not keep(name)):
                continue
            writer.add_scalar(name, float(value), step)
            self._final[name] = float(value)

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Training values (means since the last row) and the learning rates, at the run's
        x-axis step (:func:`~beyondfit.observers.axis.x_step`: env steps for RL)."""
        self._scalars(logs, x_step(engine))
        self._last_train_step = engine.global_step

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Validation values."""
        self._scalars(logs, x_step(engine))

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """The epoch's training means, unless ``on_log`` just wrote this very step."""
        if engine.global_step != self._last_train_step:
            # val_ entries of the epoch row repeat the evaluation already written.
            self._scalars(logs, x_step(engine), keep=lambda n: not n.startswith("val_"))
            self._last_train_step = engine.global_step
        if self.writer is not None:
            self.writer.flush()

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Write the hyperparameters (scored by the final values) and close the files."""
        if self.writer is not None and self.hparams:
            from torch.utils.tensorboard.summary import hparams

            metrics = {n: v for n, v in self._final.items() if n.startswith("val_") or n == "loss"}
            clean = {k: _hparam_value(v) for k, v in self.hparams.items()}
            for summary in hparams(clean, {n: v for n, v in metrics.items() if math.isfinite(v)}):
                self.writer.file_writer.add_summary(summary, x_step(engine))
        self.close()

    def close(self) -> None:
        """Flush and close the event file (safe to call twice)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _hparam_value(value: Any) -> Any:
    """HParams take numbers, strings and booleans; anything else is shown as text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optimizer": {"lr": 0.1}}`` -> ``{"optimizer.lr": 0.1}`` (lists kept whole, as text)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
