"""Augmentation as a batch transform (``beyondfit/rl/algos/augmentation.py``): DrQ(eps)'s shift
and intensity, drawn independently for ``obs`` and ``next_obs`` from the collector's generator
(so a run and its resume draw the same views), a transform of one's own, one line per mistake."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from beyondfit import BeyondfitError
from beyondfit.rl.algos.augmentation import Intensity, RandomShift, random_shift, resolve
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.nets.agents import QAgent
from beyondfit.rl.replay.buffer import ReplayBatch

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
BOARD = gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)


def gathered(obs: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """The shift written the obvious way: each pixel read from the clamped shifted index."""
    offsets = torch.randint(0, 2 * pad + 1, (obs.shape[0], 2), generator=generator)
    out = torch.empty_like(obs)
    h, w = obs.shape[-2:]
    for i, (r, c) in enumerate(offsets.tolist()):
        rows = (torch.arange(h) + r - pad).clamp(0, h - 1)
        cols = (torch.arange(w) + c - pad).clamp(0, w - 1)
        out[i] = obs[i][:, rows][:, :, cols]
    return out


@pytest.mark.parametrize("pad", [1, 4])
def test_the_shift_pads_with_the_edge_and_crops_back_as_a_plain_gather_would(pad: int) -> None:
    obs = torch.randint(0, 256, (9, 4, 84, 84), dtype=torch.uint8)
    got = random_shift(obs, pad, torch.Generator().manual_seed(3))
    assert got.dtype == torch.uint8 and got.shape == obs.shape and got.is_contiguous()
    assert torch.equal(got, gathered(obs, pad, torch.Generator().manual_seed(3)))
    # channels-last boards shift their two spatial axes, not the channels
    boards = torch.rand(5, 10, 10, 4) < 0.5
    moved = random_shift(boards, 1, torch.Generator().manual_seed(0))
    assert moved.dtype == torch.bool
    back = gathered(boards.permute(0, 3, 1, 2), 1, torch.Generator().manual_seed(0))
    assert torch.equal(moved, back.permute(0, 2, 3, 1))


def test_intensity_scales_each_image_by_one_factor_within_ten_percent() -> None:
    obs = torch.full((64, 4, 84, 84), 200, dtype=torch.uint8)
    out = Intensity(FRAMES)(obs, torch.Generator().manual_seed(0))
    assert out.dtype == torch.float32
    factor = out[:, 0, 0, 0] / 200
    assert torch.equal(out, factor.view(-1, 1, 1, 1).expand_as(out) * 200)
    assert bool(((factor >= 0.9) & (factor <= 1.1)).all()) and float(factor.std()) > 0.02


def batch_of(n: int = 6) -> ReplayBatch:
    g = torch.Generator().manual_seed(1)
    frames = lambda: torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8,  # noqa: E731
                                   generator=g)
    return ReplayBatch(frames(), torch.zeros(n, dtype=torch.long), torch.ones(n), frames(),
                       torch.zeros(n), torch.zeros(n))


def test_obs_and_next_obs_get_their_own_draws_and_nothing_else_changes() -> None:
    same = batch_of()._replace(next_obs=batch_of().obs)
    augment = resolve(["shift", "intensity"], FRAMES)
    out = augment(same, torch.Generator().manual_seed(0))
    assert not torch.equal(out.obs, out.next_obs)  # one image, two views
    assert out.rewards is same.rewards and out.actions is same.actions
    again = augment(same, torch.Generator().manual_seed(0))
    assert torch.equal(out.obs, again.obs) and torch.equal(out.next_obs, again.next_obs)
    # the shift drew first, the intensity after it, each from the same generator
    g = torch.Generator().manual_seed(0)
    shifted = RandomShift(FRAMES)(same.obs, g)
    torch.testing.assert_close(out.obs, Intensity(FRAMES)(shifted, g))


def test_a_transform_of_ones_own_joins_in_order() -> None:
    seen = []

    def invert(obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        seen.append(obs.dtype)
        return 255 - obs

    augment = resolve([invert], FRAMES)
    batch = batch_of()
    out = augment(batch, torch.Generator())
    assert torch.equal(out.obs, 255 - batch.obs) and seen == [torch.uint8, torch.uint8]


@pytest.mark.parametrize("augment, space, message", [
    (["crop"], FRAMES, r"unknown task\.augment\[0\]='crop'; choose among shift, intensity"),
    (["shift", "shift"], FRAMES, "lists shift twice"),
    (["shift"], gym.spaces.Box(-1, 1, (6,), np.float32), r"task\.augment\[0\]=shift transforms "
                                                         "images"),
    ("shift", FRAMES, r"task\.augment='shift' is a list"),
    ([3], FRAMES, r"task\.augment\[0\] is a int"),
])
def test_augment_mistakes_are_one_line(augment, space, message) -> None:
    with pytest.raises(BeyondfitError, match=message) as info:
        resolve(augment, space)
    assert "\n" not in str(info.value)


def test_the_board_shift_is_one_cell_and_nothing_is_none() -> None:
    assert resolve(["shift"], BOARD).transforms[0].pad == 1
    assert resolve(["shift"], FRAMES).transforms[0].pad == 4
    assert resolve([], FRAMES) is None and resolve(None, FRAMES) is None


def test_the_collector_augments_with_its_own_generator_and_a_resume_draws_the_same() -> None:
    pytest.importorskip("minatar")

    def collector() -> ReplayCollector:
        envs = make_vector_env("MinAtar/Breakout-v1", 1, sync=True)
        torch.manual_seed(0)
        agent = QAgent(envs.single_observation_space, envs.single_action_space, hidden=[])
        return ReplayCollector(envs, agent, total_env_steps=120, buffer_size=120, batch_size=8,
                               learning_starts=20, seed=1,
                               augment=resolve(["shift"], envs.single_observation_space))

    ref = collector()
    batches, states = [], []
    for batch in ref:
        batches.append(batch)
        states.append(copy.deepcopy(ref.state_dict()))  # as a checkpoint file holds it
    plain = ReplayCollector(ref.envs, ref.agent, total_env_steps=120, buffer_size=120,
                            batch_size=8, learning_starts=20, seed=1)
    assert not torch.equal(next(iter(plain)).obs, batches[0].obs)  # the shift changed them
    resumed = collector()
    resumed.load_state_dict(states[40])
    for k, batch in enumerate(resumed, start=41):
        assert torch.equal(batch.obs, batches[k].obs) and torch.equal(batch.next_obs,
                                                                      batches[k].next_obs)
    assert k == len(batches) - 1
