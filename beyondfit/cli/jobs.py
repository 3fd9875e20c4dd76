"""The jobs of a launch: under torchrun one config and one run directory, which rank 0
composes and the others follow; in a multirun sweep, each job failing alone."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from beyondfit.distributed.environ import launch_env

#: The jobs of this multirun sweep that failed: "job N (OVERRIDES): LINE".
FAILED_JOBS: list[str] = []


def world_size() -> int:
    """Processes in this launch (1 outside torchrun), read from the environment: rank 0
    asks before it runs Hydra, and a one-process run never imports torch."""
    env = launch_env()
    return 1 if env is None else env.world_size


def _strategy() -> Any:
    from beyondfit.distributed.connector import process_strategy  # torch: only with several ranks

    return process_strategy()


def share_job(cfg: Any, run_dir: str) -> tuple[Any, str]:
    """On rank 0 of a multi-process launch, send the composed config and run directory to the
    other ranks (waiting in :func:`follow_jobs`); everywhere return what all ranks will use.

    The config is resolved once, here: ``${now:...}`` and ``${hydra:...}`` mean the same on
    every rank (hydra #2070), and only rank 0 ever ran Hydra or made a directory.
    """
    if world_size() == 1:
        return cfg, run_dir
    from omegaconf import OmegaConf

    strategy = _strategy()

    container = OmegaConf.to_container(cfg, resolve=True)
    strategy.broadcast({"cfg": container, "run_dir": str(run_dir)})
    return OmegaConf.create(container), str(run_dir)


def end_jobs() -> None:
    """Rank 0 tells the waiting ranks that there are no more jobs."""
    if world_size() > 1:
        _strategy().broadcast(None)


def follow_jobs(run_job: Callable[[Any, str], Any]) -> int:
    """Non-zero ranks: run each job rank 0 shares, until it says there are none; returns the
    number run. A Hydra multirun under torchrun is a sequence of such jobs."""
    from omegaconf import OmegaConf

    strategy = _strategy()
    done = 0
    while True:
        job = strategy.broadcast(None)  # rank 0's next job
        if job is None:
            return done
        run_job(OmegaConf.create(job["cfg"]), job["run_dir"])
        done += 1


def job_failed(message: str) -> bool:
    """In a grid multirun sweep (one process), record a failed job and print its one line;
    True when the sweep should go on with its next job. False for a single run, where the
    caller exits at once, and under torchrun, where every rank must stop together."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN or world_size() > 1:
        return False
    job = f"job {hydra_cfg.job.num} ({' '.join(hydra_cfg.overrides.task)})"
    FAILED_JOBS.append(f"{job}: {message}")
    print(f"beyondfit: error: {job} failed: {message}", file=sys.stderr)
    return True


def end_sweep() -> None:
    """After a multirun: if jobs failed, list them on stderr and exit with status 2."""
    if FAILED_JOBS:
        print(f"beyondfit: error: {len(FAILED_JOBS)} job(s) of the sweep failed (the others "
              "ran): " + "; ".join(FAILED_JOBS), file=sys.stderr)
        sys.exit(2)
