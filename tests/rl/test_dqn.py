"""DQN: replay over Discrete actions, the epsilon-greedy schedule and its checkpointed state, the
loss (plain and Double), its mistakes as one-line errors, and algo=dqn on the command line
(train, play, kill -9 + resume bitwise)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.serialization import atomic_save, safe_load
from beyondfit.core.target import SlowCopy
from beyondfit.rl.algos.offpolicy import dqn_loss
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.nets.agents import QAgent
from beyondfit.rl.replay.buffer import ReplayBatch

from kit import cli, killed_and_resumed

QUIET = ["device=cpu", "progress.bar=false", "plots=false"]


class Steps(gym.Env):
    """obs = [steps taken, last action sent]; actions Discrete(3, start=-1); every episode
    ends by termination after 4 steps: the sent action and both ends are known in advance."""

    observation_space = gym.spaces.Box(-10, 100, (2,), np.float32)
    action_space = gym.spaces.Discrete(3, start=-1)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 0.0], np.float32), {}

    def step(self, action):
        assert action in (-1, 0, 1), action
        self.t += 1
        return np.array([self.t, action], np.float32), 1.0, self.t == 4, False, {}


gym.register("BeyondfitSteps-v0", entry_point=Steps)


def q_collector(env: str = "BeyondfitSteps-v0", n: int = 2, fraction: float = 0.5,
                **kw) -> ReplayCollector:  # fmt: skip
    envs = make_vector_env(env, n, sync=True)
    agent = QAgent(envs.single_observation_space, envs.single_action_space, hidden=(8,),
                   exploration_fraction=fraction)  # fmt: skip
    options = dict(total_env_steps=40, learning_starts=10, batch_size=4, seed=3)
    return ReplayCollector(envs, agent, **{**options, **kw})


def test_discrete_actions_are_stored_as_indices_and_batched_as_int64() -> None:
    data = q_collector()
    batch = next(iter(data))
    assert batch.actions.dtype == torch.int64 and batch.actions.shape == (4,)
    list(data)
    rows = data.buffer.transitions()
    assert data.buffer.size == data.env_steps == 40
    assert rows.actions.min() >= 0 and rows.actions.max() <= 2 and len(rows.actions.unique()) == 3
    # The env received start + index (start = -1), and no autoreset step was stored.
    assert torch.equal(rows.next_obs[:, 1], rows.actions.float() - 1)
    assert torch.equal(rows.next_obs[:, 0], rows.obs[:, 0] + 1)
    assert torch.all(rows.terminated == (rows.next_obs[:, 0] == 4).float())


def test_epsilon_falls_linearly_over_its_fraction_of_the_run_then_stays() -> None:
    space = gym.spaces.Box(-1, 1, (3,))
    agent = QAgent(space, gym.spaces.Discrete(4), hidden=(8,), exploration_fraction=0.2,
                   exploration_initial_eps=1.0, exploration_final_eps=0.1)  # fmt: skip
    assert [agent.epsilon(p) for p in (0.0, 0.1, 0.2, 0.6, 1.0)] == pytest.approx(
        [1.0, 0.55, 0.1, 0.1, 0.1])
    obs = torch.randn(4000, 3)
    generator = torch.Generator().manual_seed(0)
    greedy = agent(obs).argmax(1)
    assert torch.equal(agent.explore(obs, generator, progress=1.0)[:0], greedy[:0])
    at_end = (agent.explore(obs, generator, progress=1.0) != greedy).float().mean()
    assert 0.05 < at_end < 0.1  # epsilon 0.1, of which a quarter picks the greedy action anyway
    at_start = agent.explore(obs, generator, progress=0.0)
    assert (at_start != greedy).float().mean() > 0.7  # uniform: 3 in 4 differ
    assert torch.equal(agent.act(obs[:5]), greedy[:5])  # play and evaluation: greedy


def test_a_step_where_every_copy_explores_skips_the_forward_pass() -> None:
    space = gym.spaces.Box(-1, 1, (3,))
    agent = QAgent(space, gym.spaces.Discrete(4), hidden=(8,), exploration_fraction=0.5,
                   exploration_initial_eps=1.0, exploration_final_eps=0.0)  # fmt: skip
    calls = []
    agent.q.register_forward_hook(lambda *a: calls.append(1))
    obs = torch.randn(2, 3)
    first = agent.explore(obs, torch.Generator().manual_seed(1), progress=0.0)
    assert calls == []  # epsilon 1: uniform actions, no Q values needed
    again = agent.explore(obs, torch.Generator().manual_seed(1), progress=0.0)
    assert torch.equal(first, again)
    greedy = agent.explore(obs, torch.Generator().manual_seed(1), progress=1.0)
    assert calls == [1] and torch.equal(greedy, agent(obs).argmax(1))


def test_the_collector_explores_with_the_agents_epsilon_at_the_runs_progress() -> None:
    data = q_collector(total_env_steps=400, learning_starts=0, fraction=0.5)
    seen = []
    agent = data.agent
    explore = agent.explore

    def spy(obs, generator, progress):
        seen.append(progress)
        return explore(obs, generator, progress)

    agent.explore = spy
    list(data)
    assert seen[0] == 0.0 and seen[-1] == pytest.approx(398 / 400)
    assert data.state_dict()["exploration"] == {"epsilon": pytest.approx(0.05)}


def test_a_checkpoint_continues_bitwise_and_checks_the_epsilon_schedule(tmp_path: Path) -> None:
    make = dict(env="CartPole-v1", n=2, total_env_steps=600, learning_starts=50)
    a = q_collector(**make)
    it = iter(a)
    for _ in range(200):
        next(it)
    state = a.state_dict()
    assert 0.05 < state["exploration"]["epsilon"] < 1.0  # mid-schedule
    atomic_save({"data": state, "model": a.agent.state_dict()}, tmp_path / "c.pt")
    expected = [torch.cat([f.reshape(4, -1).float() for f in next(it)[:6]], 1)
                for _ in range(150)]
    saved = safe_load(tmp_path / "c.pt")
    b = q_collector(**make)
    b.agent.load_state_dict(saved["model"])
    b.load_state_dict(saved["data"])
    got = [torch.cat([f.reshape(4, -1).float() for f in batch[:6]], 1)
           for batch, _ in zip(b, range(150), strict=False)]
    assert all(torch.equal(x, y) for x, y in zip(got, expected, strict=True))
    # A tampered value is refused before loading; another schedule is refused in one line.
    bad = {**saved["data"], "exploration": {"epsilon": 1.5}}
    with pytest.raises(BeyondfitError, match=r"exploration=\{'epsilon': 1.5\} is not a mapping "
                                             r"of names to numbers in \[0, 1\]"):
        q_collector(**make).load_state_dict(bad)
    with pytest.raises(BeyondfitError, match=r"^env_steps=-1 is not a whole number"):
        q_collector(**make).load_state_dict({**saved["data"], "env_steps": -1})
    other = q_collector(**{**make, "fraction": 0.9})
    with pytest.raises(BeyondfitError, match=r"^the checkpoint's exploration \{'epsilon': "
                                             r".*task\.agent exploration settings") as info:
        other.load_state_dict(saved["data"])
    assert "\n" not in str(info.value) and other.env_steps == 0  # nothing changed


# --------------------------------------------------------------------------- the loss
def _agent_with_target() -> QAgent:
    torch.manual_seed(0)
    agent = QAgent(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), hidden=(8,))
    agent.q_target = SlowCopy(agent.q, rate=1.0)
    with torch.no_grad():  # a target that differs from the online network
        for p in agent.q_target.parameters():
            p.add_(torch.randn_like(p))
    return agent


@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("huber", [True, False])
def test_dqn_loss_plain_and_double_against_a_hand_computed_target(double: bool, huber: bool,
                                                                  n_step: int) -> None:
    agent = _agent_with_target()
    generator = torch.Generator().manual_seed(1)
    # n-step transitions carry gamma^m (m rewards summed: 1 to 3), which replaces gamma
    discount = None if n_step == 1 else 0.9 ** torch.randint(1, 4, (16,), generator=generator)
    batch = ReplayBatch(torch.randn(16, 3, generator=generator),
                        torch.randint(4, (16,), generator=generator),
                        torch.randn(16, generator=generator),
                        torch.randn(16, 3, generator=generator),
                        (torch.rand(16, generator=generator) < 0.3).float(),
                        torch.zeros(16), discount)  # fmt: skip
    (update,) = dqn_loss(gamma=0.9, double=double, huber=huber, target_every=7)
    assert (update.name, update.trains, update.every) == ("q", "q", 1)
    assert (update.target.name, update.target.rate, update.target.every) == ("q_target", 1.0, 7)
    out = update.loss(agent, batch)
    with torch.no_grad():
        next_target = agent.q_target(batch.next_obs)
        if double:
            picked = agent.q(batch.next_obs).argmax(1)
            value = next_target[torch.arange(16), picked]
        else:
            value = next_target.max(1).values
        target = batch.rewards + (0.9 if discount is None else discount) * (
            1 - batch.terminated) * value
    taken = agent.q(batch.obs)[torch.arange(16), batch.actions]
    expected = F.smooth_l1_loss(taken, target) if huber else F.mse_loss(taken, target)
    torch.testing.assert_close(out["loss"], expected, rtol=0, atol=0)
    out["loss"].backward()
    assert all(p.grad is None for p in agent.q_target.parameters())  # the target: no gradient
    if double:  # the two rules pick differently here, so the test tells them apart
        plain = dqn_loss(gamma=0.9, double=False, huber=huber)[0].loss(agent, batch)["loss"]
        assert not torch.equal(plain, out["loss"])


@pytest.mark.parametrize(("make", "message"), [
    (lambda: dqn_loss(double="yes"), r"task\.loss\.double='yes': true or false"),
    (lambda: dqn_loss(target_every=0), r"task\.loss\.target_every=0"),
    (lambda: dqn_loss(tau=0), r"task\.loss\.tau=0"),
    (lambda: dqn_loss(gamma=1.5), r"task\.loss\.gamma=1\.5"),
    (lambda: QAgent(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))), "not Discrete"),
    (lambda: QAgent(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), exploration_fraction=0),
     r"task\.agent\.exploration_fraction=0"),
    (lambda: QAgent(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2),
                    exploration_final_eps=2), r"task\.agent\.exploration_final_eps=2"),
])
def test_dqn_mistakes_are_one_line_errors(make, message: str) -> None:
    with pytest.raises(BeyondfitError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_the_task_builds_dqn_with_its_target_and_leaves_the_target_out_of_the_policy() -> None:
    from beyondfit import Engine
    from beyondfit.tasks.offpolicy import build

    task = build(dqn_loss(target_every=5), env="CartPole-v1", total_env_steps=60,
                 agent={"kind": "q", "hidden": [8]}, eval_episodes=1,
                 replay={"learning_starts": 20, "batch_size": 4, "updates_per_step": None,
                         "train_freq": 4, "gradient_steps": 2})  # fmt: skip
    engine = Engine(task.model, task.loss_fn, lambda p: torch.optim.Adam(p, 1e-3), device="cpu")
    engine.fit(task.train_data)
    task.train_data.close()
    task.val_data.close()
    assert [u.name for u in engine.updates] == ["q"] and engine.updates[0].steps == 20
    assert task.model.q_target.calls == 20  # after each of the q update's steps
    target, online = task.model.q_target.module.head[0], task.model.q.head[0]
    assert torch.equal(target.weight, online.weight)  # at 20
    assert task.eval_every == round(5_000 * 2 / 4)


@pytest.mark.parametrize(("steps", "total", "fraction"), [(50, 200, 0.25), (500, 200, 1.0)])
def test_exploration_steps_set_epsilon_s_schedule_in_env_steps(steps: int, total: int,
                                                               fraction: float) -> None:
    from beyondfit.tasks.offpolicy import build

    task = build(dqn_loss(), env="CartPole-v1", total_env_steps=total, eval_episodes=1,
                 agent={"kind": "q", "hidden": [8], "exploration_steps": steps},
                 replay={"learning_starts": 20, "batch_size": 4})  # fmt: skip
    task.train_data.close()
    task.val_data.close()
    assert task.model.fraction == fraction
    assert task.model.epsilon(min(1.0, steps / total)) == pytest.approx(task.model.final_eps)


@pytest.mark.parametrize(("steps", "kind"), [(0, "q"), ("many", "q"), (True, "q"),
                                            (500, "actor_critic")])
def test_bad_exploration_steps_are_one_line_errors(steps, kind) -> None:
    from beyondfit.tasks.offpolicy import build

    with pytest.raises(BeyondfitError, match=r"task\.agent\.exploration_steps") as info:
        build(dqn_loss(), env="CartPole-v1", total_env_steps=100, eval_episodes=1,
              agent={"kind": kind, "exploration_steps": steps})
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- the command line
TINY = ["task.total_env_steps=600", "task.replay.learning_starts=100", "task.eval_episodes=2",
        "task.eval_every_env_steps=300", "task.hidden=[32,32]", "task.confirm_episodes=2",
        "task.replay.train_freq=4", "task.replay.gradient_steps=1", "task.loss.target_every=50"]


@pytest.mark.e2e
@pytest.mark.runs("conf/algo/dqn.yaml", "conf/experiment/tuned/cartpole_dqn.yaml")
@pytest.mark.parametrize("double", ["false", "true"])
def test_cli_trains_and_plays_dqn_on_cartpole(tmp_path: Path, double: str) -> None:
    run = tmp_path / "run"
    done = cli("+task=cartpole", "algo=dqn", f"task.loss.double={double}", *TINY, *QUIET,
               f"hydra.run.dir={run}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    metrics = (run / "metrics.jsonl").read_text()
    rows = [r for r in metrics.splitlines() if '"train"' in r]
    assert rows and '"q/loss"' in rows[-1] and '"q/grad_norm"' in rows[-1]  # clipped: its norm
    assert '"env_steps": 600' in metrics
    weights = safe_load(run / "policy.pt")["model"]
    assert not any(k.startswith("q_target") for k in weights)  # training's, not the policy's
    played = cli(str(run), "--episodes", "1", module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    assert "mean return" in played.stdout


@pytest.mark.e2e
@pytest.mark.runs("conf/experiment/tuned/acrobot_dqn.yaml",
                  "conf/experiment/tuned/lunarlander_dqn.yaml")
@pytest.mark.parametrize("task", ["acrobot", "lunarlander"])
def test_cli_runs_the_tuned_dqn_presets(tmp_path: Path, task: str) -> None:
    pytest.importorskip("Box2D") if task == "lunarlander" else None
    done = cli(f"+task={task}", "algo=dqn", "task.total_env_steps=300", "task.eval_episodes=1",
               "task.eval_every_env_steps=300", "task.confirm_episodes=1", "task.hidden=[16]",
               *QUIET, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.e2e
def test_a_budget_below_learning_starts_is_one_line_before_any_env_step(tmp_path: Path) -> None:
    done = cli("+task=pendulum", "algo=td3", "task.total_env_steps=3000", *QUIET,
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "task.total_env_steps=3000 is not above task.replay.learning_starts=10000" in \
        done.stderr


@pytest.mark.e2e
def test_dqn_killed_with_sigkill_and_resumed_ends_bitwise_equal(tmp_path: Path) -> None:
    # n-step returns (3) on: the buffer's links and each copy's last transition go through too
    overrides = ["+task=cartpole", "algo=dqn", "task.total_env_steps=1100", "task.replay.n_step=3",
                 "task.replay.learning_starts=100", "task.eval_every_env_steps=100000",
                 "task.eval_episodes=2", "task.hidden=[16]", "checkpoint.every=25",
                 "task.replay.train_freq=4", "task.replay.gradient_steps=1",
                 "task.loss.target_every=20"]
    got, expected, context = killed_and_resumed(overrides, 250, tmp_path, kill_from=100)
    assert got["data"]["exploration"] == expected["data"]["exploration"], context
    got_buffer, expected_buffer = got["data"]["buffer"], expected["data"]["buffer"]
    assert got_buffer.keys() == expected_buffer.keys() and got_buffer["fields"].keys() == \
        expected_buffer["fields"].keys(), context
    assert "follow" in got_buffer["fields"] and got_buffer["last"] == expected_buffer["last"]
    assert all(torch.equal(got_buffer["fields"][k], expected_buffer["fields"][k])
               for k in got_buffer["fields"]), context
    assert torch.equal(got["data"]["generator"], expected["data"]["generator"]), context


def test_an_off_policy_algorithm_given_to_the_policy_gradient_task_says_which_task() -> None:
    from beyondfit.tasks.policy_gradient import build

    with pytest.raises(BeyondfitError, match=r"off-policy algorithm .* task\._target_=beyondfit"
                                             r"\.tasks\.offpolicy\.build"):
        build(loss=dqn_loss())


@pytest.mark.e2e
@pytest.mark.slow
def test_algo_dqn_solves_cartpole_confirmed_on_100_fresh_episodes(tmp_path: Path) -> None:
    # RL-Zoo's settings as shipped; seed 0 stops at 30,976 env steps (bench/dqn_cartpole.py).
    run = tmp_path / "run"
    done = cli("+task=cartpole", "algo=dqn", "seed=0", "threads=1", *QUIET,
               f"hydra.run.dir={run}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    record = __import__("json").loads((run / "result.json").read_text())
    assert record["solved"] and record["confirming_evaluation"]["episodes"] == 100


def test_epsilon_holds_through_the_random_steps_then_falls_from_exploration_start() -> None:
    agent = QAgent(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3),
                   exploration_start=0.016, exploration_fraction=0.05,
                   exploration_initial_eps=1.0, exploration_final_eps=0.01)
    # DrQ(eps) over 100k env steps: 1 through step 1,600, 0.01 from step 6,600 on
    assert agent.epsilon(0.0) == agent.epsilon(0.016) == 1.0
    assert agent.epsilon(0.041) == pytest.approx(1.0 - 0.99 * 0.5)
    assert agent.epsilon(0.066) == pytest.approx(0.01) == agent.epsilon(0.5)
    with pytest.raises(BeyondfitError, match=r"task\.agent\.exploration_start"):
        QAgent(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3),
               exploration_start=-0.1)


def test_a_target_copied_after_every_update_is_the_online_network_itself() -> None:
    torch.manual_seed(0)
    agent = QAgent(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3),
                   hidden=[8], head="dueling")
    g = torch.Generator().manual_seed(1)
    batch = ReplayBatch(torch.randn(16, 2, generator=g), torch.randint(3, (16,), generator=g),
                        torch.randn(16, generator=g), torch.randn(16, 2, generator=g),
                        (torch.rand(16, generator=g) < 0.2).float(), torch.zeros(16),
                        torch.full((16,), 0.9**3), None)
    (online,) = dqn_loss(gamma=0.9, double=True, target_every=1)
    assert online.target is None  # no copy kept: it would equal the online network
    (copied,) = dqn_loss(gamma=0.9, double=True, target_every=2)
    agent.q_target = SlowCopy(agent.q, rate=1.0)  # a copy as it stands after an update
    for out in (online.loss(agent, batch), copied.loss(agent, batch)):
        assert set(out) == {"loss", "q"}
    assert torch.equal(online.loss(agent, batch)["loss"], copied.loss(agent, batch)["loss"])
