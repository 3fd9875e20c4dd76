"""An exception raised in a user's own code while a run trains (a loss closure, off-policy or
supervised) is said as a ``_target_`` that raised while it was built is: one error line naming
the config key, the target and the user's line, then the user's own frames, no package frame
and no traceback; exit 2 (issue 47: a 75-line traceback for an off-policy loss)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beyondfit.cli.app import user_code_error

from kit import cli

LOSS = '''
import torch
import torch.nn.functional as F

from beyondfit.rl.algos.algorithm import OffPolicyUpdate, Target


def scaled(values, scale):
    if scale > 1:
        raise ValueError(f"scale {scale} is above 1")
    return values * scale


def broken_dqn(gamma=0.99, double=False, huber=True, tau=1.0, target_every=10_000, scale=2.0):
    def q(model, batch):
        values = scaled(model.q(batch.obs), scale)
        taken = values.gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        return F.smooth_l1_loss(taken, batch.rewards)

    return [OffPolicyUpdate("q", q, trains="q", target=Target("q_target", tau, target_every))]
'''

TASK = '''
import torch
from torch import nn

from beyondfit import Task


def build(seed: int = 0):
    torch.manual_seed(seed)
    x = torch.randn(64, 3)
    batches = [(x[i:i + 16], x[i:i + 16].sum(1, keepdim=True)) for i in range(0, 64, 16)]

    def loss_fn(model, batch):
        inputs, target = batch
        return ((model(inputs.T) - target) ** 2).mean()  # .T: the user's mistake

    return Task(model=nn.Linear(3, 1), loss_fn=loss_fn, train_data=batches, val_data=None)
'''

QUIET = ["plots=false", "logger=[]", "progress.bar=false", "device=cpu"]
DQN = ["+task=cartpole", "algo=dqn", "task.loss._target_=mymod.broken_dqn",
       "task.total_env_steps=300", "task.replay.learning_starts=100", "task.eval_episodes=1",
       "task.confirm_episodes=1", *QUIET]


def frames_only(stderr: str, *users: str) -> list[str]:
    """The error's lines, checked: the error line first, then the user's frames, no others."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("beyondfit: error: "))
    shown = lines[start:]
    assert "Traceback" not in stderr and "beyondfit/" not in "\n".join(shown), stderr
    assert "site-packages" not in stderr, stderr
    assert len(shown) <= 2 + len(users), stderr
    for user in users:
        assert any(user in line for line in shown[2:]), (user, stderr)
    return shown


@pytest.mark.e2e
def test_an_off_policy_loss_that_raises_shows_the_users_frames(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(LOSS)
    done = cli(*DQN, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    shown = frames_only(done.stderr, "mymod.py:16 in q: values = scaled(",
                        "mymod.py:10 in scaled: raise ValueError(")
    assert shown[0] == ("beyondfit: error: task.loss (mymod.broken_dqn) raised ValueError: "
                        "scale 2.0 is above 1 (at mymod.py:10 in scaled)")


@pytest.mark.e2e
def test_a_supervised_closure_that_raises_in_torch_shows_the_users_line(tmp_path: Path) -> None:
    (tmp_path / "mytask.py").write_text(TASK)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "mine.yaml").write_text("_target_: mytask.build\nseed: 0\n")
    done = cli("--config-dir", "conf", "+task=mine", *QUIET,
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    shown = frames_only(done.stderr, "mytask.py:15 in loss_fn")
    assert shown[0].startswith("beyondfit: error: task (mytask.build) raised RuntimeError: ")
    assert shown[0].endswith("(at mytask.py:15 in loss_fn)")


@pytest.mark.e2e
def test_hydra_full_error_still_gives_the_whole_traceback(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(LOSS)
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    done = cli(*DQN, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "beyondfit/core/" in done.stderr


def test_an_exception_with_no_frame_of_the_users_is_left_whole() -> None:
    """A failure inside the package or a library (a bug of ours) keeps its traceback."""
    with pytest.raises(ValueError) as info:
        json.loads("{")
    inside = info.value.with_traceback(info.tb.tb_next)  # json's frames alone, not this test's
    assert user_code_error(inside) is None
    assert user_code_error(info.value.with_traceback(info.tb)) is not None
