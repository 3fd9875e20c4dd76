"""Augmentation: a transform of each replay minibatch before any loss reads it.

``task.augment=[shift,intensity]`` is DrQ(eps)'s (Dopamine's ``atari_100k_rainbow_agent.py``):
each transform is applied to the batch's ``obs`` and ``next_obs`` independently, each image
with its own draw, so the Q value of ``s`` and the target on ``s'`` see different views (an
n-step batch's ``one_step_obs``, which ``self_prediction`` reads as its target, is left as
stored). The replay collector applies it as it hands a sampled
minibatch on, with its own generator (the one that sampled the rows: checkpointed, so a resumed
run draws the same views), so every loss, the shipped ones and one's own, reads an augmented
batch without knowing it. It is data, not a branch in a loss.

- :class:`RandomShift` (``shift``): the image padded by ``pad`` pixels that repeat its border,
  then cropped back at an offset drawn uniformly in ``[0, 2 pad]`` per image and axis (DrQ's
  4 of 84, edge padding).
- :class:`Intensity` (``intensity``): each image times ``1 + scale * clip(N(0, 1), -2, 2)``
  (DrQ(eps)'s ``scale=0.05``); the frames become float32 in the same 0-255 units, which the
  encoder scales as it scales uint8 frames.

A transform of one's own is ``{_target_: mymod.my_transform, _partial_: true}``, called as
``transform(images, generator)`` on ``(B, ...)`` observations and returning the same shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.rl.envs.spaces import channels_last, is_image

#: A transform of observations: ``transform(obs, generator) -> obs`` of the same shape.
Transform = Callable[[torch.Tensor, "torch.Generator | None"], torch.Tensor]


def random_shift(obs: torch.Tensor, pad: int = 4,
                 generator: torch.Generator | None = None) -> torch.Tensor:  # fmt: skip
    """Each image of ``obs`` padded by ``pad`` pixels that repeat its border (replicate
    padding), then cropped back to its size at an offset drawn uniformly in ``[0, 2 pad]`` per
    image and axis: DrQ's augmentation, in the batch's own dtype and layout (``(B, H, W)``,
    ``(B, C, H, W)`` or channels-last ``(B, H, W, C)``).

    On the CPU the padded batch is cropped image by image (ten times faster than one gather
    for Atari's 32 x 4 x 84 x 84); on an accelerator, one gather (the offsets never reach
    the host: no sync per batch). Both give the same images for the same draws."""
    if pad == 0:
        return obs
    last = obs.dim() == 4 and channels_last(tuple(obs.shape[1:]))
    rows, cols = (2, 3) if obs.dim() == 4 and not last else (1, 2)
    b, h, w = obs.shape[0], obs.shape[rows], obs.shape[cols]
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), device=obs.device, generator=generator)
    if obs.device.type == "cpu":
        padded = _edge_pad(_edge_pad(obs, pad, rows), pad, cols)
        return torch.stack([padded[i].narrow(rows - 1, r, h).narrow(cols - 1, c, w)
                            for i, (r, c) in enumerate(offsets.tolist())])
    x = obs.permute(0, 2, 3, 1) if rows == 2 else obs  # (B, H, W[, C])
    row_index = (torch.arange(h, device=obs.device) + offsets[:, :1] - pad).clamp(0, h - 1)
    col_index = (torch.arange(w, device=obs.device) + offsets[:, 1:] - pad).clamp(0, w - 1)
    index = torch.arange(b, device=obs.device)[:, None, None]
    out = x[index, row_index[:, :, None], col_index[:, None, :]]
    return out.permute(0, 3, 1, 2) if rows == 2 else out


def _edge_pad(x: torch.Tensor, pad: int, dim: int) -> torch.Tensor:
    """``x`` with its first and last slice along ``dim`` repeated ``pad`` times before and
    after (replicate padding of one axis, in any dtype)."""
    shape = list(x.shape)
    shape[dim] = pad
    first, last = x.narrow(dim, 0, 1), x.narrow(dim, x.shape[dim] - 1, 1)
    return torch.cat([first.expand(shape), x, last.expand(shape)], dim)


def shift_pad(space: gym.Space) -> int:
    """``pad=auto``: DrQ's 4 pixels of an 84-pixel frame, in proportion to the image's height,
    at least 1 (a MinAtar board of 10 shifts by 1: 4 would move it by 40% and wash out what
    the agent must see)."""
    shape = tuple(space.shape)
    height = shape[0] if channels_last(shape) or len(shape) == 2 else shape[-2]
    return max(1, round(4 * height / 84))


class RandomShift:
    """DrQ's random shift of images by up to ``pad`` pixels (``auto``: :func:`shift_pad`)."""

    def __init__(self, observation_space: gym.Space, pad: int | str = "auto") -> None:
        if pad == "auto":
            pad = shift_pad(observation_space)
        self.pad = int(check_number("task.augment shift's pad", pad, integer=True, at_least=0,
                                    example="{_target_: beyondfit.rl.algos.augmentation."
                                            "RandomShift, pad: 4}"))

    def __call__(self, obs: torch.Tensor, generator: torch.Generator | None = None
                 ) -> torch.Tensor:  # fmt: skip
        """``obs`` shifted, in its dtype."""
        return random_shift(obs, self.pad, generator)


class Intensity:
    """DrQ(eps)'s intensity jitter: each image times ``1 + scale * clip(N(0, 1), -2, 2)``."""

    def __init__(self, observation_space: gym.Space, scale: float = 0.05) -> None:
        self.scale = float(check_number("task.augment intensity's scale", scale, at_least=0,
                                        example="{_target_: beyondfit.rl.algos.augmentation."
                                                "Intensity, scale: 0.05}"))

    def __call__(self, obs: torch.Tensor, generator: torch.Generator | None = None
                 ) -> torch.Tensor:  # fmt: skip
        """``obs`` as float32 (same units), each image scaled by its own draw."""
        noise = torch.randn((obs.shape[0], *([1] * (obs.dim() - 1))), device=obs.device,
                            generator=generator)
        return obs.float() * (1.0 + self.scale * noise.clamp(-2.0, 2.0))


#: ``task.augment``: the transform each name builds (given the observation space).
AUGMENTATIONS: dict[str, Callable[[gym.Space], Transform]] = {
    "shift": RandomShift, "intensity": Intensity}


class Augmentation:
    """The transforms of ``task.augment``, applied in order to a batch's ``obs`` and
    ``next_obs``, each field with its own draws."""

    FIELDS = ("obs", "next_obs")

    def __init__(self, transforms: Sequence[Transform], names: Sequence[str]) -> None:
        self.transforms, self.names = list(transforms), list(names)

    def __call__(self, batch: Any, generator: torch.Generator | None = None) -> Any:
        """``batch`` (a named tuple) with its observation fields transformed."""
        changes = {}
        for field in self.FIELDS:
            value = getattr(batch, field, None)
            if value is None:
                continue
            for transform in self.transforms:
                value = transform(value, generator)
            changes[field] = value
        return batch._replace(**changes)


def resolve(augment: Any, observation_space: gym.Space) -> Augmentation | None:
    """``task.augment`` as an :class:`Augmentation` (``None`` for ``[]``): names of
    :data:`AUGMENTATIONS` and transforms of one's own, in order; each image augmentation
    refused in one line for observations that are not images, a name twice refused."""
    if augment is None:
        return None
    if isinstance(augment, str) or not isinstance(augment, Sequence):
        raise BeyondfitError(f"task.augment={augment!r} is a list: task.augment=[shift,intensity]"
                             " (names: " + ", ".join(AUGMENTATIONS) + ", or your own "
                             "{_target_: mymod.transform, _partial_: true})")
    transforms, names = [], []
    for i, entry in enumerate(augment):
        if isinstance(entry, str):
            if entry not in AUGMENTATIONS:
                raise BeyondfitError(f"unknown task.augment[{i}]={entry!r}; choose among "
                                     f"{', '.join(AUGMENTATIONS)}, or your own "
                                     "{_target_: mymod.transform, _partial_: true}")
            if not is_image(observation_space):
                raise BeyondfitError(f"task.augment[{i}]={entry} transforms images, but the "
                                     f"observations are {observation_space}; leave it out")
            transforms.append(AUGMENTATIONS[entry](observation_space))
            name = entry
        elif callable(entry):
            transforms.append(entry)
            func = getattr(entry, "func", entry)
            name = getattr(func, "__qualname__", type(entry).__name__)
        else:
            raise BeyondfitError(f"task.augment[{i}] is a {type(entry).__name__}: a name "
                                 f"({', '.join(AUGMENTATIONS)}) or a transform of your own")
        if name in names:
            raise BeyondfitError(f"task.augment lists {name} twice; each transform once")
        names.append(name)
    return Augmentation(transforms, names) if transforms else None
