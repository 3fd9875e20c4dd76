"""One config, one run directory under torchrun: rank 0 composes, the others follow."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from beyondfit.distributed.environ import launch_env


def world_size() -> int:
    """Processes in this launch (1 outside torchrun), read from the environment: rank 0
    asks before it runs Hydra, and a one-process run never imports torch.distributed."""
    env = launch_env()
    return 1 if env is None else env.world_size


def share_job(cfg: Any, run_dir: str) -> tuple[Any, str]:
    """On rank 0 of a multi-process launch, send the composed config and run directory to the
    other ranks (waiting in :func:`follow_jobs`); everywhere return what all ranks will use.

    The config is resolved once, here: ``${now:...}`` and ``${hydra:...}`` mean the same on
    every rank (hydra #2070), and only rank 0 ever ran Hydra or made a directory.
    """
    if world_size() == 1:
        return cfg, run_dir
    import torch.distributed as dist
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=True)
    box = [{"cfg": container, "run_dir": str(run_dir)}]
    dist.broadcast_object_list(box, src=0)
    return OmegaConf.create(container), str(run_dir)


def end_jobs() -> None:
    """Rank 0 tells the waiting ranks that there are no more jobs."""
    if world_size() > 1:
        import torch.distributed as dist

        dist.broadcast_object_list([None], src=0)


def follow_jobs(run_job: Callable[[Any, str], Any]) -> int:
    """Non-zero ranks: run each job rank 0 shares, until it says there are none; returns the
    number run. A Hydra multirun under torchrun is a sequence of such jobs."""
    import torch.distributed as dist
    from omegaconf import OmegaConf

    done = 0
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        job = box[0]
        if job is None:
            return done
        run_job(OmegaConf.create(job["cfg"]), job["run_dir"])
        done += 1
