"""The command line: ``python -m beyondfit +task=NAME [key=value ...]`` (also ``beyondfit``).

Hydra composes the config; :func:`beyondfit.cli.run.run` does the rest. Mistakes a user can
make come out as one line on stderr and exit status 2, never a traceback.

Up to the job itself all is torch-free: ``--help``, a misspelt task or a bad override answer
at once; torch loads only for a run (``tests/cli/test_startup.py`` holds this).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shlex
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from beyondfit.cli.bounds import out_of_memory_line
from beyondfit.cli.choices import (
    INFO_FLAGS,
    check_choices,
    fail,
    tuned_line,
    user_config_dirs,
)
from beyondfit.cli.configs import CONF_DIR
from beyondfit.cli.fastpath import compose_once, groups_listed_once
from beyondfit.cli.interpolation import check_interpolations
from beyondfit.cli.jobs import end_jobs, end_sweep, job_failed, share_job
from beyondfit.cli.rundir import RunDirRefused, os_error_line
from beyondfit.cli.schema import config_error_line
from beyondfit.core.errors import BeyondfitError, one_line_warning
from beyondfit.distributed.environ import launch_env


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def _app(cfg: DictConfig) -> float | None:
    """One job; in a search (an optimizing sweeper such as Optuna's), return its objective.

    A value that fails only when the job reads it (an interpolation that cannot resolve, a
    resolver that raises, a value of the wrong type) is one line naming the key here, before
    Hydra's "Error executing job" line; in a grid sweep that job fails alone.
    """
    from omegaconf.errors import OmegaConfBaseException

    try:
        check_interpolations(cfg)
    except BeyondfitError as exc:
        if not job_failed(str(exc)):
            fail(str(exc))
        return None
    try:
        return _job(cfg)
    except OmegaConfBaseException as exc:
        line = config_error_line(exc) or " ".join(str(exc).split())
        if not job_failed(line):
            fail(line)
        return None


def _job(cfg: DictConfig) -> float | None:
    # The job itself: torch loads from here on (the modules above do not import it).
    from beyondfit.checkpoint.interrupt import TrainingInterrupted
    from beyondfit.cli.result import read_result
    from beyondfit.cli.run import objective, objective_settings, run, worst_objective

    # Under torchrun, rank 0 (the only one running Hydra) sends this job to the others.
    cfg, run_dir = share_job(cfg, HydraConfig.get().runtime.output_dir)
    # Never silently untuned: which preset applied, or that none did (the RL tasks).
    tuned = tuned_line(HydraConfig.get().runtime.choices, user_config_dirs(sys.argv[1:]))
    if tuned is not None:
        logging.getLogger("beyondfit").info("%s", tuned)
    search = searching()
    mode = "min"
    if search:  # a mistake here would fail every trial alike: stop the search at once
        try:
            _, mode = objective_settings(cfg)
            check_direction(mode)
        except BeyondfitError as exc:
            fail(str(exc))
    try:
        history = run(cfg, run_dir)
    except BeyondfitError as exc:
        if not search:
            if job_failed(str(exc)):  # a grid sweep: this job fails alone, the sweep goes on
                return None
            fail(str(exc))
        # A trial that diverged or whose sampled settings do not work: the search goes on.
        print(f"beyondfit: trial failed, scored {worst_objective(mode)}: {exc}", file=sys.stderr)
        return worst_objective(mode)
    except (OSError, RuntimeError, MemoryError) as exc:  # a full disk, a blocked path, no memory
        line = os_error_line(exc) if isinstance(exc, OSError) else out_of_memory_line(exc)
        if line is None:
            return _user_code_failed(exc, cfg)
        if not job_failed(line):
            fail(line)
        return None
    except TrainingInterrupted as exc:
        print(f"beyondfit: {exc}", file=sys.stderr)
        if exc.checkpoint is not None:
            print(f"beyondfit: resume with: {resume_command(exc.checkpoint)}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        # A signal outside training (after "stopped early", before a refit, in the report):
        # the run has checkpoints by then, so say which and how to go on, as a stop in
        # training does.
        from beyondfit.checkpoint import step_checkpoints

        saved = step_checkpoints(Path(run_dir) / "checkpoints")
        if not saved:
            raise
        name = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
        print(f"\nbeyondfit: interrupted ({name}) after training; its last checkpoint: "
              f"{saved[0]}", file=sys.stderr)
        print(f"beyondfit: resume with: {resume_command(saved[0])}", file=sys.stderr)
        sys.exit(143 if name == "SIGTERM" else 130)
    except Exception as exc:  # raised in the user's code (a loss closure, data), or a bug of ours
        return _user_code_failed(exc, cfg)
    return objective(cfg, history, read_result(run_dir)) if search else None


def _user_code_failed(exc: Exception, cfg: DictConfig, sweep: bool = True) -> None:
    """An exception from the user's own code while the run trained (a loss closure, a data
    iterable): the error line and the user's frames, not the package's; the process then exits
    with 2 (a grid sweep goes on with its next job; ``sweep=False``: a torchrun rank that runs
    no Hydra). Re-raised when no frame is the user's (a bug of ours: the whole traceback), or
    with ``HYDRA_FULL_ERROR=1``."""
    report = None if _WANTS_TRACEBACKS else user_code_error(exc, cfg)
    if report is None:
        raise exc
    line, frames = report
    if sweep and job_failed(line):
        print(frames, file=sys.stderr)
        return None
    print(f"beyondfit: error: {line}\n{frames}", file=sys.stderr)
    sys.exit(2)


#: At most this many of the user's frames are shown (the innermost ones).
_FRAMES_SHOWN = 8


def user_code_error(exc: BaseException, cfg: DictConfig | None = None) -> tuple[str, str] | None:
    """``(line, frames)`` for an exception raised in (or through) the user's own code, as the
    errors of a ``_target_`` that raised while it was built say it
    (:func:`beyondfit.cli.targets.instantiate_section`): ``KEY (TARGET) raised TYPE: MESSAGE
    (at FILE:LINE)``, the key being the config's ``_target_`` whose module holds the innermost
    of the user's frames; ``frames``: those frames, innermost last, one line of source each.
    ``None`` when no frame is the user's: no file of beyondfit, of an installed package, of
    Python's own library, or of no file (``<string>``)."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _users(f.filename)]
    if not frames:
        return None
    last = frames[-1]
    where = f"{Path(last.filename).name}:{last.lineno}"
    message = " ".join(str(exc).split()) or "(no message)"
    if len(message) > 300:
        message = message[:300] + "..."
    owner = _target_of(last.filename, cfg)
    who = f"{owner[0]} ({owner[1]})" if owner else "your code"
    line = f"{who} raised {type(exc).__name__}: {message} (at {where} in {last.name})"
    shown = [f"  {f.filename}:{f.lineno} in {f.name}" + (f": {f.line.strip()}" if f.line else "")
             for f in frames[-_FRAMES_SHOWN:]]
    more = len(frames) - _FRAMES_SHOWN
    head = "  your code, innermost last" + (f" ({more} outer frames left out)" if more > 0
                                            else "")
    return line, "\n".join([f"{head} (HYDRA_FULL_ERROR=1: the whole traceback):", *shown])


def _users(filename: str) -> bool:
    """Whether a frame's file is the user's: not beyondfit's, an installed package's or the
    standard library's, and a file (not ``<string>``, ``<frozen runpy>``)."""
    import sysconfig

    if filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    package = os.path.realpath(Path(__file__).resolve().parent.parent)
    libraries = {os.path.realpath(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
                 if (p := sysconfig.get_paths().get(key))}
    if any(path.startswith(folder + os.sep) for folder in (package, *libraries)):
        return False
    return "site-packages" not in path and "dist-packages" not in path


def _target_of(filename: str, cfg: DictConfig | None) -> tuple[str, str] | None:
    """``(key, target)`` of the most specific ``_target_`` under ``task`` whose module is the
    file ``filename`` (``task.loss``, ``mymod.cql_dqn``)."""
    from omegaconf import ListConfig

    found: list[tuple[str, str]] = []

    def walk(node: object, key: str) -> None:
        if isinstance(node, DictConfig):
            target = node.get("_target_") if "_target_" in node else None
            if isinstance(target, str):
                module = sys.modules.get(target.rpartition(".")[0])
                path = getattr(module, "__file__", None)
                if path and os.path.realpath(path) == os.path.realpath(filename):
                    found.append((key, target))
            for name in node:
                walk(node._get_node(name), f"{key}.{name}")
        elif isinstance(node, ListConfig):
            for i in range(len(node)):
                walk(node._get_node(i), f"{key}[{i}]")

    try:
        walk(cfg.get("task") if cfg is not None else None, "task")
    except Exception:  # an interpolation that cannot resolve: the line names no key
        return None
    return max(found, key=lambda kt: kt[0].count(".")) if found else None


def searching() -> bool:
    """True in a multirun whose sweeper optimizes a returned value (not the grid sweeper)."""
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    target = str((hydra_cfg.sweeper or {}).get("_target_", ""))
    return hydra_cfg.mode == RunMode.MULTIRUN and not target.endswith(".BasicSweeper")


def check_direction(mode: str) -> None:
    """A sweeper's ``direction`` (Optuna's) must agree with ``objective.mode``."""
    direction = HydraConfig.get().sweeper.get("direction")
    wanted = {"min": "minimize", "max": "maximize"}[mode]
    if isinstance(direction, str) and direction.lower() != wanted:
        raise BeyondfitError(
            f"hydra.sweeper.direction={direction} but objective.mode={mode}; set "
            f"hydra.sweeper.direction={wanted} (or objective.mode to match)"
        )


def resume_command(checkpoint: Path) -> str:
    """This run's command line with ``resume=`` pointing at its run directory."""
    from beyondfit.checkpoint.resume import resume_run_dir

    target = resume_run_dir(checkpoint) or checkpoint
    args = [
        a for a in HydraConfig.get().overrides.task if a.partition("=")[0].lstrip("+") != "resume"
    ]
    mine = config_dir_args(sys.argv[1:])  # a task of one's own is found there again
    return shlex.join(["python", "-m", "beyondfit", *mine, *args, f"resume={target}"])


def config_dir_args(args: list[str]) -> list[str]:
    """The arguments that add config directories (``--config-dir DIR``, ``-cd DIR``,
    ``hydra.searchpath=[...]``), as given, with relative paths made absolute."""
    kept: list[str] = []
    for i, arg in enumerate(args):
        flag, sep, value = arg.partition("=")
        if flag in ("--config-dir", "-cd"):
            if not sep:
                value = args[i + 1] if i + 1 < len(args) else ""
            kept += ["--config-dir", str(Path(value).expanduser().absolute())]
        elif flag.lstrip("+") == "hydra.searchpath":
            kept.append(arg)
    return kept


@dataclass(frozen=True)
class ResumeArgs:
    """What the command line's arguments say about resuming, read once from argv (Hydra has
    not composed anything yet): ``resume=``, ``resume_extend=``, and an explicit
    ``hydra.run.dir=`` or ``hydra.output_subdir=``."""

    resume: str | None = None
    extend: bool = False
    run_dir: Path | None = None
    placed: bool = False  # hydra.run.dir or hydra.output_subdir given: leave them be

    @classmethod
    def read(cls, args: list[str]) -> ResumeArgs:
        """The last value of each key, quotes stripped; ``resume=null`` or empty: none."""
        resume, extend, run_dir, placed = None, False, None, False
        for arg in args:
            key, sep, value = arg.partition("=")
            key, value = key.lstrip("+"), value.strip().strip("'\"")
            if not sep:
                continue
            if key == "resume":
                resume = None if value in ("", "null") else value
            elif key == "resume_extend":
                extend = value.lower() == "true"
            elif key in ("hydra.run.dir", "hydra.output_subdir"):
                placed = True
                if key == "hydra.run.dir":
                    run_dir = Path(value)
        return cls(resume, extend, run_dir, placed)


def resume_overrides(request: ResumeArgs) -> list[str]:
    """Hydra overrides that make ``resume=RUN`` continue inside that run's directory.

    The resumed run appends to the run's metrics file and checkpoints; Hydra's record of
    this invocation goes to ``.hydra/resume/``, keeping the original ``.hydra/``. An
    explicit ``hydra.run.dir=`` wins.
    """
    if request.resume is None or request.placed:
        return []
    from beyondfit.checkpoint.resume import resume_run_dir  # a resumed run loads torch anyway

    run_dir = resume_run_dir(request.resume)
    if run_dir is None or not run_dir.is_dir():
        return []  # a loose checkpoint file: a fresh run directory, as usual
    text = str(run_dir)
    if not re.fullmatch(r"[\w/.\-:+@%~]+", text):
        text = "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return [f"hydra.run.dir={text}", "hydra.output_subdir=.hydra/resume"]


def finished_resume(request: ResumeArgs, args: list[str]) -> bool:
    """``resume=RUN_DIR`` of a run that finished, without ``resume_extend=true``: say so (one
    line, exit 0) before Hydra writes anything, so that the run directory stays as it was."""
    if request.resume is None or any(a in INFO_FLAGS or a.startswith("--cfg") for a in args):
        return False
    from beyondfit.cli.result import already_finished  # loads torch

    finished = already_finished(request.resume, request.extend, request.run_dir)
    if finished is not None:
        print(f"beyondfit: {finished}")
    return finished is not None


def _follow(cfg: DictConfig, run_dir: str) -> None:
    """A non-zero torchrun rank: run the job rank 0 composed, in rank 0's run directory."""
    from beyondfit.checkpoint.interrupt import TrainingInterrupted
    from beyondfit.cli.run import run

    try:
        run(cfg, run_dir)
    except BeyondfitError as exc:
        fail(str(exc))
    except (OSError, RuntimeError, MemoryError) as exc:
        line = os_error_line(exc) if isinstance(exc, OSError) else out_of_memory_line(exc)
        if line is None:
            _user_code_failed(exc, cfg, sweep=False)
        fail(line)
    except TrainingInterrupted as exc:
        sys.exit(exc.exit_code)  # rank 0 prints where the checkpoint is
    except Exception as exc:
        _user_code_failed(exc, cfg, sweep=False)


def open_update_names(args: list[str]) -> list[str]:
    """``task.optimizers.NAME.KEY=VALUE`` as typed, for any update ``NAME``: an algorithm of
    one's own declares names no config file lists (``critic2``), so Hydra, which overrides only
    keys that exist, would want ``+`` for a new one and refuse it for an existing one. Both
    become ``++`` (add or override); the off-policy task refuses a name its loss lacks."""
    opened = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+").startswith("task.optimizers.") and not key.startswith("++"):
            arg = f"++{key.lstrip('+')}={value}"
        opened.append(arg)
    return opened


def resolve_flag(args: list[str]) -> list[str]:
    """``["--resolve"]`` when ``--cfg`` is asked for without it: show values, not ``${seed}``."""
    asks_cfg = any(a in ("--cfg", "-c") or a.startswith("--cfg=") for a in args)
    return ["--resolve"] if asks_cfg and "--resolve" not in args else []


def main() -> None:
    """Console-script entry point (``beyondfit``) and ``python -m beyondfit``.

    ``beyondfit new NAME`` is the scaffold (:mod:`beyondfit.new`); anything else is a run.
    Ctrl-C anywhere outside training (start-up, composing, building the task) ends with one
    line and status 130; during training it checkpoints first (GracefulInterrupt).
    """
    try:
        # Until now SIGINT exited at once (beyondfit/__main__.py); from here it raises
        # KeyboardInterrupt, caught below. Switched inside the try: a Ctrl-C that lands
        # while the handler is being switched is caught too.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
            # The last atexit hook (atexit runs the first registered last) ignores SIGINT:
            # Python's finalization then puts SIG_DFL back for a Python handler, and a Ctrl-C
            # landing after that killed the process (status -2, not 130). Ignored stays ignored.
            atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
            # SIGTERM outside training (start-up, the report after the last epoch) would end
            # the process without a word; during training GracefulInterrupt takes it over.
            signal.signal(signal.SIGTERM, _terminated)
        _main()
    except KeyboardInterrupt as exc:
        interrupted("SIGTERM" if isinstance(exc, Terminated) else "SIGINT")
    finally:
        # Done, failed or interrupted: a Ctrl-C while Python shuts down (atexit hooks, torch's
        # finalizers) exits with 130 at once instead of a traceback from inside them.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, lambda *_: os._exit(130))


class Terminated(KeyboardInterrupt):
    """SIGTERM outside training: ends the run as Ctrl-C does there (cleanups run), with 143."""

    signal_name, exit_code = "SIGTERM", 143  # read where a phase turns it into its own stop


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


def interrupted(name: str = "SIGINT") -> None:
    """The one line and exit status (130, or 143 for SIGTERM) of a signal outside training."""
    code = 143 if name == "SIGTERM" else 130
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second one: at once
            signal.signal(signum, lambda *_: os._exit(code))
    print(f"\nbeyondfit: interrupted ({name})", file=sys.stderr)
    sys.exit(code)


def _main() -> None:
    if sys.argv[1:2] == ["new"]:  # never a Hydra override: those have an "="
        from beyondfit.cli.scaffold import main as scaffold

        scaffold(sys.argv[2:], prog="beyondfit new")
        return
    # A task's _target_ (mymod.build) is a module of the launch directory: importable through
    # the console script too, whose sys.path starts with its own bin directory instead.
    warnings.formatwarning = one_line_warning  # e.g. Gymnasium's env checker, then an error
    launch_dir = os.getcwd()
    if launch_dir not in sys.path:
        sys.path.insert(0, launch_dir)
    check_choices(sys.argv[1:])
    sys.argv[1:] = open_update_names(sys.argv[1:])
    request = ResumeArgs.read(sys.argv[1:])  # the one reading of resume= from argv
    if finished_resume(request, sys.argv[1:]):
        return
    sys.argv += resume_overrides(request)
    sys.argv += resolve_flag(sys.argv[1:])
    try:
        env = launch_env()
    except BeyondfitError as exc:
        fail(str(exc))
    if env is not None and env.world_size > 1:
        # torchrun started one copy of this per rank. Compose once: rank 0 alone runs Hydra
        # (one run directory, one .hydra/, one log) and sends every job to the others.
        from beyondfit.cli.jobs import follow_jobs
        from beyondfit.distributed.connector import process_strategy
        from beyondfit.distributed.launch import init_process_group, shutdown

        init_process_group(env)
        if not process_strategy().is_main:
            follow_jobs(_follow)
            shutdown()
            leave_process(0)
    try:
        with (compose_once(sys.argv[1:], user_config_dirs(sys.argv[1:])),
              groups_listed_once(sys.argv[1:])):
            run_hydra(_app)
    except SystemExit as exc:
        # Hydra reports its own config errors (bad override, unknown key) with status 1.
        if exc.code == 1:
            sys.exit(2)
        raise
    end_jobs()  # no more jobs: the other ranks return (no-op in one process)
    if "torch.distributed" in sys.modules:  # never imported: no process group to leave
        from beyondfit.distributed.launch import shutdown

        shutdown()
    if env is None or env.world_size == 1:
        end_sweep()  # a sweep with failed jobs lists them and exits non-zero
        return
    try:
        end_sweep()
    except SystemExit as exc:
        leave_process(exc.code if isinstance(exc.code, int) else 1)
    leave_process(0)


def leave_process(code: int) -> None:
    """End one torchrun rank: the atexit hooks (logging, trackers), then ``os._exit``.

    Python's own exit would go on to destroy gloo's C++ threads, which now and then aborted the
    process ("terminate called without an active exception", SIGABRT) after a run that had
    finished and written everything, and torchrun then reported the run failed.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


#: Whether the user set HYDRA_FULL_ERROR=1 (then every error is the whole traceback).
_WANTS_TRACEBACKS = False


def run_hydra(app: Callable[[], None]) -> None:
    """Run the Hydra app with its errors raised, not printed, and print each as one line.

    Hydra prints a config error as several lines (and a job's exception as "Error executing
    job" with a traceback); with HYDRA_FULL_ERROR=1 it raises them instead, so that the bad
    key can be named in one line here. A user who set HYDRA_FULL_ERROR=1 gets tracebacks.
    """
    global _WANTS_TRACEBACKS
    wants_tracebacks = _WANTS_TRACEBACKS = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        app()
    except RunDirRefused as exc:  # held by another run, or not writable
        error = exc.error
        fail(os_error_line(error) if isinstance(error, OSError) else str(error))
    except Exception as exc:
        if wants_tracebacks:
            raise
        os_error = _os_error_in(exc)
        if os_error is not None:  # Hydra could not create the run dir, its log or .hydra/
            fail(os_error_line(os_error))
        line = config_error_line(exc)
        if line is None:
            raise
        fail(line)
    finally:
        if not wants_tracebacks:
            os.environ.pop("HYDRA_FULL_ERROR", None)


def _os_error_in(exc: BaseException) -> OSError | None:
    seen: BaseException | None = exc
    for _ in range(5):
        if isinstance(seen, OSError):
            return seen
        if seen is None:
            return None
        seen = seen.__cause__ or seen.__context__
    return None


if __name__ == "__main__":
    main()
