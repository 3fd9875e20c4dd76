"""Atari copies stepped by envpool (``task.vectorization=envpool``): the task's Gymnasium
wrappers read as envpool's own options, and envpool's pool seen as a Gymnasium vector env.

envpool (``pip install envpool``) steps every copy in C++ threads, preprocessing included, so
it is given options instead of wrappers. :func:`envpool_options` reads the Atari task's
wrappers (``conf/task/atari.yaml``) and the env's ``gym.make`` arguments as the options that do
the same:

================================================ =========================================
Gymnasium (the task's wrappers, ``env_kwargs``)  envpool
================================================ =========================================
``ALE/NAME-v5``, ``repeat_action_probability``   ``NAME-v5``, the same sticky actions (ALE's)
``max_num_frames_per_episode`` (v5: 108,000)     ``max_episode_steps``: frames / frame skip
``AtariPreprocessing(noop_max, frame_skip,       ``noop_max``, ``frame_skip`` (max-pooled over
screen_size, grayscale_obs)``                    the last two frames), ``img_height/width``,
                                                 ``gray_scale``
``EpisodicLife``                                 ``episodic_life``
``FireReset``                                    ``use_fire_reset``
``ClipRewardSign``                               ``reward_clip``
``FrameStackObservation(stack_size)``            ``stack_num``
``RecordEpisodeStatistics`` (innermost)          :class:`EnvPoolVectorEnv` sums ``info["reward"]``
                                                 (envpool's unclipped reward) over each game
================================================ =========================================

A wrapper or argument with no envpool equivalent (a wrapper of one's own, RGB frames, scaled
observations, Gymnasium's ``terminal_on_life_loss``, which resets the game at each lost life)
is refused in one line naming it (``auto`` then takes ``sync``). What is not the same bit for
bit: envpool draws its own no-op starts and sticky actions (from its own seeds), presses FIRE
only (``FireReset`` also presses action 2 after it), and keeps the frame stack across a lost
life (``FrameStackObservation`` refills it from the life's first frame). Observations, rewards,
episode boundaries and autoreset are the Gymnasium path's: ``(4, 84, 84)`` uint8 frames,
clipped rewards, ``terminated`` at a lost life, and the step after an episode's end a reset
(its action ignored, reward 0) that the collectors never learn from.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from beyondfit.core.errors import BeyondfitError
from beyondfit.rl.envs.suites import register_family

#: How to get envpool, said where it is missing.
INSTALL = "pip install envpool"


def envpool_installed() -> bool:
    """Whether envpool is there to import (looked up without importing it: its import takes
    about half a second of CPU)."""
    try:
        return importlib.util.find_spec("envpool") is not None
    except ValueError:  # a module set to None in sys.modules: hidden
        return False


class NotInstalled(BeyondfitError):
    """envpool cannot be imported."""


class NoEquivalent(BeyondfitError):
    """The task's env or wrappers have no envpool equivalent: ``reason`` says which, the
    message also what to do instead."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason}; use task.vectorization=sync")
        self.reason = reason


def _options_of(wrapper: Any) -> tuple[type | None, dict[str, Any]]:
    # The class a wrapper factory builds and the options it is given, defaults filled in (a
    # class itself, or a partial of one: functools' or Hydra's, both keep .func and .keywords).
    func, args, keywords = wrapper, (), {}
    while not isinstance(func, type) and hasattr(func, "func"):
        args, keywords = (*getattr(func, "args", ()), *args), {
            **(getattr(func, "keywords", None) or {}), **keywords}
        func = func.func
    if not isinstance(func, type):
        return None, {}
    try:
        bound = inspect.signature(func).bind(None, *args, **keywords)
    except TypeError:
        return func, {"": "options its class does not take"}
    bound.apply_defaults()
    options = dict(bound.arguments)
    options.pop(next(iter(options)))  # the env
    return func, options


def envpool_options(env_id: str, wrappers: Sequence[Any] = (),
                    env_kwargs: Mapping[str, Any] | None = None
                    ) -> tuple[str, dict[str, Any], bool]:  # fmt: skip
    """envpool's task id and options that preprocess ``env_id`` as ``wrappers`` and
    ``env_kwargs`` do on Gymnasium's path, and whether the game's score is reported (a
    ``RecordEpisodeStatistics`` innermost); raises :class:`NoEquivalent` naming what has none.
    """
    if not str(env_id).startswith("ALE/"):
        raise NoEquivalent(f"task.vectorization=envpool steps Atari games "
                           f"(task.env=ALE/NAME-v5), and task.env={env_id!r} is not one")
    register_family(env_id)  # Gymnasium knows ALE/ ids once ale-py is imported
    spec = gym.spec(env_id)
    kwargs = {**dict(spec.kwargs), **dict(env_kwargs or {})}
    game = str(kwargs.pop("game", ""))
    options: dict[str, Any] = {
        "repeat_action_probability": float(kwargs.pop("repeat_action_probability", 0.25)),
        "full_action_space": bool(kwargs.pop("full_action_space", False)),
        "episodic_life": False, "use_fire_reset": False, "reward_clip": False, "stack_num": 1,
    }
    for name in ("mode", "difficulty"):
        value = kwargs.pop(name, None)
        options[name] = -1 if value is None else int(value)
    frames = kwargs.pop("max_num_frames_per_episode", None)
    frameskip = kwargs.pop("frameskip", 4)
    if kwargs.pop("obs_type", "rgb") == "ram":
        raise NoEquivalent("task.env_kwargs.obs_type=ram has no envpool equivalent (it gives "
                           "frames)")
    kwargs.pop("render_mode", None)
    if kwargs:
        raise NoEquivalent(f"task.env_kwargs {sorted(kwargs)} have no envpool equivalent")
    if frameskip != 1:
        raise NoEquivalent(f"task.env_kwargs.frameskip={frameskip!r}: envpool's frame skip is "
                           "AtariPreprocessing's, over an env of frameskip=1 (set "
                           "task.env_kwargs.frameskip=1, as the atari task does)")
    reports, preprocessed, seen = False, False, set()
    for i, wrapper in enumerate(wrappers):
        cls, given = _options_of(wrapper)
        name = getattr(cls, "__name__", type(wrapper).__name__)
        where = f"task.wrappers[{i}] ({name})"
        if "" in given:
            raise NoEquivalent(f"{where} is given {given['']}")
        if cls is gym.wrappers.RecordEpisodeStatistics and i == 0:
            reports = True
        elif cls is gym.wrappers.AtariPreprocessing and seen <= {"RecordEpisodeStatistics"}:
            _preprocessing(given, where, options)
            preprocessed = True
        elif preprocessed and name in _FLAGS and name not in seen and "stack" not in seen:
            options[_FLAGS[name]] = True
        elif cls is gym.wrappers.FrameStackObservation and preprocessed and "stack" not in seen:
            if not isinstance(given["padding_type"], str) or given["padding_type"] != "reset":
                raise NoEquivalent(f"{where}: padding_type={given['padding_type']!r} has no "
                                   "envpool equivalent (it pads with the first frame)")
            options["stack_num"] = int(given["stack_size"])
            name = "stack"
        else:
            raise NoEquivalent(
                f"{where} has no envpool equivalent here: envpool takes RecordEpisodeStatistics "
                "first, then AtariPreprocessing, EpisodicLife, FireReset, ClipRewardSign and "
                "FrameStackObservation (the atari task's)"
            )
        seen.add(name)
    if not preprocessed:
        raise NoEquivalent("task.vectorization=envpool preprocesses the frames itself: "
                           "task.wrappers must hold gymnasium.wrappers.AtariPreprocessing (the "
                           "atari task's do)")
    if frames is not None:  # v5's cap is in frames; envpool's in agent steps
        options["max_episode_steps"] = -(-int(frames) // options["frame_skip"])
    task = "".join(part.capitalize() for part in game.split("_")) + "-v5"
    return task, options, reports


#: The suites' wrappers that are one envpool flag each.
_FLAGS = {"EpisodicLife": "episodic_life", "FireReset": "use_fire_reset",
          "ClipRewardSign": "reward_clip"}


def _preprocessing(given: dict[str, Any], where: str, options: dict[str, Any]) -> None:
    """AtariPreprocessing's options as envpool's (into ``options``)."""
    for key, want in (("terminal_on_life_loss", False), ("grayscale_obs", True),
                      ("grayscale_newaxis", False), ("scale_obs", False)):
        if given[key] != want:
            raise NoEquivalent(f"{where}: {key}={given[key]!r} has no envpool equivalent here "
                               f"(only {key}={want})")
    size = given["screen_size"]
    width, height = (size, size) if isinstance(size, int) else tuple(size)
    options.update(noop_max=int(given["noop_max"]), frame_skip=int(given["frame_skip"]),
                   img_width=int(width), img_height=int(height), gray_scale=True)


class EnvPoolVectorEnv(VectorEnv):
    """An envpool pool of Atari copies as a Gymnasium vector env with next-step autoreset.

    envpool fixes its seeds when a pool is made, so the pool is made at the first
    ``reset(seed=...)`` (copy ``i`` seeded with ``seed + i``, as Gymnasium's vector envs seed
    their copies) and made again at every later seeded reset; ``reset()`` without a seed starts
    fresh games in the same pool. envpool's own autoreset is next-step: the step after an
    episode's end resets that copy, ignores its action and returns reward 0, which the
    collectors leave out of learning. With ``reports_episodes`` each finished *game* (all
    lives, or the frame cap) is reported as ``RecordEpisodeStatistics`` does: ``info["episode"]``
    (``r``: the game's unclipped score, summed from envpool's ``info["reward"]``; ``l``: its
    length in frames, agent steps x frame skip; ``t``: seconds) and ``info["_episode"]``.

    It has no per-copy envs (no ``envs`` attribute): a collector cannot rebuild its episodes on
    an exact resume, and says so (fresh episodes); the off-policy task refuses it.
    """

    def __init__(self, env_id: str, task: str, options: Mapping[str, Any], num_envs: int,
                 reports_episodes: bool = True) -> None:
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        try:
            self._envpool = importlib.import_module("envpool")
        except ImportError:
            raise NotInstalled(f"task.vectorization=envpool needs the envpool package, which is "
                               f"not installed: {INSTALL} (or task.vectorization=sync)") from None
        self.task, self.options = task, dict(options)
        self.num_envs = num_envs
        register_family(env_id)
        self.spec = gym.spec(env_id)
        pool_spec = self._envpool.make_spec(task, num_envs=num_envs, **self.options)
        single = pool_spec.gymnasium_observation_space
        # Without a frame stack Gymnasium's frames are (H, W); envpool's (1, H, W).
        self._squeeze = self.options.get("stack_num") == 1
        if self._squeeze:
            single = gym.spaces.Box(0, 255, single.shape[1:], np.uint8)
        self.single_observation_space = single
        self.single_action_space = pool_spec.gymnasium_action_space
        self.observation_space = gym.vector.utils.batch_space(single, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.reports_episodes = reports_episodes
        self._frame_skip = int(self.options.get("frame_skip", 4))
        self._pool: Any = None
        self._score = np.zeros(num_envs)
        self._started = np.zeros(num_envs)

    def _make_pool(self, seed: int | Sequence[int]) -> None:
        if self._pool is not None:
            self._pool.close()
        seeds = ({"seed": int(seed)} if isinstance(seed, int | np.integer)
                 else {"env_seed": [int(s) for s in seed]})
        self._pool = self._envpool.make_gymnasium(
            self.task, num_envs=self.num_envs, batch_size=self.num_envs, **seeds,
            **self.options)

    def reset(self, *, seed: int | Sequence[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Fresh games in every copy: a new pool seeded with ``seed`` (an int: copy ``i`` gets
        ``seed + i``; a list: one each), or the same pool's next games without one."""
        if options:
            raise ValueError(f"reset options {sorted(options)} are not supported by envpool")
        if isinstance(seed, Sequence) and any(s is None for s in seed):
            raise ValueError("envpool seeds every copy or none: a list of seeds has no None")
        if seed is not None or self._pool is None:
            self._make_pool(int(np.random.SeedSequence().entropy % 2**31) if seed is None
                            else seed)
        obs, info = self._pool.reset()
        self._score[:] = 0.0
        self._started[:] = time.perf_counter()
        return self._observe(obs), info

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        """One step of every copy; a copy whose episode ended in the last step resets instead."""
        if self._pool is None:
            raise gym.error.ResetNeeded("reset the envs before stepping them")
        obs, reward, terminated, truncated, info = self._pool.step(np.asarray(actions))
        if self.reports_episodes:
            self._score += info["reward"]
            # A game ends at envpool's real termination (no lives left) or at the frame cap;
            # a lost life ends only the learner's episode.
            over = (info["terminated"].astype(bool) & terminated) | truncated
            if over.any():
                now = time.perf_counter()
                info["episode"] = {
                    "r": np.where(over, self._score, 0.0),
                    "l": np.where(over, info["elapsed_step"] * self._frame_skip, 0),
                    "t": np.where(over, np.round(now - self._started, 6), 0.0)}
                info["_episode"] = over
                self._score[over] = 0.0
                self._started[over] = now
        return self._observe(obs), reward, terminated, truncated, info

    def _observe(self, obs: np.ndarray) -> np.ndarray:
        return obs[:, 0] if self._squeeze else obs

    def close_extras(self, **kwargs: Any) -> None:
        """Close the pool (its threads)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
