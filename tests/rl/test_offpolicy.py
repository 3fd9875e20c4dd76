"""Off-policy RL: the replay collector's boundaries and checkpoints, target networks, and SAC/TD3
on the command line (end to end, a loss of one's own, play, kill -9 + resume bitwise)."""

from __future__ import annotations

import copy
import logging
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit import Engine, Update
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.serialization import atomic_save, safe_load
from beyondfit.core.target import SlowCopy
from beyondfit.rl.algos.algorithm import OffPolicyUpdate, Target
from beyondfit.rl.algos.offpolicy import sac_loss
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.nets.agents import OffPolicyAgent

from kit import cli, killed_and_resumed

QUIET = ["device=cpu", "progress.bar=false", "plots=false"]


class Counter(gym.Env):
    """obs = steps taken in the episode; episodes alternate between terminating after 3 steps
    and being cut by the time limit (5 steps, TimeLimit): both kinds of end, known in advance."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def __init__(self) -> None:
        self.t, self.episodes = 0, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t, self.episodes = 0, self.episodes + 1
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.episodes % 2 == 1 and self.t == 3
        return np.array([self.t], np.float32), float(self.t), terminated, False, {}


gym.register("BeyondfitCounter-v0", entry_point=Counter, max_episode_steps=5)


def collector(env: str = "BeyondfitCounter-v0", n: int = 2, **kw) -> ReplayCollector:
    envs = make_vector_env(env, n)
    agent = OffPolicyAgent(envs.single_observation_space, envs.single_action_space,
                           hidden=(16,))  # fmt: skip
    options = dict(total_env_steps=40, learning_starts=10, batch_size=4, seed=3)
    return ReplayCollector(envs, agent, **{**options, **kw})


def test_autoreset_steps_are_never_stored_and_ends_keep_their_kind() -> None:
    data = collector()
    batches = list(data)
    assert len(batches) == len(data) == 30  # one per env step after learning_starts
    rows = data.buffer.transitions()
    assert data.buffer.size == data.env_steps == 40
    # Every stored transition is a real one: t -> t + 1 (a stored reset step would be 3 -> 0).
    assert torch.equal(rows.next_obs, rows.obs + 1)
    assert torch.equal(rows.rewards, rows.next_obs[:, 0])
    ended_early = rows.terminated == 1
    assert torch.all(rows.next_obs[ended_early, 0] == 3) and ended_early.any()
    cut = rows.truncated == 1
    assert torch.all(rows.next_obs[cut, 0] == 5) and cut.any()
    assert not torch.any(ended_early & cut)
    assert torch.all(rows.actions.abs() <= 1)
    logs = data.metrics()
    assert logs["env_steps"] == 40 and 3 <= logs["episode_length"] <= 5


def test_update_to_data_ratio_and_a_bad_setting() -> None:
    assert len(collector(updates_per_step=0.5)) == 15
    assert len(list(collector(updates_per_step=2))) == 60
    with pytest.raises(BeyondfitError, match=r"task\.replay\.updates_per_step"):
        collector(updates_per_step=0)
    with pytest.raises(BeyondfitError, match="not a Box"):
        OffPolicyAgent(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))


def test_shard_splits_budget_and_learning_starts_seeds_by_rank_once() -> None:
    from beyondfit.core.seeding import rank_seed

    data = collector(total_env_steps=100, learning_starts=10, seed=7)
    data.shard(1, 4)
    data.shard(1, 4)  # the runner and the engine may both ask: no double split
    assert data.total_env_steps == 25 and data.learning_starts == 3
    assert data.seed == rank_seed(7, 1) and data.buffer.capacity == 25
    assert data.metrics() == {"env_steps": 0.0}


def test_rl_zoo_bursts_train_freq_and_gradient_steps() -> None:
    # SB3 trains gradient_steps minibatches once every train_freq env steps are in, from the
    # first multiple of train_freq past learning_starts: here 16, 24, 32, 40.
    data = collector(updates_per_step=None, train_freq=8, gradient_steps=3)
    assert len(data) == 12 and data.update_ratio == 3 / 8
    seen = []
    for _ in data:
        seen.append(data.env_steps)
    assert seen == [16] * 3 + [24] * 3 + [32] * 3 + [40] * 3
    assert len(collector(updates_per_step=None, train_freq=8, gradient_steps=-1)) == 32
    with pytest.raises(BeyondfitError, match=r"updates_per_step=1.*train_freq=8 both"):
        collector(train_freq=8)
    with pytest.raises(BeyondfitError, match=r"task\.replay\.gradient_steps=0"):
        collector(updates_per_step=None, train_freq=8, gradient_steps=0)


@pytest.mark.parametrize(("options", "message"), [
    ({"total_env_steps": 40, "learning_starts": 40},
     r"^task\.total_env_steps=40 is not above task\.replay\.learning_starts=40 "),
    ({"total_env_steps": 60, "learning_starts": 33, "updates_per_step": None, "train_freq": 32},
     r"^task\.total_env_steps=60 ends before the first update.*learning_starts=33.*train_freq"),
])
def test_a_budget_that_ends_before_the_first_update_is_refused_before_any_env_step(
        options: dict, message: str) -> None:  # fmt: skip
    envs = make_vector_env("BeyondfitCounter-v0", 2)
    envs.step = None  # any env step would fail
    agent = OffPolicyAgent(envs.single_observation_space, envs.single_action_space, hidden=(4,))
    with pytest.raises(BeyondfitError, match=message) as info:
        ReplayCollector(envs, agent, **options)
    assert "\n" not in str(info.value)


def _same_state(a: object, b: object) -> bool:
    """Two saved states (mappings, lists, tensors, plain values) equal, every tensor bitwise."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            _same_state(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same_state, a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def _continue(data: ReplayCollector, it, n: int) -> list[torch.Tensor]:
    return [torch.cat([f.reshape(len(f), -1) for f in next(it) if f is not None], 1)
            for _ in range(n)]


def test_collector_checkpoint_continues_bitwise_buffer_env_and_generator(tmp_path: Path) -> None:
    a = collector("Pendulum-v1", n=2, total_env_steps=600, learning_starts=50)
    it = iter(a)
    _continue(a, it, 333)  # mid-episode (Pendulum's are 200 steps) and past a reset
    atomic_save({"data": a.state_dict(), "model": a.agent.state_dict()}, tmp_path / "c.pt")
    expected = _continue(a, it, 120)
    state = safe_load(tmp_path / "c.pt")  # weights_only: the state is plain data
    b = collector("Pendulum-v1", n=2, total_env_steps=600, learning_starts=50)
    b.agent.load_state_dict(state["model"])
    b.load_state_dict(state["data"])
    got = _continue(b, iter(b), 120)
    assert all(torch.equal(x, y) for x, y in zip(got, expected, strict=True))
    assert _same_state(a.buffer.state_dict(), b.buffer.state_dict())


def test_a_buffer_left_out_of_checkpoints_says_what_a_resume_lost(caplog) -> None:
    a = collector(save_buffer=False)
    it = iter(a)
    _continue(a, it, 5)
    state = a.state_dict()
    assert "fields" not in state["buffer"]
    b = collector(save_buffer=False)
    with caplog.at_level(logging.WARNING, logger="beyondfit.rl"):
        b.load_state_dict(state)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"left out its {a.buffer.size} transitions" in lines[0]
    assert b.buffer.size == 0
    assert len(list(b)) == len(b) - 5  # it refills from the envs and trains on


# --------------------------------------------------------------------------- target networks
def test_slow_copy_follows_by_polyak_every_period_and_checkpoints() -> None:
    source = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    target = SlowCopy(source, rate=0.25, every=2)
    start = [p.detach().clone() for p in target.module.parameters()]
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    source.train()(torch.randn(8, 3))  # moves the BatchNorm statistics
    target.update()  # call 1 of every 2: nothing
    assert all(torch.equal(p, s) for p, s in zip(target.module.parameters(), start, strict=True))
    target.update()
    for p, s, o in zip(target.module.parameters(), start, source.parameters(), strict=True):
        torch.testing.assert_close(p, 0.75 * s + 0.25 * o)
        assert not p.requires_grad
    assert torch.equal(target.module[1].running_mean, source[1].running_mean)
    restored = SlowCopy(source, rate=0.25, every=2)
    restored.load_state_dict(target.state_dict())
    assert restored.calls == 2 and all(
        torch.equal(a, b) for a, b in zip(restored.state_dict().values(),
                                          target.state_dict().values(), strict=False)
        if isinstance(a, torch.Tensor))
    with pytest.raises(BeyondfitError, match="rate"):
        SlowCopy(source, rate=1.5)


def test_a_target_follows_its_optimizer_steps_through_the_engine() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(2, 1)
            self.target = SlowCopy(self.net, rate=0.5)

    model = Model()

    def loss(m: Model, batch: torch.Tensor) -> torch.Tensor:
        return (m.net(batch) - m.target(batch).detach()).pow(2).mean() + m.net(batch).mean()

    engine = Engine(model, [Update("net", loss, torch.optim.SGD(model.net.parameters(), 0.1),
                                   after_step=[model.target.update])], device="cpu")
    engine.fit([torch.randn(4, 2) for _ in range(6)])
    assert model.target.calls == engine.updates[0].steps == 6
    assert "target.module.weight" in engine.state_dict()["model"]
    with pytest.raises(BeyondfitError, match="after_step"):
        Update("x", loss, torch.optim.SGD(model.net.parameters(), 0.1), after_step=[3])


# --------------------------------------------------------------------------- the command line
TINY = ["task.total_env_steps=240", "task.replay.learning_starts=40", "task.eval_episodes=2",
        "task.eval_every_env_steps=120", "task.hidden=[32,32]", "engine.log_every=20"]


@pytest.mark.e2e
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_cli_trains_and_plays_an_off_policy_algorithm(tmp_path: Path, algo: str) -> None:
    run = tmp_path / algo
    done = cli("+task=pendulum", f"algo={algo}", *TINY, *QUIET, f"hydra.run.dir={run}",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "greedy val_return" in done.stderr + done.stdout
    rows = [r for r in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in r]
    assert rows and '"critic/loss"' in rows[-1] and '"env_steps"' in rows[-1]
    played = cli(str(run), "--episodes", "1", module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    assert "mean return" in played.stdout


@pytest.mark.e2e
def test_cli_runs_an_off_policy_loss_of_ones_own(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(textwrap.dedent("""
        import torch
        from beyondfit.rl.algos.algorithm import OffPolicyUpdate, Target

        def my_loss(gamma=0.9, scale=2.0):
            # DDPG with a twin critic: the deterministic actor of algo=td3, no delay.
            def critic(model, batch):
                with torch.no_grad():
                    next_q = model.critic_target(batch.next_obs, model.actor(batch.next_obs))
                    target = batch.rewards + gamma * (1 - batch.terminated) * next_q.min(0).values
                q = model.critic(batch.obs, batch.actions)
                return {"loss": (q - target).pow(2).mean(), "mine": q.detach().mean() * scale}

            def actor(model, batch):
                return -model.critic(batch.obs, model.actor(batch.obs), members=1).mean()

            return [OffPolicyUpdate("critic", critic, trains="critic",
                                    target=Target("critic_target", 0.005)),
                    OffPolicyUpdate("actor", actor, trains="actor")]
    """))
    run = tmp_path / "run"
    done = cli("+task=pendulum", "algo=td3", "task.loss._target_=mymod.my_loss",
               "~task.loss.policy_noise", "~task.loss.noise_clip", "~task.loss.policy_delay",
               "+task.loss.scale=3.0", *TINY, *QUIET, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"critic/mine"' in (run / "metrics.jsonl").read_text()
    bad = cli("+task=pendulum", "algo=sac", "task.env=CartPole-v1", *TINY, *QUIET,
              f"hydra.run.dir={tmp_path / 'bad'}", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "Box" in bad.stderr


@pytest.mark.e2e
def test_sac_killed_with_sigkill_and_resumed_ends_bitwise_equal(tmp_path: Path) -> None:
    overrides = ["+task=pendulum", "algo=sac", "task.total_env_steps=230",
                 "task.replay.learning_starts=30", "task.eval_every_env_steps=100000",
                 "task.eval_episodes=2", "task.hidden=[16]", "checkpoint.every=20"]
    got, expected, context = killed_and_resumed(overrides, 200, tmp_path, kill_from=90)
    buffer, buffer_ref = got["data"]["buffer"], expected["data"]["buffer"]
    assert buffer["size"] == buffer_ref["size"] == 230
    assert _same_state(buffer, buffer_ref), context
    assert torch.equal(got["data"]["generator"], expected["data"]["generator"]), context


@pytest.mark.e2e
def test_torchrun_sac_each_rank_collects_into_its_own_buffer(tmp_path: Path) -> None:
    from kit import rows, torchrun

    result = torchrun("+task=pendulum", "algo=sac", *TINY, *QUIET, "checkpoint.every=null",
                      cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs" / "pendulum").iterdir()
    train = [r for r in rows(run_dir) if r["kind"] == "train"]
    assert train[-1]["env_steps"] == 240  # both ranks' 120, summed
    (checkpoint,) = (run_dir / "checkpoints").glob("step-*.pt")
    state = safe_load(checkpoint)
    assert state["data"]["buffer"]["size"] == 120  # rank 0's own transitions only
    assert state["counters"]["global_step"] == 100  # (120 - 20 random steps) per rank, in lockstep


def test_one_closure_gets_its_own_optimizer_settings_over_the_groups() -> None:
    from functools import partial

    from beyondfit.rl.algos.offpolicy import sac_loss
    from beyondfit.tasks.offpolicy import build

    task = build(loss=sac_loss(), total_env_steps=10, replay={"learning_starts": 5},
                 optimizers={"critic": {"lr": 2e-3}, "alpha": {"lr": 5e-4, "eps": 1e-5}})
    group = partial(torch.optim.Adam, lr=1e-3, eps=1e-8)  # the optimizer group's factory
    engine = Engine(task.model, task.loss_fn, group, device="cpu")
    settings = {update.name: {k: update.optimizer.param_groups[0][k] for k in ("lr", "eps")}
                for update in engine.updates}
    assert settings == {"critic": {"lr": 2e-3, "eps": 1e-8}, "actor": {"lr": 1e-3, "eps": 1e-8},
                        "alpha": {"lr": 5e-4, "eps": 1e-5}}
    task.train_data.close()
    task.val_data.close()


def test_the_gaussian_actors_log_std_bounds_tanh_and_clamp() -> None:
    from beyondfit.rl.evaluation.policy_file import _LOG_STD_MODES
    from beyondfit.rl.nets.agents import LOG_STD_RANGES, GaussianActor

    assert set(_LOG_STD_MODES) == set(LOG_STD_RANGES)  # what policy.pt may name, the agent builds

    torch.manual_seed(0)
    obs = torch.randn(512, 3) * 100  # large inputs drive the raw log-std to both bounds
    for mode, (low, high) in LOG_STD_RANGES.items():
        actor = GaussianActor(3, 2, (8,), log_std=mode)
        log_std = actor._mean_log_std(obs)[1]
        assert low <= log_std.min() and log_std.max() <= high
        start = actor._mean_log_std(torch.zeros(1, 3))[1]
        # tanh starts mid-range (std ~0.22), clamp near 0 (std ~1): SB3's starting point
        expected = (low + high) / 2 if mode == "tanh" else 0.0
        assert abs(start.mean().item() - expected) < 1.0
        action, log_prob = actor.sample(obs[:4])
        assert action.abs().max() <= 1 and torch.isfinite(log_prob).all()


@pytest.mark.parametrize("actor", ["gaussian", "deterministic"])
def test_an_empty_hidden_list_is_a_linear_actor(actor: str) -> None:
    # task.hidden=[] was an IndexError for SAC's actor; TD3's was already linear.
    box = gym.spaces.Box(-1, 1, (3,), np.float32)
    agent = OffPolicyAgent(box, gym.spaces.Box(-2, 2, (2,), np.float32), actor=actor, hidden=[])
    obs = torch.randn(5, 3)
    if actor == "gaussian":
        mean = lambda o: agent.actor._mean_log_std(o)[0]  # noqa: E731
        # Linear in the observation: no activation between it and the head.
        assert torch.allclose(mean(2 * obs) - mean(0 * obs), 2 * (mean(obs) - mean(0 * obs)),
                              atol=1e-5)
        action, log_prob = agent.actor.sample(obs)
        assert action.shape == (5, 2) and torch.isfinite(log_prob).all()
    assert agent.act(obs).shape == (5, 2)
    assert agent.critic(obs, torch.zeros(5, 2)).shape == (2, 5)


@pytest.mark.e2e
def test_the_issues_agent_and_replay_settings_on_the_command_line(tmp_path: Path) -> None:
    from kit import cli_batch, one_line_exit_2

    base = ["+task=pendulum", "algo=sac", *QUIET]
    bad, mistyped, linear = cli_batch([
        [*base, "task.agent.init_alpha=0"],
        [*base, "task.replay.save_buffer=maybe"],
        [*base, *TINY, "task.hidden=[]", "hydra.run.dir=linear"],
    ], cwd=tmp_path)  # fmt: skip
    one_line_exit_2(bad, "task.agent.init_alpha=0; it must be a positive number")
    one_line_exit_2(mistyped, "task.replay.save_buffer='maybe' must be true or false")
    assert linear["code"] == 0, linear["stderr"][-2000:]
    assert (tmp_path / "linear" / "result.json").is_file()


@pytest.mark.parametrize(("override", "message"), [
    ({"normalize": True}, r"task\.normalize=True: running normalization"),
    ({"replay": {"nosuch": 1}}, r"unknown task\.replay option\(s\) \['nosuch'\]"),
    ({"loss": lambda m, b: 0}, "not a list of OffPolicyUpdate"),
    ({"loss": {"critic": lambda m, b: 0}}, "not a list of OffPolicyUpdate"),
    ({"loss": [OffPolicyUpdate("value", lambda m, b: 0, trains="value")]},
     r"update 'value' trains model\.value, which the agent \(OffPolicyAgent\) has not"),
    ({"loss": [OffPolicyUpdate("a", lambda m, b: 0, trains="actor")] * 2},
     r"Update names \['a', 'a'\] must be distinct"),
    ({"loss": [OffPolicyUpdate("a", lambda m, b: 0, trains="actor", every=0)]},
     r"Update 'a' every=0"),
    ({"loss": [OffPolicyUpdate("a", lambda m, b: 0, trains="actor",
                               target=Target("critic", 0.1))]}, r"target 'critic' is already"),
    ({"loss": [OffPolicyUpdate("a", lambda m, b: 0, trains="log_alpha",
                               target=Target("t", 0.1))]}, r"model\.log_alpha is a parameter, not"),
    ({"loss": [OffPolicyUpdate("a", lambda m, b: 0, trains="x", build=lambda m: 3)]},
     r"trains model\.x, which is int, not a module or a parameter"),
    ({"agent": {"kind": "dueling"}}, r"unknown task\.agent\.kind='dueling'"),
    ({"agent": {"init_alpha": None}}, r"update 'alpha' trains model\.log_alpha, which the"),
    ({"replay": {"learning_starts": 10}}, r"total_env_steps=10 is not above task\.replay\.lea"),
    ({"agent": {"actor": "beta"}}, r"unknown task\.agent\.actor='beta'"),
    ({"agent": {"log_std": "softplus"}}, r"unknown task\.agent\.log_std='softplus'"),
    ({"optimizers": {"critc": {"lr": 1e-3}}}, r"task\.optimizers\.critc: the loss has no"),
    ({"loss": sac_loss()[:2],  # a preset's alpha rate
      "optimizers": {"alpha": {"lr": 1e-3}}}, r"no 'alpha' update.*task\.optimizers=null"),
    ({"optimizers": {"critic": 1e-3}}, r"task\.optimizers\.critic=0\.001 must be a mapping"),
    ({"optimizers": {"critic": {"lr": -1}}}, r"task\.optimizers\.critic\.lr=-1; it must be"),
    ({"optimizers": [1]}, r"task\.optimizers=\[1\] must map update names"),
    ({"agent": {"hiden": [4]}}, r"task\.agent options are invalid"),
    ({"env": "CartPole-v1"}, "not a Box"),
    ({"agent": {"hidden": [4], "init_alpha": 0}},  # was "math domain error"
     r"task\.agent\.init_alpha=0; it must be a positive number"),
    ({"agent": {"hidden": [4], "init_alpha": -1.0}}, r"task\.agent\.init_alpha=-1\.0; it must"),
    ({"replay": {"learning_starts": 5, "save_buffer": "maybe"}},  # was taken as true
     r"task\.replay\.save_buffer='maybe' must be true or false"),
])
def test_off_policy_task_mistakes_are_one_line_errors(override: dict, message: str) -> None:
    from beyondfit.tasks.offpolicy import build

    settings = {"loss": sac_loss(), "total_env_steps": 10, "replay": {"learning_starts": 5},
                "agent": {"hidden": [4]}}
    with pytest.raises(BeyondfitError, match=message) as info:
        build(**{**settings, **override})
    assert "\n" not in str(info.value)


@pytest.mark.e2e
def test_a_two_seed_sac_sweep_then_compare(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    launched = cli("-m", "+task=pendulum", "algo=sac", "seed=0,1", *TINY, *QUIET,
                   f"hydra.sweep.dir={sweep}", cwd=tmp_path)  # fmt: skip
    assert launched.returncode == 0, launched.stderr[-2000:]
    compared = cli(str(sweep), module="beyondfit.compare", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    table = (sweep / "compare.md").read_text()
    assert "| setting | runs | val_return | episode_return |" in table
    row = next(line for line in table.splitlines() if line.startswith("| `pendulum`"))
    assert row.split(" | ")[1] == "2"  # both seeds in one setting


def test_td3_delays_the_actor_and_the_targets_through_the_engine() -> None:
    from beyondfit.rl.algos.offpolicy import td3_loss
    from beyondfit.tasks.offpolicy import build

    agent = {"actor": "deterministic", "hidden": [8], "init_alpha": None}
    task = build(td3_loss(policy_delay=2), total_env_steps=30, agent=agent,
                 replay={"learning_starts": 20, "batch_size": 4}, eval_episodes=1)
    engine = Engine(task.model, task.loss_fn, lambda p: torch.optim.Adam(p, 1e-3), device="cpu")
    engine.fit(task.train_data)
    task.train_data.close()
    task.val_data.close()
    assert [u.name for u in engine.updates] == ["critic", "actor"]
    assert [u.steps for u in engine.updates] == [10, 5]  # the actor every second minibatch
    model = task.model
    assert model.critic_target.calls == 10 and model.actor_target.calls == 5
    assert model.log_alpha is None


# ------------------------------------------------- the algorithms' arithmetic, by hand
def _cli_task(overrides: list[str]) -> tuple[Any, Any]:
    """A tiny task (Pendulum unless ``+task=`` says) and its config, built as the command line
    builds them (its builders, the algo and tuned presets, the optimizer group), seeded."""
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.builders import build_task
    from beyondfit.cli.run import CONF_DIR
    from beyondfit.core.seeding import seed_everything

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        task = [] if any(o.startswith("+task=") for o in overrides) else ["+task=pendulum"]
        cfg = compose("config", overrides=[*task, "seed=3", "task.total_env_steps=300",
                                           "task.replay.learning_starts=100",
                                           "task.hidden=[16,16]", "task.eval_episodes=1",
                                           *overrides])
    seed_everything(int(cfg.seed))
    return cfg, build_task(cfg.task, swapped=[])


def _trained_by_the_engine(overrides: list[str]) -> tuple[Any, nn.Module, list]:
    """The config, the model after a tiny run of the engine on the CPU, and what each of its
    steps was given: the minibatch and the random state the step began with (the collector
    draws between steps, with the model the engine trains)."""
    from beyondfit.cli.builders import build_optimizer
    from beyondfit.rl.replay.buffer import ReplayBatch

    cfg, task = _cli_task(overrides)
    engine = Engine(task.model, task.loss_fn, build_optimizer(cfg.optimizer), device="cpu",
                    clip_norm=cfg.engine.clip_norm)
    steps: list[tuple[ReplayBatch, torch.Tensor]] = []
    train_step = engine.train_step

    def recorded(batch: ReplayBatch) -> bool:
        steps.append((ReplayBatch(*(None if x is None else x.clone() for x in batch)),
                      torch.get_rng_state()))
        return train_step(batch)

    engine.train_step = recorded  # type: ignore[method-assign]
    engine.fit(task.train_data, epochs=1, verbose=False)
    task.train_data.close()
    task.val_data.close()
    return cfg, engine.model, steps


def _adam(cfg: Any, params: Any) -> torch.optim.Adam:
    """The optimizer group's Adam (conf/optimizer/adam.yaml), written out."""
    return torch.optim.Adam(params, lr=float(cfg.optimizer.lr),
                            weight_decay=float(cfg.optimizer.weight_decay),
                            fused=bool(cfg.optimizer.fused))


@torch.no_grad()
def _polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    for t, s in zip(target.parameters(), source.parameters(), strict=True):
        t.lerp_(s, tau)  # t + tau * (s - t)


def _sac_by_hand(cfg: Any, model: OffPolicyAgent, steps: list) -> dict[str, nn.Module]:
    """SAC as CleanRL's sac_continuous_action.py writes it (SB3's order): on each minibatch
    the critic, its targets, the actor, then the temperature on the actor's log-probs."""
    gamma, tau = float(cfg.task.loss.gamma), float(cfg.task.loss.tau)
    target_entropy = -float(model.act_dim)
    critic_target = copy.deepcopy(model.critic)
    q_opt = _adam(cfg, model.critic.parameters())
    actor_opt = _adam(cfg, model.actor.parameters())
    alpha_opt = _adam(cfg, [model.log_alpha])
    for data, rng in steps:
        torch.set_rng_state(rng)
        with torch.no_grad():
            next_action, next_log_pi = model.actor.sample(data.next_obs)
            min_next_q = critic_target(data.next_obs, next_action).min(0).values
            min_next_q = min_next_q - model.log_alpha.exp() * next_log_pi
            next_q = data.rewards + gamma * (1.0 - data.terminated) * min_next_q
        q = model.critic(data.obs, data.actions)
        q_loss = 0.5 * (q - next_q).pow(2).mean(1).sum()
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        _polyak(critic_target, model.critic, tau)

        pi, log_pi = model.actor.sample(data.obs)
        min_q_pi = model.critic(data.obs, pi).min(0).values
        actor_loss = (model.log_alpha.detach().exp() * log_pi - min_q_pi).mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()

        alpha_loss = -(model.log_alpha * (log_pi.detach() + target_entropy)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()
    return {"critic_target": critic_target}


def _td3_by_hand(cfg: Any, model: OffPolicyAgent, steps: list) -> dict[str, nn.Module]:
    """TD3 as SB3 and CleanRL write it: the critic on each minibatch; on every
    ``policy_delay``-th, the critic's targets, the actor and the actor's targets."""
    loss = cfg.task.loss
    gamma, tau, delay = float(loss.gamma), float(loss.tau), int(loss.policy_delay)
    critic_target, actor_target = copy.deepcopy(model.critic), copy.deepcopy(model.actor)
    q_opt = _adam(cfg, model.critic.parameters())
    actor_opt = _adam(cfg, model.actor.parameters())
    for i, (data, rng) in enumerate(steps, 1):
        torch.set_rng_state(rng)
        with torch.no_grad():
            noise = (torch.randn_like(data.actions) * float(loss.policy_noise)).clamp_(
                -float(loss.noise_clip), float(loss.noise_clip))
            next_action = (actor_target(data.next_obs) + noise).clamp_(-1.0, 1.0)
            min_next_q = critic_target(data.next_obs, next_action).min(0).values
            next_q = data.rewards + gamma * (1.0 - data.terminated) * min_next_q
        q_loss = (model.critic(data.obs, data.actions) - next_q).pow(2).mean(1).sum()
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        if i % delay == 0:
            _polyak(critic_target, model.critic, tau)
            actor_loss = -model.critic(data.obs, model.actor(data.obs), members=1).mean()
            actor_opt.zero_grad()
            actor_loss.backward()
            actor_opt.step()
            _polyak(actor_target, model.actor, tau)
    return {"critic_target": critic_target, "actor_target": actor_target}


def _dqn_by_hand(cfg: Any, model: Any, steps: list) -> dict[str, nn.Module]:
    """(Double) DQN as SB3 writes it: the Huber TD error against the target network, the
    gradient's norm clipped (engine.clip_norm, SB3's max_grad_norm), a hard copy into the
    target every ``target_every`` optimizer steps."""
    loss = cfg.task.loss
    gamma, every = float(loss.gamma), int(loss.target_every)
    assert loss.tau == 1.0 and loss.huber
    q_target = copy.deepcopy(model.q)
    q_opt = _adam(cfg, model.q.parameters())
    for i, (data, rng) in enumerate(steps, 1):
        torch.set_rng_state(rng)
        with torch.no_grad():
            next_q = q_target(data.next_obs)
            if loss.double:  # the online network picks, the target scores
                next_q = next_q.gather(1, model.q(data.next_obs).argmax(1, keepdim=True))
                next_q = next_q.squeeze(1)
            else:
                next_q = next_q.max(1).values
            target = data.rewards + gamma * (1.0 - data.terminated) * next_q
        taken = model.q(data.obs).gather(1, data.actions.unsqueeze(1)).squeeze(1)
        q_loss = F.smooth_l1_loss(taken, target)
        q_opt.zero_grad()
        q_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.q.parameters(), float(cfg.engine.clip_norm))
        q_opt.step()
        if i % every == 0:
            q_target.load_state_dict(model.q.state_dict())
    return {"q_target": q_target}


def _differing(trained: nn.Module, by_hand: nn.Module, targets: dict[str, nn.Module]) -> list:
    """The names of the tensors where the engine's model and the hand-written loop's differ."""
    ours = {k: v for k, v in trained.state_dict().items() if isinstance(v, torch.Tensor)}
    theirs = {k: v for k, v in by_hand.state_dict().items()
              if isinstance(v, torch.Tensor) and k.split(".")[0] not in targets}
    for name, module in targets.items():  # the engine's SlowCopy holds the copy as .module
        theirs.update({f"{name}.module.{k}": v for k, v in module.state_dict().items()})
    assert sorted(ours) == sorted(theirs)
    return [k for k in ours if not torch.equal(ours[k], theirs[k])]


@pytest.mark.parametrize(("overrides", "by_hand", "updates"), [
    (["algo=sac"], _sac_by_hand, 200), (["algo=td3"], _td3_by_hand, 200),
    (["algo=sac", "task.replay.updates_per_step=2"], _sac_by_hand, 400),
    # CartPole's tuned DQN: Double DQN, 32 updates every 64 env steps, a copy every 32; a
    # clip_norm that binds (SB3's 10 does not, in so short a run).
    (["+task=cartpole", "algo=dqn", "engine.clip_norm=0.5"], _dqn_by_hand, 96)])
def test_sac_td3_and_dqn_train_bitwise_as_their_hand_written_updates(
        overrides: list[str], by_hand: Any, updates: int) -> None:  # fmt: skip
    # The declared updates compute the very numbers of the algorithm written out in one loop
    # (order, targets, Polyak, the temperature's log-probs), on any CPU: the engine's model
    # after a tiny CLI-built run equals, bit for bit, the same initial model trained by hand on
    # the minibatches the run drew, each from the random state its step began with.
    cfg, trained, steps = _trained_by_the_engine(overrides)
    assert len(steps) == updates
    _, task = _cli_task(overrides)  # the same initial model, built again
    task.train_data.close()
    task.val_data.close()
    targets = by_hand(cfg, task.model, steps)
    assert _differing(trained, task.model, targets) == []


def test_sacs_temperature_reads_the_actors_sample_of_the_same_minibatch_or_says_why_not() -> None:
    from beyondfit.rl.algos.offpolicy import Handoff

    critic, actor, alpha = sac_loss()
    model = OffPolicyAgent(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), hidden=(8,))
    with pytest.raises(BeyondfitError, match=r"'alpha' update reads what 'actor' gives on the "
                                             r"same minibatch.* declare 'actor' right before"):
        alpha.loss(model, None)  # the actor did not run on this minibatch: no stale value
    handoff = Handoff("a", "b")
    handoff.give(torch.ones(2))
    assert torch.equal(handoff.take(), torch.ones(2))
    with pytest.raises(BeyondfitError, match="'a' gave nothing"):
        handoff.take()  # once per minibatch
    assert (critic.name, actor.name, alpha.name) == ("critic", "actor", "alpha")


@pytest.mark.parametrize("override", ["task.critic_hidden=[32]", "task.init=orthogonal",
                                      "task.normalize=true"])
def test_policy_gradient_options_are_one_line_for_an_off_policy_task(override: str) -> None:
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR, build_task

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", ["+task=pendulum", "algo=sac", override])
    with pytest.raises(BeyondfitError, match=r"^task\.(critic_hidden|normalize)") as caught:
        build_task(cfg.task)
    assert "\n" not in str(caught.value)
