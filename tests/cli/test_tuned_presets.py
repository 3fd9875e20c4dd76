"""An RL run says in its first line which tuned preset applied, or that none exists for its task
and algorithm and how to borrow one; the borrowing it suggests works as typed (issue 47: an
algorithm yaml of one's own ran 100,000 env steps on the generic defaults with no word)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from kit import bench_script, cli, one_line_exit_2

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

from beyondfit.rl.algos.algorithm import OffPolicyUpdate, Target


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


# --------------------------------------------------------------------------- PPO on MuJoCo
# RL-Zoo's MuJoCo entries as beyondfit presets (issue 47): halfcheetah_ppo.yaml (HalfCheetah's
# preset) and zoo_hopper_ppo.yaml (borrowed; Hopper keeps CleanRL's settings, hopper_ppo.yaml).
try:  # at collection: MuJoCo's first import starts a process (glfw's version probe)
    import mujoco
except ImportError:
    mujoco = None
needs_mujoco = pytest.mark.skipif(mujoco is None,
                                  reason='the mujoco extra: pip install -e ".[mujoco]"')
ZOO_PRESETS = {"HalfCheetah-v5": ("halfcheetah", []),
               "Hopper-v5": ("hopper", ["experiment/tuned@_global_=zoo_hopper_ppo"])}
# The one value chosen here (halfcheetah_ppo.yaml, on tuning seeds): HalfCheetah's learning rate
# falls linearly to 0 from twice the zoo's constant, the zoo's step as its mean. Hopper's
# borrowed entry keeps the zoo's constant.
LR_SCHEDULE = {"HalfCheetah-v5": (2.0, 0.0), "Hopper-v5": (1.0, None)}  # (x zoo's lr, end)


def zoo_hyperparams(env_id: str) -> tuple[int, dict, bool]:
    """What bench/pg_tasks.py runs SB3 with: the zoo's entry, the one source of its values."""
    return bench_script("pg_tasks").zoo_hyperparams(env_id)


@needs_mujoco
@pytest.mark.parametrize("env_id", sorted(ZOO_PRESETS))
def test_the_zoo_presets_carry_rl_zoos_entries_into_the_built_task(env_id: str) -> None:
    from hydra import compose, initialize_config_dir
    from torch import nn

    from beyondfit.cli.run import CONF_DIR, build_optimizer, build_task

    task, overrides = ZOO_PRESETS[env_id]
    n_envs, zoo, normalize = zoo_hyperparams(env_id)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", [f"+task={task}", *overrides])
    t, kwargs = cfg.task, zoo["policy_kwargs"]
    assert (t.num_envs, t.normalize) == (n_envs, normalize)
    assert (t.gamma, t.collector.gae_lambda) == (zoo["gamma"], zoo["gae_lambda"])
    assert (t.collector.rollout_steps, t.collector.epochs) == (zoo["n_steps"], zoo["n_epochs"])
    assert t.collector.rollout_steps * n_envs // t.collector.minibatches == zoo["batch_size"]
    assert (t.loss.clip_coef, t.loss.ent_coef) == (zoo["clip_range"], zoo["ent_coef"])
    # SB3's value loss is the mean squared error, ours half of it: twice the coefficient.
    assert t.loss.vf_coef == pytest.approx(2 * zoo["vf_coef"], abs=1e-9)
    factor, lr_end = LR_SCHEDULE[env_id]
    lr = factor * zoo["learning_rate"]
    assert cfg.optimizer.lr == pytest.approx(lr, rel=1e-12) and cfg.optimizer.eps == 1e-5
    assert cfg.engine.clip_norm == zoo["max_grad_norm"]
    assert t.anneal.lr == lr_end
    assert t.anneal.ent_coef is None and t.anneal.clip_coef is None  # the zoo's constants
    assert (list(t.hidden), list(t.critic_hidden)) == (kwargs["net_arch"]["pi"],
                                                        kwargs["net_arch"]["vf"])
    assert t.activation == "relu" and kwargs["activation_fn"] is nn.ReLU
    assert (t.log_std_init, t.init, kwargs["ortho_init"]) == (kwargs["log_std_init"], "default",
                                                              False)
    built = build_task(t)  # and the policy, collector and optimizer they build
    try:
        policy, obs = built.model, built.model.encoder.features
        assert torch.equal(policy.log_std.detach(), torch.full_like(policy.log_std, -2.0))
        actor = [m for m in policy.actor.modules() if isinstance(m, nn.Linear)]
        critic = [m for m in policy.critic.modules() if isinstance(m, nn.Linear)]
        assert [m.in_features for m in actor] == [obs, 256, 256]
        assert [(m.in_features, m.out_features) for m in critic] == [(obs, 256), (256, 256),
                                                                     (256, 1)]
        assert all(bool(m.bias.ne(0).all()) for m in actor + critic)  # torch's init, not zeros
        optimizer = build_optimizer(cfg.optimizer)(list(policy.parameters()))
        assert optimizer.defaults["eps"] == 1e-5
        assert optimizer.defaults["lr"] == pytest.approx(lr, rel=1e-12)
        assert built.train_data.minibatches * zoo["batch_size"] == zoo["n_steps"] * n_envs
        assert policy.normalizer is not None and policy.normalizer.gamma == zoo["gamma"]
    finally:
        built.train_data.close()
        built.val_data.close()


def test_hopper_keeps_cleanrls_mujoco_settings() -> None:
    """hopper_ppo.yaml's choice (seed 0: 3,303 against SB3's 1,003 with the zoo's entry)."""
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", ["+task=hopper"])
    assert cfg.task.collector.rollout_steps == 2048 and cfg.task.anneal.lr == 0.0
    assert cfg.task.init is None and cfg.task.critic_hidden is None  # the algorithm's own


@pytest.mark.runs("conf/experiment/tuned/halfcheetah_ppo.yaml",
                  "conf/experiment/tuned/zoo_hopper_ppo.yaml")
@pytest.mark.e2e
@needs_mujoco
@pytest.mark.parametrize("env_id", sorted(ZOO_PRESETS))
def test_the_zoo_presets_run_with_debug_fast(tmp_path: Path, env_id: str) -> None:
    task, overrides = ZOO_PRESETS[env_id]
    done = cli(f"+task={task}", *overrides, "+debug=fast", "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    preset = overrides[0].split("=")[1] if overrides else f"{task}_ppo"
    assert first_line(done.stdout) == (f"tuned settings: experiment/tuned/{preset}.yaml "
                                       f"({task}, algo=ppo)")
    assert "debug: resumed from the step-1 checkpoint and trained to step 2" in done.stdout
    policy = json.loads((tmp_path / "run" / "policy.json").read_text())
    assert policy["hidden"] == policy["critic_hidden"] == [256, 256]
    assert policy["log_std_init"] == -2.0 and policy["activation"] == "relu"


# A task of one's own that takes SB3's policy shape: the options are the task's, from
# conf/base/rl.yaml, so a user's task file sets them as the shipped presets do.
OWN_TASK = """# @package _global_
defaults:
  - pendulum
  - _self_

task:
  total_env_steps: 4096
  hidden: [32]
  critic_hidden: [16, 16]
  activation: relu
  log_std_init: -1.0
  init: default
"""


@pytest.mark.e2e
def test_a_task_of_ones_own_takes_the_policy_options(tmp_path: Path) -> None:
    from beyondfit.core.state.serialization import safe_load

    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "mine.yaml").write_text(OWN_TASK)
    done = cli("--config-dir", "conf", "+task=mine", "+debug=fast", "hydra.run.dir=run",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = safe_load(tmp_path / "run" / "policy.pt")
    weights, meta = saved["model"], saved["policy"]
    assert (meta["hidden"], meta["critic_hidden"]) == ([32], [16, 16])
    assert weights["actor.0.weight"].shape == (32, 3) and weights["actor.2.weight"].shape == (1, 32)
    assert [weights[f"critic.{i}.weight"].shape for i in (0, 2, 4)] == [(16, 3), (16, 16), (1, 16)]
    # Two small Adam steps from -1.0; torch's init of the action layer (uniform within
    # 1/sqrt(32)), not orthogonal's gain of 0.01.
    assert torch.allclose(weights["log_std"], torch.full((1,), -1.0), atol=0.05)
    assert float(weights["actor.2.weight"].abs().max()) > 0.05
    played = cli("run", "--episodes", "1", module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, played.stderr[-2000:]
