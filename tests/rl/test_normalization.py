"""Running normalization inside the policy: statistics, when they change, and that they travel
with the policy (checkpoints, policy.pt, play, resume, two torchrun ranks)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.seeding import seed_everything
from beyondfit.core.state.serialization import safe_load
from beyondfit.rl import ActorCritic, RolloutCollector, make_vector_env, ppo_loss
from beyondfit.rl.algos.kl_stop import TargetKL
from beyondfit.rl.collect.normalization import (
    Normalizer,
    RunningMoments,
    batch_moments,
    merge_moments,
    normalizer_options,
)
from beyondfit.rl.evaluation.play import load_policy, play
from beyondfit.tasks.policy_gradient import build

from kit import leave_rank


class OffsetEnv(gym.Env):
    """A user's env with badly scaled observations: around 100, spread 5, and rewards of 50."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return 100.0 + 5.0 * self.np_random.standard_normal(3)

    def step(self, action):
        self.t += 1
        return self._obs(), 50.0 * float(action), False, self.t >= 20, {}


gym.register("BeyondfitTest/Offset-v0", entry_point=OffsetEnv)


def _collector(env="BeyondfitTest/Offset-v0", num_envs=4, steps=32, normalize=True, **kw):
    envs = make_vector_env(env, num_envs)
    size = int(np.prod(envs.single_observation_space.shape))
    normalizer = Normalizer(size, gamma=0.9) if normalize else None
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space,
                         normalizer=normalizer)
    return RolloutCollector(envs, policy, num_steps=steps, total_env_steps=10 * steps * num_envs,
                            gamma=0.9, seed=0, **kw)


# ---------------------------------------------------------------------------- the statistics
def test_running_moments_merge_batches_exactly_like_one_pass_over_all_rows():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (1, 7, 100, 33)]
    moments = RunningMoments(4, prior_count=0.0)
    for batch in batches:
        moments.update(torch.from_numpy(batch))
    rows = np.concatenate(batches)
    assert float(moments.count) == len(rows)
    np.testing.assert_allclose(moments.mean.numpy(), rows.mean(0), rtol=1e-12)
    np.testing.assert_allclose(moments.var.numpy(), rows.var(0), rtol=1e-12)


def test_statistics_change_between_rollouts_only_and_never_in_evaluation():
    collector = _collector()
    policy, normalizer = collector.policy, collector.policy.normalizer
    before = normalizer.state_dict()["obs.moments"].clone()
    batches = iter(collector)
    first = next(batches)
    # The first rollout was collected and is being trained on: nothing folded in yet.
    assert torch.equal(normalizer.obs.moments, before)
    for _ in range(collector.batches_per_rollout - 1):
        next(batches)
    assert torch.equal(normalizer.obs.moments, before)
    seen = first.obs.double()
    next(batches)  # the second rollout starts: the first one's observations now count
    expected = RunningMoments(3)
    expected.update(seen)
    assert torch.equal(normalizer.obs.moments, expected.moments)
    np.testing.assert_allclose(normalizer.obs.mean.numpy(), 100.0, atol=1.5)
    # Greedy evaluation (eval mode, inference) leaves every buffer as it was.
    frozen = {k: v.clone() for k, v in policy.state_dict().items()}
    policy.eval()
    with torch.inference_mode():
        features = policy.features(torch.full((5, 3), 100.0, dtype=torch.float32))
        policy.act(torch.zeros(5, 3), greedy=True)
    assert all(torch.equal(frozen[k], v) for k, v in policy.state_dict().items())
    assert features.abs().max() < 1.0  # the user's offset of 100 is gone
    collector.close()


def test_reward_scaling_matches_a_step_by_step_reference():
    normalizer = Normalizer(1, observations=False, rewards=True, gamma=0.5, clip=1e9)
    rng = np.random.default_rng(1)
    rewards = rng.normal(2.0, 3.0, size=(6, 3)).astype(np.float32)
    done = np.zeros((6, 3), dtype=bool)
    done[2, 0] = done[4, 2] = True
    valid = np.ones_like(done)
    valid[3, 0] = valid[5, 2] = False  # the reset steps after the ends
    running = np.zeros(3)
    scaled = normalizer.scale_rewards(rewards, done, valid, running)
    # Reference: VecNormalize's recursion, restarted after each episode end.
    g, seen = np.zeros(3), []
    for t in range(6):
        g = g * 0.5 + rewards[t]
        seen += [g[i] for i in range(3) if valid[t, i]]
        g = np.where(done[t], 0.0, g)
    reference = RunningMoments(1)
    reference.update(torch.tensor(seen, dtype=torch.float64).reshape(-1, 1))
    assert torch.equal(normalizer.returns.moments, reference.moments)
    np.testing.assert_allclose(running, g)
    std = np.sqrt(reference.var.numpy()[0] + 1e-8)
    np.testing.assert_allclose(scaled, rewards / std, rtol=1e-6)


def test_episode_statistics_report_the_raw_rewards():
    collector = _collector(num_envs=2, steps=45)
    batches = iter(collector)
    next(batches)
    metrics = collector.metrics()
    # 20-step episodes of rewards 0 or 50: raw returns are multiples of 50 up to 1000.
    assert metrics["episode_return"] > 100 and metrics["episode_return"] % 50 == 0
    collector.close()


@pytest.mark.parametrize(("options", "words"), [
    (3, ["task.normalize=3", "true, false"]),
    ({"obs": True}, ["unknown task.normalize", "obs"]),
    ({"clip": 0}, ["task.normalize.clip=0", "positive"]),
])
def test_bad_normalize_options_are_clear_errors(options, words):
    with pytest.raises(BeyondfitError) as info:
        normalizer_options(options, 3, 0.99)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_normalize_false_or_both_off_builds_no_module():
    assert normalizer_options(False, 3, 0.99) is None
    assert normalizer_options({"observations": False, "rewards": False}, 3, 0.99) is None


# ------------------------------------------------------------------- save, play, resume
def _task(total=1536, **options):
    seed_everything(0)
    return build(ppo_loss(), env="BeyondfitTest/Offset-v0", num_envs=4, total_env_steps=total,
                 normalize=True, collector={"rollout_steps": 64, "epochs": 2, "minibatches": 2},
                 eval_every_env_steps=10_000, eval_episodes=2, target_return=None, **options)


def _engine(task):
    return Engine(task.model, task.loss_fn, torch.optim.Adam(task.model.parameters(), 1e-3),
                  device="cpu", callbacks=task.callbacks, log_every=1)


def test_statistics_survive_checkpoint_policy_file_and_play(tmp_path):
    task = _task()
    engine = _engine(task)
    engine.fit(task.train_data, max_steps=12)  # mid-run: 3 rollouts of 4 steps each
    path = engine.save(tmp_path / "ckpt.pt")
    saved = safe_load(path)
    live = task.model.state_dict()
    assert torch.equal(saved["model"]["normalizer.obs.moments"], live["normalizer.obs.moments"])
    assert torch.equal(saved["model"]["normalizer.returns.moments"],
                       live["normalizer.returns.moments"])
    assert float(live["normalizer.obs.moments"][0]) > 100  # two rollouts folded in
    assert "pending_obs_moments" in saved["data"]  # the third, not yet
    # policy.pt from the task's finish hook; play rebuilds the same normalization.
    task.finish(engine, tmp_path)
    policy, meta = load_policy(tmp_path)
    assert meta["normalizer"]["observations"] is True
    for key, value in task.model.state_dict().items():
        assert torch.equal(policy.state_dict()[key], value), key
    obs = torch.full((2, 3), 104.0)
    assert torch.equal(policy.features(obs), task.model.features(obs))
    assert len(play(tmp_path, episodes=2)) == 2


def test_resume_restores_statistics_bitwise_and_continues_deterministically(tmp_path):
    task = _task()
    engine = _engine(task)
    engine.fit(task.train_data, max_steps=10)  # mid-rollout: 2.5 rollouts
    path = engine.save(tmp_path / "ckpt.pt")
    task.train_data.close()
    task.val_data.close()

    finals = []
    for _ in range(2):
        resumed = _task()
        other = _engine(resumed)
        other.load(path)
        for key, value in safe_load(path)["model"].items():
            assert torch.equal(resumed.model.state_dict()[key], value), key
        other.fit(resumed.train_data, max_steps=20)
        finals.append({k: v.clone() for k, v in resumed.model.state_dict().items()})
        resumed.train_data.close()
        resumed.val_data.close()
    # The resumed run first folds in the rollout the checkpoint had not yet counted.
    assert float(finals[0]["normalizer.obs.moments"][0]) > float(
        safe_load(path)["model"]["normalizer.obs.moments"][0])
    for key in finals[0]:
        assert torch.equal(finals[0][key], finals[1][key]), key


# ------------------------------------------------------------------- several ranks
def _rank_worker(rank: int, world: int, store: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    try:
        collector = _collector(num_envs=2, steps=16).shard(rank, world)
        batches = iter(collector)
        seen = []
        for _ in range(2):  # two rollouts; the second's start folds the first in
            batch = next(batches)
            seen.append(batch.obs.double())
            for _ in range(collector.batches_per_rollout - 1):
                next(batches)
        next(batches)  # the third rollout starts: both earlier ones folded in, on every rank
        moments = collector.policy.normalizer.obs.moments
        everyone = [torch.empty_like(moments) for _ in range(world)]
        dist.all_gather(everyone, moments)
        assert all(torch.equal(everyone[0], m) for m in everyone)  # the same bits everywhere
        # ... and they are the statistics of every rank's observations together.
        mine = torch.cat(seen)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(sizes, torch.tensor([mine.shape[0]]))
        padded = torch.zeros(int(max(sizes)), 3, dtype=torch.float64)
        padded[: mine.shape[0]] = mine
        rows = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(rows, padded)
        union = torch.cat([r[: int(n)] for r, n in zip(rows, sizes)])
        assert float(moments[0]) == pytest.approx(union.shape[0] + 1e-4)
        # The same prior, all rows at once (merged locally: RunningMoments.update would gather).
        one_pass = merge_moments(RunningMoments(3).moments, batch_moments(union))
        torch.testing.assert_close(moments, one_pass, rtol=1e-9, atol=0)
        returns = collector.policy.normalizer.returns.moments
        both = [torch.empty_like(returns) for _ in range(world)]
        dist.all_gather(both, returns)
        assert torch.equal(both[0], both[1])  # reward scale too
        collector.close()
        # PPO's early stop: ranks that measured different KLs still stop after the same epoch.
        monitor = TargetKL(0.02)
        monitor.record(torch.tensor([0.01, 0.035][rank]))
        assert monitor() is True and monitor.last == pytest.approx(0.0225)
        dist.barrier()  # both ranks done before the group goes
    finally:
        dist.destroy_process_group()
    leave_rank()


@pytest.mark.e2e
def test_two_ranks_share_one_set_of_statistics_and_one_early_stop(tmp_path: Path) -> None:
    mp.spawn(_rank_worker, args=(2, str(tmp_path / "store")), nprocs=2, join=True)


@pytest.mark.e2e
def test_torchrun_two_ranks_save_statistics_of_both_ranks(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    steps = 2 * 8 * 32 * 3  # 3 rollouts of 32 steps x 8 envs on each of 2 ranks
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "beyondfit", "+task=cartpole", "device=cpu", "hydra.run.dir=run",
         "task.normalize=true", f"task.total_env_steps={steps}", "task.collector.rollout_steps=32",
         "train.stop=null", "plots=false", "progress.bar=false"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    final = sorted((tmp_path / "run" / "checkpoints").glob("step-*.pt"))[-1]
    saved = safe_load(final)
    count = float(saved["model"]["normalizer.obs.moments"][0])
    # Two rollouts folded in (the third is pending): more observations than one rank took.
    assert count > 2 * 32 * 8 + 1
    policy, _ = load_policy(tmp_path / "run")
    assert torch.equal(policy.state_dict()["normalizer.obs.moments"],
                       saved["model"]["normalizer.obs.moments"])
    played = subprocess.run([sys.executable, "-m", "beyondfit.play", "run", "--episodes", "1"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert played.returncode == 0 and "mean return" in played.stdout, played.stderr


def test_ppo_loss_uses_the_normalized_observations_it_was_collected_with():
    """The first minibatch of every rollout has ratio 1: the normalization it is scored with
    is the one the actions were sampled with."""
    collector = _collector(old_log_prob=True)
    loss = ppo_loss()
    batches = iter(collector)
    for _ in range(3):
        batch = next(batches)
        out = loss(collector.policy, batch)
        assert float(out["approx_kl"]) == pytest.approx(0.0, abs=1e-7)
        for _ in range(collector.batches_per_rollout - 1):
            next(batches)
    collector.close()
