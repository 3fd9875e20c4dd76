"""Vector environments: creation with clear errors, and turning policy actions into env actions."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from beyondfit.core.errors import BeyondfitError
from beyondfit.rl.envs import envpool_atari  # envpool itself is imported only when a pool is made
from beyondfit.rl.envs.spaces import check_spaces
from beyondfit.rl.envs.suites import register_family

log = logging.getLogger("beyondfit.rl")

#: Gymnasium env modules whose dependencies are beyondfit extras: module -> extra.
EXTRAS = {"gymnasium.envs.box2d": "box2d", "gymnasium.envs.mujoco": "mujoco"}


def missing_dependency(spec: gym.envs.registration.EnvSpec, exc: Exception) -> BeyondfitError:
    """The one-line error for an env whose optional dependency is not installed."""
    entry = str(spec.entry_point)
    extra = next((name for module, name in EXTRAS.items() if entry.startswith(module)), None)
    how = (f'pip install "beyondfit[{extra}]" (from a checkout: pip install -e ".[{extra}]")'
           if extra else "install the package the message names")
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return BeyondfitError(f"env {spec.id!r} needs a package that is not installed ({reason}); "
                          f"{how}")


#: The most env copies a vector env may hold: each is a Python object stepped in turn, and the
#: rollout buffers grow with them (1e8 copies ask for tens of GB before the first step).
MAX_ENVS = 65536

#: A Gymnasium wrapper factory: ``env -> wrapped env`` (a wrapper class, or a partial of one).
WrapperFn = Callable[[gym.Env], gym.Env]


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of ``env_id``, or a :class:`BeyondfitError` saying why there is none.

    ``module:EnvId`` (Gymnasium's own form) first imports ``module``, which registers the env:
    a module of yours, importable from where you launch (the command line puts that directory
    on ``sys.path``).
    """
    module, _, name = str(env_id).rpartition(":")
    register_family(name)  # ALE/..., MinAtar/...: their package registers them
    if module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise BeyondfitError(
                f"task.env={env_id!r}: cannot import module {module!r} ({e}); the module that "
                "registers the env must be importable from the directory you launch in (or on "
                "PYTHONPATH)"
            ) from None
        except Exception as e:  # the user's registration code failed
            raise BeyondfitError(
                f"task.env={env_id!r}: importing module {module!r} raised "
                f"{type(e).__name__}: {e}"
            ) from None
    try:
        return gym.spec(name)
    except gym.error.Error as e:
        raise BeyondfitError(
            f"unknown Gymnasium env id task.env={env_id!r} ({e}); pick a registered id such as "
            "CartPole-v1, Acrobot-v1 or Pendulum-v1 (list them with gymnasium.pprint_registry()), "
            "or MODULE:ID to import the module that registers yours"
        ) from None


#: ``task.vectorization``: how the env copies are stepped. Measured for 8 Atari copies with the
#: Atari task's preprocessing on this project's 2-core machine, env steps per CPU-second (the
#: process and its children; ``bench/collect.py``, docs/how-to/pixels.md): envpool fastest,
#: then sync; async (subprocesses and their pipes) costs more than it overlaps on two cores.
VECTORIZATIONS = ("auto", "sync", "async", "envpool")


def make_vector_env(env_id: str, num_envs: int, wrappers: Sequence[WrapperFn] = (),
                    sync: bool = False, env_kwargs: Mapping[str, Any] | None = None,
                    key: str = "task.num_envs", vectorization: str = "auto",
                    pool: bool = True) -> VectorEnv:  # fmt: skip
    """``gymnasium.make_vec`` with next-step autoreset, or a :class:`BeyondfitError` saying why not.

    Uses the env's own vectorized implementation where it has one (CartPole: one NumPy call steps
    all copies) and no ``wrappers`` are given, else ``SyncVectorEnv``: for small classic-control
    envs, subprocesses cost more than they save. ``wrappers`` apply to each copy, in order. The
    envs are not reset here; the caller seeds them on its first reset. ``sync``: always
    ``SyncVectorEnv``, whose copies are envs of their own (what the replay collector rebuilds
    on an exact resume). ``env_kwargs``: keyword arguments of each copy's ``gym.make``
    (``task.env_kwargs``: Atari's ``frameskip=1`` under ``AtariPreprocessing``). ``key``: the
    config key ``num_envs`` came from, for the error. ``vectorization``
    (:data:`VECTORIZATIONS`): ``auto`` (the env's own vectorized form where it has one, else
    ``sync``; for an Atari id, envpool where it is installed and ``pool`` allows it), ``sync``
    (``SyncVectorEnv``: the copies stepped in turn in this process), ``async``
    (``AsyncVectorEnv``: one subprocess per copy, for envs slow enough to pay for the pipes on
    a machine with cores to spare), or ``envpool`` (Atari only: envpool's C++ threads with the
    wrappers read as its own options, :mod:`beyondfit.rl.envs.envpool_atari`). ``pool``: whether
    ``auto`` may pick envpool (the greedy evaluation keeps Gymnasium's wrappers: each of its
    copies plays one whole game from a real reset, the reference preprocessing).

    The returned envs carry ``reports_episodes``: whether a wrapper (Gymnasium's
    ``RecordEpisodeStatistics``) reports each finished episode in ``info["episode"]``; then
    the collectors and the greedy evaluation count those episodes (an Atari game over all its
    lives, its unclipped score) instead of the wrapped env's ``terminated``/``truncated``.
    """
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or not 0 < num_envs <= MAX_ENVS:
        raise BeyondfitError(
            f"{key}={num_envs!r} must be a whole number from 1 to {MAX_ENVS}, e.g. "
            f"{key}=8"
        )
    env_kwargs = dict(env_kwargs or {})
    if vectorization not in VECTORIZATIONS:
        raise BeyondfitError(f"task.vectorization={vectorization!r}; choose one of "
                             f"{', '.join(VECTORIZATIONS)}")
    if sync and vectorization in ("async", "envpool"):
        raise BeyondfitError(f"task.vectorization={vectorization}: the off-policy task needs "
                             "env copies of its own, stepped in its own process (an exact "
                             "resume rebuilds their episodes); use task.vectorization=sync")
    spec = env_spec(env_id)
    wrappers = list(wrappers)
    for i, wrapper in enumerate(wrappers):
        if not callable(wrapper) or isinstance(wrapper, gym.Env):
            raise BeyondfitError(
                f"task.wrappers[{i}] is {type(wrapper).__name__}, not a wrapper factory: write "
                "each as {_target_: WRAPPER_CLASS, _partial_: true, OPTION: VALUE}"
            )
        _check_stack(i, wrapper)
    if vectorization == "envpool" or (vectorization == "auto" and pool and not sync
                                      and str(env_id).startswith("ALE/")):
        envs = _pool_or_none(env_id, num_envs, wrappers, env_kwargs, vectorization)
        if envs is not None:
            return envs
        vectorization = "sync"
    native = (spec.vector_entry_point is not None and not wrappers and not sync
              and not env_kwargs and vectorization == "auto")
    mode = "vector_entry_point" if native else "async" if vectorization == "async" else "sync"
    try:
        if mode != "vector_entry_point":
            envs = gym.make_vec(
                spec, num_envs, vectorization_mode=mode,
                vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP},
                wrappers=wrappers or None, **env_kwargs,
            )
        else:
            envs = gym.make_vec(spec, num_envs, vectorization_mode=mode)
    except BeyondfitError:
        raise
    except gym.error.DependencyNotInstalled as exc:  # Box2D, MuJoCo: beyondfit extras
        raise missing_dependency(spec, exc) from None
    except Exception as e:  # the env's constructor or a wrapper failed
        what = "its wrappers" if wrappers else "the env"
        raise BeyondfitError(
            f"cannot create env {env_id!r}: {what} raised {type(e).__name__}: {e}"
        ) from None
    envs.reports_episodes = any(_wrapper_class(w) is gym.wrappers.RecordEpisodeStatistics
                                for w in wrappers)
    autoreset = envs.metadata.get("autoreset_mode")
    if autoreset != AutoresetMode.NEXT_STEP:
        envs.close()
        raise BeyondfitError(
            f"env {env_id!r} vectorizes with autoreset mode {autoreset}, but the collector "
            "relies on Gymnasium's default next-step autoreset; register the env without a "
            "custom vector entry point"
        )
    try:
        check_spaces(envs.single_observation_space, envs.single_action_space, env_id)
    except BeyondfitError:
        envs.close()
        raise
    return envs


def _pool_or_none(env_id: str, num_envs: int, wrappers: Sequence[WrapperFn],
                  env_kwargs: Mapping[str, Any], vectorization: str) -> VectorEnv | None:
    """The copies in envpool; for ``auto``, ``None`` (then ``sync``) where envpool is missing
    or has no equivalent of the wrappers, said in the run's log either way."""
    missing = ("sync (Gymnasium's wrappers; envpool, faster for Atari, is not installed: "
               f"{envpool_atari.INSTALL})")
    if vectorization == "auto" and not envpool_atari.envpool_installed():
        log.info("task.vectorization=auto: %s", missing)
        return None
    try:
        task, options, reports = envpool_atari.envpool_options(env_id, wrappers, env_kwargs)
        envs = envpool_atari.EnvPoolVectorEnv(env_id, task, options, num_envs, reports)
    except envpool_atari.NoEquivalent as e:
        if vectorization == "envpool":
            raise
        log.info("task.vectorization=auto: sync (%s)", e.reason)
        return None
    except envpool_atari.NotInstalled:
        if vectorization == "envpool":
            raise
        log.info("task.vectorization=auto: %s", missing)
        return None
    try:
        check_spaces(envs.single_observation_space, envs.single_action_space, env_id)
    except BeyondfitError:
        envs.close()
        raise
    if vectorization == "auto":
        log.info("task.vectorization=auto: envpool (%d copies of %s preprocessed in its C++ "
                 "threads; task.vectorization=sync for Gymnasium's wrappers)", num_envs, task)
    return envs


#: The most frames ``FrameStackObservation`` may stack: each copy keeps that many frames (and
#: the replay's stacks their indices), so a typo's million frames would take the machine's
#: memory before anything is measured; the data-efficient agents stack 4, none more than 16.
MAX_STACK = 64


def _check_stack(i: int, wrapper: Any) -> None:
    """A frame stack's size: a whole number from 1 to :data:`MAX_STACK`, or one line."""
    if _wrapper_class(wrapper) is not gym.wrappers.FrameStackObservation:
        return
    options = dict(getattr(wrapper, "keywords", None) or {})
    size = options.get("stack_size", (getattr(wrapper, "args", ()) or [None])[0])
    if type(size) is not int or not 1 <= size <= MAX_STACK:
        raise BeyondfitError(
            f"task.wrappers[{i}].stack_size={size!r}: FrameStackObservation stacks a whole "
            f"number of frames from 1 to {MAX_STACK} (each env copy keeps them all), e.g. "
            f"task.wrappers.{i}.stack_size=4")


def _wrapper_class(wrapper: Any) -> Any:
    # The class a wrapper factory builds: the class itself, or a partial's (Hydra's too).
    while not isinstance(wrapper, type) and hasattr(wrapper, "func"):
        wrapper = wrapper.func
    return wrapper


def reported_episodes(info: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """The episodes a vector step's ``info`` reports finished (Gymnasium's
    ``RecordEpisodeStatistics``): their returns and lengths; ``None`` when none finished in
    this step."""
    episode, mask = info.get("episode"), info.get("_episode")
    if episode is None or mask is None or not mask.any():
        return None
    return np.asarray(episode["r"])[mask], np.asarray(episode["l"])[mask]


def env_error(envs: VectorEnv | str, where: str, exc: BaseException) -> BeyondfitError:
    """The one line for an env that broke Gymnasium's API (or raised) ``where`` it ran."""
    env_id = envs if isinstance(envs, str) else getattr(getattr(envs, "spec", None), "id", "?")
    if isinstance(exc, BeyondfitError):
        return exc
    reason = " ".join(str(exc).split())[:200] or "no message"
    return BeyondfitError(
        f"env {env_id!r} failed in {where} ({type(exc).__name__}: {reason}); Gymnasium's API: "
        "reset() returns (observation, info), step(action) returns (observation, reward, "
        "terminated, truncated, info), observations of the observation space's shape"
    )


def reset_envs(envs: VectorEnv, seed: int) -> np.ndarray:
    """``envs.reset(seed=seed)``'s observations; an env that raises or breaks the API there is
    one line."""
    try:
        obs, _ = envs.reset(seed=seed)
    except Exception as exc:  # the env's own code, or a reset that returns one value
        raise env_error(envs, "reset", exc) from None
    return obs


def finite_rewards(steps: list[Any], envs: VectorEnv | str, first_step: int) -> np.ndarray:
    """A rollout's rewards as one ``(T, N)`` float32 array (one NumPy check per rollout);
    raises naming the env step of the first that is NaN, infinite or beyond float32."""
    rewards = np.stack(steps).astype(np.float32, copy=False)
    bad = np.flatnonzero(~np.isfinite(rewards))
    if len(bad):
        t, i = divmod(int(bad[0]), rewards.shape[1])
        env_id = envs if isinstance(envs, str) else getattr(getattr(envs, "spec", None), "id", "?")
        raise BeyondfitError(
            f"env {env_id!r} returned reward {rewards[t, i]} at env step "
            f"{first_step + t * rewards.shape[1] + i} (copy {i}); rewards must be finite "
            "float32 numbers: clip or rescale the env's reward"
        )
    return rewards


def action_converter(space: gym.Space) -> Callable[[torch.Tensor], np.ndarray]:
    """Return a fast function mapping a batch of policy actions to what ``envs.step`` accepts.

    Gaussian samples are clipped to the ``Box`` bounds for the env only; the learner keeps the
    unclipped sample, whose log-probability is the one the policy actually assigned.
    """
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        if start == 0:
            return lambda a: a.cpu().numpy()
        return lambda a: a.cpu().numpy() + start
    assert isinstance(space, gym.spaces.Box)
    low, high, dtype = space.low, space.high, space.dtype
    return lambda a: np.clip(a.cpu().numpy(), low, high).astype(dtype, copy=False)


def observation_converter(device: torch.device) -> Callable[[np.ndarray], torch.Tensor]:
    """Return a fast function turning an env observation batch into a tensor on ``device``, in
    the space's dtype: uint8 frames and bool boards stay what they are (4x fewer bytes to copy
    and store than float32; the encoder makes floats of them on the device), float
    observations become float32.

    It always copies: an env may legally reuse its observation buffer on the next step, and
    the collector keeps every step's tensor until the rollout ends.
    """

    def convert(obs: np.ndarray) -> torch.Tensor:
        array = obs.astype(np.float32) if obs.dtype.kind == "f" else np.array(obs, copy=True)
        tensor = torch.from_numpy(array)
        return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)

    return convert


def greedy_policy(model: Any, action_space: gym.Space) -> Callable[[np.ndarray], np.ndarray]:
    """Return ``act(obs) -> env actions``: ``model``'s most likely actions
    (``model.act(obs, greedy=True)``) for a batch of observations, on the model's device and
    under inference mode. What greedy evaluation and ``play`` step with."""
    to_obs = observation_converter(next(model.parameters()).device)
    to_env = action_converter(action_space)

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return to_env(model.act(to_obs(np.asarray(obs)), greedy=True))

    return act


def close_envs(envs: VectorEnv) -> None:
    """Close ``envs`` and let go of each copy's emulator: an ALE copy's interface lives as long
    as its Python env, and one still alive when the interpreter exits (a run's objects are)
    makes ale_py's bindings print a 30-line "nanobind: leaked instances" report on stderr."""
    envs.close()
    for env in getattr(envs, "envs", ()):
        if getattr(env.unwrapped, "ale", None) is not None:
            env.unwrapped.ale = None
