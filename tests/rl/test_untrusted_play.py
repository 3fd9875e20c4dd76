"""A policy file is data: ``python -m beyondfit.play`` builds and imports nothing a doctored
``policy.pt`` names (a nested ``_target_`` in wrapper options, a wrapper or ``module:`` env of
someone else's), refuses a malformed architecture entry in one line, and writes nothing."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

from beyondfit import BeyondfitError
from beyondfit.core.state.serialization import atomic_save
from beyondfit.rl.evaluation.play import load_policy, play
from beyondfit.rl.nets.policies import ActorCritic

from kit import cli

#: A module that leaves a mark when anything imports it.
SENTINEL = '''
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text("the policy file ran code")
import gymnasium as gym


class Wrap(gym.Wrapper):
    pass


gym.register("Trap-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
'''


def architecture(**changes: Any) -> dict[str, Any]:
    """What the gym task writes for a CartPole policy, with ``changes``."""
    meta = {"env": "CartPole-v1", "hidden": [8], "activation": "tanh", "log_std_init": 0.0,
            "critic": True, "normalizer": None,
            "wrappers": [{"_target_": "gymnasium.wrappers.common.TimeLimit",
                          "max_episode_steps": 20}]}
    meta.update(changes)
    return meta


def write_policy(directory: Path, meta: dict[str, Any], weights: dict | None = None) -> Path:
    """A policy.pt as the task writes it (checksum and all), holding ``meta``."""
    env = gym.make("CartPole-v1")
    policy = ActorCritic(env.observation_space, env.action_space, hidden=(8,))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sentinel.py").write_text(SENTINEL)
    return atomic_save({"model": weights or policy.state_dict(), "policy": meta},
                       directory / "policy.pt")


def test_a_genuine_policy_file_plays(tmp_path: Path) -> None:
    write_policy(tmp_path, architecture())
    returns = play(tmp_path, episodes=2)
    assert len(returns) == 2 and all(0 < r <= 20 for r in returns)  # TimeLimit(20) rebuilt


#: What wrote a .pth file into site-packages: Path("PWNED").write_text("x"), built by Hydra.
WRITE_TEXT = {"_target_": "pathlib.Path.write_text",
              "self": {"_target_": "pathlib.Path", "_args_": ["PWNED"]}, "data": "x"}

DOCTORED = {
    "nested target in a wrapper option": (
        architecture(wrappers=[{"_target_": "gymnasium.wrappers.TimeLimit",
                                "max_episode_steps": WRITE_TEXT}]),
        "wrappers[0].max_episode_steps is an object to build ('pathlib.Path.write_text')"),
    "a callable as a wrapper": (
        architecture(wrappers=[{"_target_": "pathlib.Path.write_text", "data": "x"}]),
        "wrappers[0] names 'pathlib.Path.write_text', which is not one of Gymnasium's"),
    "a wrapper from a module of someone else's": (
        architecture(wrappers=[{"_target_": "sentinel.Wrap"}]),
        "--allow-import sentinel"),
    "a module: env": (architecture(env="sentinel:Trap-v0"),
                      "imports module 'sentinel' to register it; play imports nothing"),
    "hydra's instructions in wrapper options": (
        architecture(wrappers=[{"_target_": "gymnasium.wrappers.TimeLimit", "_args_": ["x"]}]),
        "wrappers[0] has option '_args_'"),
    "a wrapper that writes files": (
        architecture(wrappers=[{"_target_": "gymnasium.wrappers.RecordVideo",
                                "video_folder": "PWNED"}]),
        "names 'gymnasium.wrappers.RecordVideo', which is not one of Gymnasium's"),
    "a nested target as the normalizer": (architecture(normalizer=WRITE_TEXT),
                                          "normalizer="),
    "an off-policy actor's unknown log-std bound": (
        {"kind": "offpolicy", "env": "Pendulum-v1", "wrappers": [],
         "agent": {"actor": "gaussian", "hidden": [8], "log_std": "softplus"}},
        "a log_std among tanh, clamp"),
    "an off-policy agent of an unknown kind": (
        {"kind": "offpolicy", "env": "CartPole-v1", "wrappers": [],
         "agent": {"kind": "beyondfit.rl.nets.agents.QAgent", "hidden": [8]}},
        "a kind among actor_critic, q"),
}


@pytest.mark.parametrize("case", list(DOCTORED))
def test_a_doctored_policy_file_is_refused_and_nothing_is_imported(tmp_path: Path,
                                                                    case: str) -> None:
    meta, words = DOCTORED[case]
    write_policy(tmp_path, meta)
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(BeyondfitError) as info:
            load_policy(tmp_path)
    finally:
        sys.path.remove(str(tmp_path))
    assert "\n" not in str(info.value) and words in str(info.value)
    assert "sentinel" not in sys.modules
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.pt", "sentinel.py"]


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["nested target in a wrapper option", "a module: env"])
def test_play_refuses_a_doctored_file_in_one_line_and_writes_nothing(tmp_path: Path,
                                                                     case: str) -> None:
    meta, words = DOCTORED[case]
    write_policy(tmp_path / "run", meta)
    # python -m puts the launch directory on sys.path: sentinel.py is importable from there.
    done = cli("policy.pt", "--episodes", "1", module="beyondfit.play", cwd=tmp_path / "run")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["policy.pt", "sentinel.py"]


@pytest.mark.e2e
def test_consent_imports_the_module_named(tmp_path: Path) -> None:
    write_policy(tmp_path / "run", architecture(env="sentinel:Trap-v0",
                                                wrappers=[{"_target_": "sentinel.Wrap"}]))
    done = cli(".", "--episodes", "1", "--allow-import", "sentinel", module="beyondfit.play",
               cwd=tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "IMPORTED").exists() and "mean return" in done.stdout


MALFORMED = {
    "hidden as a string": (architecture(hidden="64"), "hidden='64' is not a list"),
    "hidden bigger than the weights": (architecture(hidden=[10**6, 10**6]),
                                       "weights do not fit its policy entry"),
    "activation outside the set": (architecture(activation="os.system"),
                                   "activation='os.system' is not one of relu, tanh"),
    "critic_hidden a string": (architecture(critic_hidden="64"),
                               "critic_hidden='64' is not a list"),
    "critic_hidden not the weights' sizes": (architecture(critic_hidden=[16]),
                                             "weights do not fit its policy entry"),
    "log_std_init not finite": (architecture(log_std_init=math.nan), "log_std_init=nan"),
    "log_std_init a string": (architecture(log_std_init="0"), "log_std_init='0'"),
    "critic a string": (architecture(critic="yes"), "critic='yes' is not true or false"),
    "normalizer clip negative": (architecture(normalizer={"clip": -1.0}),
                                 "normalizer.clip=-1.0 is not a positive finite number"),
    "an unknown entry": (architecture(kind="sac"), "unknown policy entries ['kind']"),
    "env missing": ({k: v for k, v in architecture().items() if k != "env"}, "env=None"),
    "env not an id": (architecture(env="../../etc passwd"), "is not a Gymnasium env id"),
    "wrappers not a list": (architecture(wrappers="TimeLimit"), "wrappers='TimeLimit'"),
    "not a mapping": ([1, 2], "holds no policy description"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_architecture_entry_is_one_line(tmp_path: Path, case: str) -> None:
    meta, words = MALFORMED[case]
    write_policy(tmp_path, meta)
    with pytest.raises(BeyondfitError) as info:
        load_policy(tmp_path)
    assert "\n" not in str(info.value) and words in str(info.value), str(info.value)


def test_nan_weights_and_foreign_weights_are_refused(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1")
    weights = ActorCritic(env.observation_space, env.action_space, hidden=(8,)).state_dict()
    weights["actor.0.weight"][0, 0] = math.nan
    write_policy(tmp_path, architecture(), weights)
    with pytest.raises(BeyondfitError, match=r"non-finite weights in actor\.0\.weight"):
        load_policy(tmp_path)
    weights["actor.0.weight"] = torch.zeros(3, 3)
    write_policy(tmp_path, architecture(), weights)
    with pytest.raises(BeyondfitError, match=r"actor\.0\.weight \(3, 3\) vs model \(8, 4\)"):
        load_policy(tmp_path)


@pytest.mark.e2e
@pytest.mark.parametrize(("flag", "words"), [(("--episodes", "0"), "--episodes 0"),
                                             (("--seed", "-1"), "--seed -1")])
def test_play_refuses_no_episodes_or_a_negative_seed(tmp_path: Path, flag: tuple[str, str],
                                                     words: str) -> None:
    write_policy(tmp_path, architecture())
    done = cli(str(tmp_path), *flag, module="beyondfit.play")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert words in done.stderr and "nan" not in done.stdout
