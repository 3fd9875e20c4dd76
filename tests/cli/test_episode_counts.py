"""An RL run's evaluation counts are refused by their own key, before any env is built or any
step is trained (issue 47: ``task.eval_episodes=100000000`` and ``task.confirm_episodes=70000``
were refused as ``task.num_envs=...``, the confirming one only after the whole run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit import cli, one_line_exit_2

TINY = ["task.total_env_steps=64", "task.eval_episodes=1", "plots=false", "logger=[]",
        "progress.bar=false", "device=cpu"]

CASES = {
    "task.eval_episodes=100000000": ("+task=cartpole",),
    "task.confirm_episodes=70000": ("+task=cartpole",),
    "task.eval_episodes=70000": ("+task=cartpole", "algo=dqn", "task.replay.learning_starts=16"),
    "task.confirm_episodes=100000000": ("+task=cartpole", "algo=dqn",
                                        "task.replay.learning_starts=16"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("setting", CASES)
def test_an_evaluation_count_is_refused_by_its_own_key_before_training(
        tmp_path: Path, setting: str) -> None:
    key = setting.partition("=")[0]
    done = cli(*CASES[setting], *TINY, setting, f"hydra.run.dir={tmp_path / 'run'}",
               cwd=tmp_path)
    assert "epoch" not in done.stdout, done.stdout  # refused before training, not after it
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    stderr = one_line_exit_2(done, setting, "65536", f"e.g. {key}=")
    assert "task.num_envs" not in stderr
