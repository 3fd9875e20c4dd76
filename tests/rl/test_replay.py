"""The replay buffer (``beyondfit/rl/replay/buffer.py``): each field in its own dtype, each frame
of an image observation stored once, and bitwise what a plain per-transition copy would hand out.

The frame-once buffer is checked against :class:`Naive` (every transition copied whole) on the
same random transitions of several interleaved env copies, with next-step autoresets, episodes
of 1 to 5 steps, wrap-around and frames run short; against the single-row buffer it replaced
for vector observations; through its checkpoints; and through the real
:class:`~beyondfit.rl.collect.offpolicy.ReplayCollector` on a small frame-stacked env.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import FrameStackObservation
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.serialization import atomic_save, safe_load
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.replay import buffer as replay
from beyondfit.rl.replay.buffer import ReplayBatch, ReplayBuffer, replay_bytes
from beyondfit.rl.replay.restore import RestoreCheck

# the fields every transition has (``discount``, ``one_step_obs``: n-step batches, tested apart)
FIELDS = tuple(f for f in ReplayBatch._fields if f not in ("discount", "one_step_obs"))


# ------------------------------------------------------------------ random vector-env steps
def steps(space: gym.spaces.Box, n: int, count: int, seed: int, cut: float = 0.0
          ) -> Iterator[tuple[np.ndarray, ...]]:  # fmt: skip
    """``count`` steps of ``n`` env copies as a Gymnasium vector env with next-step autoreset
    gives them: ``(obs, actions, rewards, next_obs, terminated, truncated, valid)``.

    Observations are stacks of ``k`` random frames (the first axis; ``k = 1``, whole frames,
    for a channels-last image), a reset pads its stack with its first frame (as
    ``FrameStackObservation`` does); episodes end after 1 to 5 steps, terminated or
    truncated; the step after an end is the reset (``valid`` false). With probability
    ``cut`` a next observation is a fresh stack that does not continue the last one."""
    rng = np.random.default_rng(seed)
    stacked = space.shape[-1] > space.shape[0]  # channels first: frames on the first axis
    k = space.shape[0] if stacked else 1
    frame_shape = space.shape[1:] if stacked else space.shape

    def frame() -> np.ndarray:
        if space.dtype == np.bool_:
            return rng.random(frame_shape) < 0.3
        if space.dtype == np.float32:  # 0.0 and -0.0: equal as numbers, not bitwise
            return rng.choice(np.array([0.0, -0.0, 1.5], np.float32), frame_shape)
        high = 2 if np.prod(frame_shape) <= 4 else 4  # tiny frames repeat by chance
        return rng.integers(0, high, frame_shape, dtype=space.dtype)

    def fresh() -> np.ndarray:
        f = frame()
        return np.stack([f] * k) if stacked else f

    obs = np.stack([fresh() for _ in range(n)])
    left = rng.integers(1, 6, n)
    ended = np.zeros(n, dtype=bool)
    for _ in range(count):
        actions = rng.integers(0, 3, (n, 1))
        rewards = rng.normal(size=n)
        nxt = np.empty_like(obs)
        term, trunc = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        valid = ~ended
        for c in range(n):
            if ended[c]:  # the autoreset step: the next episode's first observation
                nxt[c], left[c], rewards[c] = fresh(), rng.integers(1, 6), 0.0
                continue
            if rng.random() < cut:
                nxt[c] = fresh()
            elif stacked:
                nxt[c] = np.concatenate([obs[c, 1:], frame()[None]])
            else:
                nxt[c] = frame()
            left[c] -= 1
            if left[c] == 0:
                term[c] = rng.random() < 0.5
                trunc[c] = not term[c]
        yield obs, actions, rewards, nxt, term, trunc, valid
        ended = (term | trunc) & valid
        obs = nxt


class Naive:
    """A plain per-transition copy: every transition kept whole, numbered in order, with the
    env copy it came from; the live ones are the newest ``size`` (the real buffer's count),
    sampled with the same draw."""

    def __init__(self, capacity: int, dtype: torch.dtype) -> None:
        self.capacity, self.dtype = capacity, dtype
        self.seen: list[tuple[Any, ...]] = []
        self.copy_of: list[int] = []

    def add(self, obs, actions, rewards, next_obs, term, trunc, valid) -> None:
        for i in np.flatnonzero(valid):
            self.seen.append((obs[i].copy(), actions[i, 0], rewards[i], next_obs[i].copy(),
                              term[i], trunc[i]))
            self.copy_of.append(int(i))

    def batch(self, index: torch.Tensor, size: int) -> dict[str, torch.Tensor]:
        """What the draw ``index`` takes: slot ``i``, or past dropped slots ``oldest + i``."""
        capacity, oldest = self.capacity, len(self.seen) - size
        slots = index if size == capacity or oldest % capacity == 0 else (
            index + oldest) % capacity
        return self.fields([oldest + int(s - oldest) % capacity for s in slots])

    def live(self, size: int) -> dict[str, torch.Tensor]:
        """The newest ``size`` transitions, oldest first."""
        return self.fields(range(len(self.seen) - size, len(self.seen)))

    def fields(self, numbers: Any) -> dict[str, torch.Tensor]:
        rows = [self.seen[i] for i in numbers]
        obs, actions, rewards, nxt, term, trunc = zip(*rows, strict=True)
        images = lambda x: torch.from_numpy(np.stack(x)).to(self.dtype)  # noqa: E731
        floats = lambda x: torch.tensor(np.array(x, dtype=np.float32))  # noqa: E731
        return {"obs": images(obs), "actions": torch.tensor(actions, dtype=torch.int64),
                "rewards": floats(rewards), "next_obs": images(nxt),
                "terminated": floats(term), "truncated": floats(trunc)}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (0.0 and -0.0 differ; NaN equals itself); or both
    ``None`` (a one-step batch's ``discount``)."""
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and (
        a.cpu().numpy().tobytes() == b.cpu().numpy().tobytes())


def live_count(naive: Naive, k: int, n: int, ring: int) -> int:
    """The documented rule for ``size``, written the slow way: the newest ``capacity``
    transitions, less the oldest ones while any still reads a frame its copy's ring of
    ``ring`` frames has overwritten. Frames: at an episode's first transition (one whose obs is
    not bitwise its copy's last next_obs, or after an end) the obs stack less the first frames
    that repeat the one after them (a reset's padding), then one per transition whose next
    stack moved on by one frame, else the next stack so (less its repeated first frames)."""

    def repeats(stack: np.ndarray) -> int:
        pad = 0
        while k > 1 and pad + 1 < k and stack[pad + 1].tobytes() == stack[0].tobytes():
            pad += 1
        return pad

    written, tip = [0] * n, [None] * n
    starts: list[int] = []
    oldest = 0
    for number, (obs, _, _, nxt, term, trunc) in enumerate(naive.seen):
        c = naive.copy_of[number]
        if tip[c] is None or tip[c][2].tobytes() != obs.tobytes():
            pad = repeats(obs)
            written[c] += k - pad
            end = written[c] - 1
        else:
            end, pad, _ = tip[c]
        if k > 1 and nxt[:-1].tobytes() == obs[1:].tobytes():
            written[c] += 1
            next_pad = max(pad - 1, 0)
        else:
            next_pad = repeats(nxt)
            written[c] += k - next_pad
        tip[c] = None if (term or trunc) else (written[c] - 1, next_pad, nxt)
        starts.append(end - (k - 1 - pad))
        for m in range(oldest, number + 1):
            if starts[m] < written[naive.copy_of[m]] - ring:
                oldest = m + 1
        oldest = max(oldest, number + 1 - naive.capacity)
    return len(naive.seen) - oldest


def stack_of(space: gym.spaces.Box) -> int:
    """Frames per observation: the first axis of a channels-first image, else 1."""
    return space.shape[0] if space.shape[-1] > space.shape[0] else 1


SPACES = {
    "atari-like uint8 stacks": gym.spaces.Box(0, 255, (3, 6, 7), np.uint8),
    "minatar-like bool boards": gym.spaces.Box(0, 1, (5, 5, 3), np.bool_),
    "float32 stacks of 0.0 and -0.0": gym.spaces.Box(-2, 2, (2, 4, 4), np.float32),
    "tiny uint8 frames that repeat by chance": gym.spaces.Box(0, 255, (3, 1, 4), np.uint8),
}


@pytest.mark.parametrize("ring", [None, "tight", "ample"])
@pytest.mark.parametrize("name", list(SPACES))
def test_the_frame_once_buffer_samples_what_a_naive_copy_samples(name: str, ring: Any) -> None:
    space, n, capacity = SPACES[name], 3, 40
    k = stack_of(space)
    frames = {None: None, "tight": 2 * k + 1, "ample": 400}[ring]
    buffer = ReplayBuffer(capacity, space, gym.spaces.Discrete(3), num_envs=n,
                          frames_per_copy=frames)  # fmt: skip
    naive = Naive(capacity, buffer.frames.dtype)
    smaller, generator, reference = False, torch.Generator(), torch.Generator()
    seed = sorted(SPACES).index(name) * 10 + [None, "tight", "ample"].index(ring)
    for t, step in enumerate(steps(space, n, 160, seed=seed, cut=0.05)):
        stored = buffer.add(*step)
        naive.add(*step)
        assert stored == int(step[-1].sum()) and buffer.added == len(naive.seen)
        assert buffer.size == live_count(naive, k, n, buffer.frames_per_copy), t
        smaller |= buffer.size < min(buffer.added, capacity)
        generator.manual_seed(t)
        reference.manual_seed(t)
        got = buffer.sample(16, generator)
        want = naive.batch(torch.randint(buffer.size, (16,), generator=reference), buffer.size)
        for field in FIELDS:
            assert same_bits(getattr(got, field), want[field]), (t, field)
        every, kept = buffer.transitions(), naive.live(buffer.size)
        assert all(same_bits(getattr(every, f), kept[f]) for f in FIELDS), t
        for c in range(n):  # each copy's ring of transitions holds at most its frames' worth
            assert buffer._ring_head[c] - buffer._ring_tail[c] <= buffer.frames_per_copy
    assert got.obs.dtype == buffer.frames.dtype == {np.uint8: torch.uint8, np.bool_: torch.bool,
                                                   np.float32: torch.float32}[space.dtype.type]
    assert got.obs.shape == (16, *space.shape) and got.actions.dtype == torch.int64
    assert buffer.added > 2 * capacity  # wrapped around
    assert smaller == (ring != "ample")  # frames run short: episodes of 1-5 steps are short


def test_stacks_never_cross_an_episode_start_and_next_obs_is_not_stored_twice() -> None:
    """Frames tagged with their episode and step: every stored stack is one episode's, padded
    at its start as FrameStackObservation pads, an episode's first transition writes its
    padded first stack as one frame and a transition that continues its stack one frame."""
    space = gym.spaces.Box(0, 255, (4, 2, 2), np.uint8)
    buffer = ReplayBuffer(500, space, gym.spaces.Discrete(2), num_envs=2)
    rng = np.random.default_rng(0)
    episode = [0, 1]
    t = [0, 0]
    tagged = lambda c, s: np.full((2, 2), 0, np.uint8) + np.array(  # noqa: E731
        [[episode[c], s], [c, 0]], np.uint8)
    obs = np.stack([np.stack([tagged(c, 0)] * 4) for c in range(2)])
    ended = np.zeros(2, dtype=bool)
    for _ in range(120):
        nxt = np.empty_like(obs)
        term = np.zeros(2, dtype=bool)
        for c in range(2):
            if ended[c]:
                episode[c] += 2
                t[c] = 0
                nxt[c] = np.stack([tagged(c, 0)] * 4)
                continue
            t[c] += 1
            nxt[c] = np.concatenate([obs[c, 1:], tagged(c, t[c])[None]])
            term[c] = rng.random() < 0.3  # 1-step episodes included
        before = buffer._written.copy()
        buffer.add(obs, np.zeros((2, 1), np.int64), np.zeros(2), nxt, term, term & False,
                   ~ended)  # fmt: skip
        for c in range(2):
            if not ended[c]:
                first = t[c] == 1
                assert buffer._written[c] - before[c] == (2 if first else 1)
        ended = term & ~ended
        obs = nxt
    every = buffer.transitions()
    for stack in (every.obs, every.next_obs):
        tags = stack[:, :, 0, 0]
        assert torch.all(tags == tags[:, :1])  # one episode per stack
        steps_in = stack[:, :, 0, 1].long()
        assert torch.all(steps_in.diff(dim=1) >= 0) and torch.all(steps_in.diff(dim=1) <= 1)
        newest = steps_in[:, -1]
        assert torch.all(steps_in[:, 0] == (newest - 3).clamp(min=0))  # padded at the start
    assert torch.equal(every.next_obs[:, :-1], every.obs[:, 1:])
    assert torch.equal(every.next_obs[:, -1, 0, 1].long(), every.obs[:, -1, 0, 1].long() + 1)


# ------------------------------------------------------------------ vector observations
class SingleRows:
    """The buffer this one replaced, as it stored and sampled: one float32 row ``[obs | action
    | reward | next_obs | terminated | truncated]`` per transition."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, discrete: bool) -> None:
        self.rows = torch.zeros(capacity, 2 * obs_dim + act_dim + 3)
        self.o, self.a, self.discrete = obs_dim, act_dim, discrete
        self.size = self.position = 0

    def add(self, obs, actions, rewards, nxt, term, trunc, valid) -> None:
        n = len(obs)
        rows = np.concatenate([obs.reshape(n, -1), actions, rewards.reshape(n, 1),
                               nxt.reshape(n, -1), term.reshape(n, 1), trunc.reshape(n, 1)],
                              axis=1, dtype=np.float32)[valid]  # fmt: skip
        for row in rows:
            self.rows[self.position] = torch.from_numpy(row)
            self.position = (self.position + 1) % len(self.rows)
            self.size = min(self.size + 1, len(self.rows))

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        index = torch.randint(self.size, (batch_size,), generator=generator)
        rows = self.rows.index_select(0, index)
        o, a = self.o, self.a
        actions = rows[:, o].long() if self.discrete else rows[:, o:o + a]
        return (rows[:, :o], actions, rows[:, o + a], rows[:, o + a + 1:2 * o + a + 1],
                rows[:, 2 * o + a + 1], rows[:, 2 * o + a + 2])


@pytest.mark.parametrize("discrete", [True, False])
def test_vector_observations_sample_bitwise_what_the_single_row_buffer_sampled(
        discrete: bool) -> None:  # fmt: skip
    obs_space = gym.spaces.Box(-5, 5, (3,), np.float64)
    action_space = gym.spaces.Discrete(4) if discrete else gym.spaces.Box(-1, 1, (2,))
    buffer = ReplayBuffer(25, obs_space, action_space, num_envs=2)
    old = SingleRows(25, 3, 1 if discrete else 2, discrete)
    rng = np.random.default_rng(1)
    a, b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(70):
        obs, nxt = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))  # float64: cast as before
        actions = (rng.integers(0, 4, (2, 1)) if discrete
                   else rng.uniform(-1, 1, (2, 2)).astype(np.float32))
        done = rng.random(2) < 0.2
        valid = rng.random(2) < 0.8
        args = (obs, actions, rng.normal(size=2), nxt, done, ~done & (rng.random(2) < 0.1),
                valid)
        buffer.add(*args)
        old.add(*args)
        assert buffer.size == old.size and buffer.position == old.position
        if buffer.size:
            got, want = buffer.sample(8, a), old.sample(8, b)
            assert got.discount is None  # one-step transitions
            for field, x, y in zip(FIELDS, got, want, strict=False):
                assert same_bits(x, y.contiguous()), field
    assert got.obs.dtype == torch.float32 and got.obs.shape == (8, 3)
    assert got.actions.shape == ((8,) if discrete else (8, 2))


# ------------------------------------------------------------------ memory
def test_bytes_per_transition_and_the_million_transition_atari_buffer() -> None:
    atari = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    total = replay_bytes(1_000_000, atari, gym.spaces.Discrete(4))
    # 1,031,250 frames of 7,056 bytes (1/32 more than one per transition, for episode starts),
    # 36 bytes of positions, action and scalars a transition, 16 of bookkeeping a frame.
    assert total == 1_031_250 * (7_056 + 16) + 1_000_000 * 36 + 4 * 84 * 84 == 7_329_028_224
    assert replay_bytes(1_000, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)) == 52_000
    buffer = ReplayBuffer(1_000, atari, gym.spaces.Discrete(4), num_envs=4)
    allocated = sum(t.nbytes for t in buffer.fields.values()) + buffer.frames.nbytes
    host = buffer._ring_seq.nbytes + buffer._ring_start.nbytes + 4 * 4 * 84 * 84  # last obs
    assert buffer.nbytes == allocated + host
    assert buffer.describe() == ("1,000 transitions, 7.4 MB on cpu (7,447 bytes each: (4, 84, "
                                 "84) uint8 frames stored once)")  # 4 copies' last obs: 113 KB


def test_a_buffer_too_large_for_the_memory_is_one_line_saying_what_fits(monkeypatch) -> None:
    monkeypatch.setattr(replay, "machine_memory", lambda device: (10**9, "this machine"))
    atari = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    with pytest.raises(BeyondfitError) as info:
        ReplayBuffer(1_000_000, atari, gym.spaces.Discrete(4))
    message = str(info.value)
    assert "\n" not in message and message.startswith(
        "task.replay.buffer_size: a replay buffer of 1,000,000 transitions needs 7.3 GB (7,329 "
        "bytes each), more than this machine has (1.0 GB); at most ")
    fits = int(message.rsplit("task.replay.buffer_size=", 1)[1].split()[0])
    assert f"at most {fits:,} transitions fit" in message
    assert replay_bytes(fits, atari, gym.spaces.Discrete(4)) <= 10**9 < replay_bytes(
        fits + 1, atari, gym.spaces.Discrete(4))
    ReplayBuffer(fits // 1000, atari, gym.spaces.Discrete(4))  # what it says fits, does


@pytest.mark.e2e
def test_the_command_line_refuses_a_buffer_beyond_the_memory_before_it_allocates(
        tmp_path: Path) -> None:  # fmt: skip
    """The config's lower bound (24 bytes a transition) lets it through; the buffer's own
    measure (CartPole's 52 bytes) refuses it before anything is allocated."""
    from beyondfit.cli.bounds import machine_memory

    from kit import cli, one_line_exit_2

    many = machine_memory("cpu")[0] // 40
    done = cli("+task=cartpole", "algo=dqn", f"task.replay.buffer_size={many}",
               f"task.total_env_steps={many}", "device=cpu", f"hydra.run.dir={tmp_path / 'run'}",
               cwd=tmp_path)  # fmt: skip
    line = one_line_exit_2(done, f"task.replay.buffer_size: a replay buffer of {many:,} "
                                 "transitions needs", "(52 bytes each), more than")
    fits = int(line.rsplit("task.replay.buffer_size=", 1)[1].split()[0])
    assert 52 * fits <= machine_memory("cpu")[0] < 52 * (fits + 1)


# ------------------------------------------------------------------ checkpoints
def filled(space: gym.spaces.Box, steps_taken: int, capacity: int = 30, n: int = 3,
           frames: int | None = None, n_step: int = 1) -> tuple[ReplayBuffer, Iterator]:
    buffer = ReplayBuffer(capacity, space, gym.spaces.Discrete(3), num_envs=n,
                          frames_per_copy=frames, n_step=n_step)  # fmt: skip
    stream = steps(space, n, 10_000, seed=7, cut=0.05)
    for _ in range(steps_taken):
        buffer.add(*next(stream))
    return buffer, stream


@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("name", list(SPACES))
def test_a_checkpoint_round_trip_samples_the_same_and_goes_on_the_same(
        tmp_path: Path, name: str, n_step: int) -> None:  # fmt: skip
    space = SPACES[name]
    k = stack_of(space)
    a, stream = filled(space, 50, frames=2 * k + 2, n_step=n_step)  # wrapped, frames run short
    assert a.size < a.capacity < a.added
    atomic_save({"model": {}, "buffer": a.state_dict()}, tmp_path / "b.pt")
    b = ReplayBuffer(30, space, gym.spaces.Discrete(3), num_envs=3, frames_per_copy=2 * k + 2,
                     n_step=n_step)  # fmt: skip
    b.load_state_dict(safe_load(tmp_path / "b.pt")["buffer"])  # weights_only
    for t in range(40):
        if t % 2:
            step = next(stream)
            assert a.add(*step) == b.add(*step)
        assert (a.size, a.added) == (b.size, b.added)
        x = a.sample(8, torch.Generator().manual_seed(t))
        y = b.sample(8, torch.Generator().manual_seed(t))
        assert all(same_bits(p, q) for p, q in zip(x, y, strict=True)), t


def test_a_checkpoint_holds_only_the_filled_part_without_copying_the_buffer(
        tmp_path: Path) -> None:  # fmt: skip
    space = gym.spaces.Box(0, 255, (4, 16, 16), np.uint8)
    buffer = ReplayBuffer(10_000, space, gym.spaces.Discrete(3), num_envs=3)
    stream = steps(space, 3, 100, seed=3)
    for step in stream:
        buffer.add(*step)
    state = buffer.state_dict()
    frames = state["frames"][0]
    assert frames.untyped_storage().data_ptr() == buffer.frames.untyped_storage().data_ptr()
    atomic_save({"model": {}, "buffer": state}, tmp_path / "b.pt")
    assert (tmp_path / "b.pt").stat().st_size < buffer.nbytes / 10
    loaded = ReplayBuffer(10_000, space, gym.spaces.Discrete(3), num_envs=3)
    loaded.load_state_dict(safe_load(tmp_path / "b.pt")["buffer"])
    assert all(same_bits(x, y) for x, y in zip(loaded.transitions(), buffer.transitions(),
                                               strict=True))


def _doctored(state: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    state = copy.deepcopy(state)
    *path, last = key.split(".")
    target: Any = state
    for part in path:
        target = target[int(part)] if part.isdigit() else target[part]
    if callable(value):
        value = value(target[int(last) if last.isdigit() else last])
    target[int(last) if last.isdigit() else last] = value
    return state


IMAGE = SPACES["atari-like uint8 stacks"]
REFUSED = [
    ("layout.obs_shape", [3, 6, 8], r"^buffer\.layout=.*: the checkpoint's replay buffer holds "
                                    r"other transitions than this env's"),
    ("frames_per_copy", 99, r"^buffer\.frames_per_copy=99 is not this buffer's 8$"),
    ("frames.1", lambda t: t.float(), r"^buffer\.frames\[1\] \(8, 6, 7\) torch\.float32 is not 8 "
                                      r"frames of \(6, 7\) torch\.uint8"),
    ("frames.2", lambda t: t[:3], r"^buffer\.frames\[2\] \(3, 6, 7\) torch\.uint8 is not 8 "),
    ("frames", [], r"^buffer\.frames is not a list of 3 entries \(one per env copy\)$"),
    ("written.0", -1, r"^buffer\.written\[0\]=-1 is not a whole number >= 0$"),
    ("written.0", lambda w: w + 8, r"^buffer\.tip\[0\]=\[\d+, \d\] is not null or \[\d+, pad\]"
                                   r"|^buffer\.obs_at holds a transition whose stacks are not"),
    ("tip.0", 2, r"^buffer\.tip\[0\]=2 is not null or \[\d+, pad\], the stack ending at the "
                 r"newest frame of env copy 0's stream \(pad: 0 to 2 repeated first frames\)$"),
    ("tip.0", [0, 3], r"^buffer\.tip\[0\]=\[0, 3\] is not null or \[\d+, pad\]"),
    ("fields.obs_at", lambda t: t + 1000, r"^buffer\.obs_at or buffer\.next_at holds a frame row "
                                          r"outside the streams of 3 env copies"),
    ("fields.next_at", lambda t: (t + 8) % 24, r"^buffer\.obs_at or buffer\.next_at holds .* "
                                               r"whose two stacks are in different streams$"),
    ("fields.obs_at", lambda t: t - t % 8 + (t % 8 + 4) % 8,
     r"^buffer\.obs_at holds a transition whose stacks are not in its env copy's stream"),
    ("fields.obs_at", lambda t: t.to(torch.int32), r"^buffer\.obs_at \(30,\) torch\.int32 is "
                                                   r"not 30 transitions of \(\) torch\.int64"),
    ("fields.actions", lambda t: t.index_fill(0, torch.tensor([4]), 3),
     r"^buffer\.actions holds 3 at transition 4: not an action index of this env's 3 actions"),
    ("fields.terminated", lambda t: t.index_fill(0, torch.tensor([2]), 7.0),
     r"^buffer\.terminated holds 7\.0 at transition 2: a done flag is 0 or 1$"),
    ("fields.rewards", lambda t: t.index_fill(0, torch.tensor([2]), float("inf")),
     r"^buffer\.rewards holds values that are not finite"),
    ("size", 31, r"^buffer\.size=31 is not a whole number in \[0, 30\]"),
    ("added", "many", r"^buffer\.added='many' is not a whole number >= 0$"),
    ("position", lambda p: (p + 1) % 30, r"^buffer\.position=\d+ does not follow "
                                         r"buffer\.added=\d+"),
]


@pytest.mark.parametrize(("key", "value", "message"), REFUSED,
                         ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(REFUSED)])
def test_a_doctored_buffer_is_refused_in_one_line_and_changes_nothing(
        key: str, value: Any, message: str) -> None:  # fmt: skip
    source, _ = filled(IMAGE, 60, frames=8)
    state = _doctored(source.state_dict(), key, value)
    buffer = ReplayBuffer(30, IMAGE, gym.spaces.Discrete(3), num_envs=3, frames_per_copy=8)
    buffer.add(*next(steps(IMAGE, 3, 1, seed=1)))
    before = buffer.state_dict()
    with pytest.raises(BeyondfitError, match=message) as info:
        buffer.load_state_dict(state)
    assert "\n" not in str(info.value)
    after = buffer.state_dict()
    assert after["added"] == before["added"] == 3 and after["written"] == before["written"]
    assert all(torch.equal(after["fields"][f], before["fields"][f]) for f in before["fields"])


@pytest.mark.parametrize("action_space", [gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3)])
@pytest.mark.parametrize("space", [IMAGE, gym.spaces.Box(-1, 1, (3,))])
def test_an_empty_buffers_own_state_loads(space: gym.spaces.Box,
                                          action_space: gym.spaces.Space) -> None:
    """What the engine's whole-or-nothing restore puts back after a failed resume: the state
    of a buffer nothing was stored in (a Box's empty actions were a reshape error)."""
    buffer = ReplayBuffer(30, space, action_space, num_envs=3)
    assert buffer.load_state_dict(copy.deepcopy(buffer.state_dict())) is True
    assert buffer.size == buffer.added == 0


# ------------------------------------------------------------------ n-step returns
def n_step_reference(naive: Naive, numbers: list[int], n_step: int, gamma: float
                     ) -> dict[str, torch.Tensor]:  # fmt: skip
    """The documented n-step transitions, the slow way: from transition ``t`` walk to its env
    copy's next stored transitions while the episode goes on and they exist, summing the
    rewards in float32 in the buffer's order."""
    rewards, discounts, lasts = [], [], []
    for t in numbers:
        total = torch.tensor(naive.seen[t][2], dtype=torch.float32)
        discount = torch.tensor(gamma, dtype=torch.float32)
        last = t
        for _ in range(n_step - 1):
            _, _, _, _, term, trunc = naive.seen[last]
            later = [u for u in range(last + 1, len(naive.seen))
                     if naive.copy_of[u] == naive.copy_of[last]]
            if term or trunc or not later:
                break
            last = later[0]
            total = total + discount * torch.tensor(naive.seen[last][2], dtype=torch.float32)
            discount = discount * gamma
        rewards.append(total)
        discounts.append(discount)
        lasts.append(last)
    ends, first = naive.fields(lasts), naive.fields(numbers)
    return {**first, "one_step_obs": first["next_obs"], "rewards": torch.stack(rewards),
            "discount": torch.stack(discounts), "next_obs": ends["next_obs"],
            "terminated": ends["terminated"], "truncated": ends["truncated"]}


N_STEP_SPACES = {"vectors": gym.spaces.Box(-2, 2, (3,), np.float32),
                 **{k: SPACES[k] for k in ("atari-like uint8 stacks",
                                            "minatar-like bool boards")}}


@pytest.mark.parametrize("name", list(N_STEP_SPACES))
def test_n_step_transitions_are_the_discounted_sums_a_naive_walk_finds(name: str) -> None:
    """Every live transition (wrapped, frames run short, several copies, episodes of 1 to 5
    steps ending terminated or truncated, the newest ones not followed yet) against
    :func:`n_step_reference`, bitwise, after each env step; sampling draws the same rows."""
    space, n, capacity, gamma = N_STEP_SPACES[name], 3, 40, 0.9
    image = replay.is_image(space)
    k = stack_of(space) if image else 0
    buffer = ReplayBuffer(capacity, space, gym.spaces.Discrete(3), num_envs=n, n_step=3,
                          gamma=gamma, frames_per_copy=2 * k + 4 if image else None)
    naive = Naive(capacity, buffer.fields["obs"].dtype if not image else buffer.frames.dtype)
    shortened, discounts = False, set()
    for t, step in enumerate(steps(space, n, 120, seed=11)):
        buffer.add(*step)
        naive.add(*step)
        shortened |= buffer.size < min(buffer.added, capacity)
        live = list(range(buffer.added - buffer.size, buffer.added))
        every, want = buffer.transitions(), n_step_reference(naive, live, 3, gamma)
        for field in (*FIELDS, "discount", "one_step_obs"):
            assert same_bits(getattr(every, field), want[field]), (t, field)
        discounts |= {round(d, 4) for d in every.discount.tolist()}
    assert shortened == image and buffer.added > 2 * capacity
    assert discounts == {0.9, 0.81, 0.729}  # sums of 1, 2 and 3 rewards
    one_step = ReplayBuffer(capacity, space, gym.spaces.Discrete(3), num_envs=n)
    assert one_step.transitions().discount is one_step.transitions().one_step_obs is None


def test_n_step_needs_the_links_of_its_own_kind_to_resume() -> None:
    space = SPACES["minatar-like bool boards"]
    three, _ = filled(space, 40, n_step=3)
    one, _ = filled(space, 40)
    state = three.state_dict()
    for source, target, word in ((three, one, "holds"), (one, three, "lacks")):
        fresh = ReplayBuffer(30, space, gym.spaces.Discrete(3), num_envs=3, n_step=target.n_step)
        with pytest.raises(BeyondfitError, match=rf"^buffer\.fields {word} the links of n-step "
                                                 r"returns: .* resume with the same "
                                                 r"task\.replay\.n_step$"):
            fresh.load_state_dict(source.state_dict())
    follow = state["fields"]["follow"].numpy()
    ended = (state["fields"]["terminated"] + state["fields"]["truncated"]).numpy()
    first = three.added - three.size  # the oldest live transition's number; slot: number % 30
    live = range(first, three.added)
    copy_of = dict(zip(live, RestoreCheck(three, state).check()[0], strict=True)).__getitem__
    # a transition linked on to one that is linked on too, and one that ended an episode
    chained = next(n for n in live if follow[n % 30] >= 0 and follow[follow[n % 30]] >= 0)
    slot, ended_one = chained % 30, next(n for n in live if ended[n % 30] > 0)
    targets = set(follow[[n % 30 for n in live]].tolist())
    other = next(n for n in live if n > chained and copy_of(n) != copy_of(chained)
                 and n % 30 not in targets) % 30  # newer, no one's successor: another copy's

    def last_of_its_copy(number: int):
        return lambda v: [number if c == copy_of(number) else x for c, x in enumerate(v)]

    doctored = [("fields.follow", lambda t: t.index_fill(0, torch.tensor([slot]), slot),
                 r"^buffer\.follow links a transition to one that is not a newer live "),
                ("fields.follow", lambda t: t.index_fill(0, torch.tensor([slot]), 99),
                 r"^buffer\.follow links"),
                # two transitions with one successor; a link into another env copy's stream
                ("fields.follow", lambda t: t.index_fill(0, torch.tensor([slot]),
                                                         int(t[int(t[slot])])),
                 r"^buffer\.follow links"),
                ("fields.follow", lambda t: t.index_fill(0, torch.tensor([slot]), other),
                 r"^buffer\.follow links"),
                ("last", [three.added, -1, -1], r"^buffer\.last=\[\d+, -1, -1\] is not a list "
                                                r"of 3 live transition numbers"),
                ("last", None, r"^buffer\.last=None is not a list"),
                ("last", last_of_its_copy(chained), r"^buffer\.last\[\d\]=\d+ is not env "
                                                    r"copy \d's newest transition of an episode"),
                ("last", last_of_its_copy(ended_one), r"^buffer\.last\[\d\]=\d+ is not env "),
                ("last", [chained] * 3, r"^buffer\.last\[\d\]=\d+ is not env ")]
    for key, value, message in doctored:
        fresh = ReplayBuffer(30, space, gym.spaces.Discrete(3), num_envs=3, n_step=3)
        with pytest.raises(BeyondfitError, match=message):
            fresh.load_state_dict(_doctored(state, key, value))
        assert fresh.added == 0
    with pytest.raises(BeyondfitError, match=r"^task\.replay\.n_step=0; it must be a whole "):
        ReplayBuffer(30, space, gym.spaces.Discrete(3), n_step=0)


def test_a_state_without_contents_leaves_the_buffer_empty() -> None:
    source, _ = filled(IMAGE, 20)
    buffer, _ = filled(IMAGE, 5)
    assert buffer.load_state_dict(source.state_dict(contents=False)) is False
    assert buffer.size == buffer.added == 0 and buffer._written == [0, 0, 0]


# ------------------------------------------------------------------ through the collector
class Tagged(gym.Env):
    """12x12 uint8 frames tagged with their episode (a random byte drawn at reset), the step
    in it and its length (1 to 6 steps); a time limit of 4 steps truncates the longer ones.
    The rest of each frame is noise: its state follows from the seed and the actions."""

    observation_space = gym.spaces.Box(0, 255, (12, 12), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.tag, self.t = int(self.np_random.integers(256)), 0
        self.length = int(self.np_random.integers(1, 7))
        return self._frame(), {}

    def step(self, action):
        self.t += 1
        return self._frame(), float(action), self.t == self.length, False, {}

    def _frame(self) -> np.ndarray:
        frame = self.np_random.integers(0, 256, (12, 12), dtype=np.uint8)
        frame[0, :3] = self.tag, self.t, self.length
        return frame


gym.register("BeyondfitTagged-v0", entry_point=Tagged, max_episode_steps=4)


class RandomAgent(nn.Module):
    """Uniform actions; records the observations' dtype it was shown."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.seen: set[torch.dtype] = set()

    def explore(self, obs: torch.Tensor, generator: torch.Generator,
                progress: float) -> torch.Tensor:  # fmt: skip
        self.seen.add(obs.dtype)
        return torch.randint(3, (len(obs),), generator=generator, device=obs.device)


def tagged_collector(**options: Any) -> ReplayCollector:
    envs = make_vector_env("BeyondfitTagged-v0", 3, [lambda env: FrameStackObservation(env, 4)],
                           sync=True)  # fmt: skip
    settings = dict(total_env_steps=120, buffer_size=60, learning_starts=10, batch_size=8, seed=4)
    return ReplayCollector(envs, RandomAgent(), **{**settings, **options})


def test_the_collector_stores_frame_stacks_once_exactly_and_in_uint8(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="beyondfit.rl"):
        data = tagged_collector()
    (line,) = [r.getMessage() for r in caplog.records if "replay buffer" in r.getMessage()]
    assert line.startswith("replay buffer: 60 transitions, ") and "on cpu" in line
    assert "(4, 12, 12) uint8 frames stored once" in line
    batches = list(data)
    assert len(batches) == len(data) and 120 <= data.env_steps == data.buffer.added < 123
    assert data.buffer.size <= 60 < data.buffer.added
    batch = batches[-1]
    assert batch.obs.dtype == batch.next_obs.dtype == torch.uint8
    assert batch.obs.shape == batch.next_obs.shape == (8, 4, 12, 12)
    every = data.buffer.transitions()
    for stack in (every.obs, every.next_obs):
        tag, t, length = (stack[:, :, 0, i].long() for i in range(3))
        assert torch.all(tag == tag[:, -1:]) and torch.all(length == length[:, -1:])
        assert torch.all(t == (t[:, -1:] - torch.arange(3, -1, -1)).clamp(min=0))
    assert torch.equal(every.next_obs[:, :-1], every.obs[:, 1:])
    step = every.next_obs[:, -1, 0, 1].long()
    length = every.next_obs[:, -1, 0, 2].long()
    assert torch.equal(every.terminated, (step == length).float())  # ended for good
    assert torch.equal(every.truncated, (step == 4).float())  # the time limit's cut
    assert torch.all(step >= 1)  # no autoreset step (a reset's frame, step 0) is stored
    assert torch.equal(every.rewards, every.actions.float())


def test_the_collector_resumes_an_image_buffer_bitwise(tmp_path: Path) -> None:
    a = tagged_collector(total_env_steps=200)
    it = iter(a)
    for _ in range(70):
        next(it)
    atomic_save({"model": {}, "data": a.state_dict()}, tmp_path / "c.pt")
    expected = [next(it) for _ in range(60)]
    b = tagged_collector(total_env_steps=200)
    b.load_state_dict(safe_load(tmp_path / "c.pt")["data"])
    rest = iter(b)
    got = [next(rest) for _ in range(60)]
    for x, y in zip(got, expected, strict=True):
        assert all(same_bits(p, q) for p, q in zip(x, y, strict=True))
