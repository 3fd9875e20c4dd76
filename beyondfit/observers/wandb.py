"""Weights & Biases tracking: ``logger=[csv,wandb]`` records a run in a W&B project.

``wandb`` is an optional extra (``pip install "beyondfit[wandb]"``), imported only when a
:class:`WandbTracker` is made. Online runs need ``wandb login`` first; ``WANDB_MODE=offline``
(or ``logger.wandb.mode=offline``) writes the run under ``RUN_DIR/wandb/`` and sends
nothing, and ``wandb sync RUN_DIR/wandb/offline-run-*`` uploads it later.

The x axis of every chart is ``step``, the optimizer step (``define_metric``), not W&B's
own row counter: an evaluation and a training row of the same step line up, and a resumed
run goes on from its checkpoint's step. What is recorded, and when:
:mod:`beyondfit.observers.tracking`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beyondfit.core.errors import BeyondfitError
from beyondfit.observers.tracking import ExperimentTracker, tracker_library

_MODES = ("online", "offline", "disabled")
_EXIT_CODES = {"finished": 0, "failed": 1, "killed": 1}


def wandb_module() -> Any:
    """``wandb``, or a BeyondfitError saying how to install it."""
    return tracker_library("wandb")


@dataclass(eq=False, repr=False)
class WandbTracker(ExperimentTracker):
    """Record a beyondfit run as a W&B run: config, rows at their step, artifacts.

    The plots also go to the run's media (``plots/curves`` ...), so the workspace shows
    them; all matched files go into one artifact of type ``run-files``.

    Args:
        run_dir, config, artifacts, end_at_fit_end: see
            :class:`~beyondfit.observers.tracking.ExperimentTracker`.
        project, entity, group, tags, notes: where and how W&B files the run.
        name: the run's display name (``None``: the run directory's name).
        mode: ``online``, ``offline`` or ``disabled`` (``None``: ``WANDB_MODE`` or W&B's
            default, online).
    """

    project: str = "beyondfit"
    entity: str | None = None
    name: str | None = None
    group: str | None = None
    tags: Sequence[str] | None = None
    notes: str | None = None
    mode: str | None = None

    kind = "wandb"

    def __post_init__(self) -> None:
        """Import wandb, check the options and gather ``wandb.init``'s."""
        self.wandb = wandb_module()  # fail before training, not after
        super().__post_init__()
        if self.mode is not None and self.mode not in _MODES:
            raise BeyondfitError(
                f"logger.wandb.mode={self.mode!r}; use {', '.join(_MODES)} "
                "(or null: WANDB_MODE, else online)"
            )
        self.init_options = {
            "project": self.project, "entity": self.entity, "group": self.group,
            "notes": self.notes, "tags": list(self.tags) if self.tags else None,
            "mode": self.mode, "name": self.name or self.run_dir.resolve().name,
        }  # fmt: skip
        self.run: Any = None
        self._step = 0

    def start_run(self, run_id: str | None) -> str:
        """``wandb.init`` into ``RUN_DIR/wandb``; with ``run_id``, resume that run."""
        config = {k: v for k, v in self.config.items() if k != "resume"}
        try:
            self.run = self.wandb.init(
                dir=str(self.run_dir),
                id=run_id,
                resume="allow" if run_id else None,
                config=config,
                allow_val_change=run_id is not None,
                # A separate run even when the process has one open (a notebook's own).
                reinit="create_new",
                **self.init_options,
            )
        except self.wandb.errors.Error as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise BeyondfitError(
                f"W&B could not start a run ({first}); log in with `wandb login`, or record "
                "it locally with WANDB_MODE=offline (or logger.wandb.mode=offline)"
            ) from None
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        return str(self.run.id)

    def log_params(self, params: Mapping[str, Any], resumed: bool) -> None:
        """Already given to ``wandb.init`` as the run's config (nested, as composed)."""

    def log_metrics(self, values: Mapping[str, float], step: int) -> None:
        """One W&B row per logged row, with the optimizer step as ``step``."""
        self.run.log({**values, "step": step})
        self._step = step

    def log_files(self, files: Sequence[Path]) -> None:
        """The plots as images at the last step; every file in one ``run-files`` artifact."""
        images = {
            f"plots/{path.stem}": self.wandb.Image(str(path)) for path in files
            if path.suffix.lower() == ".png"
        }  # fmt: skip
        if images:
            self.run.log({**images, "step": self._step})
        artifact = self.wandb.Artifact(f"run-{self.run.id}-files", type="run-files")
        for path in files:
            artifact.add_file(str(path), name=str(path.relative_to(self.run_dir)))
        self.run.log_artifact(artifact)

    def log_result(self, values: Mapping[str, float], step: int) -> None:
        """The result in the run's summary (what W&B's run table shows), as ``final_NAME``."""
        self.run.summary.update({f"final_{name}": value for name, value in values.items()})

    def end_run(self, status: str) -> None:
        """``run.finish`` with exit code 0 (finished) or 1 (failed, killed)."""
        self.run.finish(exit_code=_EXIT_CODES.get(status, 0))
        self.run = None
