"""The pixel tasks on the command line: ``+task=atari`` (ale-py) and ``+task=minatar``, with
the encoder in the saved policy, ``play`` replaying it, and a user's own encoder from
``--config-dir`` training PPO on MinAtar without a package edit."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
import torch

from kit import QUIET, cli, killed_and_resumed, rows

pytest.importorskip("ale_py", reason='the atari extra: pip install -e ".[atari]"')
pytest.importorskip("minatar", reason='the minatar extra: pip install -e ".[minatar]"')

TINY = ["task.eval_episodes=1", "task.confirm_episodes=1", "logger=[]", *QUIET]


def quiet(stderr: str) -> str:
    """stderr without the ALE's banner and its bindings' exit-time leak report."""
    return "\n".join(line for line in stderr.splitlines() if not any(
        word in line for word in ("A.L.E", "Stella", "leaked", "nanobind", "skipped remainder")))


#: docs/how-to/pixels.md's lines, each run as typed with a tiny budget.
PAGE = {"python -m beyondfit +task=atari": "auto", "python -m beyondfit +task=minatar": "minatar"}
PLAY = "python -m beyondfit.play outputs/atari/DATE --episodes 3"


@pytest.mark.e2e
@pytest.mark.runs("conf/task/atari.yaml", "conf/experiment/tuned/atari_ppo.yaml",
                  "conf/task/minatar.yaml", "conf/experiment/tuned/minatar_ppo.yaml", *PAGE, PLAY)
@pytest.mark.parametrize("line", list(PAGE))
def test_the_pixel_tasks_train_save_their_encoder_and_play(tmp_path: Path, line) -> None:
    task = line.rpartition("=")[2]
    run = tmp_path / "outputs" / task / "DATE"
    done = cli(*shlex.split(line)[3:], "task.total_env_steps=2048",
               "task.eval_every_env_steps=2048", *TINY, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, quiet(done.stderr)
    policy = json.loads((run / "policy.json").read_text())
    assert policy["encoder"] == PAGE[line]
    train = [r for r in rows(run) if r.get("kind") == "train"]
    assert train and train[-1]["env_steps"] == 2048
    assert any("episode_return_100" in r for r in train)  # the game's own score, game by game
    play = PLAY.replace("atari", task) if task == "minatar" else PLAY
    played = cli(*shlex.split(play)[3:], module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, quiet(played.stderr)
    assert "over 3 episodes" in played.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("task", ["atari", "minatar"])
def test_debug_fast_runs_each_pixel_task_in_seconds(tmp_path: Path, task) -> None:
    done = cli(f"+task={task}", "+debug=fast", cwd=tmp_path)
    assert done.returncode == 0, quiet(done.stderr)
    assert "resumed from the step-1 checkpoint" in done.stdout + done.stderr


MYENC = '''
import torch
import torch.nn.functional as F
from torch import nn


class Impala(nn.Module):
    """One IMPALA-style residual block over a MinAtar board, then 64 features."""

    def __init__(self, observation_space, channels=16):
        super().__init__()
        c = observation_space.shape[-1]
        self.conv = nn.Conv2d(c, channels, 3, padding=1)
        self.res1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.res2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.out = nn.Linear(channels * 10 * 10, 64)

    def forward(self, obs):
        x = self.conv(obs.permute(0, 3, 1, 2).float())
        x = x + self.res2(F.relu(self.res1(F.relu(x))))
        return F.relu(self.out(F.relu(x).flatten(1)))
'''


@pytest.mark.e2e
def test_an_encoder_of_ones_own_trains_ppo_on_minatar(tmp_path: Path) -> None:
    (tmp_path / "myenc.py").write_text(MYENC)
    run = tmp_path / "own"
    done = cli("+task=minatar", "task.total_env_steps=2048", "task.eval_every_env_steps=2048",
               "task.encoder={_target_:myenc.Impala,_partial_:true,channels:8}", *TINY,
               f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, quiet(done.stderr)
    policy = json.loads((run / "policy.json").read_text())
    assert policy["encoder"] == {"_target_": "myenc.Impala", "channels": 8}
    refused = cli(str(run), "--episodes", "1", module="beyondfit.play", cwd=tmp_path)
    assert refused.returncode == 2 and "--allow-import myenc" in refused.stderr
    played = cli(str(run), "--episodes", "1", "--allow-import", "myenc",
                 module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, quiet(played.stderr)


@pytest.mark.e2e
def test_a_missing_simulator_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "minatar.py").write_text("raise ImportError('No module named minatar')\n")
    done = cli("+task=minatar", *TINY, f"hydra.run.dir={tmp_path / 'r'}", cwd=tmp_path,
               env={**os.environ, "PYTHONPATH": str(blocked)}, fresh=True)
    assert done.returncode == 2
    assert 'pip install "beyondfit[minatar]"' in done.stderr
    assert quiet(done.stderr).strip().count("\n") == 0


@pytest.mark.e2e
@pytest.mark.runs("conf/experiment/tuned/minatar_dqn.yaml")
def test_minatar_dqn_killed_with_sigkill_and_resumed_ends_bitwise_equal(tmp_path: Path) -> None:
    overrides = ["+task=minatar", "algo=dqn", "task.total_env_steps=900",
                 "task.replay.learning_starts=100", "task.eval_every_env_steps=100000",
                 "task.eval_episodes=1", "task.confirm_episodes=1", "checkpoint.every=25",
                 "task.loss.target_every=20"]
    got, expected, context = killed_and_resumed(overrides, 800, tmp_path, kill_from=150)
    buffer, resumed = expected["data"]["buffer"], got["data"]["buffer"]
    assert all(f.dtype == torch.bool for f in buffer["frames"]), context  # boards as the env
    assert all(torch.equal(a, b) for a, b in zip(resumed["frames"], buffer["frames"],
                                                 strict=True)), context
    assert all(torch.equal(resumed["fields"][k], v) for k, v in buffer["fields"].items())
    assert torch.equal(got["data"]["generator"], expected["data"]["generator"]), context


@pytest.mark.e2e
def test_minatar_dqn_with_the_drqeps_parts_killed_and_resumed_ends_bitwise_equal(
        tmp_path: Path) -> None:
    # The new parts at once: a dueling head, the augmentation drawn by the collector's
    # generator, 3-step returns, a target that is the online network, eval epsilon.
    overrides = ["+task=minatar", "algo=dqn", "task.total_env_steps=900",
                 "task.replay.learning_starts=100", "task.eval_every_env_steps=100000",
                 "task.eval_episodes=1", "task.confirm_episodes=1", "checkpoint.every=25",
                 "task.loss.target_every=1", "task.agent.head=dueling", "task.replay.n_step=3",
                 "task.augment=[shift,intensity]", "task.eval_epsilon=0.05"]
    got, expected, context = killed_and_resumed(overrides, 800, tmp_path, kill_from=150)
    assert torch.equal(got["data"]["generator"], expected["data"]["generator"]), context
    assert any(k.startswith("q.head.advantage") for k in got["model"]), context


@pytest.mark.e2e
@pytest.mark.runs("conf/experiment/tuned/minatar_ppo.yaml")
def test_minatar_ppo_killed_with_sigkill_mid_rollout_and_resumed_ends_bitwise_equal(
        tmp_path: Path) -> None:
    # 10 rollouts of 8 envs x 32 steps, 4 epochs x 4 minibatches each: 160 engine steps; a
    # checkpoint every 7 falls inside rollouts and epochs, and SIGKILL comes mid-run.
    overrides = ["+task=minatar", "algo=ppo", "task.total_env_steps=2560",
                 "task.collector.rollout_steps=32", "task.eval_every_env_steps=100000",
                 "task.eval_episodes=1", "task.confirm_episodes=1", "checkpoint.every=7"]
    got, expected, context = killed_and_resumed(overrides, 160, tmp_path, kill_from=40)
    for key in ("generator", "running_return", "ep_return", "ep_length", "finished"):
        same = got["data"][key] == expected["data"][key] if not isinstance(
            expected["data"][key], torch.Tensor) else torch.equal(got["data"][key],
                                                                  expected["data"][key])
        assert same, f"data.{key} differs ({context})"
    assert torch.equal(got["data"]["obs"], expected["data"]["obs"]), context
    assert expected["data"]["obs"].dtype == torch.bool, context  # boards as the env gives them


@pytest.mark.e2e
@pytest.mark.runs("conf/task/atari.yaml", "conf/experiment/tuned/atari_dqn.yaml")
def test_breakout_dqn_with_the_tasks_defaults_killed_and_resumed_ends_bitwise_equal(
        tmp_path: Path) -> None:
    # Sticky actions 0.25, no-op starts, EpisodicLife, FIRE: 600 random steps end games and
    # lives before the first update, and the resumed run goes through more of both; the game
    # it resumes into started from the ALE's generator as the last one left it.
    overrides = ["+task=atari", "algo=dqn", "task.total_env_steps=1000",
                 "task.replay.learning_starts=600", "task.replay.buffer_size=1000",
                 "task.eval_every_env_steps=100000", "task.eval_episodes=1",
                 "task.confirm_episodes=1", "checkpoint.every=20", "task.loss.target_every=10",
                 "task.replay.n_step=3"]
    got, expected, context = killed_and_resumed(overrides, 100, tmp_path, kill_from=20)
    buffer, resumed = expected["data"]["buffer"], got["data"]["buffer"]
    assert all(torch.equal(a, b) for a, b in zip(resumed["frames"], buffer["frames"],
                                                 strict=True)), context
    assert all(torch.equal(resumed["fields"][k], v) for k, v in buffer["fields"].items())
    assert any(expected["data"]["game_goes_on"]) or any(
        a is not None for a in expected["data"]["game_actions"]) or expected["data"][
        "episode_rng"][0] is not None, "no life lost and no game ended: lengthen the run"


@pytest.mark.e2e
@pytest.mark.runs("conf/task/atari.yaml", "conf/experiment/tuned/atari_ppo.yaml")
def test_breakout_ppo_in_sync_envs_killed_mid_rollout_and_resumed_ends_bitwise_equal(
        tmp_path: Path) -> None:
    # 10 rollouts of 8 copies x 32 steps: each copy plays 320 steps, more than a random game
    # of Breakout lasts; a checkpoint every 7 of the 160 engine steps falls inside rollouts.
    overrides = ["+task=atari", "task.vectorization=sync", "task.total_env_steps=2560",
                 "task.collector.rollout_steps=32", "task.eval_every_env_steps=100000",
                 "task.eval_episodes=1", "task.confirm_episodes=1", "checkpoint.every=7"]
    got, expected, context = killed_and_resumed(overrides, 160, tmp_path, kill_from=40)
    assert torch.equal(got["data"]["obs"], expected["data"]["obs"]), context
    assert any(s is not None for s in expected["data"]["episode_rng"]), \
        "no game ended: lengthen the run"
    assert any(a is not None for a in expected["data"]["game_actions"]), \
        "no life lost in a running game: lengthen the run"


@pytest.mark.parametrize("task, features", [("minatar", 128), ("atari", 512)])
def test_pixel_dqn_presets_build_the_papers_network_a_linear_head_on_the_encoder(
        task: str, features: int) -> None:
    # The comparison with SB3 (net_arch=[]) and CleanRL holds only for the same network:
    # algo=dqn's default hidden layers must not slip in between.
    pytest.importorskip("minatar" if task == "minatar" else "ale_py")
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR, build_task

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", [f"+task={task}", "algo=dqn", "task.replay.buffer_size=100"])
    built = build_task(cfg.task)
    head = built.model.q.head
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 1 and linears[0].in_features == features, head
    built.train_data.close()
    built.val_data.close()


#: docs/how-to/pixels.md's DQN lines, each run as typed with a tiny budget.
DQN_LINES = ("python -m beyondfit +task=minatar task.env=MinAtar/SpaceInvaders-v1 algo=dqn",
             "python -m beyondfit +task=atari task.env=ALE/Pong-v5 algo=dqn")


@pytest.mark.e2e
@pytest.mark.runs("conf/experiment/tuned/atari_dqn.yaml", *DQN_LINES)
@pytest.mark.parametrize("line", DQN_LINES)
def test_dqn_from_pixels_stores_each_frame_once_and_says_the_buffers_size(tmp_path: Path,
                                                                          line) -> None:
    run = tmp_path / "run"
    done = cli(*shlex.split(line)[3:], "task.total_env_steps=600",
               "task.replay.learning_starts=200", "task.eval_every_env_steps=600", *TINY,
               f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, quiet(done.stderr)
    said = [s for s in (done.stdout + done.stderr).splitlines() if s.startswith("replay buffer:")]
    assert said and "stored once" in said[0], said  # its size in GB, first thing
    encoder = "minatar" if "minatar" in line else "auto"
    assert json.loads((run / "policy.json").read_text())["agent"]["encoder"] == encoder
    # best.pt keeps the network at its best, not the replay (a resume's step file does)
    from beyondfit.core.state.serialization import safe_load

    best, last = safe_load(run / "checkpoints" / "best.pt"), safe_load(
        sorted((run / "checkpoints").glob("step-*.pt"))[-1])
    assert "data" not in best and "buffer" in last["data"]
    assert (run / "checkpoints" / "best.pt").stat().st_size < 50 * 2**20


@pytest.mark.e2e
def test_a_sync_atari_run_leaves_no_leaked_emulator_report_on_stderr(tmp_path: Path) -> None:
    """ale_py's bindings print a 30-line "nanobind: leaked instances" report when an ALE
    interface is alive at exit: the envs let go of them when closed, after a run or an error."""
    done = cli("+task=atari", "task.vectorization=sync", "task.total_env_steps=256",
               "task.collector.rollout_steps=32", "task.eval_every_env_steps=100000", *TINY,
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, fresh=True)
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr
    failed = cli("+task=atari", "algo=dqn", "task.vectorization=sync", "task.loss.gamma=7",
                 *TINY, f"hydra.run.dir={tmp_path / 'bad'}", cwd=tmp_path, fresh=True)
    assert failed.returncode == 2 and "leaked" not in failed.stderr
    assert quiet(failed.stderr).strip().count("\n") == 0
