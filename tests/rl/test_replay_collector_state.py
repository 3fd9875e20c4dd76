"""A replay collector's saved state is checked whole before anything changes
(``beyondfit/rl/collect/offpolicy.py`` and the buffer's own ``load_state_dict``): each doctored
entry an adversarial trial re-sealed into a checkpoint is one line naming it, and the collector
it was offered to is left as it was."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.serialization import atomic_save, safe_load
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.nets.agents import OffPolicyAgent

from kit import cli, one_line_exit_2

OPTIONS = dict(total_env_steps=600, learning_starts=50, batch_size=8, seed=3)


def collector() -> ReplayCollector:
    envs = make_vector_env("Pendulum-v1", 2, sync=True)
    agent = OffPolicyAgent(envs.single_observation_space, envs.single_action_space,
                           hidden=(8,))  # fmt: skip
    return ReplayCollector(envs, agent, **OPTIONS)


@pytest.fixture(scope="module")
def saved() -> dict[str, Any]:
    """A state mid-episode, after the buffer's first minibatches."""
    data = collector()
    it = iter(data)
    for _ in range(133):
        next(it)
    return data.state_dict()


def doctor(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        *path, last = key.split(".")
        target = state
        for part in path:
            target = target[part] if not part.isdigit() else target[int(part)]
        target[int(last) if last.isdigit() else last] = value
    return change


CASES = [
    ("buffer.position", 500, r"^buffer\.position=500 does not follow buffer\.added=184: "
                             r"transitions are written in order, wrapping at 600"),
    ("buffer.position", 900, r"^buffer\.position=900 is not a whole number in \[0, 600\]"),
    ("buffer.size", 10**9, r"^buffer\.size=1000000000 is not a whole number in \[0, 600\]"),
    ("buffer.size", 183, r"^buffer\.size=183 is not 184, the transitions 184 stored leave"),
    ("buffer.added", 185, r"^buffer\.added=185 is not a whole number in \[0, 184\]"),
    ("buffer.capacity", 1000, r"^buffer\.capacity=1000 is not this buffer's 600"),
    ("buffer.layout.obs_shape", [4], r"^buffer\.layout=.* holds other transitions than this "
                                    r"env's"),
    ("buffer.fields.rewards", torch.zeros(184, dtype=torch.float64),
     r"^buffer\.rewards \(184,\) torch\.float64 is not 184 transitions of \(\) torch\.float32"),
    ("buffer.fields.obs", torch.zeros(10, 3), r"^buffer\.obs \(10, 3\) torch\.float32 is not "
                                              r"184 transitions of \(3,\)"),
    ("buffer.fields", {"obs": torch.zeros(184, 3)}, r"^buffer\.fields holds \['obs'\], not"),
    ("env_steps", -4, r"^env_steps=-4 is not a whole number in \[0, 600\]"),
    ("env_steps", 10**12, r"^env_steps=1000000000000 is not a whole number in \[0, 600\]"),
    ("yielded", 10**6, r"^yielded=1000000 is not a whole number in \[0, 134\]"),
    ("buffer", None, r"^buffer=None is not the replay buffer's state \(a mapping\)"),
    ("generator", torch.zeros(7, dtype=torch.uint8),
     r"^generator=a tensor of shape \(7,\) is not the state of a torch generator"),
    ("episode_rng.0", {"bit_generator": "PCG64", "state": "no"},
     r"^episode_rng\[0\] is not a state of env copy 0's random generator"),
    ("next_rng", None, r"^next_rng is not a list of 2 entries"),
    ("obs", torch.zeros(3, 3),
     r"^obs=a tensor of shape \(3, 3\) is not a finite tensor of shape \(2, 3\)"),
    ("prev_done", [False], r"^prev_done=\[False\] is not a list of 2 entries"),
    ("ep_length", [1, -1], r"^ep_length=\[1, -1\] is not a list of 2 entries"),
    ("finished", ["a", 0, 0], r"^finished=\['a', 0, 0\] is not \[episodes"),
    ("episode_actions.0", torch.full((83, 1), 99.0), r"^episode_actions\[0\] holds actions "
                                                     r"outside the env's action space"),
    ("episode_actions.1", torch.zeros(5, 1), r"^episode_actions\[1\] holds 5 actions, but its "
                                             r"episode has run 92 steps"),
]


@pytest.mark.parametrize(("key", "value", "message"), CASES,
                         ids=[f"{k}={v!r}"[:40] for k, v, _ in CASES])
def test_a_doctored_entry_is_one_line_and_changes_nothing(saved: dict[str, Any], key: str,
                                                          value: Any, message: str) -> None:
    state = copy.deepcopy(saved)
    doctor(key, value)(state)
    data = collector()
    before = data.state_dict()
    with pytest.raises(BeyondfitError, match=message) as info:
        data.load_state_dict(state)
    assert "\n" not in str(info.value)
    assert data.env_steps == 0 and data.buffer.size == 0
    assert data.state_dict().keys() == before.keys()


@pytest.mark.parametrize("field", ["obs", "next_obs", "rewards", "actions"])
def test_values_that_are_not_finite_are_refused(saved: dict[str, Any], field: str) -> None:
    state = copy.deepcopy(saved)
    state["buffer"]["fields"][field][7] = float("nan")
    with pytest.raises(BeyondfitError, match=rf"^buffer\.{field} holds values that are not "
                                             "finite"):
        collector().load_state_dict(state)


# Issue 47: a re-sealed buffer's fields were not checked against the spaces. An action index of
# 5 on CartPole's 2 actions was a 76-line traceback from gather; terminated=7 trained silently.
@pytest.fixture(scope="module")
def dqn_saved() -> dict[str, Any]:
    data = dqn_collector()
    it = iter(data)
    for _ in range(20):
        next(it)
    return data.state_dict()


def dqn_collector() -> ReplayCollector:
    from beyondfit.rl.nets.agents import QAgent

    envs = make_vector_env("CartPole-v1", 2, sync=True)
    agent = QAgent(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    return ReplayCollector(envs, agent, **OPTIONS)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("actions", 5, r"^buffer\.actions holds 5 at transition 7: not an action index of this "
                   r"env's 2 actions \(0 to 1\)$"),
    ("actions", -1, r"^buffer\.actions holds -1 at transition 7: not an action index"),
    ("terminated", 7.0, r"^buffer\.terminated holds 7\.0 at transition 7: a done flag is 0 "
                        r"or 1$"),
    ("truncated", 0.5, r"^buffer\.truncated holds 0\.5 at transition 7: a done flag is 0 or 1$"),
])
def test_a_stored_action_or_done_flag_outside_the_spaces_is_one_line(
        dqn_saved: dict[str, Any], field: str, value: float, message: str) -> None:  # fmt: skip
    state = copy.deepcopy(dqn_saved)
    state["buffer"]["fields"][field][7] = value
    data = dqn_collector()
    with pytest.raises(BeyondfitError, match=message):
        data.load_state_dict(state)
    assert data.env_steps == 0 and data.buffer.size == 0
    data.load_state_dict(copy.deepcopy(dqn_saved))  # the untouched state loads
    assert data.buffer.size == dqn_saved["buffer"]["size"]


def test_a_box_action_outside_minus_one_to_one_is_one_line(saved: dict[str, Any]) -> None:
    state = copy.deepcopy(saved)
    state["buffer"]["fields"]["actions"][7, 0] = 1.5
    with pytest.raises(BeyondfitError, match=r"^buffer\.actions holds \[1\.5\] at transition 7: "
                                             r"not an action scaled to \[-1, 1\]$"):
        collector().load_state_dict(state)


def test_the_saved_state_itself_loads(saved: dict[str, Any]) -> None:
    data = collector()
    data.load_state_dict(copy.deepcopy(saved))
    assert data.env_steps == saved["env_steps"] and data.buffer.size == 184


@pytest.mark.e2e
def test_resuming_a_doctored_checkpoint_is_one_line_exit_2_and_the_file_untouched(
        tmp_path: Path) -> None:  # fmt: skip
    tiny = ["+task=pendulum", "algo=sac", "task.total_env_steps=300", "task.hidden=[8]",
            "task.replay.learning_starts=100", "task.eval_every_env_steps=100000",
            "task.eval_episodes=1", "task.confirm_episodes=0", "checkpoint.every=50",
            "device=cpu", "progress.bar=false", "plots=false", "train.max_steps=120"]
    run = tmp_path / "run"
    done = cli(*tiny, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = sorted((run / "checkpoints").glob("step-*.pt"))[-1:]
    state = safe_load(path)
    state["data"]["buffer"]["position"] = 10_000
    atomic_save(state, path)  # re-sealed: its checksum is right, its content is not
    written = path.read_bytes()
    done = cli(*tiny, f"hydra.run.dir={run}", f"resume={run}", "resume_extend=true",
               "train.max_steps=200", cwd=tmp_path)
    one_line_exit_2(done, "cannot be restored, nothing was changed: data: buffer.position=10000")
    assert path.read_bytes() == written


def test_resuming_with_a_smaller_budget_names_the_budget(saved: dict[str, Any]) -> None:
    envs = make_vector_env("Pendulum-v1", 2, sync=True)
    agent = OffPolicyAgent(envs.single_observation_space, envs.single_action_space, hidden=(8,))
    smaller = ReplayCollector(envs, agent, **{**OPTIONS, "total_env_steps": 150})
    with pytest.raises(BeyondfitError, match=r"^env_steps=184 is not a whole number in \[0, 150\] "
                                             r"\(this run's task.total_env_steps\): resume with "
                                             r"the run's own budget"):
        smaller.load_state_dict(copy.deepcopy(saved))
