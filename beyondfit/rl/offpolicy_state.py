"""What a replay collector's saved state must be for this run to continue from it.

:meth:`~beyondfit.rl.offpolicy.ReplayCollector.load_state_dict` calls
:func:`check_replay_state` before it changes anything (the buffer checks its own rows): the
counters within the run's budget, a list per env copy of the run's number of envs, generator and
env RNG states its generators take, replayed actions its action space holds. What fails is one
line naming the entry; the engine's restore puts every part back (whole or nothing).
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state_checks import is_count, is_real

if TYPE_CHECKING:
    from beyondfit.rl.offpolicy import ReplayCollector


def check_replay_state(data: ReplayCollector, state: Any) -> None:
    """Refuse, in one line naming the entry, a saved state ``data`` could not continue from."""

    def fail(key: str, value: Any, want: str) -> BeyondfitError:
        shown = (f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                 else repr(value))
        return BeyondfitError(f"{key}={shown[:57] + '...' if len(shown) > 60 else shown} is "
                              f"not {want}")

    if not isinstance(state, dict):
        raise BeyondfitError(f"a {type(state).__name__}, not the replay collector's mapping")
    steps = state.get("env_steps")
    if not is_count(steps) or steps > data.total_env_steps:
        raise fail("env_steps", steps, f"a whole number in [0, {data.total_env_steps}] (this "
                   "run's task.total_env_steps): resume with the run's own budget")
    owed_then = data._owed(steps)
    if not is_count(state.get("yielded")) or state["yielded"] > owed_then:
        raise fail("yielded", state.get("yielded"), f"a whole number in [0, {owed_then}] (the "
                   f"minibatches due after {steps} env steps)")
    explore = state.get("exploration", {})
    if not isinstance(explore, dict) or not all(
            isinstance(k, str) and is_real(v) and 0 <= v <= 1 for k, v in explore.items()):
        raise fail("exploration", explore, "a mapping of names to numbers in [0, 1]")
    buffer = state.get("buffer")
    stored = min(steps, data.buffer.capacity)
    if not isinstance(buffer, dict) or buffer.get("size") != stored:
        size = buffer.get("size") if isinstance(buffer, dict) else buffer
        raise fail("buffer.size", size, f"{stored}, the rows {steps} env steps leave in a "
                   f"buffer of {data.buffer.capacity}")
    n = data.envs.num_envs
    per_copy = {"prev_done": (lambda v: isinstance(v, bool), "true or false"),
                "ep_return": (lambda v: is_real(v) and math.isfinite(v), "a finite number"),
                "ep_length": (is_count, "a whole number >= 0")}
    for key, (test, want) in per_copy.items():
        value = state.get(key)
        if not isinstance(value, list) or len(value) != n or not all(map(test, value)):
            raise fail(key, value, f"a list of {n} entries (one per env copy), each {want}")
    finished = state.get("finished", [0, 0.0, 0])
    if not (isinstance(finished, list) and len(finished) == 3 and is_count(finished[0])
            and is_real(finished[1]) and math.isfinite(finished[1]) and is_count(finished[2])):
        raise fail("finished", finished, "[episodes, sum of returns, sum of lengths]")
    generator = state.get("generator")
    if generator is not None:
        try:  # a CPU state is tried on a scratch generator; a CUDA one is 16 bytes
            if generator.numel() != 16:
                torch.Generator().set_state(generator)
        except (AttributeError, RuntimeError, TypeError):
            raise fail("generator", generator, "the state of a torch generator") from None
    obs = state.get("obs")
    if obs is None:
        return
    shape = (n, *data.envs.single_observation_space.shape)
    if not isinstance(obs, torch.Tensor) or tuple(obs.shape) != shape or not bool(
            torch.isfinite(obs.float()).all()):
        raise fail("obs", obs, f"a finite tensor of shape {shape}")
    if "episode_rng" in state:
        _check_replay(data, state, n)


def _check_replay(data: ReplayCollector, state: dict[str, Any], n: int) -> None:
    """The envs' replay entries: each RNG state one the copy's generator takes, the actions
    since each episode's start ones its action space holds."""
    if not data._replayable:
        raise BeyondfitError("episode_rng: the checkpoint replays env copies these envs "
                             f"({type(data.envs).__name__}) cannot rebuild")
    space = data.envs.single_action_space
    for key in ("episode_rng", "next_rng", "episode_actions"):
        if not isinstance(state.get(key), list) or len(state[key]) != n:
            raise BeyondfitError(f"{key} is not a list of {n} entries (one per env copy)")
    for i in range(n):
        for key in ("episode_rng", "next_rng"):
            entry = state[key][i]
            if entry is None:
                if key == "next_rng" and state["prev_done"][i]:
                    raise BeyondfitError(f"next_rng[{i}] is missing: env copy {i} ended its "
                                         "episode, and its next one starts from that state")
                continue
            try:
                copy.deepcopy(data.envs.envs[i].unwrapped.np_random.bit_generator).state = entry
            except (TypeError, ValueError, KeyError):
                raise BeyondfitError(f"{key}[{i}] is not a state of env copy {i}'s random "
                                     "generator") from None
        actions = state["episode_actions"][i]
        count = 0 if actions is None else len(actions)
        if actions is not None and not (isinstance(actions, torch.Tensor) and all(
                space.contains(a) for a in actions.numpy())):
            raise BeyondfitError(f"episode_actions[{i}] holds actions outside the env's "
                                 f"action space {space}")
        if not state["prev_done"][i] and count != state["ep_length"][i]:
            raise BeyondfitError(f"episode_actions[{i}] holds {count} actions, but its episode "
                                 f"has run {state['ep_length'][i]} steps (ep_length[{i}])")
