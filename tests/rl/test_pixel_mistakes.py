"""The pixel trial's mistakes, each one line (issue 59): ALE's v4 ids found as CleanRL and SB3
name them, a frame stack bounded before it is allocated, a shift listed twice."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from beyondfit import BeyondfitError
from beyondfit.rl.algos.auxiliary import resolve
from beyondfit.rl.envs.vector import MAX_STACK, env_spec, make_vector_env

pytest.importorskip("ale_py")


def test_ales_v4_ids_are_known_without_importing_ale_py_first() -> None:
    assert env_spec("BreakoutNoFrameskip-v4").id == "BreakoutNoFrameskip-v4"
    with pytest.raises(BeyondfitError, match=r"unknown Gymnasium env id task\.env='Nope-v4'"):
        env_spec("Nope-v4")


@pytest.mark.parametrize("size", [0, -1, MAX_STACK + 1, 1_000_000, 2.5, "4"])
def test_a_frame_stack_out_of_bounds_is_one_line_before_any_env_is_made(size) -> None:
    stack = functools.partial(gym.wrappers.FrameStackObservation, stack_size=size)
    with pytest.raises(BeyondfitError, match=rf"task\.wrappers\[0\]\.stack_size={size!r}") as info:
        make_vector_env("CartPole-v1", 2, [stack])
    assert "\n" not in str(info.value) and "task.wrappers.0.stack_size=4" in str(info.value)
    envs = make_vector_env("CartPole-v1", 2, [functools.partial(
        gym.wrappers.FrameStackObservation, stack_size=MAX_STACK)])
    assert envs.single_observation_space.shape == (MAX_STACK, 4)
    envs.close()


def test_a_shift_listed_twice_is_refused() -> None:
    board = gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)
    with pytest.raises(BeyondfitError, match=r"task\.aux lists shift twice"):
        resolve(["shift", "shift"], None, board, gym.spaces.Discrete(3))
