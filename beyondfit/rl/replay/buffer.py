"""The replay buffer: each field of a transition in its own preallocated tensor, in its own
dtype, on the training device; the frames of image observations stored once.

What is stored how (``C`` transitions, ``B`` sampled):

- **Vector observations** (every space :func:`~beyondfit.rl.envs.spaces.is_image` says is not an
  image: CartPole, MuJoCo): ``obs`` and ``next_obs`` as float32 rows ``(C, obs_dim)``,
  flattened, handed out bitwise as before the buffer stored fields apart. CartPole: 52 bytes
  per transition (two 4-value observations, an int64 action, three float32 scalars).
- **Image observations**: frames in the space's dtype (uint8 Atari frames, bool MinAtar
  boards; floats as float32, as the env converter hands them to the networks), each frame once,
  and per transition the stream positions of its ``obs`` and ``next_obs`` stacks (two int64).
  A batch rebuilds raw images ``(B, *obs_shape)`` by index on the device. Atari's ``(4, 84, 84)``
  uint8: about 7,330 bytes per transition (one 7,056-byte frame, plus 1/32 of one for episode
  starts; two positions, the action and three scalars, 36 bytes; 16 bytes of bookkeeping a
  frame): a 1,000,000-transition buffer is 7.33 GB, where one float32 row per transition was
  226 KB (226 GB).
- **Actions**: a ``Discrete`` space's index ``0 .. n - 1`` as int64 ``(C,)``; a ``Box``'s as
  float32 ``(C, act_dim)`` scaled to ``[-1, 1]``.
- **rewards, terminated, truncated**: float32 ``(C,)`` (losses multiply by them).

**Each frame once, exact by construction** (Dopamine's circular buffer, made exact for
Gymnasium vector envs). An image whose first axis holds ``k`` stacked frames (channels first:
Atari's ``(4, 84, 84)``) is ``k`` frames; any other image (MinAtar's ``(10, 10, C)``) is one
whole frame (``k = 1``). Each env copy has its own stream of frames (a ring of
``frames_per_copy``): copies interleave in a vector env, and a stack's frames must be
consecutive in one stream. At an episode's first stored transition (an env copy's first, or
any whose ``obs`` is not bitwise the ``next_obs`` that copy stored last: after an end, after
the autoreset step the collector does not store) the stacked ``obs`` is written, its first
frames that bitwise repeat the one after them once (``FrameStackObservation`` pads a reset's
stack with its first frame: ``[f, f, f, f]`` is one frame and ``pad = 3``); then each
transition writes only the newest frame of ``next_obs`` when ``next_obs[:-1]`` is bitwise
``obs[1:]`` (checked, with NumPy, on every transition), else the whole ``next_obs`` stack so.
A transition records where its two stacks end and their ``pad`` (frame ``i`` of a stack ending
at ``e`` is the one at ``e - min(k - 1 - i, k - 1 - pad)``), so ``next_obs`` is never stored
twice, a stack is never assembled from frames of two episodes, and every sampled observation
is bitwise the one the env returned.

**When the frames run out before the transitions do.** An episode costs one frame more than
its transitions (its padded first stack; ``k`` more when its first stack is not padded); the
rings hold ``capacity + capacity // 32`` frames, so episodes of 32 transitions and longer on
average never run short (Breakout's lives under CleanRL's ``EpisodicLife`` last about 33
steps at the start of training). Where they do (shorter episodes, observations that do not
continue their stack), writing a frame that a live transition still reads first drops the
oldest transitions, oldest first, as overwriting does at the capacity: ``size`` then stays
somewhat below ``capacity`` (the live transitions are always the newest ones, one contiguous
run of the ring), sampling stays uniform over them, and the draw is still the one
``torch.randint(size, (B,))``.

**Sampling** draws exactly what the single-row buffer drew: one
``torch.randint(self.size, (batch_size,), generator=generator, device=...)`` per minibatch
(shifted past dropped slots only when frames were dropped), then one ``index_select`` per
field, on the device.

**n-step returns** (``n_step > 1``; Sutton 1988, as Rainbow and Dopamine use them): each
transition also keeps ``follow``, the slot of its env copy's next transition in the same
episode (``-1``: none yet, or the episode ended there), linked when that one is stored. A
sampled transition ``t`` then hands out ``rewards = r_t + gamma r_{t+1} + ... + gamma^(m-1)
r_{t+m-1}``, the ``next_obs``, ``terminated`` and ``truncated`` of transition ``t + m - 1``
and ``discount = gamma^m``, where ``m`` is ``n_step``, or fewer where the episode ended first
or its next transitions are not stored yet (the newest ``n_step - 1`` of each copy). A
successor is newer than its transition, so it is live whenever the transition is: the links
need no eviction of their own. Computed on the device at sampling, from the one-step
transitions the buffer holds (a resume needs nothing but the links and each copy's last
transition).

**Checkpoints** hold the filled part of every field and of each frame stream (on the CPU, each
saved without a copy of the buffer), the stream positions, and the counters; a restore checks
all of it against this buffer's spaces before it changes anything, and each failure is one
:class:`~beyondfit.core.errors.BeyondfitError` line naming the field.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from beyondfit.core.device import gigabytes, machine_memory
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.rl.envs.spaces import channels_last, is_image
from beyondfit.rl.replay.restore import RestoreCheck, first_frame

log = logging.getLogger("beyondfit.rl")

#: The most rewards a sampled transition sums (``task.replay.n_step``): papers use 3 to 20.
MAX_N_STEP = 100
#: Frames kept beyond one per transition: ``capacity // FRAME_HEADROOM`` (for episode starts).
FRAME_HEADROOM = 32
#: The scalar fields every transition has, float32 ``(C,)``.
SCALARS = ("rewards", "terminated", "truncated")
#: A stack in a copy's frame stream: where its newest frame is, and how many of its first
#: frames repeat its oldest stored one (``pad``: an episode's start).
Stack = tuple[int, int]


class ReplayBatch(NamedTuple):
    """A minibatch of transitions sampled uniformly from the replay buffer; ``B`` rows.

    What an off-policy loss reads (``sac_loss``, ``td3_loss``, ``dqn_loss`` or your own):

    Attributes:
        obs: observations the actions were taken in. Vectors: ``(B, obs_dim)`` float32
            (flattened). Images: raw ``(B, *obs_shape)`` in the space's dtype (uint8 frames
            stay uint8: the encoder makes floats of them).
        actions: the actions taken. ``Box``: ``(B, act_dim)`` float32, **scaled to [-1, 1]**:
            the env received ``low + (actions + 1) / 2 * (high - low)``. ``Discrete``:
            ``(B,)`` int64 indices ``0 .. n - 1`` (the env received ``start + index``).
        rewards: ``(B,)`` float32.
        next_obs: the observation after the action, as ``obs``; at an episode's end the
            episode's true last observation (never the next episode's first).
        terminated: ``(B,)`` float32, 1.0 where the episode ended for good (no bootstrap),
            else 0.0.
        truncated: ``(B,)`` float32, 1.0 where a time limit cut the episode (the value of
            ``next_obs`` still counts: bootstrap), else 0.0. Kept apart from ``terminated``.
        discount: ``None`` for one-step transitions (the loss's ``gamma`` applies). With
            ``task.replay.n_step`` above 1, ``(B,)`` float32 ``gamma^m``: ``rewards`` is then
            the discounted sum of ``m`` rewards and ``next_obs`` the observation ``m`` steps
            on, so a TD target is ``rewards + discount * (1 - terminated) * V(next_obs)``
            (the shipped losses read it; a loss of your own must, to use ``n_step``).
        one_step_obs: ``None`` for one-step transitions (``next_obs`` is it); with ``n_step``
            above 1, the observation one step after ``obs``, as ``obs``: for what models one
            step of the dynamics (``task.aux=[self_prediction]``).
    """

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    discount: torch.Tensor | None = None
    one_step_obs: torch.Tensor | None = None


@dataclass(frozen=True)
class Layout:
    """What a buffer of some spaces stores per transition, and what it costs.

    ``stack`` is 0 for vector observations (float32 rows), else the frames per observation
    (``k``; 1: whole images); ``frame_shape`` one frame's shape, ``dtype`` the frames'."""

    obs_shape: tuple[int, ...]
    stack: int
    frame_shape: tuple[int, ...]
    dtype: torch.dtype
    discrete: bool
    actions: int  # Discrete: n, the number of actions; Box: act_dim, values per action

    @classmethod
    def of(cls, observation_space: gym.Space, action_space: gym.Space) -> Layout:
        """The layout of ``observation_space``'s and ``action_space``'s transitions."""
        if isinstance(action_space, gym.spaces.Discrete):
            discrete, actions = True, int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box):
            discrete, actions = False, int(np.prod(action_space.shape))
        else:
            raise BeyondfitError(f"action space {action_space} is neither a Box nor Discrete: "
                                 "the replay buffer stores one of those")
        shape = tuple(int(s) for s in observation_space.shape or ())
        if not is_image(observation_space):
            return cls((int(np.prod(shape)),), 0, (), torch.float32, discrete, actions)
        np_dtype = np.dtype(observation_space.dtype)
        dtype = torch.float32 if np_dtype.kind == "f" else torch.from_numpy(
            np.zeros(0, np_dtype)).dtype
        if len(shape) == 3 and not channels_last(shape):  # (k, H, W): k stacked frames
            return cls(shape, shape[0], shape[1:], dtype, discrete, actions)
        return cls(shape, 1, shape, dtype, discrete, actions)

    @property
    def frames(self) -> bool:
        """Are observations stored as frames (images), not float32 rows?"""
        return self.stack > 0

    def frames_per_copy(self, capacity: int, num_envs: int) -> int:
        """Each env copy's frame ring: an equal share of ``capacity + capacity // 32`` frames,
        and at least two stacks (one transition's worst case, with the stack it continues)."""
        total = capacity + capacity // FRAME_HEADROOM
        return max(2 * self.stack, -(-total // num_envs))

    def nbytes(self, capacity: int, num_envs: int, frames_per_copy: int | None = None,
               n_step: int = 1) -> int:  # fmt: skip
        """Bytes of a buffer of ``capacity`` transitions: every field (with ``n_step > 1``,
        the links to the next transitions), the frames, the stream positions and the
        host-side bookkeeping of the frame rings."""
        action = 8 if self.discrete else 4 * self.actions
        per = action + 4 * len(SCALARS) + (8 if n_step > 1 else 0)
        if not self.frames:
            return capacity * (per + 2 * 4 * self.obs_shape[0])
        frames = num_envs * (frames_per_copy or self.frames_per_copy(capacity, num_envs))
        frame = int(np.prod(self.frame_shape)) * _itemsize(self.dtype)
        obs = int(np.prod(self.obs_shape)) * _itemsize(self.dtype)
        # frames; two int64 stream positions per transition; per ring slot the transition and
        # stack start the eviction reads (two int64); each copy's last next_obs (host).
        return (frames * frame + capacity * (per + 16) + frames * 16 + num_envs * obs)

    def describe(self) -> dict[str, Any]:
        """Plain data a checkpoint records: a restore into other spaces is refused."""
        return {"obs_shape": list(self.obs_shape), "stack": self.stack,
                "dtype": str(self.dtype).removeprefix("torch."),
                "actions": f"{'Discrete' if self.discrete else 'Box'}({self.actions})"}


def replay_bytes(capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 num_envs: int = 1, n_step: int = 1) -> int:  # fmt: skip
    """Bytes a :class:`ReplayBuffer` of these spaces and ``capacity`` takes (nothing
    allocated)."""
    return Layout.of(observation_space, action_space).nbytes(capacity, num_envs, n_step=n_step)


class ReplayBuffer:
    """``capacity`` transitions of a vector env's ``observation_space`` and ``action_space``.

    Args:
        capacity: transitions kept; past it the oldest are overwritten (and, for images,
            dropped early when the frames run short: see the module's docstring).
        observation_space, action_space: one env copy's spaces (``Box`` or ``Discrete``
            actions; a ``Box``'s stored as given, in ``[-1, 1]``).
        num_envs: env copies stepped together (each keeps its own frame stream).
        device: where the fields live (the training device: sampling never leaves it).
        frames_per_copy: each copy's frame ring (images only; default
            :meth:`Layout.frames_per_copy`).
        n_step: rewards summed per sampled transition (1: one-step transitions; see the
            module's docstring).
        gamma: their discount (the task's ``gamma``), read only when ``n_step > 1``.

    The memory is allocated here, after :func:`check_fits` measured it against the device's.
    """

    def __init__(self, capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 num_envs: int = 1, device: torch.device | str = "cpu",
                 frames_per_copy: int | None = None, n_step: int = 1,
                 gamma: float = 0.99) -> None:  # fmt: skip
        check_number("task.replay.buffer_size", capacity, integer=True, above=0,
                     example="task.replay.buffer_size=1000000")
        self.n_step = check_number("task.replay.n_step", n_step, integer=True, at_least=1,
                                   at_most=MAX_N_STEP, example="task.replay.n_step=3")
        self.gamma = check_number("task.gamma", gamma, at_least=0, at_most=1,
                                  example="task.gamma=0.99")
        if capacity < num_envs:
            raise BeyondfitError(f"task.replay.buffer_size={capacity} is below task.num_envs="
                                 f"{num_envs}: each env step stores one transition per copy")
        self.capacity, self.num_envs = capacity, num_envs
        self.observation_space, self.action_space = observation_space, action_space
        self.layout = layout = Layout.of(observation_space, action_space)
        self.stack = layout.stack
        self.frames_per_copy = 0
        if layout.frames:
            self.frames_per_copy = frames_per_copy or layout.frames_per_copy(capacity, num_envs)
            if self.frames_per_copy < 2 * self.stack:
                raise BeyondfitError(f"frames_per_copy={frames_per_copy} holds less than two "
                                     f"stacks of {self.stack} frames")
        device = torch.device(device)
        self.nbytes = layout.nbytes(capacity, num_envs, self.frames_per_copy, self.n_step)
        check_fits(self.nbytes, capacity, layout, num_envs, device, self.n_step)
        c = capacity
        action = (c,) if layout.discrete else (c, layout.actions)
        fields = {"actions": torch.zeros(action, dtype=torch.int64 if layout.discrete else
                                         torch.float32, device=device)}
        fields.update({name: torch.zeros(c, device=device) for name in SCALARS})
        if layout.frames:
            fields["obs_at"] = torch.zeros(c, dtype=torch.int64, device=device)
            fields["next_at"] = torch.zeros(c, dtype=torch.int64, device=device)
            frames = num_envs * self.frames_per_copy
            self.frames = torch.zeros((frames, *layout.frame_shape), dtype=layout.dtype,
                                      device=device)
            # Newest frame first: a stack ending at ring position r is r - back (mod the ring).
            self._back = torch.arange(self.stack - 1, -1, -1, device=device)
        else:
            fields["obs"] = torch.zeros(c, layout.obs_shape[0], device=device)
            fields["next_obs"] = torch.zeros(c, layout.obs_shape[0], device=device)
        if self.n_step > 1:
            fields["follow"] = torch.full((c,), -1, dtype=torch.int64, device=device)
        self.fields = fields
        self.added = 0  # transitions ever stored; the next goes to slot added % capacity
        self.size = 0  # live transitions: the newest `size` of them
        self._empty_streams()

    def _empty_streams(self) -> None:
        """Frame streams with nothing written (host bookkeeping only)."""
        n, ring = self.num_envs, self.frames_per_copy
        self._written = [0] * n  # frames each copy has written (its stream's next position)
        self._tip: list[Stack | None] = [None] * n  # the stack of the copy's last next_obs
        self._tip_obs: list[np.ndarray | None] = [None] * n  # and that observation
        # Per copy, its transitions oldest first: their number and where their obs stack
        # starts (a ring of frames_per_copy: each writes a frame of its own).
        self._ring_seq = np.zeros((n, ring), dtype=np.int64)
        self._ring_start = np.zeros((n, ring), dtype=np.int64)
        self._ring_head, self._ring_tail = [0] * n, [0] * n
        self._warned = False
        # n-step: each copy's newest transition (its number) while its episode goes on, else -1
        self._last = [-1] * n

    # ------------------------------------------------------------------------------ basics
    @property
    def position(self) -> int:
        """The slot the next transition goes to."""
        return self.added % self.capacity

    @property
    def device(self) -> torch.device:
        """Where the fields are."""
        return self.fields["rewards"].device

    def to(self, device: torch.device) -> ReplayBuffer:
        """Move the fields to ``device`` (a no-op when they are there; measured against its
        memory first)."""
        device = torch.device(device)
        if self.device == device:
            return self
        check_fits(self.nbytes, self.capacity, self.layout, self.num_envs, device, self.n_step)
        self.fields = {name: t.to(device) for name, t in self.fields.items()}
        if self.layout.frames:
            self.frames = self.frames.to(device)
            self._back = self._back.to(device)
        log.info("replay buffer: %s moved to %s", gigabytes(self.nbytes), device)
        return self

    def describe(self) -> str:
        """``1,000,000 transitions, 7.5 GB on cpu (7,533 bytes each: (4, 84, 84) uint8 frames
        stored once)``: what the run's first lines say of it."""
        layout = self.layout
        what = (f"{layout.obs_shape} {str(layout.dtype).removeprefix('torch.')} frames stored "
                "once" if layout.frames else f"{layout.obs_shape[0]} float32 values an "
                "observation")
        returns = (f", {self.n_step}-step returns (gamma {self.gamma:g})" if self.n_step > 1
                   else "")
        return (f"{self.capacity:,} transitions, {gigabytes(self.nbytes)} on {self.device} "
                f"({self.nbytes / self.capacity:,.0f} bytes each: {what}){returns}")

    # ------------------------------------------------------------------------------ adding
    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            valid: np.ndarray | None = None) -> int:  # fmt: skip
        """Store one vector-env step: row ``i`` of each array is env copy ``i``'s transition
        (actions as stored: indices or ``[-1, 1]`` values), kept where ``valid`` (default: all;
        the collector leaves out the autoreset steps). Returns how many were stored."""
        n = len(obs)
        valid = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
        if self.layout.frames:
            return self._add_frames(obs, actions, rewards, next_obs, terminated, truncated,
                                    valid)
        rows = np.concatenate([obs.reshape(n, -1), actions.reshape(n, -1),
                               rewards.reshape(n, 1), next_obs.reshape(n, -1),
                               terminated.reshape(n, 1), truncated.reshape(n, 1)],
                              axis=1, dtype=np.float32)  # fmt: skip
        if not valid.all():
            rows = rows[valid]
        m = len(rows)
        if m:
            copies = np.flatnonzero(valid)
            done = np.logical_or(terminated, truncated).reshape(-1)[valid]
            staged = self._staged(rows)
            o, a = self.layout.obs_shape[0], self._action_columns
            self._put({"obs": staged[:, :o], "actions": staged[:, o] if self.layout.discrete
                       else staged[:, o:o + a], "rewards": staged[:, o + a],
                       "next_obs": staged[:, o + a + 1:2 * o + a + 1],
                       "terminated": staged[:, 2 * o + a + 1],
                       "truncated": staged[:, 2 * o + a + 2]})  # fmt: skip
            self.added += m
            self.size = min(self.size + m, self.capacity)
            self._link(copies, done)
        return m

    @property
    def _action_columns(self) -> int:
        return 1 if self.layout.discrete else self.layout.actions

    def _staged(self, rows: np.ndarray) -> torch.Tensor:
        """Host rows as a tensor on the buffer's device (one copy)."""
        tensor = torch.from_numpy(rows)
        device = self.device
        return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)

    def _put(self, values: dict[str, torch.Tensor]) -> None:
        """Write ``m`` transitions' fields at the next slots, wrapping around the capacity (with
        ``n_step > 1``, their links not made yet: ``-1``)."""
        if self.n_step > 1:
            values["follow"] = torch.full((len(values["rewards"]),), -1, dtype=torch.int64,
                                          device=self.device)
        start = self.position
        for name, value in values.items():
            field, m = self.fields[name], len(value)
            end = start + m
            if end <= self.capacity:
                field[start:end].copy_(value)
            else:  # rare: split at the wrap (m is at most the number of envs)
                first = self.capacity - start
                field[start:].copy_(value[:first])
                field[: m - first].copy_(value[first:])

    def _add_frames(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                    next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                    valid: np.ndarray) -> int:  # fmt: skip
        k, ring, shape = self.stack, self.frames_per_copy, self.layout.frame_shape
        if len(obs) != self.num_envs:
            raise BeyondfitError(f"{len(obs)} observations for a replay buffer of "
                                 f"{self.num_envs} env copies")
        obs, next_obs = self._stored(obs), self._stored(next_obs)
        done = np.logical_or(terminated, truncated).reshape(-1)
        chunks: list[np.ndarray] = []  # frames to write, in order
        slots: list[np.ndarray] = []  # and their ring rows
        stored: list[tuple[int, Stack, Stack]] = []  # (copy, obs stack, next_obs stack)
        for c in range(self.num_envs):
            if not valid[c]:  # the autoreset step: a new episode comes next
                self._tip[c] = self._tip_obs[c] = None
                self._last[c] = -1
                continue
            begin = written = self._written[c]
            here = self._tip[c]
            if here is None or not _same(obs[c], self._tip_obs[c]):  # an episode's first
                pad = _repeats(obs[c]) if k > 1 else 0  # a start padded with its first frame
                chunks.append(obs[c].reshape(k, *shape)[pad:])
                written += k - pad
                here = (written - 1, pad)
            if k > 1 and _same(next_obs[c, :-1], obs[c, 1:]):
                chunks.append(next_obs[c, -1:])  # the stack moved on by one frame
                written += 1
                after = (written - 1, max(here[1] - 1, 0))
            else:
                pad = _repeats(next_obs[c]) if k > 1 else 0
                chunks.append(next_obs[c].reshape(k, *shape)[pad:])
                written += k - pad
                after = (written - 1, pad)
                if k > 1 and not self._warned:
                    self._warned = True
                    log.warning("replay buffer: env copy %d's next observation does not "
                                "continue its stack of %d frames %s, so whole stacks are "
                                "stored (exact, but the buffer then keeps fewer transitions "
                                "than task.replay.buffer_size)", c, k, self.layout.obs_shape)
            slots.append(c * ring + np.arange(begin, written) % ring)
            self._written[c] = written
            stored.append((c, here, after))
            if done[c]:
                self._tip[c] = self._tip_obs[c] = None
            else:
                self._tip[c], self._tip_obs[c] = after, next_obs[c].copy()
        m = len(stored)
        if not m:
            return 0
        self._make_room(stored)
        where = torch.from_numpy(np.concatenate(slots)).to(self.device)
        self.frames.index_copy_(0, where, self._staged(np.concatenate(chunks)))
        ends = np.array([(self._at(c, here), self._at(c, after)) for c, here, after in stored])
        columns = self._action_columns
        rows = np.concatenate([actions.reshape(len(valid), -1)[valid].astype(np.float32),
                               rewards.reshape(-1, 1)[valid], terminated.reshape(-1, 1)[valid],
                               truncated.reshape(-1, 1)[valid]], axis=1, dtype=np.float32)
        staged, at = self._staged(rows), self._staged(ends)
        self._put({"actions": staged[:, 0] if self.layout.discrete else staged[:, :columns],
                   "rewards": staged[:, columns], "terminated": staged[:, columns + 1],
                   "truncated": staged[:, columns + 2], "obs_at": at[:, 0],
                   "next_at": at[:, 1]})  # fmt: skip
        for j, (c, here, _) in enumerate(stored):  # each copy's transitions, oldest first
            index = self._ring_head[c] % ring
            self._ring_seq[c, index], self._ring_start[c, index] = self.added + j, first_frame(
                here, k)
            self._ring_head[c] += 1
        self.added += m
        self.size = min(self.size + m, self.capacity)
        self._link(np.array([c for c, _, _ in stored]), done[valid])
        return m

    def _link(self, copies: np.ndarray, done: np.ndarray) -> None:
        """``n_step > 1``: after the newest ``len(copies)`` transitions were stored (copy
        ``copies[j]``'s is number ``added - m + j``), point each copy's previous transition of
        the same episode to it, if that one is still live."""
        if self.n_step == 1:
            return
        first, oldest = self.added - len(copies), self.added - self.size
        links = []
        for j, c in enumerate(copies.tolist()):
            number = first + j
            if self._last[c] >= oldest:
                links.append((self._last[c] % self.capacity, number % self.capacity))
            self._last[c] = -1 if done[j] else number
        if links:  # one host-to-device copy, as the transitions' own
            at, to = self._staged(np.array(links, dtype=np.int64)).unbind(1)
            self.fields["follow"].index_put_((at,), to)

    def _stored(self, obs: np.ndarray) -> np.ndarray:
        """Observations as the frames keep them: ``(n, *obs_shape)`` in the frames' dtype."""
        dtype = np.float32 if self.layout.dtype == torch.float32 else None
        array = np.asarray(obs, dtype=dtype)
        return array.reshape(len(array), *self.layout.obs_shape)

    def _at(self, copy: int, stack: Stack) -> int:
        """Where a stack is, as a transition stores it: the ring row of its newest frame, plus
        ``pad`` times the rows of all rings."""
        end, pad = stack
        ring = self.frames_per_copy
        return copy * ring + end % ring + pad * self.num_envs * ring

    def _make_room(self, stored: list[tuple[int, Stack, Stack]]) -> None:
        """Drop the oldest transitions while any of them reads a frame this step overwrites.

        A copy's transitions read its frames in order, so the ones to drop are a prefix of
        each copy's; dropping is from the oldest of all, as overwriting at the capacity is."""
        ring = self.frames_per_copy
        oldest = self.added - self.size  # the oldest live transition's number
        for c, _, _ in stored:
            first_kept = self._written[c] - ring  # frames before this are overwritten
            tail, head = self._ring_tail[c], self._ring_head[c]
            while tail < head:
                index = tail % ring
                if self._ring_seq[c, index] >= oldest:
                    if self._ring_start[c, index] >= first_kept:
                        break
                    oldest = int(self._ring_seq[c, index]) + 1
                tail += 1
            self._ring_tail[c] = tail
        self.size = self.added - oldest

    # ------------------------------------------------------------------------------ sampling
    def sample(self, batch_size: int, generator: torch.Generator) -> ReplayBatch:
        """``batch_size`` live transitions drawn uniformly with replacement, on the buffer's
        device."""
        index = torch.randint(self.size, (batch_size,), generator=generator,
                              device=self.device)  # fmt: skip
        return self.batch(index)

    def batch(self, index: torch.Tensor) -> ReplayBatch:
        """The live transitions at ``index`` (``0 <= index < size``, a tensor on the buffer's
        device), in the order :meth:`sample` numbers them."""
        oldest = (self.added - self.size) % self.capacity
        if self.size < self.capacity and oldest:  # frames dropped some: skip their slots
            index = (index + oldest) % self.capacity
        take = self.fields
        rewards, discount, last = take["rewards"].index_select(0, index), None, index
        if self.n_step > 1:
            rewards, discount, last = self._n_step(index, rewards)
        ends = (last,) if discount is None else (last, index)  # n-step: one step on as well
        if self.layout.frames:
            obs = self._stacks(take["obs_at"].index_select(0, index))
            nexts = [self._stacks(take["next_at"].index_select(0, at)) for at in ends]
        else:
            obs = take["obs"].index_select(0, index)
            nexts = [take["next_obs"].index_select(0, at) for at in ends]
        return ReplayBatch(obs, take["actions"].index_select(0, index), rewards, nexts[0],
                           take["terminated"].index_select(0, last),
                           take["truncated"].index_select(0, last), discount,
                           nexts[1] if len(nexts) > 1 else None)  # fmt: skip

    def _n_step(self, index: torch.Tensor, rewards: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """The ``n_step`` returns from the slots ``index``: the discounted reward sums, their
        ``gamma^m`` and the slots of the last transition each sums (the module's docstring)."""
        take, gamma = self.fields, self.gamma
        last = index
        discount = torch.full_like(rewards, gamma)
        for _ in range(self.n_step - 1):
            # on past an episode's end never (a link is -1 there too: checked on restore)
            after = take["follow"].index_select(0, last)
            going = after >= 0
            last = torch.where(going, after, last)
            rewards = rewards + torch.where(going, discount * take["rewards"].index_select(
                0, last), 0.0)  # fmt: skip
            discount = torch.where(going, discount * gamma, discount)
        return rewards, discount, last

    def transitions(self) -> ReplayBatch:
        """Every live transition, oldest first (for tests and inspection: a copy)."""
        order = torch.arange(self.size, device=self.device)
        if self.size == self.capacity:  # every slot live, numbered as they lie
            order = (order + self.position) % self.capacity
        return self.batch(order)

    def _stacks(self, at: torch.Tensor) -> torch.Tensor:
        """The observations of the stacks stored as ``at`` (:meth:`_at`): ``(B, *obs_shape)``.

        Frame ``i`` of a stack ending at stream position ``e`` with ``pad`` is the frame at
        ``e - min(k - 1 - i, k - 1 - pad)``: a padded start repeats its first frame."""
        ring, rows_all = self.frames_per_copy, self.num_envs * self.frames_per_copy
        pad = at.div(rows_all, rounding_mode="floor")
        row = at - pad * rows_all
        within = row % ring
        back = torch.minimum(self._back, (self.stack - 1 - pad).unsqueeze(1))
        rows = (row - within).unsqueeze(1) + (within.unsqueeze(1) - back) % ring
        frames = self.frames.index_select(0, rows.reshape(-1))
        return frames.view(len(at), *self.layout.obs_shape)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self, contents: bool = True) -> dict[str, Any]:
        """Counters and the layout, and (``contents``) the filled part of every field and of
        each frame stream with the streams' positions, on the CPU."""
        state: dict[str, Any] = {"capacity": self.capacity, "added": self.added,
                                 "size": self.size, "position": self.position,
                                 "layout": self.layout.describe()}
        if self.layout.frames:
            state["frames_per_copy"] = self.frames_per_copy
        if not contents:
            return state
        filled = min(self.added, self.capacity)
        state["fields"] = {name: _saved(t[:filled]) for name, t in self.fields.items()}
        if self.n_step > 1:
            state["last"] = list(self._last)
        if self.layout.frames:
            ring = self.frames_per_copy
            state["frames"] = [_saved(self.frames[c * ring: c * ring + min(w, ring)])
                               for c, w in enumerate(self._written)]
            state["written"] = list(self._written)
            state["tip"] = [None if t is None else list(t) for t in self._tip]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore :meth:`state_dict`; returns whether the contents were in it (else the
        buffer is left empty).

        Checked first, whole, against this buffer: its spaces and capacity; the counters;
        every field's dtype and shape; floats finite; Discrete indices within the action
        space's ``n``; Box actions within ``[-1, 1]``; ``terminated`` and ``truncated``
        exactly 0 or 1; frames in the space's dtype; each live transition's stacks within
        its copy's stream, in order. A failure is one line naming the field; nothing changed.
        """
        if not isinstance(state, dict):
            raise BeyondfitError(f"buffer is a {type(state).__name__}, not a mapping")
        checked = RestoreCheck(self, state).check()
        self._empty_streams()
        if checked is None:
            self.added = self.size = 0
            return False
        self.added, self.size = int(state["added"]), int(state["size"])
        if self.n_step > 1:
            self._last = [int(x) for x in state["last"]]
        filled = min(self.added, self.capacity)
        for name, field in self.fields.items():
            field[:filled].copy_(state["fields"][name])
        if self.layout.frames:
            ring = self.frames_per_copy
            for c, frames in enumerate(state["frames"]):
                self.frames[c * ring: c * ring + len(frames)].copy_(frames)
            self._written = [int(w) for w in state["written"]]
            self._tip = [None if t is None else (int(t[0]), int(t[1])) for t in state["tip"]]
            for c, tip in enumerate(self._tip):
                if tip is not None:
                    at = torch.tensor([self._at(c, tip)], device=self.device)
                    self._tip_obs[c] = self._stacks(at)[0].cpu().numpy()
            copies, starts = checked
            live = np.arange(self.added - self.size, self.added)
            for c in range(self.num_envs):
                mine = copies == c
                count = int(mine.sum())
                self._ring_seq[c, :count], self._ring_start[c, :count] = live[mine], starts[mine]
                self._ring_tail[c], self._ring_head[c] = 0, count
        return True


def check_fits(nbytes: int, capacity: int, layout: Layout, num_envs: int,
               device: torch.device, n_step: int = 1) -> None:  # fmt: skip
    """Refuse, in one line naming ``task.replay.buffer_size`` and how many transitions would
    fit, a buffer larger than ``device``'s memory (the RAM, or the GPU's)."""
    memory, where = machine_memory(str(device))
    if nbytes <= memory:
        return
    low, high = 0, capacity  # the most transitions whose buffer fits
    while low < high:
        mid = (low + high + 1) // 2
        if layout.nbytes(mid, num_envs, n_step=n_step) <= memory:
            low = mid
        else:
            high = mid - 1
    raise BeyondfitError(
        f"task.replay.buffer_size: a replay buffer of {capacity:,} transitions needs "
        f"{gigabytes(nbytes)} ({nbytes / capacity:,.0f} bytes each), more than {where} has "
        f"({gigabytes(memory)}); at most {low:,} transitions fit: set "
        f"task.replay.buffer_size={low} or less")


def _repeats(stack: np.ndarray) -> int:
    """How many of a stack's first frames repeat the one after them (a reset's padding:
    ``FrameStackObservation`` pads an episode's start with its first frame)."""
    first, pad = stack[0].tobytes(), 0
    while pad + 1 < len(stack) and stack[pad + 1].tobytes() == first:
        pad += 1
    return pad


def _same(a: np.ndarray, b: np.ndarray | None) -> bool:
    """Are ``a`` and ``b`` bitwise equal (NaN and -0.0 included)?"""
    return b is not None and a.shape == b.shape and a.tobytes() == b.tobytes()


def _saved(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (a contiguous run of rows) as a CPU tensor that ``torch.save`` writes alone:
    on the CPU a tensor over a slice of the buffer's storage (no copy; a plain view would save
    the whole preallocated storage), elsewhere a copy."""
    if tensor.device.type != "cpu":
        return tensor.cpu()
    if not tensor.numel():
        return torch.empty(tensor.shape, dtype=tensor.dtype)
    size = tensor.element_size()
    begin = tensor.storage_offset() * size
    storage = tensor.untyped_storage()[begin:begin + tensor.numel() * size]
    return torch.empty(0, dtype=tensor.dtype).set_(storage, 0, tensor.shape)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()
