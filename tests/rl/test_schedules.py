"""Schedules over env steps, PPO's early stop at a target KL, value clipping, and the one-line
error for an env whose optional dependency (Box2D, MuJoCo) is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from beyondfit.core.callbacks import Callback
from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.seeding import seed_everything
from beyondfit.rl import RolloutBatch, make_vector_env, ppo_loss
from beyondfit.rl.algos.kl_stop import TargetKL
from beyondfit.rl.algos.onpolicy import clipped_value_loss
from beyondfit.rl.algos.schedules import env_step_schedules
from beyondfit.tasks.policy_gradient import build

ROLLOUT = 4 * 32  # env steps per rollout below: 4 envs x 32 steps
TOTAL = 8 * ROLLOUT


class Record(Callback):
    """What each optimizer step ran with: learning rate and the loss's coefficients."""

    def __init__(self, loss) -> None:
        self.loss, self.rows = loss, []

    def on_step_end(self, engine) -> None:
        c = self.loss.coefficients
        self.rows.append((engine.train_data.env_steps, engine.optimizer.param_groups[0]["lr"],
                          c.ent_coef, c.clip_coef))


def _task(loss=None, anneal=None, epochs=2, minibatches=2):
    seed_everything(0)
    loss = loss or ppo_loss(ent_coef=0.02)
    return build(loss, env="CartPole-v1", num_envs=4, total_env_steps=TOTAL,
                 collector={"rollout_steps": 32, "epochs": epochs, "minibatches": minibatches},
                 eval_every_env_steps=100_000, eval_episodes=2, anneal=anneal)


def _engine(task, *extra, **options):
    return Engine(task.model, task.loss_fn, torch.optim.Adam(task.model.parameters(), 0.01),
                  device="cpu", callbacks=[*task.callbacks, *extra], **options)


def test_lr_and_coefficients_anneal_linearly_per_rollout_over_the_env_step_budget():
    task = _task(anneal={"lr": 0.0, "ent_coef": 0.0, "clip_coef": 0.1})
    record = Record(task.loss_fn)
    _engine(task, record).fit(task.train_data)
    assert len(record.rows) == 8 * 4
    for collected, lr, ent, clip in record.rows:
        done_before = collected - ROLLOUT  # the rollout being trained on is not counted yet
        progress = done_before / TOTAL
        assert lr == pytest.approx(0.01 * (1 - progress))
        assert ent == pytest.approx(0.02 * (1 - progress))
        assert clip == pytest.approx(0.2 + (0.1 - 0.2) * progress)
    assert record.rows[0][1] == 0.01  # the first rollout at the configured values
    task.train_data.close()
    task.val_data.close()


def test_annealing_resumes_from_the_restored_env_step_count(tmp_path):
    anneal = {"lr": 0.1, "ent_coef": 0.0}
    task = _task(anneal=anneal)
    reference = Record(task.loss_fn)
    _engine(task, reference).fit(task.train_data)
    task.train_data.close()

    first = _task(anneal=anneal)
    engine = _engine(first)
    engine.fit(first.train_data, max_steps=10)  # mid-way through the third rollout
    path = engine.save(tmp_path / "ckpt.pt")
    first.train_data.close()
    resumed = _task(anneal=anneal)
    record = Record(resumed.loss_fn)
    engine = _engine(resumed, record)
    engine.load(path)
    assert engine.optimizer.param_groups[0]["initial_lr"] == 0.01  # the base survives
    engine.fit(resumed.train_data)
    # The resumed run starts a new rollout; from then on every rollout's values are the ones
    # the uninterrupted run used for the rollout that took the same env steps.
    expected = {row[0]: row[1:] for row in reference.rows}
    assert record.rows and all(expected[row[0]] == row[1:] for row in record.rows)
    resumed.train_data.close()


@pytest.mark.parametrize(("anneal", "words"), [
    ({"momentum": 0.0}, ["cannot anneal momentum", "no adjustable coefficients"]),
    ({"lr": -1}, ["task.anneal.lr=-1", ">= 0"]),
    ({"lr": True}, ["task.anneal.lr=True"]),
])
def test_bad_anneal_options_are_clear_errors(anneal, words):
    with pytest.raises(BeyondfitError) as info:
        env_step_schedules(anneal, collector=None, loss=None)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_annealing_a_coefficient_the_loss_lacks_is_a_clear_error():
    def my_loss(policy, batch):  # a user's loss without adjustable coefficients
        return policy.value(batch.obs).mean()

    with pytest.raises(BeyondfitError, match="no adjustable coefficients"):
        _task(loss=my_loss, anneal={"ent_coef": 0.0})
    with pytest.raises(BeyondfitError, match=r"task\.anneal\.momentum: the loss has no such"):
        _task(anneal={"momentum": 0.0})


def test_annealed_lr_and_a_scheduler_together_are_refused():
    task = _task(anneal={"lr": 0.0})
    engine = _engine(task, scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 10))
    with pytest.raises(BeyondfitError, match="scheduler"):
        engine.fit(task.train_data)
    task.train_data.close()


# ------------------------------------------------------------------------ target KL
def _steps_and_epochs(target_kl):
    task = _task(loss=ppo_loss(target_kl=target_kl), epochs=4)
    engine = _engine(task, log_every=4)
    history = engine.fit(task.train_data)
    task.train_data.close()
    return engine.global_step, history


def test_target_kl_stops_a_rollouts_epochs_early():
    steps, history = _steps_and_epochs(1e-12)  # any update moves the policy past it
    assert steps == 8 * 2  # one epoch of 2 minibatches per rollout
    assert history[-1]["update_epochs"] == 1.0
    steps, history = _steps_and_epochs(1e9)  # never reached
    assert steps == 8 * 4 * 2 and history[-1]["update_epochs"] == 4.0


def test_target_kl_compares_the_epoch_mean_and_starts_afresh():
    monitor = TargetKL(0.02)
    for kl in (0.01, 0.04):
        monitor.record(torch.tensor(kl))
    assert monitor() is True and monitor.last == pytest.approx(0.025)
    monitor.record(torch.tensor(0.015))
    assert monitor() is False and monitor.last == pytest.approx(0.015)
    assert monitor() is False  # nothing recorded: no reason to stop


def test_target_kl_saved_mid_epoch_resumes_the_same_mean():
    monitor, resumed = TargetKL(0.02), TargetKL(0.02)
    monitor.record(torch.tensor(0.01))
    resumed.load_state_dict(monitor.state_dict())  # a checkpoint after the first minibatch
    for m in (monitor, resumed):
        m.record(torch.tensor(0.04))
    assert monitor() is resumed() is True and monitor.last == resumed.last
    for doctored in ({"sum": None, "count": 2, "last": None},
                     {"sum": torch.tensor(float("nan")), "count": 1, "last": None},
                     {"sum": None, "count": 0, "last": "high"}):
        with pytest.raises(BeyondfitError, match=r"^stop_epochs\."):
            resumed.load_state_dict(doctored)


@pytest.mark.parametrize("target", [0, -0.1, True, "x"])
def test_bad_target_kl_is_a_clear_error(target):
    with pytest.raises(BeyondfitError, match="target_kl"):
        ppo_loss(target_kl=target)


# ------------------------------------------------------------------------ value clipping
class _Values(torch.nn.Module):
    def __init__(self, values):
        super().__init__()
        self.values = torch.nn.Parameter(values)

    def value(self, obs):
        return self.values


def test_value_clipping_takes_the_larger_of_the_clipped_and_plain_errors():
    old = torch.tensor([0.0, 0.0, 1.0])
    new = torch.tensor([0.5, -0.05, 3.0])
    target = torch.tensor([1.0, 1.0, 0.0])
    batch = RolloutBatch(torch.zeros(3, 1), torch.zeros(3), None, old, target - old, target)
    loss = clipped_value_loss(_Values(new), batch, clip=0.1)
    clipped = torch.tensor([0.1, -0.05, 1.1])
    expected = 0.5 * torch.max((new - target) ** 2, (clipped - target) ** 2).mean()
    assert torch.equal(loss, expected)
    plain = clipped_value_loss(_Values(new), batch, clip=1e9).detach()
    assert plain.item() == pytest.approx((0.5 * ((new - target) ** 2).mean()).item())
    with pytest.raises(BeyondfitError, match="value_clip"):
        ppo_loss(value_clip=-1)


def test_ppo_with_value_clipping_and_target_kl_trains_through_the_engine():
    task = _task(loss=ppo_loss(value_clip=0.2, target_kl=0.05), anneal={"lr": 0.0})
    history = _engine(task).fit(task.train_data)
    assert history[-1]["env_steps"] == TOTAL and history[-1]["value_loss"] > 0
    task.train_data.close()


# ------------------------------------------------------------------------ optional dependencies
@pytest.mark.parametrize(("env_id", "extra"), [("LunarLander-v3", "box2d"),
                                               ("Hopper-v5", "mujoco")])
def test_an_env_without_its_optional_dependency_names_the_extra(monkeypatch, env_id, extra):
    def missing(*args, **kwargs):
        raise gym.error.DependencyNotInstalled("the simulator is not installed")

    monkeypatch.setattr(gym, "make_vec", missing)
    with pytest.raises(BeyondfitError) as info:
        make_vector_env(env_id, 2)
    message = str(info.value)
    assert f'pip install -e ".[{extra}]"' in message and env_id in message
    assert "\n" not in message


@pytest.mark.e2e
@pytest.mark.parametrize(("task", "module", "extra"), [("lunarlander", "Box2D", "box2d"),
                                                       ("hopper", "mujoco", "mujoco")])
def test_cli_without_the_simulator_is_one_line_and_exit_2(tmp_path: Path, task, module, extra):
    # The module made unimportable, as on a machine without the extra.
    code = (f"import sys; sys.modules[{module!r}] = None; "
            "from beyondfit.cli.app import main; main()")
    done = subprocess.run([sys.executable, "-c", code, f"+task={task}",
                           f"hydra.run.dir={tmp_path}"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and f'.[{extra}]"' in done.stderr, done.stderr


def test_a_users_loss_with_its_own_coefficients_is_annealed_by_name():
    class Knobs:
        def __init__(self):
            self.beta = 1.0

    seen = []

    def my_loss_factory():
        knobs = Knobs()

        def loss_fn(policy, batch):  # vanilla policy gradient with a KL-ish weight "beta"
            seen.append(knobs.beta)
            logp, _ = policy.log_prob_entropy(batch.obs, batch.actions)
            return -(logp * batch.advantages).mean() * knobs.beta

        loss_fn.coefficients = knobs
        return loss_fn

    seed_everything(0)
    loss = my_loss_factory()
    task = build(loss, env="CartPole-v1", num_envs=4, total_env_steps=4 * ROLLOUT, critic=False,
                 collector={"rollout_steps": 32, "old_log_prob": False},
                 eval_every_env_steps=100_000, eval_episodes=2, anneal={"beta": 0.0})
    _engine(task).fit(task.train_data)
    assert seen == [1.0, 0.75, 0.5, 0.25]
    task.train_data.close()
    task.val_data.close()
