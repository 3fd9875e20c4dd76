"""Benchmark env families that live outside Gymnasium: Atari (ale-py) and MinAtar.

Their ids need their package imported (and MinAtar's registration called) before Gymnasium
knows them: :func:`register_family` does it for ``ALE/NAME-v5`` and ``MinAtar/NAME-v1``, and an
absent package is one line with the extra to install. The wrappers below are the Atari
preprocessing CleanRL's ``ppo_atari.py`` and SB3's ``AtariWrapper`` apply beside Gymnasium's
own ``AtariPreprocessing`` (no-op starts, frame skip with max-pooling, 84x84 grayscale) and
``FrameStackObservation``; ``conf/task/atari.yaml`` lists them in CleanRL's order:

``RecordEpisodeStatistics`` (innermost: the game's own score over all lives, which the
collectors and the greedy evaluation report) -> ``AtariPreprocessing`` -> :class:`EpisodicLife`
(a lost life ends the episode for learning, not the game) -> :class:`FireReset` ->
:class:`ClipRewardSign` -> ``FrameStackObservation(4)``.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from beyondfit.core.errors import BeyondfitError

#: ALE's ids without a family prefix (``BreakoutNoFrameskip-v4``, ``Pong-v0``).
_ALE_V4 = re.compile(r"^[A-Z][A-Za-z]+(NoFrameskip|Deterministic)?-v[04]$")
#: Env-id prefixes of the families, their module and the beyondfit extra that installs it.
FAMILIES = {"ALE/": ("ale_py", "atari"), "MinAtar/": ("minatar", "minatar")}


def register_family(env_id: str) -> None:
    """Make ``env_id``'s family known to Gymnasium (import ale-py; call MinAtar's
    ``register_envs``, which MinAtar 1.0.15 needs under Gymnasium 1.x); an absent simulator is
    one line naming the extra to install. Other ids are left alone."""
    family = next((v for k, v in FAMILIES.items() if env_id.startswith(k)), None)
    if family is None and _ALE_V4.match(env_id) and env_id not in gym.registry:
        # ALE's v0/v4 ids (BreakoutNoFrameskip-v4, CleanRL's and SB3's): ale_py registers
        # them with its v5 ones, when it is installed.
        if importlib.util.find_spec("ale_py") is not None:
            gym.register_envs(importlib.import_module("ale_py"))
        return
    if family is None:
        return
    module, extra = family
    try:
        package = importlib.import_module(module)
    except ImportError:
        raise BeyondfitError(
            f"task.env={env_id!r} needs the {module} package, which is not installed; "
            f'pip install "beyondfit[{extra}]" (from a checkout: pip install -e ".[{extra}]")'
        ) from None
    if module == "ale_py":
        gym.register_envs(package)
    elif not any(name.startswith("MinAtar/") for name in gym.registry):
        importlib.import_module("minatar.gym").register_envs()


def _ale(env: gym.Env) -> Any:
    ale = getattr(env.unwrapped, "ale", None)
    if ale is None:
        raise BeyondfitError(f"{env.unwrapped} is not an Atari env (no ale): the Atari "
                             "wrappers EpisodicLife and FireReset read the ALE's lives")
    return ale


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for the learner (``terminated``), while the game goes on:
    the next ``reset`` continues from where the life was lost (one no-op step), unless the game
    is over (Mnih et al. 2015; SB3's ``EpisodicLifeEnv``). The game's own score and length are
    what ``RecordEpisodeStatistics`` inside this wrapper reports."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    @property
    def game_goes_on(self) -> bool:
        """The last episode ended with a lost life, not the game: the next ``reset`` continues
        it (what a resume's rebuild of the copy replays from the game's start)."""
        return not self.game_over

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """The env's step, ``terminated`` also when a life was lost."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = _ale(self.env).lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        """A real reset after the game's end (or a seed); else a no-op step in the same game."""
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op ended the game: start a new one
                obs, info = self.env.reset(seed=seed, options=options)
        self.lives = _ale(self.env).lives()
        self.game_over = False
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE after each reset in games that wait for it (Breakout's ball is launched by
    FIRE): SB3's ``FireResetEnv``; a game without FIRE is left as it is."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings() if hasattr(
            env.unwrapped, "get_action_meanings") else []
        self.fire = meanings.index("FIRE") if "FIRE" in meanings and len(meanings) >= 3 else None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        """The env's reset, then FIRE (and the action after it, as SB3 does)."""
        obs, info = self.env.reset(seed=seed, options=options)
        if self.fire is None:
            return obs, info
        for action in (self.fire, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(seed=seed, options=options)
        return obs, info


class ClipRewardSign(gym.RewardWrapper):
    """Rewards to their sign, -1, 0 or 1 (DQN's and PPO's Atari setting: one learning rate for
    every game's score scale). The game's score stays in ``RecordEpisodeStatistics``."""

    def reward(self, reward: SupportsFloat) -> float:
        """``sign(reward)``."""
        return float(np.sign(float(reward)))
