"""From a composed config to a finished run: build the task, the engine and the callbacks, fit.

This is the command line's whole job, kept apart from Hydra's entry point so that tests
and notebooks can call :func:`run` with a config they composed themselves.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from beyondfit.checkpoint import config_changes, resume
from beyondfit.checkpoint.interrupt import GracefulInterrupt, TrainingInterrupted
from beyondfit.cli.builders import (
    absolute_paths,
    build_checkpointer,
    build_optimizer,
    build_scheduler,
    build_task,
    engine_options,
    output_callbacks,
)
from beyondfit.cli.rundir import claim_run_dir, release_run_dir
from beyondfit.cli.schema import check_config  # also registers the schema config.yaml names
from beyondfit.core.callbacks import Callback, StopRule
from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.seeding import seed_everything
from beyondfit.distributed import resolve_strategy
from beyondfit.observers import MetricsFile
from beyondfit.observers.tracking import end_trackers
from beyondfit.tasks.contract import bind_updates

log = logging.getLogger("beyondfit")

PACKAGE_DIR = Path(__file__).resolve().parent.parent
CONF_DIR = PACKAGE_DIR / "conf"  # where the wheel ships it
if not CONF_DIR.is_dir():  # a source checkout keeps conf/ at the top level
    CONF_DIR = PACKAGE_DIR.parent / "conf"


def available(group: str, config_dirs: Sequence[Path] = ()) -> list[str]:
    """The options of a config group (``task``, ``optimizer``, ...): the shipped configs' and
    those in the user's ``config_dirs`` (``--config-dir``, ``hydra.searchpath``)."""
    dirs = [CONF_DIR, *config_dirs]
    return sorted({p.stem for d in dirs for p in (Path(d) / group).glob("*.yaml")})


def run(cfg: DictConfig, run_dir: str | Path) -> list[dict[str, float]]:
    """Train the task ``cfg`` describes, writing metrics and artifacts into ``run_dir``.

    Returns the engine's history. Raises :class:`BeyondfitError` for anything the user
    can fix.
    """
    started = time.perf_counter()
    if cfg.get("task") is None:
        raise BeyondfitError(no_task_message())
    check_config(cfg)
    # Under torchrun every rank runs this with the same config and run_dir (rank 0 composed
    # both, beyondfit.distributed.share_job); only rank 0 creates or writes files.
    strategy = resolve_strategy((cfg.get("engine") or {}).get("strategy", "auto"))
    run_dir = Path(run_dir)
    # One live run per directory (the command line took the lock before Hydra wrote there).
    claimed = strategy.is_main and claim_run_dir(run_dir, resuming=bool(cfg.get("resume")))
    try:
        return _train(cfg, run_dir, strategy, started)
    finally:
        if claimed:
            release_run_dir(run_dir)


def _train(cfg: DictConfig, run_dir: Path, strategy: Any, started: float) -> list[dict[str, float]]:
    if cfg.get("threads"):
        # Intra-op threads cost more than they give on small models, and oversubscribed
        # cores (a sweep, a busy machine) make every op wait on the slowest thread.
        torch.set_num_threads(int(cfg.threads))
    seed_everything(int(cfg.seed))
    absolute_paths(cfg.task)
    task = build_task(cfg.task)
    # This rank's shard, before the scheduler is told the run's length in steps.
    task.train_data = strategy.shard_train(task.train_data)
    optimizer = build_optimizer(cfg.optimizer)
    train = cfg.train
    callbacks: list[Callback] = [
        MetricsFile(run_dir / "metrics.jsonl"),
        *output_callbacks(cfg, run_dir),  # progress, the logger group's picks, curves.png
    ] if strategy.is_main else []
    if train.get("stop"):
        callbacks.append(StopRule(str(train.stop)))
    callbacks += task.callbacks  # early stopping, schedules: before the checkpointer's save
    options = engine_options(cfg.engine)
    options.pop("strategy", None)
    # Last, after every logger: a checkpoint counts the rows they wrote, and the interrupt
    # handler stops the run only once every other on_fit_end has run.
    checkpointer = build_checkpointer(cfg, run_dir)
    interrupt = GracefulInterrupt(checkpointer)
    callbacks += [checkpointer, interrupt]
    # A task with several optimizers (SAC) gets each built from the optimizer group.
    loss_fn, optimizer, scheduler = bind_updates(task.loss_fn, optimizer, build_scheduler(
        cfg.get("scheduler"), task, train, options.get("accumulate", 1)), options)
    engine = Engine(
        task.model,
        loss_fn,
        optimizer,
        scheduler=scheduler,
        device=str(cfg.device),
        callbacks=callbacks,
        strategy=strategy,
        **options,
    )
    if cfg.get("resume"):
        resume_engine(engine, cfg)
    try:
        with interrupt:  # SIGINT/SIGTERM: finish the step, checkpoint, raise TrainingInterrupted
            history = engine.fit(
                task.train_data,
                epochs=int(train.epochs),
                max_steps=train.get("max_steps"),
                val_data=task.val_data,
                eval_every=train.get("eval_every") or task.eval_every,
            )
        if engine.stopped_by:
            log.info("stopped early: %s", engine.stopped_by)
        if task.finish is not None and strategy.is_main:  # it may save artifacts: rank 0's job
            for line in task.finish(engine, run_dir) or []:
                log.info("%s", line)
        elif not strategy.is_main:
            for data in (task.train_data, task.val_data):  # e.g. this rank's environments
                close = getattr(data, "close", None)
                if callable(close):
                    close()
    except BaseException as exc:
        # The tracked run ends too: killed (resume=RUN_DIR continues it) or failed.
        status = "killed" if isinstance(exc, (TrainingInterrupted, KeyboardInterrupt)) else "failed"
        end_trackers(callbacks, status)
        raise
    # After the task's finish: the trackers send the files it wrote (policy.pt) too.
    end_trackers(callbacks, "finished")
    log.info(
        "done in %.1fs: %d optimizer steps; metrics in %s",
        time.perf_counter() - started,
        engine.global_step,
        run_dir / "metrics.jsonl",
    )
    return history


# Settings a checkpoint cannot continue under: another task, another optimizer algorithm.
_RESUME_SAME = ("task._target_", "optimizer._target_")
# Settings that may differ on resume without changing what is computed.
_RESUME_MAY_CHANGE = (
    "resume", "device", "threads", "checkpoint", "progress", "plots", "logger", "objective",
)


def resume_engine(engine: Engine, cfg: DictConfig) -> None:
    """Load ``cfg.resume`` (a file or a run directory) into ``engine``, warning on changes."""
    current = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(current, Mapping)
    path, state = resume(engine, str(cfg.resume), config=current, must_match=_RESUME_SAME)
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


def no_task_message(config_dirs: Sequence[Path] = ()) -> str:
    """What to say when no task was picked."""
    tasks = ", ".join(available("task", config_dirs))
    return (
        f"no task given; pick one with +task=NAME (available: {tasks}), "
        "e.g. python -m beyondfit +task=cartpole; your own: python -m beyondfit.new NAME"
    )


_MODES = ("min", "max")


def objective(cfg: DictConfig, history: list[dict[str, float]]) -> float:
    """The value a hyperparameter search optimizes: the run's last ``objective.metric``.

    ``objective: {metric: val_loss, mode: min}`` by default; the RL task configs set
    ``val_return`` and ``max`` (the final greedy evaluation). A run whose metric is NaN or
    infinite, or was never logged, scores the worst value, ``+inf`` to minimize and
    ``-inf`` to maximize (see :func:`worst_objective`), so that a search learns to avoid
    its settings instead of stopping.
    """
    metric, mode = objective_settings(cfg)
    for row in reversed(history):
        value = row.get(metric)
        if value is not None:
            value = float(value)
            if math.isfinite(value):
                return value
            log.warning("objective %s=%s is not finite: scored as %s", metric, value,
                        worst_objective(mode))
            return worst_objective(mode)
    logged = sorted({k for row in history for k in row if k not in ("epoch", "step")})
    log.warning(
        "objective.metric=%s was never logged (logged: %s): scored as %s; set objective.metric",
        metric, ", ".join(logged) or "nothing", worst_objective(mode),
    )
    return worst_objective(mode)


def objective_settings(cfg: DictConfig) -> tuple[str, str]:
    """``(metric, mode)`` of the ``objective`` section, checked."""
    section = cfg.get("objective") or {}
    unknown = sorted(set(section) - {"metric", "mode"})
    if unknown:
        raise BeyondfitError(f"unknown objective option(s) {unknown}; known: metric, mode")
    metric = section.get("metric") or "val_loss"
    mode = str(section.get("mode") or "min")
    if mode not in _MODES:
        raise BeyondfitError(f"objective.mode={mode!r}; use min or max")
    return str(metric), mode


def worst_objective(mode: str) -> float:
    """The score of a failed or diverged run: ``+inf`` to minimize, ``-inf`` to maximize.

    Optuna records an infinite value as a complete trial that lost (a NaN would be a failed
    trial, which its samplers ignore): TPE then steers away from the settings that diverged.
    """
    return math.inf if mode == "min" else -math.inf
