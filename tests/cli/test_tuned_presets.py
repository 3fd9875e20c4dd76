"""An RL run says in its first line which tuned preset applied, or that none exists for its task
and algorithm and how to borrow one; the borrowing it suggests works as typed (issue 47: an
algorithm yaml of one's own ran 100,000 env steps on the generic defaults with no word)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kit import cli, one_line_exit_2

# An algorithm file of one's own, shaped like docs/how-to/own-algorithm.md's, with a DQN-style
# loss that takes the options the CartPole DQN preset sets (gamma, double, target_every) and
# RL-Zoo's update rhythm (train_freq), as that preset's keys need.
CQL_MIN = """# @package _global_
task:
  _target_: beyondfit.tasks.offpolicy.build
  loss:
    _target_: mymod.cql_dqn
    gamma: ${task.gamma}
  replay: {batch_size: 64, learning_starts: 100, updates_per_step: null, train_freq: 4}
  agent: {kind: q, hidden: "${task.hidden}"}
  num_envs: 1
"""
MYMOD = '''
import torch
import torch.nn.functional as F

from beyondfit.rl.algorithm import OffPolicyUpdate, Target


def cql_dqn(gamma=0.99, double=False, target_every=1000, alpha=0.5):
    def q(model, batch):
        with torch.no_grad():
            next_value = model.q_target(batch.next_obs).max(1).values
            target = batch.rewards + gamma * (1 - batch.terminated) * next_value
        values = model.q(batch.obs)
        taken = values.gather(1, batch.actions.unsqueeze(1)).squeeze(1)
        cql = (torch.logsumexp(values, 1) - taken).mean()
        return {"loss": F.smooth_l1_loss(taken, target) + alpha * cql, "cql": cql.detach()}

    return [OffPolicyUpdate("q", q, trains="q", target=Target("q_target", 1.0, target_every))]
'''
TINY = ["task.total_env_steps=300", "task.replay.learning_starts=100", "task.eval_episodes=1",
        "task.confirm_episodes=1", "task.hidden=[16]", "plots=false", "logger=[]",
        "progress.bar=false", "device=cpu"]


@pytest.fixture
def own(tmp_path: Path) -> Path:
    (tmp_path / "conf" / "algo").mkdir(parents=True)
    (tmp_path / "conf" / "algo" / "cql_min.yaml").write_text(CQL_MIN)
    (tmp_path / "mymod.py").write_text(MYMOD)
    return tmp_path


def first_line(stdout: str) -> str:
    return stdout.splitlines()[0] if stdout else ""


@pytest.mark.e2e
def test_an_own_algorithm_without_a_preset_says_so_first_and_how_to_borrow(own: Path) -> None:
    done = cli("--config-dir", "conf", "+task=cartpole", "algo=cql_min", *TINY,
               f"hydra.run.dir={own / 'a'}", cwd=own)
    assert done.returncode == 0, done.stderr[-2000:]
    line = first_line(done.stdout)
    assert line.startswith("no tuned settings for cartpole with algo=cql_min "
                           "(no experiment/tuned/cartpole_cql_min.yaml): the generic defaults "
                           "apply"), done.stdout
    # An off-policy algorithm: the off-policy preset of the task is the one to borrow.
    assert "experiment/tuned@_global_=cartpole_dqn" in line
    assert "algo=dqn task.loss._target_=mymod.my_loss" in line

    # The borrowing, as the line spells it: the preset applies (and says so).
    borrowed = cli("--config-dir", "conf", "+task=cartpole", "algo=cql_min",
                   "experiment/tuned@_global_=cartpole_dqn", *TINY,
                   f"hydra.run.dir={own / 'b'}", cwd=own)
    assert borrowed.returncode == 0, borrowed.stderr[-2000:]
    assert first_line(borrowed.stdout) == ("tuned settings: experiment/tuned/cartpole_dqn.yaml "
                                           "(cartpole, algo=cql_min)")
    config = yaml.safe_load((own / "b" / ".hydra" / "config.yaml").read_text())
    assert config["optimizer"]["lr"] == 0.0023 and config["task"]["loss"]["double"] is True


@pytest.mark.e2e
def test_a_tuned_run_names_its_preset_and_a_supervised_one_says_nothing(tmp_path: Path) -> None:
    done = cli("+task=cartpole", "algo=dqn", *TINY, f"hydra.run.dir={tmp_path / 'a'}",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert first_line(done.stdout) == ("tuned settings: experiment/tuned/cartpole_dqn.yaml "
                                       "(cartpole, algo=dqn)")
    plain = cli("+task=regression", "train.epochs=1", "plots=false", "logger=[]",
                "progress.bar=false", f"hydra.run.dir={tmp_path / 'b'}", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "tuned settings" not in plain.stdout + plain.stderr


@pytest.mark.e2e
def test_borrowing_with_a_plus_says_to_drop_it(own: Path) -> None:
    done = cli("--config-dir", "conf", "+task=cartpole", "algo=cql_min",
               "+experiment/tuned@_global_=cartpole_dqn", cwd=own)
    one_line_exit_2(done, "override it without the +: experiment/tuned@_global_=cartpole_dqn")
