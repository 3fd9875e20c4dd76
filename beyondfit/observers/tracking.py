"""What every experiment tracker does (W&B, MLflow): one tracked run per beyondfit run.

A tracker is an observer callback on rank 0 (``rank_zero_only = True``). It records

- the resolved config as the tracked run's parameters, when the run starts;
- every logged row at its optimizer step: the training values of each log interval (with
  the learning rate as ``lr``), each evaluation's ``val_`` values, and an epoch's training
  means when no log interval fell on the epoch's last step (otherwise they repeat it);
- the run's result (``result.json``: the values of the model it ended with) when it
  finished, as ``final_NAME`` values (W&B: in the run's summary);
- the run directory's plots (``*.png``) and the policy files of an RL run (``policy.pt``,
  ``policy.json``) as artifacts, when the run ends (after the task has written them);
- the tracked run's id in its checkpoint state, so ``resume=RUN_DIR`` continues the same
  tracked run instead of starting a second one.

Subclasses (:mod:`beyondfit.observers.wandb`, :mod:`beyondfit.observers.mlflow`) say how
to start, log to and end a run of their library, which they import lazily: the supervised
path never imports a tracking library it was not asked for.

A resumed run logs again the steps between its checkpoint and the interruption: neither
library can delete logged values, so those steps hold the values of both attempts.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback
from beyondfit.core.errors import BeyondfitError
from beyondfit.observers.axis import x_step
from beyondfit.observers.tensorboard import flatten

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")

#: Files of the run directory sent as artifacts when the run ends (glob patterns).
DEFAULT_ARTIFACTS = ("*.png", "policy.pt", "policy.json")
# Logged values that are bookkeeping, not metrics.
_NOT_METRICS = ("epoch", "step")
# Config keys that are no part of what a run computes (they change on resume).
_NOT_PARAMS = ("resume",)


def missing_package(logger: str, package: str, extra: str) -> BeyondfitError:
    """The error for ``logger=[...,NAME]`` when NAME's library is not installed."""
    return BeyondfitError(
        f"logger={logger} needs the {package} package, which is not installed; "
        f'pip install "beyondfit[{extra}]" (or pip install {package}), '
        f"or leave {logger} out of logger=..."
    )


def tracker_library(name: str) -> Any:
    """The tracking library ``name`` (``mlflow``, ``wandb``), or the BeyondfitError of
    :func:`missing_package` for ``logger=NAME`` when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise missing_package(name, name, name) from None


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optimizer": {"lr": 0.1}}`` -> ``{"optimizer.lr": 0.1}``; lists stay whole.

    The dotted names of TensorBoard's HParams (:func:`~beyondfit.observers.tensorboard.flatten`),
    less the keys that are no parameter (``resume``).
    """
    return {k: v for k, v in flatten(config, prefix).items() if k not in _NOT_PARAMS}


# A dataclass (identity equality, object's repr), so that a subclass declares only its own
# options: its constructor takes these four, then its fields, and keeps a signature of named
# parameters, which the command line checks a logger section's options against.
@dataclass(eq=False, repr=False)
class ExperimentTracker(Callback):
    """Base of the trackers: the rows to log and when; subclasses talk to their library.

    Subclasses are dataclasses too (``@dataclass(eq=False, repr=False)``) whose fields are
    their options; their ``__post_init__`` calls this one's.

    Args:
        run_dir: the run directory (artifacts are found there).
        config: the resolved run config (plain dicts and lists), logged as parameters.
        artifacts: glob patterns, relative to ``run_dir``, of the files to send at the end.
        end_at_fit_end: end the tracked run in ``on_fit_end`` (the Python API). The command
            line passes ``False`` and calls :meth:`end` itself once the task has written its
            own files (``policy.pt``), which happens after training.
    """

    run_dir: str | Path
    config: Mapping[str, Any] | None = None
    artifacts: Sequence[str] = DEFAULT_ARTIFACTS
    end_at_fit_end: bool = True

    rank_zero_only = True  # under DDP: one tracked run (rank 0's), not one per rank
    #: Its name in the logger group, for messages.
    kind = "tracker"

    def __post_init__(self) -> None:
        """Check ``artifacts``; ``run_dir`` as a Path, ``config`` as a dict."""
        artifacts = self.artifacts
        if isinstance(artifacts, str):
            artifacts = [artifacts]
        if not all(isinstance(a, str) and a for a in artifacts):
            raise BeyondfitError(
                f"logger.{self.kind}.artifacts={list(artifacts)!r}; give a list of file "
                "patterns relative to the run directory, e.g. ['*.png', 'policy.pt']"
            )
        self.run_dir = Path(self.run_dir)
        self.config = dict(self.config or {})
        self.artifacts = list(artifacts)
        #: The tracked run's id (saved in checkpoints; set before ``on_fit_start`` on resume).
        self.run_id: str | None = None
        self.active = False
        self._last_train_step = -1

    # ---------------------------------------------------------------- the library's part
    def start_run(self, run_id: str | None) -> str:
        """Start a tracked run, or continue ``run_id``; return the run's id."""
        raise NotImplementedError

    def log_params(self, params: Mapping[str, Any], resumed: bool) -> None:
        """Record the flat config (on resume: keep the first values, add new keys)."""
        raise NotImplementedError

    def log_metrics(self, values: Mapping[str, float], step: int) -> None:
        """Record ``values`` at optimizer step ``step``."""
        raise NotImplementedError

    def log_files(self, files: Sequence[Path]) -> None:
        """Send ``files`` (inside ``run_dir``) as artifacts."""
        raise NotImplementedError

    def end_run(self, status: str) -> None:
        """End the tracked run; ``status`` is ``finished``, ``failed`` or ``killed``."""
        raise NotImplementedError

    def log_result(self, values: Mapping[str, float], step: int) -> None:
        """Record the run's result (the values of the model it ended with, ``result.json``).

        By default as ``final_NAME`` metrics at the last step, beside the logged curves.
        """
        self.log_metrics({f"final_{name}": value for name, value in values.items()}, step)

    # ---------------------------------------------------------------- the hooks
    def on_fit_start(self, engine: Engine) -> None:
        """Start (or continue) the tracked run and record the config."""
        if self.active:
            return
        resumed = self.run_id is not None
        self.run_id = self.start_run(self.run_id)
        self.active = True
        log.info("%s run %s%s", self.kind, self.run_id, " (continued)" if resumed else "")
        if self.config:
            self.log_params(flat_params(self.config), resumed)

    def _values(self, logs: Mapping[str, float], keep: Any = None) -> dict[str, float]:
        return {
            name: float(value)
            for name, value in logs.items()
            if name not in _NOT_METRICS and (keep is None or keep(name))
        }

    def _log_train(self, engine: Engine, logs: Mapping[str, float], keep: Any = None) -> None:
        values = self._values(logs, keep)  # the engine logs each optimizer's lr with them
        if values and self.active:
            self.log_metrics(values, x_step(engine))
        self._last_train_step = engine.global_step

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """The log interval's training values and the learning rate."""
        self._log_train(engine, logs)

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """The evaluation's ``val_`` values."""
        values = self._values(logs)
        if values and self.active:
            self.log_metrics(values, x_step(engine))

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """The epoch's training means, unless ``on_log`` just logged this very step."""
        if engine.global_step != self._last_train_step:
            # Its val_ entries repeat the evaluation already logged.
            self._log_train(engine, logs, keep=lambda n: not n.startswith("val_"))

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """End the tracked run here unless the caller ends it later (``end_at_fit_end``)."""
        if self.end_at_fit_end:
            self.end("finished")

    def end(self, status: str = "finished", record: Mapping[str, Any] | None = None) -> None:
        """Record the result, send the artifacts that exist and end the tracked run (safe to
        call twice). ``record`` is the run's final record (:mod:`beyondfit.cli.result`).

        ``status``: ``finished``; ``failed`` (an error stopped training); ``killed`` (an
        interruption: ``resume=RUN_DIR`` continues the same tracked run). Training is over
        by now and its files are on disk: a tracker that cannot send them (a server gone
        away) is reported as a warning, not as a failed run.
        """
        if not self.active:
            return
        self.active = False
        values = {
            k: float(v) for k, v in ((record or {}).get("values") or {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        try:
            if values:
                self.log_result(values, int((record or {}).get("step", 0)))
        except Exception as exc:
            log.warning("%s: the run's result was not sent: %s", self.kind, _first_line(exc))
        try:
            files = self.artifact_files()
            if files:
                self.log_files(files)
        except Exception as exc:
            log.warning("%s: the run's files were not sent: %s", self.kind, _first_line(exc))
        try:
            self.end_run(status)
        except Exception as exc:
            log.warning("%s: the run was not ended: %s", self.kind, _first_line(exc))

    def artifact_files(self) -> list[Path]:
        """The files of ``run_dir`` that match ``artifacts``, each once, in pattern order."""
        found: list[Path] = []
        for pattern in self.artifacts:
            for path in sorted(self.run_dir.glob(pattern)):
                if path.is_file() and path not in found:
                    found.append(path)
        return found

    def state_dict(self) -> dict[str, Any]:
        """The tracked run's id: a resumed run continues it."""
        return {"run_id": self.run_id}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the tracked run the checkpoint names (``on_fit_start`` reopens it)."""
        run_id = state.get("run_id")
        if run_id and not self.active:
            self.run_id = str(run_id)


def param_text(value: Any, limit: int) -> str:
    """A parameter value as the text trackers store (``None`` as ``null``), cut to ``limit``."""
    text = "null" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def end_trackers(
    callbacks: Sequence[Callback], status: str, record: Mapping[str, Any] | None = None
) -> None:
    """End every tracker in ``callbacks`` that is still open, giving it the run's result
    (``curves.png`` is on disk by then: it is drawn when training ends, and the trackers
    send it)."""
    for callback in callbacks:
        if isinstance(callback, ExperimentTracker) and callback.active:
            callback.end(status, record)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
