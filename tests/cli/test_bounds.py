"""Bounds before allocation (``beyondfit/cli/bounds.py``): sizes that cannot fit the machine's
memory are one line naming the keys, before anything is built; every shipped preset fits."""

from __future__ import annotations

import pytest

from beyondfit import BeyondfitError
from beyondfit.cli import bounds

from kit import cli, one_line_exit_2, task_config

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
