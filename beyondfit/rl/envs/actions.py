"""How the replay collector handles an action space's actions: drawn at random, stored, sent.

A ``Box`` space's actions live in ``[-1, 1]`` inside the agent and the buffer and reach the env
rescaled to its bounds; a ``Discrete`` space's are indices ``0 .. n - 1`` (stored exactly as one
float32 value, handed to a loss as int64) and reach the env plus the space's ``start``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from beyondfit.core.errors import BeyondfitError


def box_bounds(space: gym.Space, env_id: str = "") -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` of a bounded ``Box`` action space, else a :class:`BeyondfitError`."""
    where = f" of env {env_id!r}" if env_id else ""
    if not isinstance(space, gym.spaces.Box):
        raise BeyondfitError(
            f"action space {space}{where} is not a Box: SAC and TD3 act in continuous (Box) "
            "action spaces; for Discrete actions use algo=ppo"
        )
    low, high = space.low.reshape(-1), space.high.reshape(-1)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise BeyondfitError(
            f"action space {space}{where} is unbounded: SAC and TD3 squash actions into the "
            "Box's bounds; wrap the env with gymnasium.wrappers.RescaleAction or ClipAction"
        )
    return low.astype(np.float64), high.astype(np.float64)


class BoxActions:
    """A ``Box`` space's actions: the agent's are in ``[-1, 1]``, stored so, sent rescaled."""

    def __init__(self, space: gym.Space, num_envs: int) -> None:
        self.low, self.high = box_bounds(space)
        self._half = (self.high - self.low) / 2
        self._dtype, self._shape = space.dtype, (num_envs, *space.shape)
        self.columns = self.low.size  # values per stored action

    def random(self, generator: torch.Generator, device: torch.device) -> np.ndarray:
        """Uniform actions in ``[-1, 1]``, one row per env copy."""
        action = torch.rand(self._shape, generator=generator, device=device)
        return action.mul_(2).sub_(1).cpu().numpy()

    def to_env(self, action: np.ndarray) -> np.ndarray:
        """``(n, columns)`` agent actions as the vector env takes them."""
        sent = (self.low + (action + 1.0) * self._half).astype(self._dtype)
        return sent.reshape(self._shape)


class DiscreteActions:
    """A ``Discrete`` space's actions: the index ``0 .. n - 1``, stored exactly (a float32
    column holds integers below ``2**24``; the batch hands them out as int64), sent plus the
    space's ``start``."""

    columns = 1

    def __init__(self, space: gym.spaces.Discrete, num_envs: int) -> None:
        self.n, self.start, self.num_envs = int(space.n), int(space.start), num_envs
        if self.n > 1 << 24:
            raise BeyondfitError(f"action space {space} has more than 2**24 actions: the replay "
                                 "buffer stores an action index exactly below that")

    def random(self, generator: torch.Generator, device: torch.device) -> np.ndarray:
        """Uniform indices, one per env copy."""
        index = torch.randint(self.n, (self.num_envs,), generator=generator, device=device)
        return index.cpu().numpy()

    def to_env(self, action: np.ndarray) -> np.ndarray:
        """``(n, 1)`` indices as the vector env takes them."""
        return action.reshape(self.num_envs).astype(np.int64) + self.start


def action_columns(space: gym.Space, num_envs: int) -> BoxActions | DiscreteActions:
    """How the collector draws, stores and sends ``space``'s actions; one error line for a
    space the replay collector does not take."""
    if isinstance(space, gym.spaces.Discrete):
        return DiscreteActions(space, num_envs)
    if isinstance(space, gym.spaces.Box):
        return BoxActions(space, num_envs)
    raise BeyondfitError(f"action space {space} is neither a Box nor Discrete: the replay "
                         "collector stores one of those; pick another env with task.env=ID")
