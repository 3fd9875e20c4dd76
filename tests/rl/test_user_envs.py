"""An env of one's own, registered by a module outside the package (``task.env=MODULE:ID``),
with wrappers from the config: trained from the command line, played back, mistakes in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from beyondfit import BeyondfitError
from beyondfit.cli.builders import build_task
from beyondfit.rl.envs.vector import make_vector_env

from kit import CORRIDOR_ENV, cli

ROOT = Path(__file__).resolve().parents[2]

USER_ENVS = CORRIDOR_ENV + '''

class ScaleReward(gym.RewardWrapper):
    def __init__(self, env, factor: float = 1.0):
        super().__init__(env)
        self.factor = factor

    def reward(self, reward):
        return self.factor * reward


gym.register("Corridor-v0", entry_point=Corridor)
'''

WRAPPERS = (
    "task.wrappers=[{_target_:gymnasium.wrappers.TimeLimit,_partial_:true,max_episode_steps:20},"
    "{_target_:myenvs.ScaleReward,_partial_:true,factor:2.0}]"
)


@pytest.mark.e2e
def test_a_users_env_and_wrappers_train_from_the_command_line_and_play(tmp_path: Path) -> None:
    (tmp_path / "myenvs.py").write_text(USER_ENVS)
    done = cli("+task=cartpole", "task.env=myenvs:Corridor-v0", WRAPPERS,
               "task.target_return=null", "train.stop=null", "task.total_env_steps=2048",
               "task.eval_every_env_steps=1024", "task.eval_episodes=4", "hydra.run.dir=run",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    episodes = [r for r in rows if "episode_length" in r]
    assert episodes and all(r["episode_length"] == 20 for r in episodes)  # TimeLimit(20)
    # Rewards doubled by the wrapper: at most 2 per step, and steps 0-3 can't be at the end.
    assert all(0 <= r["episode_return"] <= 2 * 16 for r in episodes)
    evaluations = [r for r in rows if "val_length" in r]
    assert evaluations and all(r["val_length"] == 20 for r in evaluations)
    saved = json.loads((tmp_path / "run" / "policy.json").read_text())
    assert saved["env"] == "myenvs:Corridor-v0"
    assert saved["wrappers"] == [
        {"_target_": "gymnasium.wrappers.common.TimeLimit", "max_episode_steps": 20},
        {"_target_": "myenvs.ScaleReward", "factor": 2.0},
    ]
    # A policy file imports nothing it names without the user's consent.
    refused = cli("run", "--episodes", "2", module="beyondfit.play", cwd=tmp_path)
    assert refused.returncode == 2 and "--allow-import myenvs" in refused.stderr
    played = cli("run", "--episodes", "2", "--allow-import", "myenvs", module="beyondfit.play",
                 cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    assert "mean return" in played.stdout


@pytest.mark.parametrize(
    ("env_id", "words"),
    [
        ("nosuchmodule:Corridor-v0",
         ["cannot import module 'nosuchmodule'", "directory you launch"]),
        ("badenvs:Corridor-v0", ["importing module 'badenvs' raised RuntimeError: no"]),
        ("myenvs:Nowhere-v0", ["unknown Gymnasium env id", "MODULE:ID"]),
    ],
)
def test_env_mistakes_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   env_id: str, words: list[str]) -> None:
    (tmp_path / "myenvs.py").write_text(USER_ENVS)
    (tmp_path / "badenvs.py").write_text("raise RuntimeError('no')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BeyondfitError) as info:
        make_vector_env(env_id, 2)
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_a_wrapper_without_partial_says_to_add_it(tmp_path: Path) -> None:
    cfg = OmegaConf.create({
        "_target_": "beyondfit.tasks.policy_gradient.build",
        "loss": {"_target_": "beyondfit.rl.algos.onpolicy.ppo_loss"},
        "wrappers": [{"_target_": "gymnasium.wrappers.TimeLimit", "max_episode_steps": 20}],
    })
    with pytest.raises(BeyondfitError) as info:
        build_task(cfg)
    message = str(info.value)
    assert message.startswith("task.wrappers[0] (gymnasium.wrappers.TimeLimit) raised TypeError")
    assert "needs _partial_: true" in message and "\n" not in message
    not_a_factory = [{"_target_": "gymnasium.make", "id": "CartPole-v1"}]
    cfg.wrappers = not_a_factory  # an env, not a wrapper factory
    with pytest.raises(BeyondfitError, match=r"task.wrappers\[0\] is TimeLimit, not a wrapper"):
        build_task(cfg)


