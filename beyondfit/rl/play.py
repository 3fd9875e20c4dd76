"""Watch a trained policy: ``python -m beyondfit.play RUN_DIR [--episodes 5] [--video DIR]``.

Loads the ``policy.pt`` that the gym task saved into its run directory (the weights plus the
env id and architecture, also written to ``policy.json``), runs greedy episodes and prints their
returns. ``--video DIR`` records them with Gymnasium's ``RecordVideo`` (``rgb_array`` frames,
written by moviepy, so ``pip install moviepy`` first, plus whatever the env needs to render,
e.g. pygame for the classic-control envs).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.serialization import safe_load
from beyondfit.rl.envs import action_converter, env_spec, missing_dependency
from beyondfit.rl.normalization import Normalizer
from beyondfit.rl.policies import ActorCritic


def load_policy(path: str | Path) -> tuple[ActorCritic, dict]:
    """Rebuild the policy saved in a run directory (or from its ``policy.pt``)."""
    path = Path(path)
    weights = path / "policy.pt" if path.is_dir() else path
    if not weights.is_file():
        raise BeyondfitError(
            f"no saved policy at {str(path)!r}: expected policy.pt, which a run of an RL task "
            "(e.g. python -m beyondfit +task=cartpole) writes into its run directory"
        )
    state = safe_load(weights)
    meta = state.get("policy")
    if not isinstance(meta, dict):
        raise BeyondfitError(f"{str(weights)!r} holds no policy description; it was not written "
                             "by an RL task (python -m beyondfit +task=cartpole writes one)")
    env = make_env(meta)
    if meta.get("kind") == "offpolicy":  # SAC, TD3: the agent's options, as plain data
        from beyondfit.rl.agents import OffPolicyAgent

        agent = OffPolicyAgent(env.observation_space, env.action_space, **meta["agent"])
        env.close()
        agent.load_state_dict(state["model"])
        return agent.eval(), meta
    normalizer = None
    if meta.get("normalizer"):  # running statistics: rebuilt empty, then loaded with the weights
        obs_size = int(np.prod(env.observation_space.shape))
        normalizer = Normalizer(obs_size, **meta["normalizer"])
    policy = ActorCritic(env.observation_space, env.action_space, hidden=tuple(meta["hidden"]),
                         activation=meta["activation"], log_std_init=meta["log_std_init"],
                         value_head=meta.get("critic", True), normalizer=normalizer)
    env.close()
    policy.load_state_dict(state["model"])
    return policy.eval(), meta


def make_env(meta: dict, **kwargs: object) -> gym.Env:
    """The env a policy was trained on, with the wrappers it was trained with."""
    spec = env_spec(meta["env"])
    try:
        env = gym.make(spec, **kwargs)
    except gym.error.DependencyNotInstalled as exc:  # Box2D, MuJoCo: beyondfit extras
        raise missing_dependency(spec, exc) from None
    except Exception as exc:
        raise BeyondfitError(f"cannot create env {meta['env']!r}: {exc}") from None
    wrappers = meta.get("wrappers", [])
    if wrappers is None:
        raise BeyondfitError(
            "the policy was trained with env wrappers that were not saved as config entries "
            "({_target_: CLASS, ...}), so play cannot rebuild its env"
        )
    if wrappers:
        from hydra.utils import instantiate

        for entry in wrappers:
            env = instantiate(entry, _partial_=True)(env)
    return env


def play(
    path: str | Path, episodes: int = 5, video: str | Path | None = None, seed: int = 0
) -> list[float]:
    """Run greedy episodes with the saved policy; return their returns."""
    policy, meta = load_policy(path)
    if video is not None and importlib.util.find_spec("moviepy") is None:
        raise BeyondfitError(
            "recording a video needs moviepy: pip install moviepy (or run without --video)"
        )
    # Only when recording: an env of one's own need not take a render_mode argument.
    env = make_env(meta, **({"render_mode": "rgb_array"} if video is not None else {}))
    if video is not None:
        env = gym.wrappers.RecordVideo(env, str(video), episode_trigger=lambda _: True,
                                       name_prefix=meta["env"].replace("/", "-"))
    to_env = action_converter(env.action_space)
    returns = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                with torch.inference_mode():
                    obs_t = torch.as_tensor(np.asarray(obs), dtype=torch.float32).unsqueeze(0)
                    action = to_env(policy.act(obs_t, greedy=True))[0]
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    except gym.error.DependencyNotInstalled as exc:
        raise BeyondfitError(f"cannot render {meta['env']}: {exc}") from None
    finally:
        env.close()
    return returns


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: print each episode's return and the mean; errors exit with 2."""
    parser = argparse.ArgumentParser(prog="python -m beyondfit.play", description=__doc__)
    parser.add_argument("path", help="run directory (or its policy.pt)")
    parser.add_argument("--episodes", type=int, default=5, help="greedy episodes to run")
    parser.add_argument("--video", default=None, metavar="DIR", help="record videos into DIR")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    args = parser.parse_args(argv)
    try:
        returns = play(args.path, args.episodes, args.video, args.seed)
    except BeyondfitError as exc:
        print(f"beyondfit: error: {exc}", file=sys.stderr)
        sys.exit(2)
    for i, value in enumerate(returns):
        print(f"episode {i}: return {value:.1f}")
    print(f"mean return {np.mean(returns):.1f} over {len(returns)} episodes")
    if args.video is not None:
        print(f"videos written to {args.video}")


if __name__ == "__main__":
    main()
