"""Mistakes on the command line and in the environment are one line on stderr and exit 2,
naming the key: interpolations that cannot resolve, an empty group or run directory, a thread
count no machine has, WORLD_SIZE without torchrun, a number of envs no memory holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit import cli

pytestmark = pytest.mark.e2e  # every test here starts a command line

CASES = {
    "an env var that is not a seed": (["seed=${oc.env:HOME}"], {},
                                      "seed=${oc.env:HOME}: the interpolation cannot be resolved"),
    "a recursive interpolation": (["seed=${seed}"], {}, "Recursive interpolation detected"),
    "an unset env var": (["optimizer.lr=${oc.env:BF_NO_SUCH_VAR}"], {},
                         "optimizer.lr=${oc.env:BF_NO_SUCH_VAR}: the interpolation cannot"),
    "a resolver that fails": (["+optimizer.extra=${oc.decode:'[1,'}"], {}, "optimizer.extra="),
    "an empty task": (["+task="], {}, "'+task=' names no task; pick one with +task=NAME"),
    "an empty optimizer": (["optimizer="], {}, "'optimizer=' names no optimizer"),
    "threads no machine has": (["threads=100000"], {}, "threads=100000; it must be a whole number"),
    "an empty run directory": (["hydra.run.dir="], {}, "hydra.run.dir is empty"),
    "a quoted empty run directory": (["hydra.run.dir=''"], {}, "hydra.run.dir is empty"),
    "WORLD_SIZE without torchrun": ([], {"WORLD_SIZE": "2", "RANK": "0"},
                                    "MASTER_ADDR and MASTER_PORT not: start the processes with "
                                    "torchrun"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_mistake_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    args, env, words = CASES[case]
    task = [] if any(a.startswith("+task") for a in args) else ["+task=regression"]
    run_dir = [] if any(a.startswith("hydra.run.dir") for a in args) else ["hydra.run.dir=run"]
    done = cli(*task, "train.epochs=1", "plots=false", *run_dir, *args, cwd=tmp_path,
               env={**os.environ, **env})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("beyondfit: error: ")
    assert words in done.stderr, done.stderr
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing in the launch directory


def test_an_interpolation_error_fails_its_sweep_job_alone(tmp_path: Path) -> None:
    done = cli("-m", "+task=regression", "train.epochs=1", "plots=false", "seed=0,${seed}",
               "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert (tmp_path / "sweep" / "0" / "metrics.jsonl").is_file()
    assert "Error executing job" not in done.stderr and "Traceback" not in done.stderr
    assert "job 1 (" in done.stderr and "Recursive interpolation" in done.stderr


def test_num_envs_beyond_any_memory_is_one_line(tmp_path: Path) -> None:
    done = cli("+task=cartpole", "task.num_envs=100000000", "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert "task.num_envs=100000000 must be a whole number from 1 to 65536" in done.stderr
