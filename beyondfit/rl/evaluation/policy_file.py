"""A policy file (``policy.pt``, ``policy.json``) read as data, never as code.

A file someone sends or downloads can carry a valid checksum and still be forged: the checksum
is integrity, not authenticity. So what ``python -m beyondfit.play`` reads from it is checked
as plain data before anything is built: the architecture entry has the types and ranges the
gym task writes, wrappers are rebuilt from an allowlist (Gymnasium's own wrappers, by name) with
literal options only, and nothing the file names is imported (a ``module:EnvId`` env, a wrapper
of one's own) unless the user consents on the command line with ``--allow-import MODULE``.
Nothing here calls ``hydra.utils.instantiate``: a nested ``_target_`` is refused, not built.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import gymnasium as gym
import gymnasium.wrappers

from beyondfit.core.errors import BeyondfitError

#: The architecture keys the gym task writes (policy_gradient.build's ``architecture``).
KEYS = ("env", "hidden", "activation", "log_std_init", "critic", "wrappers", "normalizer",
        "encoder", "env_kwargs", "critic_hidden")
#: ``activation`` values :class:`~beyondfit.rl.nets.policies.ActorCritic` builds.
ACTIVATIONS = ("relu", "tanh")
#: :class:`~beyondfit.rl.collect.normalization.Normalizer` options and their checks.
NORMALIZER: dict[str, tuple[type | tuple[type, ...], Callable[[Any], bool], str]] = {
    "observations": (bool, lambda v: True, "true or false"),
    "rewards": (bool, lambda v: True, "true or false"),
    "gamma": ((int, float), lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "clip": ((int, float), lambda v: 0 < v < math.inf, "a positive finite number"),
    "epsilon": ((int, float), lambda v: 0 < v < math.inf, "a positive finite number"),
}
#: Gymnasium wrappers play will not rebuild from a file: RecordVideo writes files where its
#: options say (play records videos only where ``--video`` says).
REFUSED_WRAPPERS = frozenset({"RecordVideo"})
#: The entries of an off-policy agent's description (SAC, TD3, DQN: ``kind: offpolicy``) and
#: the options it may give: the agent's ``kind`` (``beyondfit.tasks.offpolicy.AGENTS``) and
#: those of :class:`~beyondfit.rl.nets.agents.OffPolicyAgent` or
#: :class:`~beyondfit.rl.nets.agents.QAgent`.
AGENT_KEYS = ("kind", "env", "wrappers", "agent", "env_kwargs")
AGENT_KINDS = ("actor_critic", "q")
AGENT_OPTIONS = ("kind", "actor", "hidden", "critic_hidden", "critics", "init_alpha",
                 "exploration_noise", "log_std", "activation", "exploration_fraction",
                 "exploration_initial_eps", "exploration_final_eps", "encoder",
                 "exploration_start", "head")
#: The Gaussian actor's log-std bounds (:data:`beyondfit.rl.nets.agents.LOG_STD_RANGES`' names).
_LOG_STD_MODES = ("tanh", "clamp")
_ENV_ID = re.compile(r"[A-Za-z0-9_.\-/:]{1,200}")
_MAX_LAYERS, _MAX_WIDTH = 64, 1 << 20


def consented(module: str, allowed: Iterable[str]) -> bool:
    """Whether ``--allow-import`` names ``module`` or a package above it."""
    return any(module == m or module.startswith(m + ".") for m in allowed)


def gymnasium_wrappers() -> dict[str, type]:
    """Gymnasium's own env wrappers by every name a file may give them (``gymnasium.wrappers.X``
    and ``X``'s defining module), minus :data:`REFUSED_WRAPPERS`.

    ``vars()``, not ``getattr``: Gymnasium imports its jax/torch converters lazily on access,
    and play imports nothing for a file.
    """
    from beyondfit.rl.envs.suites import ClipRewardSign, EpisodicLife, FireReset

    # The package's own Atari wrappers (conf/task/atari.yaml) are as safe to build as these.
    found = {f"{cls.__module__}.{cls.__qualname__}": cls
             for cls in (EpisodicLife, FireReset, ClipRewardSign)}
    # Their name before rl/ was grouped by concept, which policy files of earlier runs hold.
    found |= {f"beyondfit.rl.suites.{cls.__qualname__}": cls
              for cls in (EpisodicLife, FireReset, ClipRewardSign)}
    for name in gymnasium.wrappers.__all__:
        cls = vars(gymnasium.wrappers).get(name)
        if isinstance(cls, type) and issubclass(cls, gym.Wrapper) and name not in REFUSED_WRAPPERS:
            found[f"gymnasium.wrappers.{name}"] = cls
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def check_literal(value: Any, where: str, source: str) -> None:
    """Refuse anything but numbers, strings, booleans, ``None`` and lists of them."""
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_literal(item, f"{where}[{i}]", source)
        return
    if isinstance(value, Mapping) and "_target_" in value:
        what = f"an object to build ({str(value['_target_'])[:80]!r})"
    else:
        what = f"a {type(value).__name__}"
    raise BeyondfitError(
        f"{source} was refused: {where} is {what}, not plain data (numbers, strings, booleans, "
        "lists of them); a policy file is data, and play builds nothing it names"
    )


def check_policy(meta: Any, source: str, allowed: Iterable[str] = ()) -> dict[str, Any]:
    """The architecture entry of a policy file, checked as plain data of the right types; a
    one-line :class:`BeyondfitError` naming the entry otherwise. Imports nothing."""
    allowed = tuple(allowed)
    if not isinstance(meta, Mapping):
        raise BeyondfitError(f"{source} holds no policy description; it was not written "
                             "by an RL task (python -m beyondfit +task=cartpole writes one)")

    def bad(key: str, want: str) -> BeyondfitError:
        shown = repr(meta.get(key))[:80]
        return BeyondfitError(f"{source} was refused: its policy entry {key}={shown} is not "
                              f"{want}; the file was not written by beyondfit's RL task")

    if meta.get("kind") == "offpolicy":
        return _check_agent(meta, source, allowed, bad)
    unknown = sorted(str(k)[:40] for k in meta if k not in KEYS)
    if unknown:
        raise BeyondfitError(f"{source} was refused: unknown policy entries {unknown}; known: "
                             f"{', '.join(KEYS)}")
    for key in ("env", "hidden", "activation", "log_std_init"):
        if key not in meta:
            raise bad(key, "given (the entry is missing)")
    for key in KEYS:
        if key not in ("wrappers", "normalizer", "encoder", "env_kwargs"):
            check_literal(meta.get(key), key, source)
    _check_env(meta, source, allowed, bad)
    encoder_factory(meta.get("encoder", "auto"), "encoder", source, allowed, check_only=True)
    for key in ("hidden", "critic_hidden"):  # critic_hidden: null (the actor's sizes) too
        hidden = meta.get(key)
        if key == "critic_hidden" and hidden is None:
            continue
        if (not isinstance(hidden, list | tuple) or len(hidden) > _MAX_LAYERS
                or not all(type(h) is int and 0 < h <= _MAX_WIDTH for h in hidden)):
            raise bad(key, f"a list of at most {_MAX_LAYERS} positive layer sizes")
    if meta["activation"] not in ACTIVATIONS:
        raise bad("activation", f"one of {', '.join(ACTIVATIONS)}")
    log_std = meta["log_std_init"]
    if isinstance(log_std, bool) or not isinstance(log_std, int | float) or not math.isfinite(
            log_std):
        raise bad("log_std_init", "a finite number")
    if not isinstance(meta.get("critic", True), bool):
        raise bad("critic", "true or false")
    normalizer = meta.get("normalizer")
    if normalizer is not None:
        if not isinstance(normalizer, Mapping) or set(normalizer) - set(NORMALIZER):
            raise bad("normalizer", f"null or a mapping of {', '.join(NORMALIZER)}")
        for key, value in normalizer.items():
            types, ok, want = NORMALIZER[key]
            if isinstance(value, bool) is not (types is bool) or not isinstance(value, types) \
                    or not ok(value):
                raise BeyondfitError(f"{source} was refused: its policy entry normalizer.{key}="
                                     f"{value!r} is not {want}")
    _check_wrappers(meta, source, allowed, bad)
    return dict(meta)


def _check_env(meta: Mapping[str, Any], source: str, allowed: tuple[str, ...],
               bad: Callable[[str, str], BeyondfitError]) -> None:  # fmt: skip
    kwargs = meta.get("env_kwargs", {})
    if not isinstance(kwargs, Mapping) or not all(
            isinstance(k, str) and k.isidentifier() and not k.startswith("_") for k in kwargs):
        raise bad("env_kwargs", "a mapping of keyword arguments")
    for key, value in kwargs.items():
        check_literal(value, f"env_kwargs.{key}", source)
    env = meta.get("env")
    if not isinstance(env, str) or not _ENV_ID.fullmatch(env):
        raise bad("env", "a Gymnasium env id such as CartPole-v1")
    module, _, _ = env.rpartition(":")
    if module and not consented(module, allowed):
        raise BeyondfitError(
            f"{source} names env {env!r}, which imports module {module!r} to register it; play "
            f"imports nothing a policy file names: add --allow-import {module} if you trust it"
        )


def _check_wrappers(meta: Mapping[str, Any], source: str, allowed: tuple[str, ...],
                    bad: Callable[[str, str], BeyondfitError]) -> None:  # fmt: skip
    wrappers = meta.get("wrappers", [])
    if wrappers is not None:  # None: saved as "not rebuildable", which play reports itself
        if not isinstance(wrappers, list):
            raise bad("wrappers", "a list of wrapper entries")
        for i, entry in enumerate(wrappers):
            wrapper_factory(entry, f"wrappers[{i}]", source, allowed, check_only=True)


def _check_agent(meta: Mapping[str, Any], source: str, allowed: tuple[str, ...],
                 bad: Callable[[str, str], BeyondfitError]) -> dict[str, Any]:  # fmt: skip
    """An off-policy agent's description: its env, wrappers and the agent's options, each
    plain data of a known name (the network is then built from them and checked against the
    weights, as for a policy)."""
    unknown = sorted(str(k)[:40] for k in meta if k not in AGENT_KEYS)
    if unknown:
        raise BeyondfitError(f"{source} was refused: unknown policy entries {unknown}; known: "
                             f"{', '.join(AGENT_KEYS)}")
    _check_env(meta, source, allowed, bad)
    agent = meta.get("agent")
    if not isinstance(agent, Mapping) or set(agent) - set(AGENT_OPTIONS):
        raise bad("agent", f"a mapping of {', '.join(AGENT_OPTIONS)}")
    for key, value in agent.items():
        if key == "encoder":
            encoder_factory(value, "agent.encoder", source, allowed, check_only=True)
        else:
            check_literal(value, f"agent.{key}", source)
    if agent.get("kind", "actor_critic") not in AGENT_KINDS:
        raise bad("agent", f"a kind among {', '.join(AGENT_KINDS)}")
    hidden = [*agent.get("hidden", ()), *(agent.get("critic_hidden") or ())]
    if len(hidden) > 2 * _MAX_LAYERS or not all(
            type(h) is int and 0 < h <= _MAX_WIDTH for h in hidden):
        raise bad("agent", f"hidden sizes of at most {_MAX_LAYERS} positive layers")
    if agent.get("activation", "relu") not in ACTIVATIONS:
        raise bad("agent", f"an activation among {', '.join(ACTIVATIONS)}")
    if agent.get("log_std", "tanh") not in _LOG_STD_MODES:
        raise bad("agent", f"a log_std among {', '.join(_LOG_STD_MODES)}")
    from beyondfit.rl.nets.heads import HEADS

    if agent.get("head", "mlp") not in HEADS:  # a head of one's own is code: not from a file
        raise bad("agent", f"a head among {', '.join(HEADS)}")
    _check_wrappers(meta, source, allowed, bad)
    return dict(meta)


def wrapper_factory(
    entry: Any, where: str, source: str, allowed: Iterable[str] = (), check_only: bool = False
) -> Callable[[gym.Env], gym.Env]:
    """``env -> wrapped env`` for one saved wrapper entry ``{"_target_": NAME, **options}``.

    ``NAME`` must be one of Gymnasium's wrappers, or live in a module the user allowed; options
    must be literals (keys that start with ``_`` are Hydra's instructions, and refused). The
    class is called with the options itself: nothing goes through ``hydra.utils.instantiate``.
    With ``check_only``, an allowed module is not imported yet (the result is then unusable).
    """
    if not isinstance(entry, Mapping) or not isinstance(entry.get("_target_"), str):
        raise BeyondfitError(f"{source} was refused: {where} is not a wrapper entry "
                             "{_target_: WRAPPER_CLASS, OPTION: VALUE}")
    target = entry["_target_"]
    # ``_partial_: true`` is how a config writes a wrapper factory: that is what this builds.
    options = {k: v for k, v in entry.items()
               if k != "_target_" and not (k == "_partial_" and v is True)}
    for key, value in options.items():
        if not isinstance(key, str) or not key.isidentifier() or key.startswith("_"):
            raise BeyondfitError(f"{source} was refused: {where} has option {str(key)[:40]!r}, "
                                 "not a plain keyword argument")
        check_literal(value, f"{where}.{key}", source)
    cls = gymnasium_wrappers().get(target)
    if cls is None:
        module = target.rpartition(".")[0]
        if not module or not consented(module, allowed) or not re.fullmatch(r"[\w.]+", target):
            raise BeyondfitError(
                f"{source} was refused: {where} names {target[:80]!r}, which is not one of "
                "Gymnasium's wrappers; play imports nothing a policy file names: add "
                f"--allow-import {module or target} if you trust it"
            )
        if check_only:
            return lambda env: env
        cls = _import_class(target, where, source)
    return functools.partial(cls, **options)


def encoder_factory(entry: Any, where: str, source: str, allowed: Iterable[str] = (),
                    check_only: bool = False) -> Any:  # fmt: skip
    """The encoder a saved entry names: a built-in's name (:data:`~beyondfit.rl.nets.encoders.
    ENCODERS`) as it is, or ``{"_target_": "module.function", OPTION: VALUE}`` (a factory of
    your own and its literal options), imported only from a module the user allowed
    (``--allow-import``)."""
    from beyondfit.rl.nets.encoders import ENCODERS

    if isinstance(entry, str) and entry in ENCODERS:
        return entry
    target = entry.get("_target_") if isinstance(entry, Mapping) else None
    if not isinstance(target, str) or not re.fullmatch(r"[\w.]+", target):
        raise BeyondfitError(f"{source} was refused: {where}={str(entry)[:80]!r} is neither one "
                             f"of {', '.join(ENCODERS)} nor {{_target_: module.function}}")
    options = {k: v for k, v in entry.items() if k != "_target_"}
    for key, value in options.items():
        if not isinstance(key, str) or not key.isidentifier() or key.startswith("_"):
            raise BeyondfitError(f"{source} was refused: {where} has option {str(key)[:40]!r}, "
                                 "not a plain keyword argument")
        check_literal(value, f"{where}.{key}", source)
    module = target.rpartition(".")[0]
    if not module or not consented(module, allowed):
        raise BeyondfitError(f"{source} names its own encoder {target!r}; play imports nothing "
                             f"a policy file names: add --allow-import {module or target} if "
                             "you trust it")
    if check_only:
        return "auto"
    try:
        factory = getattr(importlib.import_module(module), target.rpartition(".")[2])
    except Exception as exc:
        raise BeyondfitError(f"{source}: importing the encoder {target!r} raised "
                             f"{type(exc).__name__}: {exc}") from None
    if not callable(factory):
        raise BeyondfitError(f"{source}: the encoder {target!r} is not callable")
    return functools.partial(factory, **options)


def _import_class(target: str, where: str, source: str) -> type:
    # The user consented to this module; what it names must still be a wrapper class.
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        except Exception as exc:
            raise BeyondfitError(f"{source}: importing {'.'.join(parts[:cut])!r} for {where} "
                                 f"raised {type(exc).__name__}: {exc}") from None
        for name in parts[cut:]:
            obj = getattr(obj, name, None)
        if isinstance(obj, type) and issubclass(obj, gym.Wrapper):
            return obj
        break
    raise BeyondfitError(f"{source}: {where} names {target!r}, which is not a gymnasium.Wrapper "
                         "class importable from where you run play")
