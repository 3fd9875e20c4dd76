"""From a composed config to a finished run: build the task, the engine and the callbacks, fit.

This is the command line's whole job, kept apart from Hydra's entry point so that tests
and notebooks can call :func:`run` with a config they composed themselves.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from beyondfit import MetricsFile, resume
from beyondfit.checkpoint import config_changes
from beyondfit.checkpoint.interrupt import GracefulInterrupt, TrainingInterrupted
from beyondfit.checkpoint.resume import model_settings_hint
from beyondfit.cli import debug, startup_gc
from beyondfit.cli.bounds import check_sizes
from beyondfit.cli.builders import (
    absolute_paths,
    build_checkpointer,
    build_engine,
    build_optimizer,
    build_task,
    output_callbacks,
)
from beyondfit.cli.configs import CONF_DIR, available, no_task_message
from beyondfit.cli.refit import initial_weights, refit
from beyondfit.cli.result import (
    RESULT_FILE,
    already_finished,
    final_record,
    result_line,
    result_value,
    write_result,
)
from beyondfit.cli.rundir import claim_run_dir, release_run_dir
from beyondfit.cli.schema import (  # registers the schema
    check_config,
    in_config_words,
)
from beyondfit.core.callbacks import Callback, StopRule, Stopwatch
from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.monitor import Monitor, check_mode, worst_value
from beyondfit.core.seeding import seed_everything
from beyondfit.core.state.serialization import ModelMismatchError
from beyondfit.distributed.connector import resolve_strategy
from beyondfit.observers.tracking import end_trackers
from beyondfit.tasks.contract import Task

log = logging.getLogger("beyondfit")

# Re-exported: tests and scripts compose configs from here.
__all__ = [
    "CONF_DIR",
    "available",
    "build_optimizer",
    "build_task",
    "no_task_message",
    "objective",
    "objective_settings",
    "resume_engine",
    "run",
    "worst_objective",
]

def run(cfg: DictConfig, run_dir: str | Path) -> list[dict[str, float]]:
    """Train the task ``cfg`` describes, writing metrics and artifacts into ``run_dir``.

    Returns the engine's history. Raises :class:`BeyondfitError` for anything the user
    can fix.
    """
    try:
        return _run(cfg, Path(run_dir))
    except BeyondfitError as exc:
        exc.args = (in_config_words(exc),)  # the library's argument names, as config keys
        raise


def _run(cfg: DictConfig, run_dir: Path) -> list[dict[str, float]]:
    started = time.perf_counter()
    if cfg.get("task") is None:
        raise BeyondfitError(no_task_message())
    check_config(cfg)
    check_sizes(cfg.task, str(cfg.get("device") or "auto"))  # before anything allocates
    # Under torchrun every rank runs this with the same config and run_dir (rank 0 composed
    # both, beyondfit.distributed.share_job); only rank 0 creates or writes files.
    strategy = resolve_strategy((cfg.get("engine") or {}).get("strategy", "auto"))
    # One live run per directory (the command line took the lock before Hydra wrote there).
    claimed = strategy.is_main and claim_run_dir(run_dir, resuming=bool(cfg.get("resume")))
    try:
        finished = already_finished(cfg.get("resume"), bool(cfg.get("resume_extend")), run_dir)
        if finished is not None:
            log.info("%s", finished)
            return []
        if debug.settings(cfg)["resume_check"]:  # +debug=fast: train, checkpoint, resume, train
            return debug.with_resume_check(
                cfg, run_dir, lambda c, first: _train(c, run_dir, strategy, started, first)
            )
        return _train(cfg, run_dir, strategy, started)
    finally:
        if claimed:
            release_run_dir(run_dir)


@dataclass
class Run:
    """What :func:`build_run` makes of a config: the task, the engine that trains it, the
    engine's callbacks (the stopwatch first, the interrupt handler last) and the debug
    group's settings."""

    task: Task
    engine: Engine
    callbacks: list[Callback]
    interrupt: GracefulInterrupt
    stopwatch: Stopwatch
    checks: dict[str, Any]
    initial: dict[str, torch.Tensor] | None = None  # the weights a refit starts from


def _train(
    cfg: DictConfig, run_dir: Path, strategy: Any, started: float, first_part: bool = False
) -> list[dict[str, float]]:
    """Build, maybe resume, fit, report. ``first_part`` (``debug.resume_check``): one step
    and a checkpoint, no report; a resume follows."""
    run = build_run(cfg, run_dir, strategy)
    if cfg.get("resume"):
        resume_run(run, cfg, run_dir, strategy)
    startup_gc.resume()  # built: the collector back on, what start-up made frozen
    try:
        history = fit_run(run, cfg, first_part)
        record = report_run(run, cfg, run_dir) if strategy.is_main and not first_part else None
        if record is None:
            close_data(run.task)
    except BaseException as exc:
        # The tracked run ends too: killed (resume=RUN_DIR continues it) or failed.
        status = "killed" if isinstance(exc, (TrainingInterrupted, KeyboardInterrupt)) else "failed"
        end_trackers(run.callbacks, status)
        raise
    # After the task's finish: the trackers send the files it wrote (policy.pt) too.
    end_trackers(run.callbacks, "finished", record)
    log.info(
        "done: %d optimizer steps in %.1fs of training (%.1fs with building the task and the "
        "reports); metrics in %s",
        run.engine.global_step,
        run.stopwatch.seconds,
        time.perf_counter() - started,
        run_dir / "metrics.jsonl",
    )
    return history


def build_run(cfg: DictConfig, run_dir: Path, strategy: Any) -> Run:
    """The task, its engine and every callback ``cfg`` asks for, in one place."""
    checks = debug.settings(cfg)
    if cfg.get("threads"):
        # Intra-op threads cost more than they give on small models, and oversubscribed
        # cores (a sweep, a busy machine) make every op wait on the slowest thread.
        # (The schema bounds the count: check_config above.)
        torch.set_num_threads(int(cfg.threads))
    seed_everything(int(cfg.seed))
    absolute_paths(cfg.task)
    debug.cap_episodes(cfg.task, checks["episodes"])
    task = build_task(cfg.task)
    initial = initial_weights(task)  # as built, before any step or resume
    if checks["overfit_batches"]:
        debug.overfit(task, int(checks["overfit_batches"]))
    stopwatch = Stopwatch()  # first: the training time the summary gives
    callbacks: list[Callback] = [stopwatch]
    if strategy.is_main:
        callbacks += [
            MetricsFile(run_dir / "metrics.jsonl"),
            *output_callbacks(cfg, run_dir),  # progress, the logger group's picks, curves.png
        ]
    if cfg.train.get("stop"):
        callbacks.append(StopRule(str(cfg.train.stop)))
    callbacks += task.callbacks  # early stopping, schedules: before the checkpointer's save
    # Last, after every logger: a checkpoint counts the rows they wrote, and the interrupt
    # handler stops the run only once every other on_fit_end has run.
    checkpointer = build_checkpointer(cfg, run_dir)
    interrupt = GracefulInterrupt(checkpointer)
    callbacks += [checkpointer, interrupt, *debug.callbacks(checks, run_dir)]
    # A task with several optimizers (SAC's Updates) gets each built from the optimizer group.
    engine = build_engine(cfg, task.model, task.loss_fn, callbacks=callbacks, strategy=strategy)
    return Run(task, engine, callbacks, interrupt, stopwatch, checks, initial)


def resume_run(run: Run, cfg: DictConfig, run_dir: Path, strategy: Any) -> None:
    """Continue the checkpoint ``cfg.resume`` names (its data position included)."""
    run.engine.train_data = run.task.train_data  # its saved position is checked with the rest
    resume_engine(run.engine, cfg)
    if cfg.get("resume_extend"):  # train on past the stop the checkpoint recorded
        run.engine.position.extend()
        # Extended, once the checkpoint is accepted: no longer finished until it finishes
        # again (a kill meanwhile resumes).
        if strategy.is_main:
            (run_dir / RESULT_FILE).unlink(missing_ok=True)


def fit_run(run: Run, cfg: DictConfig, first_part: bool = False) -> list[dict[str, float]]:
    """Train as ``cfg.train`` says; SIGINT/SIGTERM finish the step, checkpoint and raise
    :class:`TrainingInterrupted`."""
    train, task = cfg.train, run.task
    with run.interrupt, debug.checks(run.checks):
        history = run.engine.fit(
            task.train_data,
            epochs=int(train.epochs),
            max_steps=1 if first_part else train.get("max_steps"),
            val_data=task.val_data,
            eval_every=train.get("eval_every") or task.eval_every,
        )
    if run.engine.stopped_by:
        log.info("stopped early: %s", run.engine.stopped_by)
    return history


def report_run(run: Run, cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """The task's own report (it may save artifacts), the refit a task may ask for
    (:mod:`beyondfit.cli.refit`), then the final record, written last: its presence says
    every other file is written."""
    if run.task.finish is not None:  # on the chosen run's model: its validation rows unseen
        for line in run.task.finish(run.engine, run_dir) or []:
            log.info("%s", line)
    try:
        refitted = refit(run.task, cfg, run_dir, run.initial, run.engine.strategy.world_size)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM in the refit: resume= refits again
        checkpointer = run.interrupt.checkpointer
        raise TrainingInterrupted(
            getattr(exc, "signal_name", "SIGINT"), getattr(exc, "exit_code", 130),
            run.engine.global_step, checkpointer.last_path if checkpointer else None,
            finished=True,
        ) from None
    record = final_record(run.engine, run.callbacks, objective_settings(cfg))
    if refitted is not None:
        record.update(refitted)
        if refitted["refit"]:
            record["values_from"] += (
                f"; then refit on training and validation rows for {refitted['refit']['epochs']}"
                f" epochs, the model the run ends with ({refitted['refit']['file']})"
            )
    log.info("%s", result_line(record, write_result(run_dir, record)))
    return record


def close_data(task: Task) -> None:
    """Close what the task's data holds open (e.g. this rank's environments)."""
    for data in (task.train_data, task.val_data):
        close = getattr(data, "close", None)
        if callable(close):
            close()


# Settings a checkpoint cannot continue under: another task, another optimizer algorithm.
_RESUME_SAME = ("task._target_", "optimizer._target_")
# Settings that may differ on resume without changing what is computed.
_RESUME_MAY_CHANGE = (
    "resume", "resume_extend", "device", "threads", "checkpoint", "progress", "plots", "logger",
    "objective", "debug",
)


def resume_engine(engine: Engine, cfg: DictConfig) -> None:
    """Load ``cfg.resume`` (a file or a run directory) into ``engine``, warning on changes."""
    current = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(current, Mapping)
    try:
        path, state = resume(engine, str(cfg.resume), config=current, must_match=_RESUME_SAME)
    except ModelMismatchError as exc:
        raise BeyondfitError(f"{exc}{model_settings_hint(exc.saved_config, current)}") from None
    saved = state.get("config")
    if isinstance(saved, Mapping):
        changes = config_changes(saved, current, ignore=_RESUME_MAY_CHANGE)
        if changes:
            more = f"; and {len(changes) - 8} more" if len(changes) > 8 else ""
            shown = "; ".join(changes[:8]) + more
            log.warning(
                "resuming with settings that differ from the checkpoint's (%s); the run "
                "continues with the current ones", shown,
            )
    log.info(
        "resumed from %s: %d epochs done, optimizer step %d",
        path, engine.epoch, engine.global_step,
    )


def objective(
    cfg: DictConfig, history: list[dict[str, float]], record: Mapping[str, Any] | None = None
) -> float:
    """The value a hyperparameter search optimizes: ``objective.metric`` of the run's result.

    ``record`` is the run's final record (``result.json``, :mod:`beyondfit.cli.result`): the
    restored model's validation values with early stopping, the confirming evaluation of an
    RL run. A metric it lacks (a training value such as ``loss``) is the last one logged in
    ``history``. ``objective: {metric: val_loss, mode: min}`` by default; the RL task configs
    set ``val_return`` and ``max``. A run whose metric is NaN or infinite, or was never
    logged, scores the worst value, ``+inf`` to minimize and ``-inf`` to maximize (see
    :func:`worst_objective`), so that a search learns to avoid its settings instead of
    stopping.
    """
    tracked = Monitor(*objective_settings(cfg), owner="objective", key="objective.")
    final = (record or {}).get("values") or {}
    if tracked.metric in final:  # null in the file: a NaN or infinite value
        value = result_value(record, tracked.metric)
    else:
        value = tracked.last(history)
    if value is not None and math.isfinite(value):
        return value
    if value is not None or tracked.metric in final:
        log.warning("objective %s=%s is not finite: scored as %s", tracked.metric, value,
                    tracked.worst)
        return tracked.worst
    logged = sorted({k for row in history for k in row if k not in ("epoch", "step")})
    log.warning(
        "objective.metric=%s was never logged (logged: %s): scored as %s; set objective.metric",
        tracked.metric, ", ".join(logged) or "nothing", tracked.worst,
    )
    return tracked.worst


def objective_settings(cfg: DictConfig) -> tuple[str, str]:
    """``(metric, mode)`` of the ``objective`` section, checked."""
    section = cfg.get("objective") or {}
    unknown = sorted(set(section) - {"metric", "mode"})
    if unknown:
        raise BeyondfitError(f"unknown objective option(s) {unknown}; known: metric, mode")
    metric = section.get("metric") or "val_loss"
    mode = check_mode(str(section.get("mode") or "min"), "objective.")
    return str(metric), mode


def worst_objective(mode: str) -> float:
    """The score of a failed or diverged run: ``+inf`` to minimize, ``-inf`` to maximize.

    Optuna records an infinite value as a complete trial that lost (a NaN would be a failed
    trial, which its samplers ignore): TPE then steers away from the settings that diverged.
    """
    return worst_value(mode)
