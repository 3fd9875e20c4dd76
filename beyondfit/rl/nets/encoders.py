"""The encoder: what turns a raw observation into features, one part shared by every algorithm.

Observations reach the networks as the env made them (uint8 frames, bool boards, float32
vectors: :func:`~beyondfit.rl.envs.vector.observation_converter` keeps the space's dtype), and
become floats here, on the training device. A loss never calls an encoder itself: ``model.q(obs)``,
``model.critic(obs, a)``, ``model.actor(obs)`` and the policy's methods take raw observations.

- ``flat``: observations flattened, optionally normalized (vectors: CartPole, MuJoCo);
- ``nature``: the Nature-DQN CNN (Mnih et al. 2015; CleanRL's ``ppo_atari.py`` and SB3's
  ``NatureCNN``) for 84x84 frames, pixels scaled to ``[0, 1]``: 512 features;
- ``minatar``: the MinAtar paper's network (Young & Tian 2019) for 10x10xC boards: one 3x3
  convolution of 16 filters, 128 features;
- your own: any ``nn.Module`` taking a batch of raw observations to ``(B, F)`` features,
  named in the config by a factory ``observation_space -> module``
  (``task.encoder={_target_: myenc.build, _partial_: true}``); its width is measured on one
  observation of the space.

:func:`make_encoder` picks one from the observation space by default (``auto``): a Box of
images (three dimensions, or two of integers) never silently gets the MLP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.nets import INITS
from beyondfit.rl.envs.spaces import channels_last, is_image

#: The encoders ``task.encoder`` names (``auto`` picks one of these from the space).
ENCODERS = ("auto", "flat", "nature", "minatar")




class Pixels(nn.Module):
    """An image batch as the convolutions read it: ``(B, C, H, W)`` float32 in channels-last
    memory (oneDNN's own layout: a CNN's forward and backward took 0.11 s instead of 0.17 s per
    256 Atari frames on one CPU core, and cuDNN prefers it too), written in one pass from the
    uint8 frames or bool boards. Values are left as they are: :class:`ScaledConv2d`, the first
    convolution, scales them (uint8 to ``[0, 1]``) on its weights, not on every pixel."""

    def __init__(self, space: gym.spaces.Box, last: bool | None = None) -> None:
        super().__init__()
        shape = tuple(space.shape)
        self.last = channels_last(shape) if last is None else bool(last)
        #: What the first convolution multiplies the raw values by: 1/255 for uint8 frames.
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
        if len(shape) == 2:
            self.channels, self.size = 1, shape
        elif self.last:
            self.channels, self.size = shape[2], shape[:2]
        else:
            self.channels, self.size = shape[0], shape[1:]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` float32, channels-last, raw values."""
        if obs.dim() == 3:
            obs = obs.unsqueeze(1)
        elif self.last:
            obs = obs.permute(0, 3, 1, 2)
        if obs.dtype == torch.float32 and obs.is_contiguous(memory_format=torch.channels_last):
            return obs
        out = torch.empty(obs.shape, dtype=torch.float32, device=obs.device,
                          memory_format=torch.channels_last)
        return out.copy_(obs)  # the layout and the dtype in one pass


class ScaledConv2d(nn.Conv2d):
    """A convolution of ``scale`` x its input: the scale goes on the (small) weight, which is
    the same sum as scaling every input value first (CleanRL's ``x / 255.0``)."""

    def __init__(self, *args: Any, scale: float = 1.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``conv(scale * x)``."""
        weight = self.weight if self.scale == 1.0 else self.weight * self.scale
        return self._conv_forward(x, weight, self.bias)


class NatureCNN(nn.Module):
    """The Nature-DQN CNN: 32 8x8/4, 64 4x4/2, 64 3x3/1 convolutions, then ``features`` units.

    ``init``: ``"orthogonal"`` (the default: CleanRL's ``ppo_atari.py`` and SB3's PPO, gain
    sqrt 2, zero biases; the policy's and value heads' own gains go on top) or ``"default"``
    (torch's, as SB3's ``ortho_init=False`` leaves it)."""

    def __init__(self, space: gym.spaces.Box, features: int = 512,
                 channels_last: bool | None = None, init: str = "orthogonal") -> None:  # fmt: skip
        super().__init__()
        self.pixels = Pixels(space, channels_last)
        self.convs = nn.Sequential(
            _initialized(ScaledConv2d(self.pixels.channels, 32, 8, stride=4,
                                      scale=self.pixels.scale), init), nn.ReLU(),
            _initialized(nn.Conv2d(32, 64, 4, stride=2), init), nn.ReLU(),
            _initialized(nn.Conv2d(64, 64, 3, stride=1), init), nn.ReLU(),
            nn.Flatten(),
        )
        flat = _width(self.convs, self.pixels.channels, self.pixels.size, "nature", (36, 36))
        self.head = nn.Sequential(_initialized(nn.Linear(flat, features), init), nn.ReLU())
        self.features = int(features)
        self.convs.to(memory_format=torch.channels_last)  # as Pixels hands the frames over

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, features)``."""
        return self.head(self.convs(self.pixels(obs)))


class MinAtarCNN(nn.Module):
    """The MinAtar paper's network: one 3x3 convolution of 16 filters (stride 1), then
    ``features`` units (128), over a 10x10xC board of 0/1 channels.

    ``init``: ``"default"`` (torch's, as the paper's DQN and SB3's DQN leave it) or
    ``"orthogonal"`` (gain sqrt 2, zero biases: what SB3's PPO ``ortho_init`` does to a
    features extractor, and what the policy-gradient policy asks for by default)."""

    def __init__(self, space: gym.spaces.Box, features: int = 128, filters: int = 16,
                 channels_last: bool | None = None, init: str = "default") -> None:  # fmt: skip
        super().__init__()
        self.pixels = Pixels(space, channels_last)
        self.convs = nn.Sequential(
            _initialized(ScaledConv2d(self.pixels.channels, filters, 3, stride=1,
                                      scale=self.pixels.scale), init),
            nn.ReLU(), nn.Flatten())
        flat = _width(self.convs, self.pixels.channels, self.pixels.size, "minatar", (3, 3))
        self.head = nn.Sequential(_initialized(nn.Linear(flat, features), init), nn.ReLU())
        self.features = int(features)
        self.convs.to(memory_format=torch.channels_last)  # as Pixels hands the frames over

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, features)``."""
        return self.head(self.convs(self.pixels(obs)))


class Flat(nn.Module):
    """Inputs flattened to ``(B, features)`` float32: the encoder of a network built from a
    flat width (``CriticEnsemble(model.obs_dim, ...)``) rather than an observation space."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.features = int(features)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, features)``."""
        x = obs.flatten(1)
        return x if x.dtype == torch.float32 else x.float()


def as_encoder(encoder: nn.Module | int) -> nn.Module:
    """``encoder`` itself, or for a width ``n`` (the networks' former signature, and a part
    of one's own built from ``model.obs_dim``) a flatten of ``n`` features."""
    return Flat(encoder) if isinstance(encoder, int) else encoder


def make_encoder(space: gym.Space, encoder: Any = "auto", normalized: bool = False,
                 init: str | None = None) -> nn.Module:  # fmt: skip
    """The encoder ``encoder`` names for observations of ``space``, with its ``features`` width.

    ``encoder``: ``"auto"`` (``nature`` for frames of at least 36x36, ``minatar`` for smaller
    images, ``flat`` otherwise), ``"flat"``, ``"nature"``, ``"minatar"``, or a callable
    ``space -> nn.Module`` (a factory of your own). ``normalized`` (running observation
    statistics asked for) goes with ``flat`` only: per-pixel statistics of frames are refused
    in one line. ``init`` (``"orthogonal"`` or ``"default"``) initializes a built-in CNN as the
    network around it is (the policy-gradient policy passes its ``task.init``, as SB3's PPO
    initializes its features extractor with its heads); ``None`` keeps each CNN's own default.
    """
    image = is_image(space)
    if (encoder in (None, "auto", "flat") and isinstance(space, gym.spaces.Box)
            and len(space.shape) >= 4 and np.issubdtype(space.dtype, np.integer)):
        raise BeyondfitError(
            f"the observations {tuple(space.shape)} {space.dtype} are stacked color frames, "
            f"which the built-in CNNs do not read (and task.encoder={encoder or 'auto'} would "
            "flatten raw pixels into a linear layer): stack grayscale frames (Atari: "
            "grayscale_obs: true in AtariPreprocessing), or give your own encoder "
            "(task.encoder={_target_: mymod.build, _partial_: true})")
    if encoder is None or encoder == "auto":
        encoder = ("nature" if min(_spatial(space)) >= 36 else "minatar") if image else "flat"
    if normalized and encoder != "flat":
        raise BeyondfitError(
            f"task.normalize asks for running observation statistics, but the observations "
            f"{space} go through the {encoder if isinstance(encoder, str) else 'own'} encoder "
            "(images are scaled inside it); set task.normalize=null, or "
            "task.normalize='{observations: false, rewards: true}' to scale rewards only"
        )
    if isinstance(encoder, str):
        if encoder not in ENCODERS:
            raise BeyondfitError(f"unknown task.encoder={encoder!r}; choose one of "
                                 f"{', '.join(ENCODERS)}, or a factory of your own "
                                 "({_target_: mymodule.build, _partial_: true})")
        if encoder == "flat":
            return Flat(int(np.prod(space.shape)))
        if not image:
            raise BeyondfitError(f"task.encoder={encoder} reads images, but the observations "
                                 f"are {space}; use task.encoder=flat (or auto)")
        options = {} if init is None else {"init": init}
        return NatureCNN(space, **options) if encoder == "nature" \
            else MinAtarCNN(space, **options)
    if callable(encoder):
        return own_encoder(encoder, space)
    raise BeyondfitError(f"task.encoder is a {type(encoder).__name__}; name one of "
                         f"{', '.join(ENCODERS)} or a factory observation_space -> nn.Module")


def describe_encoder(encoder: Any) -> str | dict[str, Any]:
    """What a policy file records of ``encoder``: a built-in's name, or ``{"_target_":
    "module.function", OPTION: VALUE}`` for a factory of your own and the options it was given
    (``play`` rebuilds it only from a module you allow it to import)."""
    if encoder is None or isinstance(encoder, str):
        return "auto" if encoder is None else encoder
    func = getattr(encoder, "func", encoder)
    options = dict(getattr(encoder, "keywords", None) or {})
    return {"_target_": f"{func.__module__}.{func.__qualname__}", **options}


def own_encoder(factory: Callable[[gym.Space], nn.Module], space: gym.Space) -> nn.Module:
    """Build a user's encoder and measure its feature width on one observation of ``space``
    (raw, as the env gives it); a factory that fails, or a module that does not return
    ``(1, F)`` features, is one line naming it."""
    name = getattr(factory, "__qualname__", None) or getattr(
        getattr(factory, "func", None), "__qualname__", type(factory).__name__)
    try:
        module = factory(space)
    except BeyondfitError:
        raise
    except Exception as exc:
        raise BeyondfitError(f"task.encoder {name}(observation_space) raised "
                             f"{type(exc).__name__}: {exc}") from None
    if not isinstance(module, nn.Module):
        raise BeyondfitError(f"task.encoder {name}(observation_space) returned a "
                             f"{type(module).__name__}, not a torch.nn.Module")
    # A batch of two: an encoder that returns one row whatever the batch is caught here.
    sample = torch.as_tensor(np.zeros((2, *space.shape), dtype=space.dtype))
    try:
        with torch.no_grad():
            out = module(sample)
    except Exception as exc:
        raise BeyondfitError(
            f"task.encoder {name} cannot read a batch of observations {tuple(sample.shape)} "
            f"{sample.dtype} ({type(exc).__name__}: {exc}); it gets raw observations as the "
            "env gives them, batched, and converts them itself") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2:
        shown = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise BeyondfitError(f"task.encoder {name} returned {shown} for a batch of 2 "
                             "observations; an encoder returns features of shape "
                             "(batch, features), one row per observation")
    if out.dtype != torch.float32:
        raise BeyondfitError(f"task.encoder {name} returned {out.dtype} features; the heads "
                             "after it are float32: end it with .float()")
    if out.shape[1] == 0:
        raise BeyondfitError(f"task.encoder {name} returned 0 features per observation: the "
                             "policy would see nothing; return at least one")
    module.features = int(out.shape[1])
    return module


def _spatial(space: gym.Space) -> tuple[int, int]:
    shape = tuple(space.shape)
    if len(shape) == 2:
        return shape  # type: ignore[return-value]
    return shape[:2] if channels_last(shape) else shape[1:]  # type: ignore[return-value]


def _initialized(layer: nn.Module, init: str) -> nn.Module:
    # ``layer`` with orthogonal weights of gain sqrt 2 and zero biases (CleanRL's layer_init,
    # SB3's ortho_init of a features extractor), or as torch initialized it.
    if init not in INITS:
        raise BeyondfitError(f"unknown task.init={init!r}; choose one of {', '.join(INITS)}")
    if init == "orthogonal":
        nn.init.orthogonal_(layer.weight, float(np.sqrt(2)))
        nn.init.zeros_(layer.bias)
    return layer


def _width(convs: nn.Module, channels: int, size: tuple[int, ...], name: str,
           least: tuple[int, int]) -> int:  # fmt: skip
    # The flattened width after the convolutions, or one line for frames they cannot read.
    if size[0] < least[0] or size[1] < least[1]:
        raise BeyondfitError(f"task.encoder={name} needs frames of at least {least[0]}x"
                             f"{least[1]}, got {size[0]}x{size[1]}; use task.encoder=minatar "
                             "for small boards, or resize the frames with a wrapper")
    with torch.no_grad():
        return int(convs(torch.zeros(1, channels, *size)).shape[1])
