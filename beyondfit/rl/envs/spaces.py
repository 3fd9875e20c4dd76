"""What an env's spaces hold, decided once from the space: whether the observations are
images and how they are laid out (:func:`is_image`, :func:`channels_last`), and which spaces
the collectors, policies and agents take (:func:`check_spaces`). The envs, the encoders, the
replay and the augmentations ask here instead of guessing from shapes each on its own."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from beyondfit.core.errors import BeyondfitError


def check_spaces(observation_space: gym.Space, action_space: gym.Space, env_id: str = "") -> None:
    """Raise :class:`BeyondfitError` unless observations are Box and actions Discrete or Box."""
    where = f" of env {env_id!r}" if env_id else ""
    if not isinstance(observation_space, gym.spaces.Box):
        raise BeyondfitError(
            f"observation space {observation_space}{where} is not supported: the policies "
            "take a Box (a vector, or images); flatten it first, e.g. with "
            "gymnasium.wrappers.FlattenObservation, or pick another env with task.env=ID"
        )
    if not isinstance(action_space, gym.spaces.Discrete | gym.spaces.Box):
        raise BeyondfitError(
            f"action space {action_space}{where} is not supported: the policies handle Discrete "
            "(categorical) and Box (diagonal Gaussian) actions; pick another env with task.env=ID"
        )


def is_image(space: gym.Space) -> bool:
    """Does ``space`` hold images: a Box of three dimensions (channels and two spatial ones),
    or of two with an integer or boolean dtype (one grayscale frame)?"""
    if not isinstance(space, gym.spaces.Box):
        return False
    integral = np.issubdtype(space.dtype, np.integer) or space.dtype == np.bool_
    return len(space.shape) == 3 or (len(space.shape) == 2 and integral)


def channels_last(shape: tuple[int, ...]) -> bool:
    """Is an image of ``shape`` laid out height x width x channels (Gymnasium's RGB frames,
    MinAtar's boards) rather than channels first (a frame stack, ``(4, 84, 84)``)? Two equal
    axes are the spatial ones; otherwise the channel axis is the short one, and a cube
    (MinAtar's ``(10, 10, 10)``) is Gymnasium's height x width x channels."""
    if len(shape) != 3:
        return False
    if shape[1] == shape[2] and shape[0] != shape[1]:
        return False
    if shape[0] == shape[1]:
        return True
    return shape[-1] < shape[0]
