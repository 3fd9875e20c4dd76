"""Bounds before allocation (``beyondfit/cli/bounds.py``): sizes that cannot fit the machine's
memory are one line naming the keys, before anything is built; every shipped preset fits."""

from __future__ import annotations

import pytest

from beyondfit import BeyondfitError
from beyondfit.cli import bounds

from kit import cli, cli_batch, one_line_exit_2, task_config

GB = 10**9

SHIPPED = [("regression", ()), ("autoencoder", ()), ("classification", ()),
           ("cartpole", ()), ("acrobot", ()), ("lunarlander", ()), ("hopper", ()),
           ("halfcheetah", ()), ("pendulum", ("algo=sac",)), ("pendulum", ("algo=td3",)),
           ("cartpole", ("algo=dqn",)), ("cartpole", ("algo=a2c",)),
           ("hopper", ("algo=sac", "task.total_env_steps=50000"))]


@pytest.mark.parametrize(("task", "overrides"), SHIPPED, ids=[f"{t} {' '.join(o)}".strip()
                                                             for t, o in SHIPPED])
def test_every_shipped_preset_fits_in_two_gigabytes(monkeypatch: pytest.MonkeyPatch, task: str,
                                                    overrides: tuple[str, ...]) -> None:
    monkeypatch.setattr(bounds, "machine_memory", lambda device: (2 * GB, "this machine"))
    bounds.check_sizes(task_config(task, *overrides).task)


@pytest.mark.parametrize(("overrides", "names"), [
    (["+task=pendulum", "algo=sac", "task.hidden=[100000000]"],
     "for a batch's activations (task.replay.batch_size=256, task.hidden=[100000000], "
     "task.agent.critics=2)"),
    (["+task=pendulum", "algo=sac", "task.agent.critics=1000000"],
     "for the networks (task.hidden=[128, 128], task.agent.critics=1000000)"),
    (["+task=pendulum", "algo=sac", "task.replay.batch_size=1000000000"],
     "(task.replay.batch_size=1000000000, task.hidden=[128, 128], task.agent.critics=2)"),
    (["+task=cartpole", "task.hidden=[100000000]"],
     "(task.num_envs=8 x task.collector.rollout_steps=64, task.hidden=[100000000])"),
    (["+task=cartpole", "algo=dqn", "task.replay.buffer_size=100000000000",
      "task.total_env_steps=100000000000"],
     "for the replay buffer (task.replay.buffer_size=100000000000)"),
    (["+task=regression", "task.hidden=[100000000,100000000]", "task.batch_size=64"],
     "for the networks (task.hidden=[100000000, 100000000])"),
])
def test_sizes_beyond_the_machine_are_one_line_naming_the_keys(
        monkeypatch: pytest.MonkeyPatch, overrides: list[str], names: str) -> None:  # fmt: skip
    monkeypatch.setattr(bounds, "machine_memory", lambda device: (24 * GB, "this machine"))
    task, *rest = overrides
    with pytest.raises(BeyondfitError, match=r"^this config needs at least [\d,.]+ GB of "
                                             r"memory, more than this machine has \(24\.0 GB\)"
                       ) as info:  # fmt: skip
        bounds.check_sizes(task_config(task.split("=")[1], *rest).task)
    assert names in str(info.value) and str(info.value).endswith("choose smaller values")


def test_the_memory_is_the_rams_within_a_containers_limit() -> None:
    memory, where = bounds.machine_memory("cpu")
    assert where == "this machine" and 10**8 < memory < 10**15


@pytest.mark.e2e
def test_the_command_line_refuses_a_width_before_building_anything(tmp_path) -> None:
    done = cli("+task=pendulum", "algo=sac", "task.hidden=[100000000]", cwd=tmp_path)
    one_line_exit_2(done, "this config needs at least", "task.hidden=[100000000]")
    assert not list((tmp_path / "outputs").rglob("metrics.jsonl"))


def test_the_memory_is_within_this_processs_ulimit_v(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ulimit -v`` below the RAM is the memory a run has: sizes past it are refused before
    anything allocates, naming the limit (issue 29's trial capped its runs so)."""
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: (3 * GB, resource.RLIM_INFINITY))
    assert bounds.machine_memory("cpu") == (3 * GB, "this process (ulimit -v)")
    with pytest.raises(BeyondfitError, match=r"more than this process \(ulimit -v\) has "
                                             r"\(3\.0 GB\): 6\.4 GB for the networks"):
        bounds.check_sizes(task_config("regression", "task.hidden=[20000,20000]").task, "cpu")


ALLOCATOR = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
             "memory: you tried to allocate 1600000000 bytes. Error code 12 (Cannot allocate "
             "memory)")


@pytest.mark.parametrize(("error", "said"), [
    (RuntimeError(ALLOCATOR), "out of memory (an allocation of 1.6 GB was refused): "),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                  "of 7.79 GiB"), "out of memory (an allocation of 2.00 GiB was refused): "),
    (MemoryError(), "out of memory: this config's sizes"),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), None),
    (ValueError("out of memory"), None),
])
def test_an_allocation_the_allocator_refused_is_one_line(error: BaseException,
                                                         said: str | None) -> None:
    line = bounds.out_of_memory_line(error)
    if said is None:
        assert line is None
    else:
        assert line is not None and line.startswith(said) and "\n" not in line
        assert line.endswith("choose smaller values")


#: The command line with the allocator refusing: in the task's build, or in a training step.
REFUSED_ALLOCATION = f"""
import os
import beyondfit.core.engine as engine_module
import beyondfit.nets as nets
def refuse(*args, **kwargs):
    raise RuntimeError({ALLOCATOR!r})
if os.environ.get("REFUSE_IN") == "build":
    nets.WideAndDeep.__init__ = refuse
else:
    engine_module.Engine.train_step = refuse
"""


@pytest.mark.e2e
@pytest.mark.parametrize("where", ["build", "train"])
def test_an_allocation_refused_past_the_bound_is_one_line(
        tmp_path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:  # fmt: skip
    """Sizes the bound lets through can still be more than there is (other processes, a
    ulimit -v): the allocator's refusal, in the task's build or in training, was a traceback
    (issue 29's trial); it is one line, exit 2."""
    monkeypatch.setenv("REFUSE_IN", where)
    (done,) = cli_batch([["+task=regression", "train.epochs=1", "plots=false", "device=cpu",
                          "progress.bar=false", f"hydra.run.dir={tmp_path / 'run'}"]],
                        tmp_path, patch=REFUSED_ALLOCATION)
    stderr = one_line_exit_2(done, "out of memory (an allocation of 1.6 GB was refused): this "
                                   "config's sizes (task.hidden, the batch size")
    assert ("building task (beyondfit.tasks.regression.build) ran out" in stderr) == (
        where == "build")
