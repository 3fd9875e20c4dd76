"""Watch a trained policy: ``python -m beyondfit.play RUN_DIR [--episodes 5] [--video DIR]``.

Loads the ``policy.pt`` that the gym task saved into its run directory (the weights plus the
env id and architecture, also written to ``policy.json``), runs greedy episodes and prints their
returns. ``--video DIR`` records them with Gymnasium's ``RecordVideo`` (``rgb_array`` frames,
written by moviepy, so ``pip install moviepy`` first, plus whatever the env needs to render,
e.g. pygame for the classic-control envs).

A policy file is data, not code: play imports nothing it names (a ``module:EnvId`` env, a
wrapper of one's own) unless ``--allow-import MODULE`` says so, and rebuilds Gymnasium's
wrappers from literal options without ``hydra.utils.instantiate``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.serialization import (
    is_plain_extra_state,
    mismatched_keys,
    nonfinite_entries,
    safe_load,
)
from beyondfit.rl.collect.normalization import Normalizer
from beyondfit.rl.envs.vector import env_spec, greedy_policy, missing_dependency
from beyondfit.rl.evaluation.policy_file import check_policy, encoder_factory, wrapper_factory
from beyondfit.rl.nets.policies import ActorCritic


def load_policy(
    path: str | Path, allow_import: Iterable[str] = ()
) -> tuple[nn.Module, dict]:
    """Rebuild the policy saved in a run directory (or from its ``policy.pt``).

    The file is data: its description is checked (:mod:`beyondfit.rl.evaluation.policy_file`) and
    the network's shapes are compared with its weights on the meta device before anything real is
    built; modules it names are imported only when ``allow_import`` names them.
    """
    path = Path(path)
    weights = path / "policy.pt" if path.is_dir() else path
    if not weights.is_file():
        raise BeyondfitError(
            f"no saved policy at {str(path)!r}: expected policy.pt, which a run of an RL task "
            "(e.g. python -m beyondfit +task=cartpole) writes into its run directory"
        )
    state = safe_load(weights)
    source = repr(str(weights))
    meta = check_policy(state.get("policy"), source, allow_import)
    env = make_env(meta, allow_import)
    try:
        with torch.device("meta"):  # sizes from the file: check them against the weights first
            probe = build_policy(meta, env, allow_import)
        problems = mismatched_keys(probe.state_dict(), state["model"])
        problems += [f"{k} is not a tensor" for k, v in state["model"].items()
                     if not isinstance(v, torch.Tensor) and not is_plain_extra_state(k, v)]
        if problems:
            raise BeyondfitError(f"{source} was refused: its weights do not fit its policy entry "
                                 f"({'; '.join(problems[:4])})")
        bad = nonfinite_entries(state["model"].items())
        if bad:
            raise BeyondfitError(f"{source} was refused: non-finite weights in {', '.join(bad)}")
        policy = build_policy(meta, env, allow_import)
    finally:
        env.close()
    policy.load_state_dict(state["model"])
    return policy.eval(), meta


def build_policy(meta: dict, env: gym.Env, allow_import: Iterable[str] = ()) -> nn.Module:
    """The network a checked policy entry describes, for ``env``'s spaces (weights untrained):
    an :class:`ActorCritic`, or an off-policy agent (SAC, TD3, DQN) for ``kind: offpolicy``;
    an encoder of one's own is imported only from a module ``allow_import`` names."""
    if meta.get("kind") == "offpolicy":
        from beyondfit.rl.nets.agents import AGENTS

        options = dict(meta["agent"])
        agent = AGENTS[options.pop("kind", "actor_critic")]  # checked by check_policy
        if "encoder" in options:
            options["encoder"] = encoder_factory(options["encoder"], "agent.encoder",
                                                 "the policy file", allow_import)
        try:
            return agent(env.observation_space, env.action_space, **options)
        except (TypeError, ValueError) as exc:
            raise BeyondfitError(f"the policy entry's agent options do not build an agent: "
                                 f"{exc}") from None
    normalizer = None
    if meta.get("normalizer"):  # running statistics: rebuilt empty, then loaded with the weights
        obs_size = int(np.prod(env.observation_space.shape))
        normalizer = Normalizer(obs_size, **meta["normalizer"])
    return ActorCritic(env.observation_space, env.action_space, hidden=tuple(meta["hidden"]),
                       activation=meta["activation"], log_std_init=meta["log_std_init"],
                       value_head=meta.get("critic", True), normalizer=normalizer,
                       critic_hidden=meta.get("critic_hidden"),
                       encoder=encoder_factory(meta.get("encoder", "auto"), "encoder",
                                               "the policy file", allow_import))


def make_env(meta: dict, allow_import: Iterable[str] = (), **kwargs: object) -> gym.Env:
    """The env a policy was trained on, with the wrappers it was trained with.

    ``meta`` must have passed :func:`~beyondfit.rl.evaluation.policy_file.check_policy`: a
    ``module:`` env and wrappers of one's own are imported only when ``allow_import`` names their
    module.
    """
    meta = check_policy(meta, "the policy entry", allow_import)  # cheap; imports nothing
    wrappers = meta.get("wrappers", [])
    if wrappers is None:
        raise BeyondfitError(
            "the policy was trained with env wrappers that were not saved as config entries "
            "({_target_: CLASS, ...}), so play cannot rebuild its env"
        )
    factories = [wrapper_factory(entry, f"wrappers[{i}]", "the policy file", allow_import)
                 for i, entry in enumerate(wrappers)]
    spec = env_spec(meta["env"])
    try:
        env = gym.make(spec, **{**meta.get("env_kwargs", {}), **kwargs})
        for factory in factories:
            env = factory(env)
    except gym.error.DependencyNotInstalled as exc:  # Box2D, MuJoCo: beyondfit extras
        raise missing_dependency(spec, exc) from None
    except Exception as exc:
        raise BeyondfitError(f"cannot create env {meta['env']!r}: {exc}") from None
    return env


def play(
    path: str | Path,
    episodes: int = 5,
    video: str | Path | None = None,
    seed: int = 0,
    allow_import: Iterable[str] = (),
) -> list[float]:
    """Run greedy episodes with the saved policy; return their returns.

    ``allow_import``: modules the policy file may import (its ``module:EnvId`` env, its own
    wrappers), by the user's consent; by default nothing it names is imported.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes <= 0:
        raise BeyondfitError(f"--episodes {episodes!r}: play needs a positive number of "
                             "episodes, e.g. --episodes 5")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise BeyondfitError(f"--seed {seed!r}: give a non-negative integer, e.g. --seed 0")
    policy, meta = load_policy(path, allow_import)
    if video is not None and importlib.util.find_spec("moviepy") is None:
        raise BeyondfitError(
            'recording a video needs moviepy: pip install -e ".[video]" (or pip install '
            "moviepy), or run without --video"
        )
    # Only when recording: an env of one's own need not take a render_mode argument.
    render = {"render_mode": "rgb_array"} if video is not None else {}
    env = make_env(meta, allow_import, **render)
    if video is not None:
        env = gym.wrappers.RecordVideo(env, str(video), episode_trigger=lambda _: True,
                                       name_prefix=meta["env"].replace("/", "-"))
    act = greedy_policy(policy, env.action_space)
    # With RecordEpisodeStatistics among the wrappers (the Atari task's), an episode is what it
    # reports: a whole game over all its lives, its unclipped score, as training logged it.
    reports = any(entry.get("_target_", "").endswith("RecordEpisodeStatistics")
                  for entry in meta.get("wrappers") or [])
    returns = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, info = env.step(
                    act(np.asarray(obs)[None])[0])
                total += float(reward)
                if reports:
                    if "episode" in info:
                        total, done = float(info["episode"]["r"]), True
                    elif terminated or truncated:  # a life lost: the game goes on
                        obs, _ = env.reset()
                    continue
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
    parser.add_argument(
        "--allow-import", action="append", default=[], metavar="MODULE",
        help="let the policy file import MODULE (its module:EnvId env, its own wrappers); "
             "only for files you trust: importing a module runs its code")
    args = parser.parse_args(argv)
    try:
        returns = play(args.path, args.episodes, args.video, args.seed, args.allow_import)
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
