"""The replay buffer: transitions in one preallocated tensor on the training device.

Each stored transition is one row ``[obs | action | reward | next_obs | terminated | truncated]``
of a ``(capacity, width)`` float32 tensor, so a minibatch is one ``index_select`` (one gather
kernel, on the GPU too) and its fields are views of it. Rows are written in order and, past
the capacity, overwrite the oldest. A ``Discrete`` action is stored as its index (exact in
float32 below ``2**24``) and handed out as int64.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number


class ReplayBatch(NamedTuple):
    """A minibatch of transitions sampled uniformly from the replay buffer; ``B`` rows.

    What an off-policy loss reads (``sac_loss``, ``td3_loss`` or your own):

    Attributes:
        obs: observations the actions were taken in, ``(B, obs_dim)`` float32 (flattened).
        actions: the actions taken. ``Box``: ``(B, act_dim)`` float32, **scaled to [-1, 1]**:
            the env received ``low + (actions + 1) / 2 * (high - low)``. ``Discrete``:
            ``(B,)`` int64 indices ``0 .. n - 1`` (the env received ``start + index``).
        rewards: ``(B,)``.
        next_obs: the observation after the action, ``(B, obs_dim)``; at an episode's end the
            episode's true last observation (never the next episode's first).
        terminated: ``(B,)`` 1.0 where the episode ended for good (no bootstrap), else 0.0.
        truncated: ``(B,)`` 1.0 where a time limit cut the episode (the value of ``next_obs``
            still counts: bootstrap), else 0.0. Kept apart from ``terminated``.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor


class ReplayBuffer:
    """``capacity`` transitions of ``obs_dim`` observations and ``act_dim`` actions.

    Args:
        capacity: rows kept; the oldest are overwritten past it.
        obs_dim, act_dim: flat sizes of an observation and an action.
        device: where the rows live (the training device: sampling never leaves it).
        discrete: the action is one index (``act_dim`` 1), handed out as int64 ``(B,)``.
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int,
                 device: torch.device | str = "cpu", discrete: bool = False) -> None:  # fmt: skip
        check_number("task.replay.buffer_size", capacity, integer=True, above=0,
                     example="task.replay.buffer_size=1000000")
        self.capacity, self.obs_dim, self.act_dim = capacity, obs_dim, act_dim
        if discrete and act_dim != 1:
            raise BeyondfitError(f"a discrete action is one index, not {act_dim} values")
        self.discrete = discrete
        o, a = obs_dim, act_dim
        # Column slices of a row, in order.
        self._slices = (slice(0, o), slice(o, o + a), o + a, slice(o + a + 1, 2 * o + a + 1),
                        2 * o + a + 1, 2 * o + a + 2)  # fmt: skip
        self.width = 2 * o + a + 3
        self.rows = torch.zeros(capacity, self.width, device=torch.device(device))
        self.size = 0  # rows filled
        self.position = 0  # where the next row goes

    @property
    def device(self) -> torch.device:
        """Where the rows are."""
        return self.rows.device

    def to(self, device: torch.device) -> ReplayBuffer:
        """Move the rows to ``device`` (a no-op when they are there)."""
        if self.rows.device != device:
            self.rows = self.rows.to(device)
        return self

    def add(self, rows: torch.Tensor) -> None:
        """Append ``(n, width)`` rows (on any device), wrapping around past the capacity."""
        n = rows.shape[0]
        if n == 0:
            return
        start = self.position
        end = start + n
        non_blocking = self.rows.device.type == "cuda"
        if end <= self.capacity:
            self.rows[start:end].copy_(rows, non_blocking=non_blocking)
        else:  # rare: split at the wrap (n is at most the number of envs)
            first = self.capacity - start
            self.rows[start:].copy_(rows[:first], non_blocking=non_blocking)
            self.rows[: n - first].copy_(rows[first:], non_blocking=non_blocking)
        self.position = end % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator) -> ReplayBatch:
        """``batch_size`` rows drawn uniformly with replacement, on the buffer's device."""
        index = torch.randint(self.size, (batch_size,), generator=generator,
                              device=self.rows.device)  # fmt: skip
        return self.fields(self.rows.index_select(0, index))

    def fields(self, rows: torch.Tensor) -> ReplayBatch:
        """The named views of a ``(B, width)`` block of rows."""
        obs, act, rew, nxt, term, trunc = self._slices
        actions = rows[:, act.start].long() if self.discrete else rows[:, act]
        return ReplayBatch(rows[:, obs], actions, rows[:, rew], rows[:, nxt],
                           rows[:, term], rows[:, trunc])  # fmt: skip

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self, contents: bool = True) -> dict[str, Any]:
        """Position and size, and (``contents``) the filled rows, on the CPU."""
        state: dict[str, Any] = {"size": self.size, "position": self.position,
                                 "width": self.width, "capacity": self.capacity}
        if contents:
            state["rows"] = self.rows[: self.size].cpu()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore :meth:`state_dict`; returns whether the rows were in it (else it is empty).

        Checked first, whole: the row width (the same env), ``size`` and ``position`` within
        the capacity and agreeing with the rows, and every row finite."""
        if not isinstance(state, dict):
            raise BeyondfitError(f"buffer is a {type(state).__name__}, not a mapping")
        if state.get("width", self.width) != self.width:
            raise BeyondfitError(
                f"buffer.width={state['width']!r}: the checkpoint's replay buffer holds rows of "
                f"other transitions than this env's ({self.width} values): resume with the "
                "same env"
            )
        size, position = state.get("size"), state.get("position")
        for name, value in (("size", size), ("position", position)):
            if not isinstance(value, int) or isinstance(value, bool) or not (
                    0 <= value <= self.capacity):
                raise BeyondfitError(f"buffer.{name}={value!r} is not a whole number in [0, "
                                     f"{self.capacity}] (the buffer's capacity)")
        if position == self.capacity or (size < self.capacity and position != size):
            raise BeyondfitError(f"buffer.position={position} does not follow buffer.size="
                                 f"{size}: rows are written in order, wrapping at "
                                 f"{self.capacity}")
        rows = state.get("rows")
        if rows is None:
            self.size = self.position = 0
            return False
        if not isinstance(rows, torch.Tensor) or rows.dtype != torch.float32 or rows.shape != (
                size, self.width):
            shown = tuple(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
            raise BeyondfitError(
                f"buffer.rows {shown} is not {size} float32 rows of {self.width} values (its "
                "size): resume with the same task.replay.buffer_size and env"
            )
        if not bool(torch.isfinite(rows).all()):
            raise BeyondfitError("buffer.rows holds values that are not finite (NaN or inf): "
                                 "no transition this package stores is")
        self.size, self.position = size, position
        self.rows[:size].copy_(rows)
        return True
