"""The gym task through the one engine: bad input, learning, determinism, saving and playing."""

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from beyondfit.core.callbacks import StopRule
from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.seeding import seed_everything
from beyondfit.rl.algos.onpolicy import a2c_loss, ppo_loss, reinforce_loss
from beyondfit.tasks.policy_gradient import build as build_pg

from kit import cli, one_line_exit_2

# The tuned collector settings of conf/algo/*.yaml, for the Python API.
ALGOS = {
    "reinforce": (reinforce_loss, {"rollout_steps": 64, "gae_lambda": 1.0,
                                   "old_log_prob": False}),
    "a2c": (a2c_loss, {"rollout_steps": 8, "gae_lambda": 0.9, "old_log_prob": False}),
    "ppo": (ppo_loss, {"rollout_steps": 64, "gae_lambda": 0.9, "epochs": 10, "minibatches": 3}),
}


def build(algo: str = "ppo", **options):
    """The task with one of the built-in algorithms, as its config file sets it up."""
    factory, collector = ALGOS[algo]
    return build_pg(factory(), **{"collector": collector, **options})


ROOT = Path(__file__).resolve().parents[2]


class DictObsEnv(gym.Env):
    """An env whose observations are a Dict: the MLP policies do not take it."""

    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1.0, 1.0, (2,))})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


class TupleActionEnv(DictObsEnv):
    """Box observations but Tuple actions."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))


gym.register("BeyondfitTest/DictObs-v0", entry_point=DictObsEnv)
gym.register("BeyondfitTest/TupleAction-v0", entry_point=TupleActionEnv)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"env": "NoSuchEnv-v9"}, ["task.env='NoSuchEnv-v9'", "unknown"]),
        ({"env": "BeyondfitTest/DictObs-v0"}, ["observation space", "Dict", "not supported"]),
        ({"env": "BeyondfitTest/TupleAction-v0"}, ["action space", "Tuple", "not supported"]),
        ({"loss": "ppo"}, ["task.loss is str", "task.loss._target_="]),
        ({"num_envs": 0}, ["task.num_envs=0", "positive"]),
        ({"num_envs": -3}, ["task.num_envs=-3", "positive"]),
        ({"collector": {"rollout_steps": 0}}, ["task.collector.rollout_steps=0", "positive"]),
        ({"gamma": 1.5}, ["task.gamma=1.5", "[0, 1]"]),
        ({"gamma": -0.1}, ["task.gamma=-0.1", "[0, 1]"]),
        ({"collector": {"gae_lambda": 2}}, ["task.collector.gae_lambda=2", "[0, 1]"]),
        ({"collector": {"horizon": 5}}, ["horizon", "task.collector"]),
        ({"activation": "gelu"}, ["task.activation='gelu'", "relu, tanh"]),
    ],
)
def test_bad_input_is_a_clear_error(options, words):
    with pytest.raises(BeyondfitError) as info:
        if "loss" in options:
            build_pg(**options)
        else:
            build(**options)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def train(seed: int, total_env_steps: int, **options):
    seed_everything(seed)
    task = build(seed=seed, total_env_steps=total_env_steps, **options)
    engine = Engine(task.model, task.loss_fn, torch.optim.Adam(task.model.parameters(), 3e-3),
                    clip_norm=0.5, device="cpu")
    engine.fit(task.train_data, val_data=task.val_data, eval_every=task.eval_every)
    return task, engine


def test_short_cartpole_run_improves_on_the_untrained_policy(tmp_path):
    seed_everything(0)
    untrained = build(seed=0)
    before = untrained.val_data(untrained.model)["val_return"]
    task, engine = train(0, total_env_steps=8192)
    after = engine.last_val["val_return"]
    assert after > before + 50, (before, after)
    lines = task.finish(engine, tmp_path)
    assert "CartPole-v1" in lines[0] and "8192 env steps" in lines[0]
    assert (tmp_path / "policy.pt").is_file()
    assert json.loads((tmp_path / "policy.json").read_text())["env"] == "CartPole-v1"


@pytest.mark.parametrize("algo", ["reinforce", "a2c", "ppo"])
def test_every_algorithm_trains_through_the_engine(algo):
    _, engine = train(0, total_env_steps=2048, algo=algo)
    assert engine.global_step > 0 and "val_return" in engine.last_val
    assert np.isfinite(engine.history[-1]["loss"])


def test_same_seed_same_result_on_cpu():
    (_, a), (_, b) = train(3, 2048), train(3, 2048)
    for (name, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(x, y), name
    assert a.history == b.history


def test_continuous_task_builds_and_steps():
    _, engine = train(0, total_env_steps=1024, env="Pendulum-v1", algo="ppo",
                      collector={"rollout_steps": 64, "epochs": 2, "minibatches": 2})
    assert engine.global_step == 2 * 2 * 2  # 2 rollouts of 64 x 8 env steps, 4 batches each


def test_stop_rule_ends_training_at_the_target():
    seed_everything(0)
    task = build(seed=0, total_env_steps=10**6, eval_every_env_steps=1024)
    engine = Engine(task.model, task.loss_fn, torch.optim.Adam(task.model.parameters(), 3e-3),
                    device="cpu", callbacks=[StopRule("val_return>=40")])
    engine.fit(task.train_data, val_data=task.val_data, eval_every=task.eval_every)
    assert engine.stopped_by is not None and engine.last_val["val_return"] >= 40
    assert task.train_data.env_steps < 10**6


@pytest.mark.e2e
def test_cli_bad_collector_setting_is_one_line_and_exit_2(tmp_path):
    done = cli("+task=cartpole", "task.collector.epochs=0",
               f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    one_line_exit_2(done, "task.collector.epochs=0")


@pytest.mark.e2e
@pytest.mark.slow
def test_cli_solves_cartpole_and_play_loads_the_policy(tmp_path):
    run_dir = tmp_path / "run"
    done = cli("+task=cartpole", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "CartPole-v1 solved" in done.stdout + done.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(row.get("val_return", 0) >= 475 for row in rows)
    played = cli(str(run_dir), "--episodes", "3", module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    assert "mean return" in played.stdout


@pytest.mark.parametrize(("task", "algo", "clip_norm", "lr"),
                         [("cartpole", "ppo", None, 0.005), ("cartpole", "a2c", 0.5, 0.003),
                          ("cartpole", "reinforce", 0.5, 0.003),
                          ("acrobot", "ppo", 0.5, 0.003), ("pendulum", "ppo", 0.5, 0.001),
                          ("lunarlander", "a2c", None, 0.001)])  # untuned: the defaults
def test_engine_and_optimizer_follow_the_chosen_algorithms_tuning(task, algo, clip_norm, lr):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from beyondfit.cli.run import CONF_DIR, build_task

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", [f"+task={task}", f"algo={algo}", "task.num_envs=2"])
        mine = compose("config", [f"+task={task}", f"algo={algo}", "engine.clip_norm=2",
                                  "optimizer.lr=0.01"])
    assert OmegaConf.to_container(cfg.engine, resolve=True)["clip_norm"] == clip_norm
    assert cfg.optimizer.lr == lr
    assert mine.engine.clip_norm == 2 and mine.optimizer.lr == 0.01  # the command line wins
    built = build_task(cfg.task)  # the task builder takes the algorithm's settings
    built.train_data.close()
    built.val_data.close()
