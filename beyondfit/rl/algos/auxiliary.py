"""Self-supervision inside RL: auxiliary losses on the agent's encoder, in the algorithm's step.

``task.aux=[NAME, ...]`` adds terms to an algorithm's loss; each trains the encoder that the RL
loss trains too, on the same batch, in the same step (same optimizer, clipping, precision,
compile and checkpoints). How each is combined, in the one place a reader sees
(:meth:`Auxiliary.wrap`)::

    batch = shift(batch)                          # shift only: what every term below sees
    out = rl_loss(model, batch)                   # {"loss": ..., the algorithm's own logs}
    out["loss"] += weight * term(model, batch)    # for each term, logged as aux/NAME

The sum is minimised by the optimizer of the update that trains the encoder (PPO's one
optimizer; DQN's ``q``; SAC's and TD3's ``critic``), whose parameters grow by the terms'
parts (a decoder, a projection head); a term's momentum copies (:class:`Momentum`: a
:class:`~beyondfit.core.target.SlowCopy`) follow right after each of that optimizer's steps.
Off-policy, the update's name prefixes the logs (``q/aux/reconstruction``).

The built-ins (options in ``task.aux_options.NAME``; each needs image observations):

- ``shift``: DrQ's random shift (Kostrikov, Yarats et al. 2020): each frame padded by ``pad``
  pixels repeating its border (``auto``: DrQ's 4 of 84 in proportion to the frame's height, at
  least 1), then cropped back at a random offset. Not a term: it changes the
  batch the RL loss (and any term after it) sees. Q-learning (``dqn_loss``) averages its TD
  target over ``k`` shifted next observations and its loss over ``m`` shifted observations
  (DrQ's K and M; the batch carries them as ``obs_views``/``next_views``); other losses see one
  shifted ``obs`` (and ``next_obs``). The offsets are drawn from torch's generator, which
  ``seed=`` seeds and every checkpoint saves (a ``torch.Generator`` argument would break the
  compiled step's graph).
- ``reconstruction``: SAC-AE (Yarats et al. 2019): a decoder from the encoder's features back to
  the observation; the mean squared error on the pixels scaled to ``[0, 1]`` plus ``latent`` x
  half the squared norm of the features.
- ``self_prediction``: SPR-style (Schwarzer et al. 2021), one step ahead: a transition model
  maps the features and the action to the next step's features, projected and passed through a
  prediction head; scored by ``2 - 2 cos`` against a momentum copy of the encoder and the
  projection applied to the next observation (BYOL inside RL). PPO's rollout batch and the
  replay's both carry ``next_obs``.

Your own: a factory returning an :class:`AuxLoss` (its closure, weight, the parts it needs
built, its momentum copies), named with ``task.aux=[{_target_: mymod.curl}]``, or a bare
closure ``aux(model, batch) -> loss or {"loss": ..., ...}`` named with
``task.aux=[{_target_: mymod.term, _partial_: true}]`` (weight 1, no parts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, get_type_hints

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.core.target import SlowCopy
from beyondfit.core.update import Update
from beyondfit.nets import mlp
from beyondfit.rl.algos.augmentation import random_shift, shift_pad
from beyondfit.rl.envs.spaces import is_image
from beyondfit.rl.nets.encoders import Pixels
from beyondfit.rl.replay.buffer import ReplayBatch

#: A term's closure: ``aux(model, batch) -> scalar tensor or {"loss": ..., logged values}``.
Closure = Callable[[nn.Module, Any], Any]

#: The built-in names ``task.aux`` takes, and their options' defaults (``task.aux_options``).
BUILTINS: dict[str, dict[str, Any]] = {
    "shift": {"pad": "auto", "k": 2, "m": 2},
    "reconstruction": {"weight": 1.0, "latent": 1.0e-6},
    "self_prediction": {"weight": 1.0, "rate": 0.01, "projection": 128, "hidden": 256},
}


@dataclass(frozen=True)
class Momentum:
    """A slow copy a term reads: ``model.NAME``, a :class:`~beyondfit.core.target.SlowCopy` of
    ``model.OF`` (the agent's ``encoder``, or one of the term's parts), averaged by ``rate``
    right after every ``every``-th step of the optimizer that minimises the term."""

    name: str
    of: str
    rate: float = 0.01
    every: int = 1


@dataclass(frozen=True)
class AuxLoss:
    """One auxiliary term.

    Attributes:
        name: logged as ``aux/NAME`` (the unweighted term; its closure's other entries as
            ``aux/NAME/ENTRY``).
        loss: ``loss(model, batch)``: a scalar tensor, or ``{"loss": ..., other values}``.
        weight: what the term is multiplied by in the sum.
        parts: ``{attribute: build(model) -> module}``: the parts the term trains that the
            agent lacks (kept on the model, so they move to the device, are checkpointed and
            join the optimizer; left out of ``policy.pt``).
        momentum: its :class:`Momentum` copies, made after the parts.
    """

    name: str
    loss: Closure
    weight: float = 1.0
    parts: Mapping[str, Callable[[nn.Module], nn.Module]] = field(default_factory=dict)
    momentum: Sequence[Momentum] = ()


@dataclass(frozen=True)
class Shift:
    """DrQ's random shift: ``pad`` pixels of border, ``k`` next observations and ``m``
    observations per transition for Q-learning's averaged target and loss."""

    pad: int = 4
    k: int = 2
    m: int = 2


# Built from ReplayBatch's fields, not a second list of them: a loss that does not know the
# views reads it as the replay batch it extends.
ShiftedReplayBatch = NamedTuple("ShiftedReplayBatch", [
    *get_type_hints(ReplayBatch).items(),
    ("obs_views", torch.Tensor),
    ("next_views", torch.Tensor),
])
ShiftedReplayBatch.__doc__ = """A :class:`~beyondfit.rl.replay.buffer.ReplayBatch` as ``shift``
    hands it on: ``obs`` and ``next_obs`` are the first shifted view; ``obs_views`` ``(m * B, ...)``
    and ``next_views`` ``(k * B, ...)`` hold all of them, view-major (``dqn_loss`` averages over
    them; a loss that does not know them reads the first)."""




def shifted(batch: Any, shift: Shift) -> Any:
    """``batch`` with its observations shifted: a replay batch as a
    :class:`ShiftedReplayBatch` (``m`` and ``k`` views), any other batch with ``obs`` (and
    ``next_obs`` where it has one) replaced by one shifted view."""
    next_obs = getattr(batch, "next_obs", None)
    if isinstance(batch, ReplayBatch):
        n = batch.obs.shape[0]
        obs_views = random_shift(_repeat(batch.obs, shift.m), shift.pad)
        next_views = random_shift(_repeat(next_obs, shift.k), shift.pad)
        first = batch._replace(obs=obs_views[:n], next_obs=next_views[:n])
        return ShiftedReplayBatch(*first, obs_views=obs_views, next_views=next_views)
    changes = {"obs": random_shift(batch.obs, shift.pad)}
    if next_obs is not None:
        changes["next_obs"] = random_shift(next_obs, shift.pad)
    return batch._replace(**changes)


def _repeat(x: torch.Tensor, times: int) -> torch.Tensor:
    return x if times == 1 else x.repeat(times, *([1] * (x.dim() - 1)))


class Auxiliary:
    """``task.aux`` resolved: the shift (or none) and the terms, with what attaching them to a
    model builds. One per run; :meth:`attach` once, then :meth:`wrap` the encoder's closure."""

    def __init__(self, shift: Shift | None, terms: Sequence[AuxLoss]) -> None:
        self.shift, self.terms = shift, list(terms)
        self.copies: list[SlowCopy] = []

    @property
    def names(self) -> list[str]:
        """What the run asked for, in order (``shift`` first if asked)."""
        return (["shift"] if self.shift else []) + [t.name for t in self.terms]

    def attach(self, model: nn.Module) -> tuple[list[nn.Parameter], list[Callable[..., Any]],
                                                list[str]]:  # fmt: skip
        """Build every term's parts on ``model`` (then their momentum copies): the parts'
        parameters (for the encoder's optimizer), the copies' ``update`` hooks (its
        ``after_step``) and the attributes added (training's alone: not in ``policy.pt``)."""
        params: list[nn.Parameter] = []
        added: list[str] = []
        for term in self.terms:
            for name, build in term.parts.items():
                if getattr(model, name, None) is not None:
                    raise BeyondfitError(f"task.aux {term.name!r}: its part {name!r} is already "
                                         "a part of the agent; name it otherwise")
                part = build(model)
                if not isinstance(part, nn.Module):
                    raise BeyondfitError(f"task.aux {term.name!r}: build of {name!r} returned a "
                                         f"{type(part).__name__}, not a torch.nn.Module")
                setattr(model, name, part)
                params += [p for p in part.parameters() if p.requires_grad]
                added.append(name)
        for term in self.terms:
            for m in term.momentum:
                source = getattr(model, m.of, None)
                if not isinstance(source, nn.Module):
                    raise BeyondfitError(f"task.aux {term.name!r}: its momentum copy {m.name!r} "
                                         f"follows model.{m.of}, which is not a module")
                if getattr(model, m.name, None) is not None:
                    raise BeyondfitError(f"task.aux {term.name!r}: {m.name!r} is already a "
                                         "part of the agent")
                copy = SlowCopy(source, rate=m.rate, every=m.every)
                setattr(model, m.name, copy)
                self.copies.append(copy)
                added.append(m.name)
        return params, [c.update for c in self.copies], added

    def join(self, model: nn.Module, trains: Sequence[str], updates: list[Update]
             ) -> list[str]:  # fmt: skip
        """Put the terms on the off-policy update that trains the agent's encoder (DQN's
        ``q``, SAC's and TD3's ``critic``; the first when the encoder has no parameters):
        ``updates[i]`` (training ``model.<trains[i]>``) becomes that update over its part and
        the terms' parts, minimising :meth:`wrap` of its closure, the momentum copies following
        its steps. Returns the attributes added to ``model`` (training's alone)."""
        encoder = getattr(model, "encoder", None)
        first = next(iter(encoder.parameters()), None) if isinstance(encoder, nn.Module) else None
        owner = next((i for i, name in enumerate(trains) if first is not None and isinstance(
            getattr(model, name), nn.Module) and any(
            p is first for p in getattr(model, name).parameters())), 0)
        extra, hooks, added = self.attach(model)
        u, part = updates[owner], getattr(model, trains[owner])
        params = [part] if isinstance(part, nn.Parameter) else list(part.parameters())
        updates[owner] = Update(u.name, self.wrap(u.loss_fn), params=[*params, *extra],
                                every=u.every, after_step=[*u.after_step, *hooks],
                                optimizer_options=u.optimizer_options)
        return added

    def wrap(self, closure: Closure) -> Closure:
        """The closure that the encoder's optimizer minimises: the RL loss on the (shifted)
        batch plus each term times its weight; each term logged as ``aux/NAME``."""
        shift, terms = self.shift, self.terms

        def loss(model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
            if shift is not None:
                batch = shifted(batch, shift)
            out = closure(model, batch)
            out = dict(out) if isinstance(out, Mapping) else {"loss": out}
            total = out["loss"]
            for term in terms:
                value, extras = _split(term.loss(model, batch), term.name)
                total = total + term.weight * value
                out[f"aux/{term.name}"] = value.detach()
                for key, extra in extras.items():
                    out[f"aux/{term.name}/{key}"] = extra
            out["loss"] = total
            return out

        return loss


def _split(out: Any, name: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if isinstance(out, Mapping):
        if "loss" not in out:
            raise BeyondfitError(f"task.aux {name!r} returned a mapping without 'loss'; return "
                                 "a scalar tensor or {'loss': ..., other values}")
        return out["loss"], {k: v for k, v in out.items() if k != "loss"}
    if not isinstance(out, torch.Tensor):
        raise BeyondfitError(f"task.aux {name!r} returned {type(out).__name__}; return a "
                             "scalar tensor or {'loss': ..., other values}")
    return out, {}


# ---------------------------------------------------------------------------------- resolving
def resolve(aux: Any, options: Mapping[str, Any] | None, observation_space: gym.Space,
            action_space: gym.Space) -> Auxiliary | None:  # fmt: skip
    """``task.aux`` (names, :class:`AuxLoss` objects or closures) and ``task.aux_options`` as
    an :class:`Auxiliary`; ``None`` when none is asked for (the run is then exactly what it is
    without this module)."""
    entries = [] if aux is None else list(aux) if isinstance(aux, Sequence) and not isinstance(
        aux, str) else [aux]
    if not entries:
        return None
    settings = _options(options)
    shift: Shift | None = None
    terms: list[AuxLoss] = []
    for entry in entries:
        if isinstance(entry, str):
            if entry not in BUILTINS:
                raise BeyondfitError(f"unknown task.aux entry {entry!r}; choose among "
                                     f"{', '.join(BUILTINS)}, or name your own "
                                     "({_target_: mymod.factory} returning an AuxLoss)")
            if not is_image(observation_space):
                raise BeyondfitError(
                    f"task.aux={entry} works on the encoder of image observations, but they "
                    f"are {observation_space} (a flatten with nothing to train); use a pixel "
                    "task (+task=minatar, +task=atari) or drop it")
            if entry == "shift":
                if shift is not None:
                    raise BeyondfitError("task.aux lists shift twice; once is one shift of "
                                         "each view (its k and m: task.aux_options.shift)")
                o = settings["shift"]
                pad = shift_pad(observation_space) if o["pad"] == "auto" else o["pad"]
                shift = Shift(pad, o["k"], o["m"])
            elif entry == "reconstruction":
                terms.append(reconstruction(observation_space, **settings["reconstruction"]))
            else:
                terms.append(self_prediction(observation_space, action_space,
                                             **settings["self_prediction"]))
        elif isinstance(entry, AuxLoss):
            terms.append(entry)
        elif callable(entry):
            func = getattr(entry, "func", entry)
            terms.append(AuxLoss(getattr(func, "__name__", "own"), entry))
        else:
            raise BeyondfitError(f"task.aux entry {entry!r} is a {type(entry).__name__}: name a "
                                 f"built-in ({', '.join(BUILTINS)}), a factory returning an "
                                 "AuxLoss ({_target_: mymod.curl}) or a closure "
                                 "({_target_: mymod.term, _partial_: true})")
    names = [t.name for t in terms]
    if len(set(names)) != len(names):
        raise BeyondfitError(f"task.aux names {names} must be distinct: they name the logs")
    for t in terms:
        check_number(f"task.aux {t.name!r} weight", t.weight, at_least=0)
    return Auxiliary(shift, terms)


def _options(options: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``task.aux_options`` over :data:`BUILTINS`' defaults, each key and value checked."""
    given = dict(options or {})
    unknown = sorted(set(given) - set(BUILTINS))
    if unknown:
        raise BeyondfitError(f"unknown task.aux_options {unknown}; known: {', '.join(BUILTINS)}")
    settings = {}
    for name, defaults in BUILTINS.items():
        mine = dict(given.get(name) or {})
        extra = sorted(set(mine) - set(defaults))
        if extra:
            raise BeyondfitError(f"unknown task.aux_options.{name} option(s) {extra}; known: "
                                 f"{', '.join(defaults)}")
        settings[name] = {**defaults, **mine}
    s = settings["shift"]
    if s["pad"] != "auto":
        check_number("task.aux_options.shift.pad", s["pad"], integer=True, at_least=0,
                     example="task.aux_options.shift.pad=4 (or auto)")
    for key in ("k", "m"):
        check_number(f"task.aux_options.shift.{key}", s[key], integer=True, at_least=1,
                     example=f"task.aux_options.shift.{key}=2")
    for name in ("reconstruction", "self_prediction"):
        check_number(f"task.aux_options.{name}.weight", settings[name]["weight"], at_least=0,
                     example=f"task.aux_options.{name}.weight=1.0")
    check_number("task.aux_options.reconstruction.latent", settings["reconstruction"]["latent"],
                 at_least=0, example="task.aux_options.reconstruction.latent=1e-6")
    sp = settings["self_prediction"]
    check_number("task.aux_options.self_prediction.rate", sp["rate"], above=0, at_most=1,
                 example="task.aux_options.self_prediction.rate=0.01")
    for key in ("projection", "hidden"):
        check_number(f"task.aux_options.self_prediction.{key}", sp[key], integer=True,
                     at_least=1, example=f"task.aux_options.self_prediction.{key}=128")
    return settings


# ---------------------------------------------------------------------------------- built-ins
def _features(model: nn.Module) -> int:
    return int(model.encoder.features)


class Decoder(nn.Module):
    """SAC-AE's decoder: features back to ``(B, C, H, W)`` images of ``space``'s size.
    Frames of at least 36x36: the Nature CNN's convolutions transposed (7x7 -> 84x84, resized
    to the frame when it is another size); smaller boards: one linear layer to 16 maps of
    ``(H - 2) x (W - 2)`` and a 3x3 transposed convolution."""

    def __init__(self, space: gym.spaces.Box, features: int) -> None:
        super().__init__()
        pixels = Pixels(space)
        c, (h, w) = pixels.channels, tuple(pixels.size)
        self.size = (h, w)
        if min(h, w) >= 36:
            self.shape = (64, 7, 7)
            self.body = nn.Sequential(
                nn.ConvTranspose2d(64, 64, 3, stride=1), nn.ReLU(),
                nn.ConvTranspose2d(64, 32, 4, stride=2), nn.ReLU(),
                nn.ConvTranspose2d(32, c, 8, stride=4))
        else:
            self.shape = (16, h - 2, w - 2)
            self.body = nn.ConvTranspose2d(16, c, 3, stride=1)
        self.fc = nn.Linear(features, int(np.prod(self.shape)))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` reconstructions."""
        x = self.body(torch.relu(self.fc(z)).view(-1, *self.shape))
        if tuple(x.shape[-2:]) != self.size:
            x = F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)
        return x


def reconstruction(observation_space: gym.spaces.Box, weight: float = 1.0,
                   latent: float = 1.0e-6) -> AuxLoss:  # fmt: skip
    """SAC-AE's term: ``mse(decoder(z), obs / 255 or obs) + latent * mean(0.5 |z|^2)`` with
    ``z = model.encoder(obs)``; the decoder is the part ``model.decoder``."""
    pixels = Pixels(observation_space)

    def loss(model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        z = model.encoder(batch.obs)
        target = pixels(batch.obs)
        if pixels.scale != 1.0:
            target = target * pixels.scale
        error = (model.decoder(z) - target).pow(2).mean()
        penalty = 0.5 * z.pow(2).sum(1).mean()
        return {"loss": error + latent * penalty, "pixels": error.detach()}

    return AuxLoss("reconstruction", loss, weight,
                   parts={"decoder": lambda model: Decoder(observation_space, _features(model))})


def self_prediction(observation_space: gym.spaces.Box, action_space: gym.Space,
                    weight: float = 1.0, rate: float = 0.01, projection: int = 128,
                    hidden: int = 256) -> AuxLoss:  # fmt: skip
    """SPR's term, one step ahead: ``2 - 2 cos(q(g(T(z, a))), g'(f'(next_obs)))`` (an n-step
    replay batch's ``one_step_obs`` for ``next_obs``) averaged over
    the batch, with ``z = f(obs)`` the online encoder, ``T`` the transition model
    (``model.spr_transition``: features and action to next features), ``g`` the projection
    (``model.spr_projection``), ``q`` the prediction head (``model.spr_predictor``), and
    ``f'``, ``g'`` their momentum copies (``model.spr_encoder_target``,
    ``model.spr_projection_target``, EMA ``rate`` after each optimizer step)."""
    discrete = isinstance(action_space, gym.spaces.Discrete)
    actions = int(action_space.n) if discrete else int(np.prod(action_space.shape))

    def loss(model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        next_obs = getattr(batch, "next_obs", None)
        if next_obs is None:
            raise BeyondfitError("task.aux=self_prediction reads batch.next_obs, which this "
                                 "batch has not (a collector built without transitions=True)")
        if getattr(batch, "one_step_obs", None) is not None:  # n-step: next_obs is further on
            next_obs = batch.one_step_obs
        a = batch.actions
        a = F.one_hot(a.long(), actions).float() if discrete else a.flatten(1).float()
        z_next = model.spr_transition(torch.cat([model.encoder(batch.obs), a], 1))
        prediction = model.spr_predictor(model.spr_projection(z_next))
        with torch.no_grad():
            target = model.spr_projection_target(model.spr_encoder_target(next_obs))
        cos = F.cosine_similarity(prediction, target, dim=1)
        return {"loss": (2 - 2 * cos).mean(), "cos": cos.detach().mean()}

    return AuxLoss(
        "self_prediction", loss, weight,
        parts={"spr_transition": lambda m: mlp([_features(m) + actions, hidden, _features(m)]),
               "spr_projection": lambda m: nn.Linear(_features(m), projection),
               "spr_predictor": lambda m: nn.Linear(projection, projection)},
        momentum=[Momentum("spr_encoder_target", "encoder", rate),
                  Momentum("spr_projection_target", "spr_projection", rate)])
