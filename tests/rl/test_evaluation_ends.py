"""Every evaluation ends (``beyondfit/rl/evaluation/evaluator.py``): an episode that runs to its
cap (the env's time limit, else the Atari protocol's 27,000 steps) ends there as truncated and is
said to, so a stalled greedy policy in a game without a time limit never holds a run; and a stop
signal during an evaluation stops the run, saves it and names the resume (real signals)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from beyondfit.rl.evaluation.evaluator import EPISODE_CAP, GreedyEvaluator

from kit import CORRIDOR_ENV, QUIET, ROOT, cli


class Stay(nn.Module):
    """A greedy policy that stalls: always action 0 (left, at the corridor's start: no end)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def act(self, obs: torch.Tensor, greedy: bool = True) -> torch.Tensor:
        return torch.zeros(len(obs), dtype=torch.long)


@pytest.fixture
def corridor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A user's env with no time limit and no end: ``stalls:Corridor-v0``."""
    (tmp_path / "stalls.py").write_text(CORRIDOR_ENV + (
        '\ngym.register("Corridor-v0", entry_point=Corridor)\n'))
    monkeypatch.syspath_prepend(str(tmp_path))
    import stalls  # noqa: F401  (registers the id)

    return "Corridor-v0"


def test_a_stalled_policy_in_an_env_without_a_time_limit_is_capped(corridor: str, caplog) -> None:
    evaluator = GreedyEvaluator(corridor, 3, seed=1, max_steps=200)
    result = evaluator(Stay())
    assert result == {"val_return": 0.0, "val_length": 200.0, "val_capped": 3.0}
    assert "3 of 3 episodes of Corridor-v0 reached the cap of 200 steps" in caplog.text
    evaluator.close()
    assert GreedyEvaluator(corridor, 1).max_steps == EPISODE_CAP == 27_000
    assert GreedyEvaluator("CartPole-v1", 1).max_steps == 500  # its own time limit


def test_a_stalled_minatar_game_ends_at_the_cap_with_the_score_it_had() -> None:
    pytest.importorskip("minatar")
    from beyondfit.rl.envs.suites import register_family

    register_family("MinAtar/Seaquest-v1")
    wrappers = [gym.wrappers.RecordEpisodeStatistics]
    evaluator = GreedyEvaluator("MinAtar/Seaquest-v1", 2, seed=0, max_steps=40,
                                wrappers=wrappers)
    result = evaluator(Stay())  # no-op: the sub waits at the surface for 40 steps
    assert result["val_capped"] == 2.0 and result["val_length"] == 40.0
    assert np.isfinite(result["val_return"])
    evaluator.close()


SLOW_ENV = CORRIDOR_ENV + '''
import os, time


class Watched(Corridor):
    """The corridor; its evaluation copies (seeded from 10,000 on) say they started, and step
    slowly while the file ``slow`` exists."""

    def reset(self, *, seed=None, options=None):
        if seed is not None and seed >= 10_000:
            open("evaluating", "w").close()
            self.slow = os.path.exists("slow")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if getattr(self, "slow", False) and os.path.exists("slow"):
            time.sleep(0.01)
        return super().step(action)


gym.register("Watched-v0", entry_point=Watched)
'''


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_during_an_evaluation_stops_the_run_and_it_resumes(
        tmp_path: Path, signum: int) -> None:
    (tmp_path / "watched.py").write_text(SLOW_ENV)
    (tmp_path / "slow").touch()
    run = tmp_path / "run"
    args = ["+task=cartpole", "task.env=watched:Watched-v0", "task.total_env_steps=1024",
            "task.eval_every_env_steps=512", "task.eval_episodes=1", "task.confirm_episodes=1",
            "train.stop=null", "logger=[]", *QUIET, f"hydra.run.dir={run}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.Popen([sys.executable, "-m", "beyondfit", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (tmp_path / "evaluating").exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no evaluation started"
        time.sleep(0.05)
    time.sleep(1.0)  # well inside the evaluation: 27,000 slow steps would take minutes
    sent = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert time.monotonic() - sent < 60, "the evaluation ran on after the signal"
    name = signal.Signals(signum).name
    assert proc.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[signum], err
    assert f"{name} received: stopping the evaluation, then saving a checkpoint" in err
    assert f"resume={run}" in err + out
    assert not (run / "result.json").exists()
    (tmp_path / "slow").unlink()
    resumed = cli(*args, f"resume={run}", cwd=tmp_path,
                  env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert resumed.returncode == 0, resumed.stderr
    assert (run / "result.json").exists()
