"""Several processes, one run: DDP through the engine, on CPU with Gloo.

Three layers: pure helpers (no process group), a 2-process ``torch.multiprocessing`` worker that
checks the engine's DDP mechanics against hand-computed references, and ``torchrun`` launches of
the command line (one run directory, rank 0 writes, checkpoints resume in one process).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hydra import compose, initialize_config_dir
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from beyondfit import BeyondfitError, Callback, Engine, TensorBatches
from beyondfit.cli.builders import build_scheduler
from beyondfit.cli.run import CONF_DIR, build_optimizer, build_task
from beyondfit.core.seeding import rank_seed
from beyondfit.core.strategy import Strategy
from beyondfit.distributed import (
    DDPStrategy,
    DistributedModel,
    ShardedBatches,
    launch_env,
    rank_device,
    shutdown,
)
from beyondfit.distributed.connector import resolve_strategy

from kit import Recorder, leave_rank, mse, rows, torchrun

WORLD = 2


# ---------------------------------------------------------------------- helpers, no group
def test_launch_env_reads_torchrun_variables() -> None:
    assert launch_env({}) is None
    env = launch_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    assert (env.rank, env.local_rank, env.world_size) == (1, 1, 2)


@pytest.mark.parametrize(
    "environ",
    [{"RANK": "one", "WORLD_SIZE": "2"}, {"RANK": "2", "WORLD_SIZE": "2"}],
    ids=["not-a-number", "rank-out-of-range"],
)
def test_bad_launch_variables_are_clear_errors(environ: dict[str, str]) -> None:
    with pytest.raises(BeyondfitError, match="torchrun"):
        launch_env(environ)


def test_unknown_strategy_names_the_argument_and_the_choices() -> None:
    from beyondfit.cli.schema import in_config_words

    with pytest.raises(BeyondfitError, match=r"^strategy='fsdp'.*auto.*none.*ddp") as info:
        resolve_strategy("fsdp")
    # The command line says it in its own words (the schema's check is the same rule).
    assert in_config_words(info.value).startswith("engine.strategy='fsdp'")


def test_strategy_none_under_a_multi_process_launch_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    from beyondfit.cli.schema import in_config_words

    with pytest.raises(BeyondfitError, match=r"^strategy='none'.*2 processes") as info:
        resolve_strategy("none")
    assert in_config_words(info.value).startswith("engine.strategy='none'")


def test_auto_is_one_process_outside_torchrun(monkeypatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    strategy = resolve_strategy("auto")
    assert type(strategy) is Strategy and strategy.is_main and not strategy.is_distributed


def test_rank_device_gives_each_process_its_own_gpu() -> None:
    # The device logic, with CUDA described rather than present.
    assert rank_device("auto", 1, False, 0) == torch.device("cpu")
    assert rank_device("cpu", 3, True, 4) == torch.device("cpu")
    assert rank_device("auto", 1, True, 2) == torch.device("cuda", 1)
    assert rank_device("cuda", 3, True, 4) == torch.device("cuda", 3)
    assert rank_device("cuda:2", 2, True, 4) == torch.device("cuda", 2)


@pytest.mark.parametrize(
    ("device", "local_rank", "cuda", "count", "message"),
    [
        ("cuda:0", 1, True, 2, r"device='cuda:0' under DDP.*cuda:1.*device=cuda"),
        ("cuda", 2, True, 2, r"LOCAL_RANK=2 but this node has 2 CUDA.*nproc_per_node=2"),
        ("cuda", 0, False, 0, r"CUDA is not available.*device=cpu"),
        ("mps", 0, False, 0, r"device='mps' cannot be used with DDP"),
    ],
    ids=["someone-elses-gpu", "more-ranks-than-gpus", "no-cuda", "mps"],
)
def test_rank_device_errors_say_what_to_write(device, local_rank, cuda, count, message) -> None:
    with pytest.raises(BeyondfitError, match=message):
        rank_device(device, local_rank, cuda, count)


def test_rank_seeds_keep_rank_zero_and_separate_the_others() -> None:
    assert rank_seed(7, 0) == 7
    seeds = [rank_seed(7, r) for r in range(1, 5)]
    assert len(set(seeds)) == 4 and all(abs(s - 7) > 1000 for s in seeds)
    assert seeds == [rank_seed(7, r) for r in range(1, 5)]  # deterministic


def test_sharded_batches_pad_for_training_and_split_exactly_for_evaluation() -> None:
    batches = list("abcde")
    train = [list(ShardedBatches(batches, r, 2, pad=True)) for r in range(2)]
    assert train == [["a", "c", "e"], ["b", "d", "a"]]  # equal lengths: DDP needs them
    val = [list(ShardedBatches(batches, r, 2, pad=False)) for r in range(2)]
    assert val == [["a", "c", "e"], ["b", "d"]] and len(ShardedBatches(batches, 1, 2, False)) == 2


def test_tensor_batches_shards_are_disjoint_equal_and_cover_every_row() -> None:
    x = torch.arange(11).float().unsqueeze(1)
    shards = [TensorBatches(x, batch_size=2, seed=3) for _ in range(3)]
    for rank, shard in enumerate(shards):
        shard.shard(rank, 3)
    for _ in range(2):  # two passes: each reshuffled the same way on every rank
        rows = [torch.cat(list(s)).flatten().tolist() for s in shards]
        assert [len(r) for r in rows] == [4, 4, 4] and [len(s) for s in shards] == [2, 2, 2]
        flat = sorted(v for r in rows for v in r)
        assert set(flat) == set(range(11))  # 12 slots: one row appears twice (padding)
    with pytest.raises(BeyondfitError, match="rank=3 is not in a group of 3"):
        shards[0].shard(3, 3)


def test_engine_strategy_option_reaches_the_engine_from_the_config(tmp_path: Path) -> None:
    from beyondfit.cli.run import run

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose(config_name="config",
                      overrides=["+task=regression", "engine.strategy=spmd", "device=cpu"])
    with pytest.raises(BeyondfitError, match=r"engine\.strategy='spmd'"):
        run(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


# ---------------------------------------------------------------------- one-process DDP group
@pytest.fixture
def single_process_group():
    """A one-process group over an in-memory store (what engine.strategy=ddp makes)."""
    yield
    shutdown()


def _regression_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 4, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]]) + 0.1


def test_ddp_with_one_process_trains_exactly_like_no_strategy(single_process_group) -> None:
    x, y = _regression_data()
    finals = []
    for strategy in ("none", "ddp"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.05),
                        device="cpu", strategy=strategy, accumulate=2)
        history = engine.fit(TensorBatches(x, y, batch_size=8, seed=1), epochs=3,
                             val_data=[(x, y)])
        finals.append((history, [p.detach().clone() for p in model.parameters()]))
        if strategy == "ddp":
            assert isinstance(engine.forward_model, DistributedModel)
            assert isinstance(engine.strategy, DDPStrategy) and dist.get_world_size() == 1
            # The checkpointed module is the plain one: no "module." prefixes.
            assert set(engine.state_dict()["model"]) == set(model.state_dict())
    (h_single, p_single), (h_ddp, p_ddp) = finals
    assert [r["loss"] for r in h_ddp] == pytest.approx([r["loss"] for r in h_single], rel=1e-6)
    assert h_ddp[-1]["val_loss"] == pytest.approx(h_single[-1]["val_loss"], rel=1e-6)
    for a, b in zip(p_single, p_ddp, strict=True):
        torch.testing.assert_close(a, b)


# ---------------------------------------------------------------------- two processes (spawn)
class _PerRank:
    """This rank's batches, already split: its ``shard`` keeps them as they are."""

    def __init__(self, batches: list) -> None:
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)

    def shard(self, rank: int, world_size: int) -> None:
        """Nothing to do: built per rank."""


def _batches(rank: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for b in range(n):
        g = torch.Generator().manual_seed(100 * rank + b)
        x = torch.randn(4, 3, generator=g)
        out.append((x, x.sum(1, keepdim=True) * (rank + 1)))
    return out


def _gather(value):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _check_accumulation(rank: int, world: int) -> None:
    """accumulate=3 over 7 batches: two synchronised windows and a partial one, synced by
    hand; DDP all-reduces once per window, not per micro-batch."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    reference = nn.Linear(3, 1)
    reference.load_state_dict(model.state_dict())
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.1), device="cpu",
                    accumulate=3, log_every=1)
    calls = []

    def counting_hook(state, bucket):
        calls.append(1)
        buffer = bucket.buffer().div_(world)
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda f: f.value()[0])

    engine.forward_model.ddp.register_comm_hook(None, counting_hook)
    engine.fit(_PerRank(_batches(rank, 7)), epochs=1)
    assert engine.global_step == 3 and len(calls) == 2

    # The same updates by hand: mean over ranks of each window's mean gradient (the short last
    # window averages its one micro-batch, not a third of it).
    data = [_batches(r, 7) for r in range(world)]
    for window in ([0, 1, 2], [3, 4, 5], [6]):
        reference.zero_grad()
        for r in range(world):
            for b in window:
                (mse(reference, data[r][b]) / len(window) / world).backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= 0.1 * p.grad
    torch.testing.assert_close(_params(model), _params(reference))


def _check_metrics_and_evaluation(rank: int, world: int) -> None:
    """Logged values are over all ranks, whatever names each rank has; evaluation is exact."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)

    def loss_fn(m, batch):
        loss = mse(m, batch)
        out = {"loss": loss}
        if m.training and rank == 1:
            out["only_on_rank_1"] = torch.tensor(5.0)
        return out

    recorder = Recorder()
    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.0), device="cpu",
                    callbacks=[recorder], log_every=1)
    batches = _batches(rank, 2)
    engine.fit(_PerRank(batches), epochs=1)
    local = [float(mse(model, b)) for b in batches]  # lr=0: the model never changed
    every = [v for part in _gather(local) for v in part]
    last = [part[-1] for part in _gather(local)]  # a log row: its interval, over the ranks
    assert recorder.logs[-1]["loss"] == pytest.approx(sum(last) / len(last), rel=1e-6)
    assert engine.history[-1]["loss"] == pytest.approx(sum(every) / len(every), rel=1e-6)
    assert recorder.logs[-1]["only_on_rank_1"] == 5.0
    assert _gather(recorder.logs) == [recorder.logs] * world  # identical on every rank

    val = _batches(7, 3)  # the same 3 batches on every rank: rank 0 scores 2, rank 1 one
    expected = sum(float(mse(model, b)) for b in val) / 3
    assert engine.evaluate(val)["val_loss"] == pytest.approx(expected, rel=1e-6)
    loader = DataLoader(TensorDataset(*(torch.cat(t) for t in zip(*val, strict=True))),
                        batch_size=4)
    expected = sum(float(mse(model, b)) for b in loader) / len(loader)
    assert engine.evaluate(loader)["val_loss"] == pytest.approx(expected, rel=1e-6)
    # An evaluator (RL's greedy episodes) returns floats: averaged over ranks.
    assert engine.evaluate(lambda m: {"val_return": float(rank)}) == {"val_return": 0.5}


def _check_skips_and_stops_agree(rank: int, world: int) -> None:
    """A NaN on one rank makes every rank skip (else one would wait for the other's
    backward forever), also at the accumulation boundary; a stop on one rank stops all."""

    def loss_fn(m, batch):
        loss = mse(m, batch)
        step = int(batch[0][0, 0].item())
        return loss * float("nan") if rank == 1 and step in (1, 3) else loss

    def marked(n: int) -> list:
        out = []
        for b, (x, y) in enumerate(_batches(rank, n)):
            x = x.clone()
            x[0, 0] = b
            out.append((x, y))
        return out

    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu",
                    on_nonfinite="skip", accumulate=2)
    engine.fit(_PerRank(marked(6)), epochs=2)  # batch 1 and 3 end windows: skipped there
    assert engine.skipped_steps == 4
    params = _gather(_params(model))
    torch.testing.assert_close(params[0], params[1])

    class StopOnRank1(Callback):
        def on_step_end(self, engine) -> None:
            if rank == 1 and engine.global_step == 2:
                engine.should_stop = True

    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    engine = Engine(model, mse, torch.optim.SGD(model.parameters(), lr=0.01), device="cpu",
                    callbacks=[StopOnRank1()])
    engine.fit(_PerRank(_batches(rank, 6)), epochs=3)
    assert engine.global_step == 2


class _ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.actor = nn.Linear(3, 2)
        self.critic = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.actor(x)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)


def _check_methods_and_submodules_are_synchronised(rank: int, world: int) -> None:
    """Closures call methods (model.value) and submodules (model.critic[0]), not only
    forward: all of it runs through DDP, so replicas trained on different data stay equal."""
    torch.manual_seed(rank)  # different initial weights: DDP broadcasts rank 0's
    model = _ActorCritic()

    def loss_fn(m, batch):
        x, y = batch
        assert m.training and not isinstance(m, nn.Module)
        hidden = m.critic[0](x)
        return ((m.value(x) - y.squeeze(-1)) ** 2).mean() + m(x).pow(2).mean() + 0 * hidden.sum()

    engine = Engine(model, loss_fn, torch.optim.Adam(model.parameters(), 1e-2), device="cpu")
    initial = _params(model)  # rank 0's weights everywhere: DDP broadcast them
    engine.fit(_PerRank(_batches(rank, 5)), epochs=2)
    params = _gather(_params(model))
    torch.testing.assert_close(params[0], params[1])
    assert not torch.allclose(params[0], initial)


def _check_data_loaders(rank: int, world: int) -> None:
    """Map-style DataLoaders get a DistributedSampler (reshuffled by set_epoch) for training;
    evaluation takes every other batch of the original ones."""
    strategy = resolve_strategy("auto")
    assert isinstance(strategy, DDPStrategy) and strategy.rank == rank
    torch.manual_seed(1234 + rank)  # ranks disagree: the sampler's seed must come from rank 0
    loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=2, shuffle=True)
    sharded = strategy.shard_train(loader)
    assert strategy.shard_train(sharded) is sharded  # idempotent: a shard is left as it is
    orders = []
    for epoch in range(2):
        strategy.set_epoch(sharded, epoch)
        mine = [int(i) for (b,) in sharded for i in b]
        everyone = _gather(mine)
        assert sorted(i for part in everyone for i in part) == list(range(10))
        assert len(mine) == 5
        orders.append(mine)
    assert orders[0] != orders[1]
    val = DataLoader(TensorDataset(torch.arange(10)), batch_size=3)
    mine = [b.tolist() for (b,) in strategy.shard_eval(val)]
    assert mine == ([[0, 1, 2], [6, 7, 8]] if rank == 0 else [[3, 4, 5], [9]])


def _check_rl_collectors(rank: int, world: int) -> None:
    """RL: each rank steps its own envs (own seed, half the env-step budget); the logged
    env_steps are the sum over ranks, and the policies stay equal."""
    from beyondfit.rl.algos.onpolicy import a2c_loss
    from beyondfit.tasks.policy_gradient import build

    task = build(a2c_loss(), seed=0, num_envs=4, total_env_steps=2048, eval_episodes=2,
                 collector={"rollout_steps": 8, "gae_lambda": 0.9, "old_log_prob": False})
    recorder = Recorder()
    engine = Engine(task.model, task.loss_fn, torch.optim.Adam(task.model.parameters(), 3e-3),
                    device="cpu", callbacks=[recorder], log_every=1)
    try:
        engine.fit(task.train_data, epochs=1)
        collector = engine.train_data
        assert collector.total_env_steps == 1024 and collector.env_steps == 1024
        assert len(set(_gather(collector.seed))) == world
        # a2c: one rollout of num_steps x 4 envs per rank and optimizer step
        per_step = collector.num_steps * 4 * world
        assert [r["env_steps"] for r in recorder.logs] == [
            per_step * k for k in range(1, engine.global_step + 1)
        ]
        assert engine.history[-1]["env_steps"] == 2048
        params = _gather(_params(task.model))
        torch.testing.assert_close(params[0], params[1])
    finally:
        task.train_data.close()
        task.val_data.close()


def _check_episode_stats_seen_on_one_rank(rank: int, world: int) -> None:
    """A rank whose envs finished no episode in an interval reports no episode_return: the
    others' mean stands, env_steps still add up, and every rank logs the same row."""
    strategy = resolve_strategy("auto")
    mine = {"env_steps": 512.0, **({"episode_return": 21.0} if rank == 0 else {})}
    row = strategy.reduce_report(mine, totals=("env_steps",))
    assert row == {"env_steps": 512.0 * world, "episode_return": 21.0}
    assert len({json.dumps(r, sort_keys=True) for r in _gather(row)}) == 1


def _check_several_optimizers(rank: int, world: int) -> None:
    """Two optimizers under DDP: each all-reduces its own gradients at its own step, so the
    ranks stay equal and the run equals one process on the union of the ranks' batches."""
    from beyondfit import Update

    def first(m, batch):
        x, y = batch
        return ((m[0](x) - y) ** 2).mean()

    def second(m, batch):
        x, y = batch
        return ((m[1](m[0](x).detach()) - y) ** 2).mean()

    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 1), nn.Linear(1, 1))
        return model, [Update("a", first, torch.optim.SGD(model[0].parameters(), lr=0.05)),
                       Update("b", second, torch.optim.SGD(model[1].parameters(), lr=0.05),
                              every=2)]

    model, updates = build()
    engine = Engine(model, updates, device="cpu", strategy="ddp")
    engine.fit(_PerRank(_batches(rank, 6)), epochs=1, verbose=False)
    params = _gather(_params(model))
    torch.testing.assert_close(params[0], params[1])

    ref_model, ref_updates = build()  # one process, each batch the union of the ranks'
    union = [tuple(torch.cat(parts) for parts in zip(*(_batches(r, 6)[b] for r in range(world))))
             for b in range(6)]
    Engine(ref_model, ref_updates, device="cpu", strategy=Strategy()).fit(union, verbose=False)
    torch.testing.assert_close(_params(model), _params(ref_model))


def _worker(rank: int, world: int, store: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    try:
        _check_accumulation(rank, world)
        _check_several_optimizers(rank, world)
        _check_metrics_and_evaluation(rank, world)
        _check_skips_and_stops_agree(rank, world)
        _check_methods_and_submodules_are_synchronised(rank, world)
        _check_data_loaders(rank, world)
        _check_rl_collectors(rank, world)
        _check_episode_stats_seen_on_one_rank(rank, world)
        dist.barrier()  # both ranks done before the group goes
    finally:
        dist.destroy_process_group()
    leave_rank()


@pytest.mark.e2e
def test_two_processes_share_gradients_metrics_skips_stops_and_env_steps(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(WORLD, str(tmp_path / "store")), nprocs=WORLD, join=True)


# ---------------------------------------------------------------------- torchrun, the CLI
@pytest.mark.e2e
def test_torchrun_regression_one_run_dir_rank0_writes_and_resumes_alone(tmp_path: Path) -> None:
    # No early stopping: the final checkpoint holds the last evaluated weights, not restored
    # best ones, so it can be scored against the last logged validation row.
    no_stop = "task.early_stopping=null"
    result = torchrun("+task=regression", "train.epochs=3", "device=cpu", no_stop, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # One Hydra run directory (rank 0 composed it); nothing else appeared where we ran.
    assert [p.name for p in tmp_path.iterdir()] == ["outputs"]
    (run_dir,) = (tmp_path / "outputs" / "regression").iterdir()
    assert sorted(p.name for p in (run_dir / ".hydra").iterdir()) == [
        "config.yaml", "hydra.yaml", "overrides.yaml"
    ]
    logged = rows(run_dir)
    keys = [(r["kind"], r["step"], r["epoch"]) for r in logged]
    assert len(keys) == len(set(keys))  # one writer: no row twice
    epochs = [r for r in logged if r["kind"] == "epoch"]
    # 353 training rows: 177 per rank, 6 batches of 32 per rank and epoch.
    assert [(r["epoch"], r["step"]) for r in epochs] == [(1, 6), (2, 12), (3, 18)]
    assert result.stdout.count("validation R2") == 1  # rank 0 speaks for the run

    # The logged validation values describe the whole split: a single process scoring the
    # final checkpoint gets the same numbers.
    (checkpoint,) = (run_dir / "checkpoints").glob("step-*.pt")
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose(config_name="config", overrides=["+task=regression", "device=cpu", no_stop])
    task = build_task(cfg.task)
    # Built as the run was (its cosine schedule too: the checkpoint's learning rate, 0 at the
    # schedule's end, is refused by an engine that has no schedule to explain it).
    engine = Engine(task.model, task.loss_fn, build_optimizer(cfg.optimizer), device="cpu",
                    strategy="none", scheduler=build_scheduler(cfg.get("scheduler")))
    engine.load(checkpoint)
    assert engine.global_step == 18
    single = engine.evaluate(task.val_data)
    last_val = [r for r in logged if r["kind"] == "val"][-1]
    assert single["val_loss"] == pytest.approx(last_val["val_loss"], rel=1e-6)
    assert single["val_r2"] == pytest.approx(last_val["val_r2"], rel=1e-6)

    # ... and the run continues in one process, in the same directory.
    resumed = subprocess.run(
        [sys.executable, "-m", "beyondfit", "+task=regression", f"resume={run_dir}",
         "train.epochs=4", "resume_extend=true", "device=cpu", no_stop],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    epochs = [r for r in rows(run_dir) if r["kind"] == "epoch"]
    # One process: all 353 rows per epoch, 12 batches.
    assert [(r["epoch"], r["step"]) for r in epochs] == [(1, 6), (2, 12), (3, 18), (4, 30)]


def _cartpole(tmp_path: Path, *overrides: str) -> tuple[subprocess.CompletedProcess[str], list]:
    result = torchrun("+task=cartpole", "device=cpu", "hydra.run.dir=run", *overrides,
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    return result, rows(tmp_path / "run")


def _check_summed_env_steps(logged: list) -> None:
    train = [r for r in logged if r["kind"] == "train"]
    assert train
    # A2C: one optimizer step per rollout of 16 steps x 8 envs on each of the 2 ranks.
    assert all(r["env_steps"] == r["step"] * 16 * 8 * WORLD for r in train)
    # (the run pins algo=a2c and its rollout length, whatever the task's default is)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.runs("torchrun --standalone --nproc_per_node=2 -m beyondfit +task=cartpole device=cpu")
def test_torchrun_cartpole_two_ranks_solve_it(tmp_path: Path) -> None:
    result, logged = _cartpole(tmp_path, "algo=a2c", "task.collector.rollout_steps=16")
    _check_summed_env_steps(logged)
    val = [r["val_return"] for r in logged if r["kind"] == "val"]
    assert val[-1] >= 475 and "CartPole-v1 solved" in result.stdout
