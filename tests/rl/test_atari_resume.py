"""An Atari copy rebuilt on resume is the game it continues
(``beyondfit/rl/collect/env_collector.py``): v5's sticky actions draw from the ALE's own generator,
kept with the ALE's state, and a lost life (``EpisodicLife``) is replayed from the game's real
start, not from the life's.

Each test runs a collector with the task's own wrappers (sticky actions 0.25, no-op starts,
``EpisodicLife``, FIRE, 4 stacked frames), checkpoints it at steps that fall inside a life,
right after a lost life and right after a game's end, and has a fresh collector on fresh envs
continue from each checkpoint: every later observation equal to the uninterrupted run's."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from torch import nn

from kit import task_config

pytest.importorskip("ale_py")

from beyondfit.core.state.checks import FieldError
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.collect.onpolicy import RolloutCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.nets.policies import ActorCritic


def breakout(num_envs: int = 2) -> Any:
    """Breakout-v5 with ``+task=atari``'s own settings, stepped in this process."""
    cfg = task_config("atari", "task.vectorization=sync")
    wrappers = instantiate(cfg.task.wrappers)
    return make_vector_env(cfg.task.env, num_envs, wrappers, sync=True,
                           env_kwargs=dict(cfg.task.env_kwargs))


class RandomAgent(nn.Module):
    """Uniform actions from the collector's generator: the envs' part of a run alone."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.n = n_actions
        self.weight = nn.Parameter(torch.zeros(1))

    def explore(self, obs: torch.Tensor, generator: torch.Generator | None = None,
                progress: float = 0.0) -> torch.Tensor:
        return torch.randint(self.n, (len(obs),), generator=generator)


def replay_collector(total: int) -> ReplayCollector:
    envs = breakout()
    agent = RandomAgent(int(envs.single_action_space.n))
    return ReplayCollector(envs, agent, total_env_steps=total, buffer_size=64, batch_size=4,
                           learning_starts=0, updates_per_step=1.0, seed=3)


def through_a_file(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's round trip: ``torch.save``, then ``weights_only`` load."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_a_replay_collector_resumed_after_a_lost_life_and_a_game_over_continues_bitwise(
        ) -> None:
    total = 1400
    ref = replay_collector(total)
    ref_iter = iter(ref)
    checkpoints: dict[str, dict[str, Any]] = {}
    seen: list[np.ndarray] = []
    lives_lost = games_over = 0
    for _ in ref_iter:
        seen.append(ref._obs.copy())
        step = ref.env_steps
        if ref._prev_done.any():
            if ref._goes_on.any() and "life" not in checkpoints:
                checkpoints["life"] = through_a_file(ref.state_dict()) | {"at": len(seen)}
            if not ref._goes_on[ref._prev_done].all() and "game" not in checkpoints:
                checkpoints["game"] = through_a_file(ref.state_dict()) | {"at": len(seen)}
            lives_lost += int(ref._goes_on.sum())
            games_over += int((ref._prev_done & ~ref._goes_on).sum())
        if step == 300:  # within a later life of a running game
            checkpoints["mid"] = through_a_file(ref.state_dict()) | {"at": len(seen)}
        if "game" in checkpoints and len(seen) == checkpoints["game"]["at"] + 100:
            # within the second game, which started from the ALE's generator as the first
            # left it (sticky actions)
            checkpoints["next game"] = through_a_file(ref.state_dict()) | {"at": len(seen)}
    assert lives_lost and games_over, "the run lost no life or ended no game: lengthen it"
    assert any(a is not None for a in checkpoints["mid"]["game_actions"])
    for name, state in checkpoints.items():
        at = state.pop("at")
        resumed = replay_collector(total)
        resumed.load_state_dict(state)
        for k, _ in enumerate(resumed, start=at):
            assert np.array_equal(resumed._obs, seen[k]), f"resumed at the {name}: step {k}"
        assert k == len(seen) - 1
        for field, value in ref.buffer.state_dict()["fields"].items():
            assert torch.equal(resumed.buffer.state_dict()["fields"][field], value), field
        resumed.envs.close()
    assert "next game" in checkpoints
    ref.envs.close()


def test_a_rollout_collector_resumed_across_lost_lives_continues_bitwise() -> None:
    torch.manual_seed(0)

    def collector() -> RolloutCollector:
        envs = breakout()
        policy = ActorCritic(envs.single_observation_space, envs.single_action_space,
                             hidden=())
        policy.load_state_dict(weights)
        return RolloutCollector(envs, policy, num_steps=64, total_env_steps=128 * 8, seed=5)

    envs = breakout()
    weights = ActorCritic(envs.single_observation_space, envs.single_action_space,
                          hidden=()).state_dict()
    envs.close()
    ref = collector()
    states, batches = [], []
    for batch in ref:
        batches.append(batch)
        states.append(through_a_file(ref.state_dict()))
    assert any(s["game_actions"][i] is not None for s in states for i in range(2)), \
        "no life was lost: lengthen the run"
    for k in (2, 5):
        resumed = collector()
        resumed.load_state_dict(states[k])
        for j, batch in enumerate(resumed, start=k + 1):
            assert torch.equal(batch.obs, batches[j].obs), f"resumed after rollout {k}: {j}"
            assert torch.equal(batch.actions, batches[j].actions)
        resumed.envs.close()


def test_a_doctored_ale_state_or_game_record_is_refused_in_one_line() -> None:
    ref = replay_collector(400)
    for _ in ref:
        pass
    state = through_a_file(ref.state_dict())
    doctored = []
    rng = state["episode_rng"][0] or state["next_rng"][0]
    if rng is not None:
        for bad in (b"garbage", rng["ale"][:100], 3):
            copy = through_a_file(state)
            entry = copy["episode_rng"][0] or copy["next_rng"][0]
            entry["ale"] = bad
            doctored.append(copy)
    copy = through_a_file(state)
    copy["game_goes_on"] = [True] * 2
    copy["prev_done"] = [False] * 2
    doctored.append(copy)
    copy = through_a_file(state)
    copy["game_actions"] = [torch.tensor([99]), None]
    doctored.append(copy)
    assert len(doctored) == 5, "no game ended: lengthen the run"
    for bad in doctored:
        fresh = replay_collector(400)
        with pytest.raises(FieldError):
            fresh.load_state_dict(bad)
        fresh.envs.close()
