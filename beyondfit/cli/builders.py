"""From config sections to objects: the task, optimizer, scheduler, checkpointer, outputs."""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from beyondfit import Checkpointer, Task
from beyondfit.checkpoint import CHECKPOINT_DIR
from beyondfit.core.callbacks import Callback
from beyondfit.core.errors import BeyondfitError
from beyondfit.observers.files import CsvFile

log = logging.getLogger("beyondfit")


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


def build_task(task_cfg: DictConfig, swapped: Iterable[str] | None = None) -> Task:
    """Instantiate ``cfg.task``: its ``_target_`` is a builder returning a :class:`Task`.

    The builder may be anyone's (``mymod.build``, importable from the launch directory); every
    way it can fail is one :class:`BeyondfitError` line (see :mod:`beyondfit.cli.targets`).
    ``swapped``: the keys (``task``, ``task.loss``) whose ``_target_`` the command line replaced;
    ``None``: read them from the running Hydra app's overrides, if any.
    """
    from beyondfit.cli.targets import instantiate_section, swapped_targets

    if swapped is None:
        from hydra.core.hydra_config import HydraConfig

        from beyondfit.distributed.launch import world_size

        if HydraConfig.initialized():
            swapped = swapped_targets(HydraConfig.get().overrides.task)
        elif world_size() > 1:
            # A torchrun rank other than 0 runs the config rank 0 composed and checked: it
            # fits every target as rank 0 did, without knowing the overrides.
            swapped = ["*"]
        else:
            swapped = []
    task = instantiate_section(task_cfg, "task", set(swapped))
    target = task_cfg.get("_target_")
    if not isinstance(task, Task):
        raise BeyondfitError(
            f"task._target_={target!r} returned {type(task).__name__}, not a beyondfit Task: "
            "end the builder with return Task(model=..., loss_fn=..., train_data=...) "
            "(from beyondfit import Task)"
        )
    task.check(f"task._target_={target!r} returned a Task whose")
    return task


def build_optimizer(optimizer_cfg: DictConfig) -> Any:
    """Instantiate the optimizer group as a factory ``(params, **overrides) -> Optimizer`` (its
    ``lr`` was checked with the config: :func:`beyondfit.core.options.check_learning_rate`);
    ``overrides`` are one update's own settings over the group's."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    factory = instantiate(optimizer_cfg)
    has_fused = "fused" in optimizer_cfg

    def build(params: list[Any], **overrides: Any) -> Any:
        # overrides: one update's own settings over the group's (task.optimizers.critic.lr).
        try:
            try:
                return factory(params, **overrides)
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
                return instantiate(plain)(params, **overrides)
        except InstantiationException as exc:
            cause = exc.__cause__ or exc
            raise BeyondfitError(f"optimizer options are invalid: {cause}") from None
        except (TypeError, ValueError) as exc:
            raise BeyondfitError(f"optimizer options are invalid: {exc}") from None

    return build


def build_scheduler(scheduler_cfg: DictConfig | None) -> Any:
    """The scheduler group as a factory ``(optimizer, total_steps) -> scheduler``: ``fit``
    tells it the run's length in optimizer steps on this rank's share of the data."""
    if not scheduler_cfg:
        return None
    from hydra.utils import instantiate

    return instantiate(scheduler_cfg)


def engine_options(engine_cfg: DictConfig) -> dict[str, Any]:
    """The engine section as keyword arguments (its keys and values were checked with the
    config: :func:`beyondfit.cli.schema.check_config`)."""
    options = OmegaConf.to_container(engine_cfg, resolve=True)
    assert isinstance(options, Mapping)
    return dict(options)


def build_engine(cfg: DictConfig, model: Any, loss_fn: Any, **kwargs: Any) -> Any:
    """The :class:`~beyondfit.Engine` ``cfg`` describes for ``model`` and ``loss_fn``: its
    optimizer and scheduler groups, its device and its engine section; ``kwargs`` (callbacks,
    the strategy) go to the engine as well. The run's engine and a refit's are built here."""
    from beyondfit.core.engine import Engine

    options = engine_options(cfg.engine)
    options.pop("strategy", None)  # resolved by the caller (the run's), or one process
    return Engine(model, loss_fn, build_optimizer(cfg.optimizer),
                  scheduler=build_scheduler(cfg.get("scheduler")), device=str(cfg.device),
                  **options, **kwargs)


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


_PROGRESS_KEYS = ("bar", "refresh", "every", "interval", "metrics")


def output_callbacks(cfg: DictConfig, run_dir: Path) -> list[Callback]:
    """What a run shows and writes besides ``metrics.jsonl``, from three config sections.

    ``progress``: a tqdm bar when stdout is a terminal, Keras-style lines otherwise (always
    lines in a multirun, whose jobs share one console). ``logger``: the picks of the logger
    group (``logger=[csv,tensorboard]`` or ``+logger=tensorboard``), see
    :func:`build_loggers`. ``plots``: ``curves.png`` at the end (``auto``: when matplotlib
    is installed).
    """
    from beyondfit.core.console import progress_callback
    from beyondfit.observers.plots import CurvesPlot, has_matplotlib, skipped_without_matplotlib

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
            interval=progress.get("interval", 60.0),
            max_steps=train.get("max_steps"),
            metrics=list(metrics) if metrics else None,
        )
    ]
    callbacks += build_loggers(cfg, run_dir)
    plots = str(cfg.get("plots", "auto")).lower()  # auto, true or false (the schema's check)
    if plots == "true" or (plots == "auto" and has_matplotlib()):
        # Drawn when training ends, in this process: on disk when the command returns.
        callbacks.append(CurvesPlot(run_dir, title=_task_name(cfg)))
    elif plots == "auto":  # one line, so that a missing curves.png is no surprise
        skipped_without_matplotlib("curves.png", ", or set plots=false to skip it without "
                                   "this note")
    return callbacks


def build_loggers(cfg: DictConfig, run_dir: Path) -> list[Callback]:
    """The picks of the ``logger`` group, each built by the ``_target_`` its section names.

    Each section of ``cfg.logger`` (``csv:``, ``mlflow:``, a user's own ``mine:``) names a
    callable with ``_target_``; it is called with the section's other keys plus
    ``run_dir`` (the run directory) and ``config`` (the resolved run config as plain dicts)
    and returns a :class:`~beyondfit.core.callbacks.Callback`. A tracker
    (:class:`~beyondfit.observers.tracking.ExperimentTracker`) is left open at the end of
    training: :func:`beyondfit.cli.run.run` ends it once the task has written its files.
    """
    from hydra.errors import InstantiationException

    from beyondfit.cli.targets import instantiate_section
    from beyondfit.observers.tracking import ExperimentTracker

    loggers = cfg.get("logger") or {}
    shipped = available_loggers()
    unknown = sorted(
        k for k, v in loggers.items() if not isinstance(v, DictConfig) or "_target_" not in v
    )
    if unknown:
        raise BeyondfitError(
            f"unknown logger(s) {unknown}; available: {', '.join(shipped)} (pick several "
            "with logger=[csv,tensorboard], add one with +logger=tensorboard; a logger of your "
            "own is a section with a _target_)"
        )
    config = OmegaConf.to_container(cfg, resolve=True)
    built: list[Callback] = []
    for name, section in loggers.items():
        options = OmegaConf.to_container(section, resolve=True)
        assert isinstance(options, dict)
        target = options["_target_"]
        # Built by Hydra's instantiate as every _target_ is (its blocklist refuses os.system and
        # the like; the options are fitted to the signature), as a partial: run_dir and config
        # are given to the call, never instantiated themselves.
        factory = instantiate_section(OmegaConf.create({**options, "_partial_": True}),
                                      f"logger.{name}")
        try:
            inspect.signature(factory).bind(run_dir=run_dir, config=config)
        except TypeError as exc:
            raise BeyondfitError(
                f"logger.{name} options do not fit {target}: {exc} (a logger's _target_ is "
                "called with its options plus run_dir and config)"
            ) from None
        except ValueError:  # no signature to check (a builtin): let the call tell
            pass
        try:
            callback = factory(run_dir=run_dir, config=config)
        except InstantiationException as exc:  # Hydra's policy refused the call itself
            raise BeyondfitError(
                f"cannot build logger.{name} ({target}): {' '.join(str(exc).split())}"
            ) from None
        if not isinstance(callback, Callback):
            raise BeyondfitError(
                f"logger.{name}._target_={target} returned {type(callback).__name__}, not a "
                "beyondfit Callback"
            )
        if isinstance(callback, ExperimentTracker):
            callback.end_at_fit_end = False
        built.append(callback)
    return built


def available_loggers() -> list[str]:
    """The logger group's shipped options."""
    from beyondfit.cli.configs import available

    return available("logger")


def csv_logger(run_dir: Path, config: Mapping[str, Any], file: str = "metrics.csv") -> CsvFile:
    """``logger=csv``: the rows of ``metrics.jsonl`` as one table, ``RUN_DIR/FILE``."""
    return CsvFile(Path(run_dir) / str(file))


def tensorboard_logger(
    run_dir: Path,
    config: Mapping[str, Any],
    dir: str = "tensorboard",
    flush_secs: float = 30,
    hparams: bool = True,
) -> Callback:
    """``logger=tensorboard``: event files in ``RUN_DIR/DIR``, the config as text and HParams."""
    from beyondfit.observers.tensorboard import TensorBoardLogger, flatten

    flat = {k: v for k, v in flatten(config).items() if "_target_" not in k}
    return TensorBoardLogger(
        Path(run_dir) / str(dir),
        hparams=flat if hparams else None,
        config_text=OmegaConf.to_yaml(OmegaConf.create(dict(config))),
        flush_secs=flush_secs,
    )
