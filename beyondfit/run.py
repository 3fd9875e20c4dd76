"""From a composed config to a finished run: build the task, the engine and the callbacks, fit.

This is the command line's whole job, kept apart from Hydra's entry point so that tests
and notebooks can call :func:`run` with a config they composed themselves.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from beyondfit.callbacks import Callback, StopRule
from beyondfit.checkpointing import CHECKPOINT_DIR, Checkpointer, config_changes, resume
from beyondfit.distributed import resolve_strategy
from beyondfit.engine import Engine
from beyondfit.errors import BeyondfitError
from beyondfit.interrupt import GracefulInterrupt
from beyondfit.loggers import CsvFile, MetricsFile
from beyondfit.seeding import seed_everything
from beyondfit.task import Task

log = logging.getLogger("beyondfit")

CONF_DIR = Path(__file__).resolve().parent / "conf"
if not CONF_DIR.is_dir():  # a source checkout keeps conf/ at the top level
    CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def available(group: str) -> list[str]:
    """The options of a config group (``task``, ``optimizer``, ...), from the shipped configs."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def run(cfg: DictConfig, run_dir: str | Path) -> list[dict[str, float]]:
    """Train the task ``cfg`` describes, writing metrics and artifacts into ``run_dir``.

    Returns the engine's history. Raises :class:`BeyondfitError` for anything the user
    can fix.
    """
    started = time.perf_counter()
    if cfg.get("task") is None:
        raise BeyondfitError(no_task_message())
    # Under torchrun every rank runs this with the same config and run_dir (rank 0 composed
    # both, beyondfit.distributed.share_job); only rank 0 creates or writes files.
    strategy = resolve_strategy((cfg.get("engine") or {}).get("strategy", "auto"))
    run_dir = Path(run_dir)
    if strategy.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
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
    options = _engine_options(cfg.engine)
    options.pop("strategy", None)
    # Last, after every logger: a checkpoint counts the rows they wrote, and the interrupt
    # handler stops the run only once every other on_fit_end has run.
    checkpointer = build_checkpointer(cfg, run_dir)
    interrupt = GracefulInterrupt(checkpointer)
    callbacks += [checkpointer, interrupt]
    engine = Engine(
        task.model,
        task.loss_fn,
        optimizer,
        scheduler=build_scheduler(cfg.get("scheduler"), task, train, options.get("accumulate", 1)),
        device=str(cfg.device),
        callbacks=callbacks,
        strategy=strategy,
        **options,
    )
    if cfg.get("resume"):
        resume_engine(engine, cfg)
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
    log.info(
        "done in %.1fs: %d optimizer steps; metrics in %s",
        time.perf_counter() - started,
        engine.global_step,
        run_dir / "metrics.jsonl",
    )
    return history


def build_checkpointer(cfg: DictConfig, run_dir: Path) -> Checkpointer:
    """The ``checkpoint`` config section as a :class:`Checkpointer` into ``RUN_DIR/checkpoints``.

    Every checkpoint stores the resolved config, so a run can be traced from its file alone.
    """
    section = cfg.get("checkpoint") or {}
    known = {"every", "keep", "monitor", "mode"}
    unknown = sorted(set(section) - known)
    if unknown:
        raise BeyondfitError(
            f"unknown checkpoint option(s) {unknown}; known: {', '.join(sorted(known))}"
        )
    return Checkpointer(
        run_dir / CHECKPOINT_DIR,
        every=section.get("every", 500),
        keep=section.get("keep", 3),
        monitor=section.get("monitor", "val_loss"),
        mode=section.get("mode", "min"),
        extra={"config": OmegaConf.to_container(cfg, resolve=True)},
    )


# Settings that may differ on resume without changing what is computed.
_RESUME_MAY_CHANGE = ("resume", "device", "threads", "checkpoint", "progress", "plots", "logger")


def resume_engine(engine: Engine, cfg: DictConfig) -> None:
    """Load ``cfg.resume`` (a file or a run directory) into ``engine``, warning on changes."""
    path, state = resume(engine, str(cfg.resume))
    saved = state.get("config")
    if isinstance(saved, Mapping):
        current = OmegaConf.to_container(cfg, resolve=True)
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


def build_task(task_cfg: DictConfig) -> Task:
    """Instantiate ``cfg.task`` (its ``_target_`` is a task module's ``build``)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        task = instantiate(task_cfg, _convert_="all")
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, BeyondfitError):
            raise cause from None
        if isinstance(cause, TypeError):
            raise BeyondfitError(f"task options do not fit the task: {cause}") from None
        raise BeyondfitError(f"cannot build the task: {exc}") from None
    if not isinstance(task, Task):
        raise BeyondfitError(f"task._target_ returned {type(task).__name__}, not a beyondfit Task")
    return task


def build_optimizer(optimizer_cfg: DictConfig) -> Any:
    """Instantiate the optimizer group as a factory ``params -> Optimizer``, checking ``lr``."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    lr = optimizer_cfg.get("lr")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise BeyondfitError(f"optimizer.lr={lr!r}; the learning rate must be a positive number")
    factory = instantiate(optimizer_cfg)
    has_fused = "fused" in optimizer_cfg

    def build(params: list[Any]) -> Any:
        try:
            try:
                return factory(params)
            except (RuntimeError, TypeError) as exc:
                if not has_fused or "fused" not in str(exc):
                    raise
                # `fused` is a speed hint, not a change of algorithm: where this optimizer or
                # torch build has no fused kernel for these parameters (RMSprop; CPU before
                # torch 2.4), run the default implementation instead of failing.
                if optimizer_cfg.get("fused"):
                    reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                    log.info("optimizer.fused=true is not available here (%s); using the "
                             "default implementation", reason)
                plain = OmegaConf.to_container(optimizer_cfg, resolve=True)
                plain.pop("fused")  # type: ignore[union-attr]
                return instantiate(plain)(params)
        except InstantiationException as exc:
            cause = exc.__cause__ or exc
            raise BeyondfitError(f"optimizer options are invalid: {cause}") from None
        except (TypeError, ValueError) as exc:
            raise BeyondfitError(f"optimizer options are invalid: {exc}") from None

    return build


def build_scheduler(
    scheduler_cfg: DictConfig | None, task: Task, train: DictConfig, accumulate: int
) -> Any:
    """The scheduler group as a factory ``optimizer -> scheduler``, told the run's length."""
    if not scheduler_cfg:
        return None
    from hydra.utils import instantiate

    total = train.get("max_steps")
    if total is None:
        try:
            per_epoch = -(-len(task.train_data) // int(accumulate))  # type: ignore[arg-type]
        except TypeError:
            raise BeyondfitError(
                "the scheduler needs the run's length: the training data has none, so set "
                "train.max_steps"
            ) from None
        total = per_epoch * int(train.epochs)
    factory = instantiate(scheduler_cfg)
    return lambda optimizer: factory(optimizer, total_steps=int(total))


def _engine_options(engine_cfg: DictConfig) -> dict[str, Any]:
    options = OmegaConf.to_container(engine_cfg, resolve=True)
    assert isinstance(options, Mapping)
    known = {
        "precision", "clip_norm", "clip_value", "accumulate", "compile", "on_nonfinite",
        "max_skips", "log_every", "track_grad_norm", "strategy",
    }  # fmt: skip
    unknown = sorted(set(options) - known)
    if unknown:
        raise BeyondfitError(
            f"unknown engine option(s) {unknown}; known: {', '.join(sorted(known))}"
        )
    return dict(options)


_PATH_KEY = re.compile(r"^(path|.+_(path|file|dir))$")


def absolute_paths(section: DictConfig) -> None:
    """Make the relative file paths in ``section`` absolute against the launch directory.

    A path typed on the command line means "from where I am"; Hydra may run the job in
    another directory (``hydra.job.chdir=true``), so keys named ``path``, ``*_path``,
    ``*_file`` or ``*_dir`` are resolved with Hydra's ``to_absolute_path`` before the task
    sees them. Outside a Hydra app (tests, notebooks) the working directory is the base.
    """
    from hydra.utils import to_absolute_path

    for key in list(section.keys()):
        value = section.get(key)
        if isinstance(value, DictConfig):
            absolute_paths(value)
        elif (
            isinstance(value, str)
            and _PATH_KEY.match(str(key))
            and value
            and "://" not in value
            and not Path(value).expanduser().is_absolute()
        ):
            section[key] = to_absolute_path(value)


def _multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _task_name(cfg: DictConfig) -> str:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get("task")
        if choice:
            return str(choice)
    target = str(cfg.task.get("_target_", "task"))
    return target.rsplit(".", 2)[-2] if target.count(".") >= 2 else target


_LOGGERS = ("csv", "tensorboard")
_PROGRESS_KEYS = ("bar", "refresh", "every", "metrics")


def output_callbacks(cfg: DictConfig, run_dir: Path) -> list[Callback]:
    """What a run shows and writes besides ``metrics.jsonl``, from three config sections.

    ``progress``: a tqdm bar when stdout is a terminal, Keras-style lines otherwise (always
    lines in a multirun, whose jobs share one console). ``logger``: the picks of the logger
    group (``logger=[csv,tensorboard]`` or ``+logger=tensorboard``), each a sub-section.
    ``plots``: ``curves.png`` at the end (``auto``: when matplotlib is installed).
    """
    from beyondfit.plots import CurvesPlot, has_matplotlib
    from beyondfit.progress import progress_callback

    train = cfg.train
    epochs = int(train.epochs)
    progress = cfg.get("progress") or {}
    unknown = sorted(set(progress) - set(_PROGRESS_KEYS))
    if unknown:
        raise BeyondfitError(
            f"unknown progress option(s) {unknown}; known: {', '.join(_PROGRESS_KEYS)}"
        )
    bar = progress.get("bar", "auto")
    if str(bar).lower() == "auto" and _multirun():
        bar = False
    metrics = progress.get("metrics")
    callbacks: list[Callback] = [
        progress_callback(
            epochs,
            bar=bar,
            every=int(progress.get("every") or max(1, epochs // 20)),
            refresh=progress.get("refresh", 0.5),
            max_steps=train.get("max_steps"),
            metrics=list(metrics) if metrics else None,
        )
    ]
    loggers = cfg.get("logger") or {}
    unknown = sorted(set(loggers) - set(_LOGGERS))
    if unknown:
        raise BeyondfitError(
            f"unknown logger(s) {unknown}; available: {', '.join(_LOGGERS)} "
            "(pick several with logger=[csv,tensorboard], add one with +logger=tensorboard)"
        )
    if "csv" in loggers:
        callbacks.append(CsvFile(run_dir / str((loggers.csv or {}).get("file", "metrics.csv"))))
    if "tensorboard" in loggers:
        from beyondfit.tensorboard import TensorBoardLogger, flatten

        section = loggers.tensorboard or {}
        config = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(config, Mapping)
        hparams = {k: v for k, v in flatten(config).items() if "_target_" not in k}
        callbacks.append(
            TensorBoardLogger(
                run_dir / str(section.get("dir", "tensorboard")),
                hparams=hparams if section.get("hparams", True) else None,
                config_text=OmegaConf.to_yaml(cfg, resolve=True),
                flush_secs=section.get("flush_secs", 30),
            )
        )
    plots = str(cfg.get("plots", "auto")).lower()
    if plots not in ("auto", "true", "false"):
        raise BeyondfitError(f"plots={cfg.get('plots')!r}; use auto, true or false")
    if plots == "true" or (plots == "auto" and has_matplotlib()):
        callbacks.append(CurvesPlot(run_dir, title=_task_name(cfg)))
    return callbacks


def no_task_message() -> str:
    """What to say when no task was picked."""
    tasks = ", ".join(available("task"))
    return (
        f"no task given; pick one with +task=NAME (available: {tasks}), "
        "e.g. python -m beyondfit +task=cartpole"
    )
