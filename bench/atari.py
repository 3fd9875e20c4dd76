"""Pixel RL: CleanRL and Stable-Baselines3 on Atari Breakout and MinAtar, beside beyondfit.

    python bench/atari.py                                    # the Atari suite: missing runs, table
    python bench/atari.py --run cleanrl breakout 1           # one run (a queue's unit)
    python bench/atari.py --run sb3-ppo breakout 1
    python bench/atari.py --suite minatar --run sb3-dqn space_invaders 2
    python bench/atari.py --suite minatar --methods sb3-ppo --seeds 1 2 3   # missing runs, table
    python bench/atari.py --table                            # the tables from the kept files
    python bench/atari.py --suite minatar --table
    python bench/atari.py --suite minatar-aux    # issue 45: PPO with each auxiliary loss
    python bench/atari.py --suite atari100k      # issue 57: DrQ(eps), DER, SPR on Atari 100k
    python bench/atari.py --suite atari100k --adopt RUN_DIR beyondfit-drqeps assault 1

The smoke checks (``tests/bench/test_atari_bench.py`` runs these lines as typed here, into a
temporary folder instead of /tmp/pixels):

  python bench/atari.py --suite minatar --run sb3-ppo breakout 1 --budget 2048 --results /tmp/pixels
  python bench/atari.py --run sb3-ppo breakout 1 --budget 1024 --results /tmp/pixels
  python bench/atari.py --suite minatar-aux --budget 2048 --results /tmp/pixels \\
      --run beyondfit-ppo-self_prediction breakout 1
  python bench/atari.py --suite atari100k --budget 1700 --results /tmp/pixels \\
      --override task.confirm_episodes=2 --override task.eval_episodes=1 \\
      --run beyondfit-drqeps breakout 1
  python bench/atari.py --suite minatar --budget 600 --results /tmp/pixels \\
      --run sb3-dqn-n3 breakout 1

Every run is a subprocess of this script, timed from the outside: ``os.wait4`` gives the
child's CPU seconds (user + system, its own waited-for children included) and its peak RSS;
wall seconds are taken around it. Nothing is taken out: start-up, env construction and
training are all in the numbers. Every contender runs on one torch thread
(``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1`` in its environment; ``torch.set_num_threads(1)``
in the SB3 child; ``threads=1`` for beyondfit). The return of a run is the mean **raw game
score** of its last 100 *training* episodes (fewer if it finished fewer): a full game (all
lives), unclipped, as the episode statistics wrapper innermost on the unwrapped env reports
it (SB3's ``Monitor`` under ``AtariWrapper``; CleanRL's ``RecordEpisodeStatistics`` under its
wrappers; MinAtar has no clipping or lives). Each run's result goes into its suite's one JSON
file, ``RESULTS/SUITE.json`` (default ``bench/results/pixels/``), under the key
``SUITE-METHOD-GAME-BUDGET-seedS`` (written under a lock, so two runs of a suite may finish
together), and is not run again while that key is there; logs and scratch files go to
``--work`` (outside the repo).
The table is built from the files and written to ``RESULTS/SUITE.md``. Results are written,
never asserted on: times depend on the machine.

**Atari suite** (``ALE/Breakout-v5``, 500,000 env steps = agent steps = 2,000,000 frames):
the base env of every contender is ``gym.make("ALE/Breakout-v5", frameskip=1)`` (v5's sticky
actions, ``repeat_action_probability=0.25``, kept; its own 4-frame skip replaced by the
wrappers' max-pooled one, as on ``BreakoutNoFrameskip-v4``, CleanRL's default id, which
v5 differs from by the sticky actions and the 108,000-frame cap).

- ``cleanrl``: CleanRL's ``cleanrl/ppo_atari.py`` (commit ``CLEANRL_COMMIT``) as published
  except the edits in ``CLEANRL_EDITS`` (gymnasium 1.x / ale-py 0.12 instead of its pinned
  gymnasium 0.29 / ale-py 0.8, whose ROMs need AutoROM's download, impossible here), kept
  outside the repo (``--cleanrl-script``, default ``/work/peers/ppo_atari.py``, beside
  ``cleanrl_utils/atari_wrappers.py`` copied unedited) and run by ``--cleanrl-python``
  (default ``/work/venvs/cleanrl/bin/python``: a venv with the main env's site packages and
  tyro) as ``ppo_atari.py --env-id ALE/Breakout-v5 --total-timesteps B --seed S --no-track
  --no-capture-video`` (tyro 1.x spells the booleans as flags). Its settings: 8 envs, 128
  steps, 4 minibatches, 4 epochs, lr 2.5e-4 annealed, clip 0.1, ent 0.01, vf 0.5, NatureCNN.
  Returns from its stdout lines ``global_step=..., episodic_return=...``.
- ``sb3-ppo``: SB3 PPO ``CnnPolicy`` with RL-Zoo's ``atari`` entry of ``hyperparams/ppo.yml``
  (``ZOO_ATARI_PPO``): ``AtariWrapper`` (its defaults), ``frame_stack: 4``, 8 envs, n_steps 128,
  n_epochs 4, batch 256, lr lin_2.5e-4, clip lin_0.1, vf 0.5, ent 0.01.
- ``beyondfit-ppo``: ``python -m beyondfit +task=atari task.vectorization=sync
  task.eval_every_env_steps=1000000000 task.eval_episodes=1 task.confirm_episodes=0 algo=ppo
  task.env=ALE/Breakout-v5 seed=S task.total_env_steps=B threads=1 plots=false
  hydra.run.dir=WORK/...``: one greedy game at the end, as the peers evaluate nothing (the
  task's own evaluations cost a few hundred CPU seconds on Breakout).

**MinAtar suite** (``MinAtar/Breakout-v1``, ``SpaceInvaders-v1``, ``Asterix-v1``, minatar
1.0.15, registered by ``minatar.gym.register_envs()``; its defaults: sticky actions 0.1,
difficulty ramping, minimal action set). Both SB3 methods use the MinAtar paper's network
(``MinAtarCNN``: the bool ``10x10xC`` board transposed to ``Cx10x10``, ``Conv2d(C, 16, 3,
stride 1)``, ReLU, flatten, ``Linear(1024, 128)``, ReLU) as a ``BaseFeaturesExtractor`` with
``net_arch=[]`` (linear heads on its 128 features; PPO's policy and value share it).

- ``sb3-ppo`` (1,000,000 env steps, seeds 1-3): the zoo's Atari PPO settings above
  (``MINATAR_PPO``: 8 envs, n_steps 128, 4 epochs, batch 256, lr lin_2.5e-4, clip lin_0.1,
  ent 0.01, vf 0.5), no frame stack.
- ``sb3-dqn`` (500,000 env steps, seeds 1-2, Breakout and SpaceInvaders): the paper's DQN
  (``MINATAR_DQN``): one env, replay 100,000, batch 32, an update every env step, target
  copied every 1,000 steps, epsilon 1.0 to 0.1 over the first 100,000 steps, 5,000 steps
  before learning, gamma 0.99, Huber loss, the paper's RMSProp (lr 2.5e-4, alpha 0.95,
  eps 0.01, centered), no gradient clipping (SB3's default would clip at 10).
- ``sb3-dqn-n3``: the same with SB3's 3-step returns (``n_steps=3``, SB3 2.7 and later): what
  beyondfit's MinAtar DQN preset adds to the paper's settings, given to SB3 as well.
- ``beyondfit-ppo``, ``beyondfit-dqn``: ``python -m beyondfit +task=minatar algo=ppo|dqn
  task.env=MinAtar/NAME-v1 seed=S task.total_env_steps=B ...``: the presets
  ``minatar_ppo.yaml`` (the zoo's settings but the learning rate, 5e-4 annealed, chosen on
  tuning seeds 0 and 4) and ``minatar_dqn.yaml`` (the paper's, as SB3's above, with 3-step
  returns, chosen on tuning seeds 0 and 4; SB3's DQN has one-step returns only).

**MinAtar-aux suite** (self-supervision inside RL): beyondfit PPO on MinAtar Breakout and
SpaceInvaders, 500,000 env steps, seeds 1-3, once per ``task.aux`` variant (``none``,
``shift``, ``reconstruction``, ``self_prediction``: method ``beyondfit-ppo-VARIANT``). Its
table gives each variant's per-seed returns, their IQM with a 95% bootstrap interval
(``beyondfit.cli.intervals``, as ``python -m beyondfit.compare`` computes it), the confirming
greedy evaluation and CPU time against ``none``.

**Atari-100k suite** (the data-efficient benchmark, issue 57): each preset run as its paper
ran it, ``+experiment=PRESET task.env=ALE/GAME-v5 seed=S`` (``PRESETS_100K``: DrQ(eps)
``atari100k``, DER ``atari100k_der``, SPR ``atari100k_spr``), 100,000 agent steps, scored by
the protocol: the run's confirming evaluation, 100 full games of unclipped score with up to
30 no-op starts and the 27,000-step cap, epsilon 0.001 (``result.json``). The table puts each
run among the published 100 runs of the agent its preset follows (its percentile; the score
files in ``bench/data/atari100k/``, Agarwal et al. 2021's), gives human-normalized scores
(HNS), and the IQM of our runs' HNS over the games and seeds run, with a 95% stratified
bootstrap interval, beside the published agent's IQM over the same games from the same files.
A run is resumable: killed (a session's end), ``--run`` again continues its run directory
(``resume=``, bitwise) and adds the segment's CPU time to the earlier ones'; a run started by
hand is taken in with ``--adopt RUN_DIR METHOD GAME SEED`` (its CPU from GNU time's
``time-*.txt`` files beside it, if any).

A beyondfit run is read from its run directory: ``metrics.jsonl``'s ``kind: train`` rows
(``env_steps``; ``episode_return_100`` if the task logs a mean of the last 100 episodes,
else ``episode_return`` weighted by ``episodes`` where rows have it, else plain row means of
the last rows covering 100 episodes' worth of ``episode_return``), and ``result.json``'s
``values.val_return`` (greedy, kept beside, not in the table's return column).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "pixels"
WORK = Path(tempfile.gettempdir()) / "beyondfit-bench-pixels"
CLEANRL_SCRIPT = Path("/work/peers/ppo_atari.py")
CLEANRL_PYTHON = Path("/work/venvs/cleanrl/bin/python")
#: The CleanRL commit ppo_atari.py and cleanrl_utils/atari_wrappers.py were taken from.
CLEANRL_COMMIT = "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"
#: Every edit of the CleanRL copy (each line is marked ``# EDIT N`` in it).
CLEANRL_EDITS = (
    "1. `import ale_py` and `gym.register_envs(ale_py)`: gymnasium 1.x registers the ALE "
    "envs only when asked.",
    "2. `gym.make(env_id, frameskip=1)` (both calls in `make_env`): ALE/*-v5 skips 4 frames "
    "itself; CleanRL's `MaxAndSkipEnv` does it, as on `BreakoutNoFrameskip-v4`.",
    "3. `GrayScaleObservation` -> `GrayscaleObservation`, `FrameStack(env, 4)` -> "
    "`FrameStackObservation(env, 4)`: gymnasium 1.x's names (no LazyFrames).",
    "4. `SyncVectorEnv(..., autoreset_mode=AutoresetMode.SAME_STEP)`: gymnasium 0.29's "
    "autoreset (the step that ends an episode returns the reset observation), which the "
    "script's rollout assumes; gymnasium 1.x's default is the next step.",
    "5. The episode printing loop: gymnasium 1.x's `infos['final_info']` is one dict of arrays "
    "with an `_episode` mask, not a list of per-env dicts; the lines printed are the same.",
)
#: The zoo's commit its hyperparameters were read from.
ZOO_COMMIT = "22e3ff2450fd92033f7f032915e1f64894a09584"
ATARI_ENV_KWARGS = {"frameskip": 1}
#: rl-baselines3-zoo hyperparams/ppo.yml, ``atari:`` (n_timesteps aside).
ZOO_ATARI_PPO = {"env_wrapper": "stable_baselines3.common.atari_wrappers.AtariWrapper",
                 "frame_stack": 4, "policy": "CnnPolicy", "n_envs": 8, "n_steps": 128,
                 "n_epochs": 4, "batch_size": 256, "learning_rate": "lin_2.5e-4",
                 "clip_range": "lin_0.1", "vf_coef": 0.5, "ent_coef": 0.01}
MINATAR_PPO = {"policy": "MlpPolicy + MinAtarCNN, net_arch=[]", "n_envs": 8, "n_steps": 128,
               "n_epochs": 4, "batch_size": 256, "learning_rate": "lin_2.5e-4",
               "clip_range": "lin_0.1", "vf_coef": 0.5, "ent_coef": 0.01}
MINATAR_DQN = {"policy": "MlpPolicy + MinAtarCNN, net_arch=[]", "n_envs": 1,
               "buffer_size": 100_000, "batch_size": 32, "train_freq": 1, "gradient_steps": 1,
               "target_update_interval": 1_000, "exploration_initial_eps": 1.0,
               "exploration_final_eps": 0.1, "exploration_steps": 100_000,
               "learning_starts": 5_000, "gamma": 0.99, "loss": "Huber (SB3's smooth_l1)",
               "optimizer": "RMSprop(lr=2.5e-4, alpha=0.95, eps=0.01, centered=True)",
               "max_grad_norm": "none"}
MINATAR_DQN_N3 = {**MINATAR_DQN, "n_steps": 3}


@dataclass(frozen=True)
class Game:
    """One benchmarked game: the table's key and the Gymnasium id."""

    key: str
    env: str


SUITES: dict[str, dict[str, Game]] = {
    "atari": {"breakout": Game("breakout", "ALE/Breakout-v5")},
    "minatar": {"breakout": Game("breakout", "MinAtar/Breakout-v1"),
                "space_invaders": Game("space_invaders", "MinAtar/SpaceInvaders-v1"),
                "asterix": Game("asterix", "MinAtar/Asterix-v1")},
    "minatar-aux": {"breakout": Game("breakout", "MinAtar/Breakout-v1"),
                    "space_invaders": Game("space_invaders", "MinAtar/SpaceInvaders-v1")},
    "atari100k": {g.lower(): Game(g.lower(), f"ALE/{g}-v5")
                  for g in ("Assault", "Jamesbond", "Krull", "Boxing", "Breakout")},
}
#: What each suite's beyondfit runs select on the command line. (1) Gymnasium's wrappers, as
#: CleanRL and SB3 step them (and as seeds 1-2 were measured): envpool, which ``auto`` picks
#: for Atari where it is installed, draws its own no-op starts and sticky actions and keeps the
#: frame stack across a lost life (docs/how-to/pixels.md); it collects 1.04x sync's env steps
#: per CPU-second in a PPO run here (bench/results/collect.md). (2) One greedy game at the end
#: and no confirming games: CleanRL's and SB3's runs evaluate nothing, and the task's own
#: schedule (8 games at 250,000 and 500,000 env steps, then 10 confirming ones) costs a few
#: hundred CPU seconds on Breakout, where a greedy policy that stops firing plays to v5's cap.
SUITE_TASK = {"atari": ["+task=atari", "task.vectorization=sync",  # (1)
                        "task.eval_every_env_steps=1000000000", "task.eval_episodes=1",
                        "task.confirm_episodes=0"],  # (2)
              "minatar": ["+task=minatar"],
              "minatar-aux": ["+task=minatar"],
              "atari100k": []}  # each method's preset (PRESETS_100K) is the whole task
#: Atari 100k: method -> (the preset, the published agent it follows: its score file in
#: DATA_100K, ``None`` where no per-run file was published: DER's 2019 table is a mean).
PRESETS_100K = {"beyondfit-drqeps": ("atari100k", "DrQ_eps"),
                "beyondfit-der": ("atari100k_der", None),
                "beyondfit-spr": ("atari100k_spr", "SPR")}
#: Agarwal et al. 2021's per-run Atari 100k scores (100 runs a game) and the random and human
#: references, copied from ../shared/data/atari100k/ (its README beside them).
DATA_100K = ROOT / "bench" / "data" / "atari100k"
#: The auxiliary losses the ``minatar-aux`` suite compares (``task.aux=[NAME]``), none first.
AUX_VARIANTS = ("none", "shift", "reconstruction", "self_prediction")
#: suite -> method -> (label, default budget, default seeds, games run by default).
METHODS: dict[str, dict[str, tuple[str, int, tuple[int, ...], tuple[str, ...]]]] = {
    "atari": {
        "cleanrl": ("CleanRL `ppo_atari.py`", 500_000, (1, 2), ("breakout",)),
        "sb3-ppo": ("SB3 PPO (RL-Zoo atari)", 500_000, (1, 2), ("breakout",)),
        "beyondfit-ppo": ("beyondfit `+task=atari algo=ppo`", 500_000, (1, 2), ("breakout",)),
    },
    "minatar": {
        "sb3-ppo": ("SB3 PPO (zoo Atari settings)", 1_000_000, (1, 2, 3),
                    ("breakout", "space_invaders", "asterix")),
        "sb3-dqn": ("SB3 DQN (MinAtar paper)", 500_000, (1, 2),
                    ("breakout", "space_invaders")),
        "sb3-dqn-n3": ("SB3 DQN (MinAtar paper, 3-step returns)", 500_000, (1, 2),
                       ("breakout", "space_invaders")),
        "beyondfit-ppo": ("beyondfit `+task=minatar algo=ppo`", 1_000_000, (1, 2, 3),
                          ("breakout", "space_invaders", "asterix")),
        "beyondfit-dqn": ("beyondfit `+task=minatar algo=dqn`", 500_000, (1, 2),
                          ("breakout", "space_invaders")),
    },
    "atari100k": {
        "beyondfit-drqeps": ("DrQ(eps) `+experiment=atari100k`", 100_000, (1, 2),
                             ("assault", "jamesbond", "krull", "boxing")),
        "beyondfit-der": ("DER `+experiment=atari100k_der`", 100_000, (1, 2), ("assault",)),
        "beyondfit-spr": ("SPR `+experiment=atari100k_spr`", 100_000, (1, 2), ("boxing",)),
    },
    "minatar-aux": {
        f"beyondfit-ppo-{aux}": (f"beyondfit PPO, `task.aux=[{'' if aux == 'none' else aux}]`",
                                 500_000, (1, 2, 3), ("breakout", "space_invaders"))
        for aux in AUX_VARIANTS
    },
}
#: Per suite, the method each row's CPU time is compared with: on Atari CleanRL's (the issue's
#: bar: at most 0.7x its CPU), on MinAtar SB3's, in the aux suite no auxiliary loss.
BASELINE = {
    "atari": {"cleanrl": "cleanrl", "sb3-ppo": "cleanrl", "beyondfit-ppo": "cleanrl"},
    "minatar": {"sb3-ppo": "sb3-ppo", "sb3-dqn": "sb3-dqn", "sb3-dqn-n3": "sb3-dqn",
                "beyondfit-ppo": "sb3-ppo", "beyondfit-dqn": "sb3-dqn"},
    "minatar-aux": {f"beyondfit-ppo-{aux}": "beyondfit-ppo-none" for aux in AUX_VARIANTS},
    "atari100k": {m: "beyondfit-drqeps" for m in PRESETS_100K},
}
BASE_NAME = {"atari": "CleanRL", "minatar": "SB3"}
LAST = 100  # training episodes averaged for a run's return
CURVE_POINTS = 20


# ------------------------------------------------------------------------------ the SB3 child
def register_envs() -> None:
    """Make the ALE and MinAtar ids known to Gymnasium 1.x (each only if installed)."""
    import gymnasium as gym

    try:
        import ale_py
        gym.register_envs(ale_py)
    except ImportError:
        pass
    try:
        import minatar.gym
        if "MinAtar/Breakout-v1" not in gym.registry:
            minatar.gym.register_envs()
    except ImportError:
        pass


def minatar_cnn():
    """The MinAtar paper's network as an SB3 features extractor (a class, built lazily)."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class MinAtarCNN(BaseFeaturesExtractor):
        """HxWxC bool board -> CxHxW -> Conv2d(C, 16, 3) -> ReLU -> Linear(.., 128) -> ReLU."""

        def __init__(self, observation_space, features_dim: int = 128) -> None:
            super().__init__(observation_space, features_dim)
            h, w, c = observation_space.shape
            self.conv = nn.Sequential(nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(), nn.Flatten())
            self.linear = nn.Sequential(nn.Linear(16 * (h - 2) * (w - 2), features_dim),
                                        nn.ReLU())

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.linear(self.conv(obs.float().permute(0, 3, 1, 2)))

    return MinAtarCNN


def linear(start: float):
    """The zoo's ``lin_X``: X times the remaining progress (1 -> 0)."""
    return lambda progress_remaining: progress_remaining * start


def sb3_child(suite: str, method: str, env_id: str, seed: int, budget: int) -> dict:
    """Train one SB3 model in this process; the training episodes' (end step, raw return)."""
    import torch
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    register_envs()
    episodes: list[tuple[int, float]] = []

    class Episodes(BaseCallback):
        """Every finished game's Monitor statistics (raw score, all lives)."""

        next_report = max(1, budget // 10)

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    episodes.append((int(self.num_timesteps), float(info["episode"]["r"])))
            if self.num_timesteps >= self.next_report:  # a progress line in the run's log
                self.next_report += max(1, budget // 10)
                last = [r for _, r in episodes[-LAST:]]
                print(f"{self.num_timesteps} env steps, {len(episodes)} episodes, last "
                      f"{len(last)} mean {statistics.fmean(last) if last else float('nan'):.2f}"
                      f", {time.process_time():.0f} CPU s", flush=True)
            return True

    if suite == "atari":
        from stable_baselines3.common.atari_wrappers import AtariWrapper
        from stable_baselines3.common.vec_env import VecFrameStack

        hp = ZOO_ATARI_PPO
        env = make_vec_env(env_id, n_envs=hp["n_envs"], seed=seed, wrapper_class=AtariWrapper,
                           env_kwargs=ATARI_ENV_KWARGS)
        env = VecFrameStack(env, n_stack=hp["frame_stack"])
        model = PPO("CnnPolicy", env, n_steps=hp["n_steps"], n_epochs=hp["n_epochs"],
                    batch_size=hp["batch_size"], learning_rate=linear(2.5e-4),
                    clip_range=linear(0.1), vf_coef=hp["vf_coef"], ent_coef=hp["ent_coef"],
                    seed=seed, device="cpu")
    elif method == "sb3-ppo":
        hp = MINATAR_PPO
        env = make_vec_env(env_id, n_envs=hp["n_envs"], seed=seed)
        model = PPO("MlpPolicy", env, n_steps=hp["n_steps"], n_epochs=hp["n_epochs"],
                    batch_size=hp["batch_size"], learning_rate=linear(2.5e-4),
                    clip_range=linear(0.1), vf_coef=hp["vf_coef"], ent_coef=hp["ent_coef"],
                    policy_kwargs=dict(features_extractor_class=minatar_cnn(), net_arch=[],
                                       normalize_images=False),
                    seed=seed, device="cpu")
    else:
        hp = MINATAR_DQN_N3 if method == "sb3-dqn-n3" else MINATAR_DQN
        env = make_vec_env(env_id, n_envs=1, seed=seed)
        model = DQN("MlpPolicy", env, buffer_size=hp["buffer_size"],
                    batch_size=hp["batch_size"], train_freq=hp["train_freq"],
                    gradient_steps=hp["gradient_steps"],
                    target_update_interval=hp["target_update_interval"],
                    exploration_initial_eps=hp["exploration_initial_eps"],
                    exploration_final_eps=hp["exploration_final_eps"],
                    exploration_fraction=min(1.0, hp["exploration_steps"] / budget),
                    learning_starts=min(hp["learning_starts"], budget // 2),
                    gamma=hp["gamma"], learning_rate=2.5e-4, max_grad_norm=float("inf"),
                    **({"n_steps": hp["n_steps"]} if "n_steps" in hp else {}),
                    policy_kwargs=dict(features_extractor_class=minatar_cnn(), net_arch=[],
                                       normalize_images=False,
                                       optimizer_class=torch.optim.RMSprop,
                                       optimizer_kwargs=dict(alpha=0.95, eps=0.01,
                                                             centered=True)),
                    seed=seed, device="cpu")
    model.learn(budget, callback=Episodes())
    env.close()
    return {"env_steps": int(model.num_timesteps), "episodes": episodes,
            "torch_threads": torch.get_num_threads()}


# ----------------------------------------------------------------------------------- the methods
def child_env() -> dict[str, str]:
    """The environment of every contender's process: one thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def timed(cmd: list[str], cwd: Path, log: Path) -> dict:
    """Run ``cmd`` (stdout and stderr to ``log``); its CPU seconds and peak RSS by wait4."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=child_env(), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n" + "\n".join(tail))
    return {"cpu_seconds": usage.ru_utime + usage.ru_stime, "wall_seconds": wall,
            "peak_rss_mib": usage.ru_maxrss / 1024}


def run_sb3(suite: str, method: str, game: Game, seed: int, budget: int, work: Path,
            args: argparse.Namespace) -> dict:  # fmt: skip
    """SB3 in a child process of this script."""
    out = work / "child.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", suite, method, game.env,
           str(seed), str(budget), str(out)]
    measured = timed(cmd, ROOT, work / "log.txt")
    child = json.loads(out.read_text())
    settings = ZOO_ATARI_PPO if suite == "atari" else (
        MINATAR_PPO if method == "sb3-ppo" else MINATAR_DQN_N3 if method == "sb3-dqn-n3"
        else MINATAR_DQN)
    extra = {"env_kwargs": ATARI_ENV_KWARGS} if suite == "atari" else {}
    return {**measured, **summary(child["episodes"], child["env_steps"]),
            "return_source": "SB3 Monitor (innermost): raw score of a whole game",
            "torch_threads": child["torch_threads"], "settings": {**settings, **extra},
            "zoo_commit": ZOO_COMMIT, "child_command": " ".join(["python", *cmd[1:]])}


def cleanrl_returns(stdout: str) -> list[tuple[int, float]]:
    """``(global_step, episodic_return)`` of each line CleanRL prints for a finished game."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("global_step=") and "episodic_return=" in line:
            step, ret = line.split(",", 1)
            value = ret.split("=", 1)[1].strip().strip("[]")
            out.append((int(step.split("=", 1)[1]), float(value)))
    return out


def run_cleanrl(suite: str, method: str, game: Game, seed: int, budget: int, work: Path,
                args: argparse.Namespace) -> dict:  # fmt: skip
    """CleanRL's ppo_atari.py (edited copy, outside the repo) as a subprocess."""
    script = Path(args.cleanrl_script)
    if not script.exists():
        raise RuntimeError(f"no CleanRL script at {script} (see CLEANRL_EDITS)")
    python = str(args.cleanrl_python if Path(args.cleanrl_python).exists() else sys.executable)
    cmd = [python, "-W", "ignore", str(script), "--env-id", game.env, "--total-timesteps",
           str(budget), "--seed", str(seed), "--no-track", "--no-capture-video"]
    measured = timed(cmd, work, work / "log.txt")  # runs/ (tensorboard) lands in work
    episodes = cleanrl_returns((work / "log.txt").read_text())
    batch = 8 * 128
    steps = (budget // batch) * batch
    return {**measured, **summary(episodes, steps),
            "return_source": "CleanRL stdout episodic_return (RecordEpisodeStatistics "
                             "innermost): raw score of a whole game",
            "cleanrl_commit": CLEANRL_COMMIT, "cleanrl_edits": list(CLEANRL_EDITS),
            "cleanrl_script_sha256": hashlib.sha256(script.read_bytes()).hexdigest(),
            "settings": {"num_envs": 8, "num_steps": 128, "num_minibatches": 4,
                         "update_epochs": 4, "learning_rate": "2.5e-4 annealed",
                         "clip_coef": 0.1, "ent_coef": 0.01, "vf_coef": 0.5,
                         "env_kwargs": ATARI_ENV_KWARGS, "tyro": _version("tyro", python)},
            "command": " ".join(["ppo_atari.py", *cmd[4:]])}


def beyondfit_command(suite: str, method: str, game: Game, seed: int, budget: int,
                      run_dir: Path) -> list[str]:  # fmt: skip
    """The command line of a beyondfit run (``beyondfit-ALGO`` or ``beyondfit-ALGO-AUX``)."""
    _, algo, *aux = method.split("-", 2)
    aux_override = [] if not aux else [f"task.aux=[{'' if aux[0] == 'none' else aux[0]}]"]
    return [sys.executable, "-m", "beyondfit", *SUITE_TASK[suite], f"algo={algo}",
            f"task.env={game.env}", f"seed={seed}", f"task.total_env_steps={budget}",
            *aux_override, "threads=1", "plots=false", f"hydra.run.dir={run_dir}"]


def read_beyondfit(run_dir: Path) -> dict:
    """The training episodes' last-100 return and env steps from a beyondfit run directory
    (``metrics.jsonl``), and its greedy result (``result.json``)."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("kind") == "train":
            rows.append(row)
    steps = int(max((r.get("env_steps", 0) for r in rows), default=0))
    with_return = [r for r in rows if r.get("episode_return") is not None]
    curve = [(int(r["env_steps"]), float(r["episode_return"])) for r in with_return]
    if rows and rows[-1].get("episode_return_100") is not None:
        ret, source, n = float(rows[-1]["episode_return_100"]), "episode_return_100", LAST
    elif with_return and all("episodes" in r for r in with_return):
        total = weight = 0.0
        for r in reversed(with_return):  # the trailing rows holding the last 100 episodes
            take = min(float(r["episodes"]), LAST - weight)
            total, weight = total + take * float(r["episode_return"]), weight + take
            if weight >= LAST:
                break
        ret = total / weight if weight else None
        source, n = "episode_return weighted by episodes", int(weight)
    elif with_return:
        tail = with_return[-LAST:]
        ret = statistics.fmean(float(r["episode_return"]) for r in tail)
        source, n = f"mean of the last {len(tail)} rows' episode_return", len(tail)
    else:
        ret, source, n = None, "no episode_return logged", 0
    result = json.loads((run_dir / "result.json").read_text())
    return {"return_last100": ret, "episodes_averaged": n, "env_steps": steps,
            "return_source": f"beyondfit metrics.jsonl: {source}", "curve": thin(curve),
            "greedy_return": result.get("values", {}).get("val_return"),
            "result_finished": result.get("finished")}


def run_beyondfit(suite: str, method: str, game: Game, seed: int, budget: int, work: Path,
                  args: argparse.Namespace) -> dict:  # fmt: skip
    """``python -m beyondfit +task=SUITE algo=ALGO ...`` as a subprocess; its run directory."""
    run_dir = work / "run"
    if run_dir.exists():  # a failed earlier try's: set aside, never resumed into
        run_dir.rename(work / f"run-{time.strftime('%Y%m%d-%H%M%S')}")
    cmd = beyondfit_command(suite, method, game, seed, budget, run_dir)
    measured = timed(cmd, ROOT, work / "log.txt")
    return {**measured, **read_beyondfit(run_dir), "command": " ".join(["python", *cmd[1:-1]])}


def preset_command(method: str, game: Game, seed: int, budget: int, run_dir: Path,
                   overrides: list[str]) -> list[str]:  # fmt: skip
    """An Atari 100k run's command line: the method's preset, the game, the seed (and, for a
    run directory that has a checkpoint, ``resume=``: a run cut short continues bitwise)."""
    preset = PRESETS_100K[method][0]
    resume = [f"resume={run_dir}"] if list(run_dir.glob("checkpoints/step-*.pt")) else []
    return [sys.executable, "-m", "beyondfit", f"+experiment={preset}", f"task.env={game.env}",
            f"seed={seed}", f"task.total_env_steps={budget}", *overrides, "threads=1",
            "plots=false", f"hydra.run.dir={run_dir}", *resume]


def run_preset(suite: str, method: str, game: Game, seed: int, budget: int, work: Path,
               args: argparse.Namespace) -> dict:  # fmt: skip
    """One Atari 100k run, resumable: each segment's CPU, wall and RSS appended to
    ``segments.jsonl`` in its work folder; the result sums them and reads the run directory."""
    run_dir = work / "run"
    cmd = preset_command(method, game, seed, budget, run_dir, list(args.override or ()))
    measured = timed(cmd, ROOT, work / f"log-{time.strftime('%Y%m%d-%H%M%S')}.txt")
    with (work / "segments.jsonl").open("a") as out:
        out.write(json.dumps(measured) + "\n")
    return {**segments(work), **read_protocol(run_dir),
            "command": " ".join(["python", *cmd[1:-1]]).replace(f" resume={run_dir}", "")}


def segments(work: Path) -> dict:
    """CPU and wall seconds summed over a run's segments, the largest peak RSS: from
    ``segments.jsonl`` (bench runs) and GNU time's ``time-*.txt`` (a run started by hand)."""
    parts = [json.loads(line) for line in (work / "segments.jsonl").read_text().splitlines()
             ] if (work / "segments.jsonl").exists() else []
    for path in sorted(work.glob("time-*.txt")):
        text = path.read_text()
        if "Elapsed (wall clock)" not in text:  # a segment still running, or killed
            continue
        clock = _gnu_time(text, "Elapsed (wall clock) time (h:mm:ss or m:ss): ")
        wall = sum(float(x) * 60**i for i, x in enumerate(reversed(clock.split(":"))))
        cpu = float(_gnu_time(text, "User time (seconds): ")) + float(
            _gnu_time(text, "System time (seconds): "))
        rss = float(_gnu_time(text, "Maximum resident set size (kbytes): ")) / 1024
        parts.append({"cpu_seconds": cpu, "wall_seconds": wall, "peak_rss_mib": rss})
    return {"cpu_seconds": sum(p["cpu_seconds"] for p in parts),
            "wall_seconds": sum(p["wall_seconds"] for p in parts),
            "peak_rss_mib": max((p["peak_rss_mib"] for p in parts), default=0.0),
            "segments": len(parts)}


def _gnu_time(text: str, label: str) -> str:
    """The value after ``label`` in GNU time's ``-v`` report."""
    return text.split(label)[1].split()[0]


def read_protocol(run_dir: Path) -> dict:
    """What :func:`read_beyondfit` reads, and the protocol's score: the confirming evaluation
    of ``result.json`` (its episodes, policy and seeds as the record says)."""
    out = read_beyondfit(run_dir)
    record = json.loads((run_dir / "result.json").read_text())
    confirm = record.get("confirming_evaluation") or {}
    return {**out, "score": out["greedy_return"], "score_episodes": confirm.get("episodes"),
            "score_policy": confirm.get("policy", "greedy"),
            "score_from": record.get("values_from")}


RUNNERS = {"cleanrl": run_cleanrl, "sb3-ppo": run_sb3, "sb3-dqn": run_sb3,
           "sb3-dqn-n3": run_sb3, "beyondfit-ppo": run_beyondfit, "beyondfit-dqn": run_beyondfit,
           **{f"beyondfit-ppo-{aux}": run_beyondfit for aux in AUX_VARIANTS},
           **dict.fromkeys(PRESETS_100K, run_preset)}


# ------------------------------------------------------------------------------------- results
def thin(curve: list[tuple[int, float]], points: int = CURVE_POINTS) -> list[list[float]]:
    """At most ``points`` evenly spaced entries of ``curve`` (the last one kept)."""
    if len(curve) <= points:
        return [list(c) for c in curve]
    idx = sorted({round(i * (len(curve) - 1) / (points - 1)) for i in range(points)})
    return [list(curve[i]) for i in idx]


def summary(episodes: list, env_steps: int) -> dict:
    """The run's return (mean raw score of its last 100 training episodes) and a small curve:
    the trailing 100-episode mean at up to ``CURVE_POINTS`` points."""
    returns = [float(r) for _, r in episodes]
    curve = [(int(episodes[i][0]), statistics.fmean(returns[max(0, i + 1 - LAST):i + 1]))
             for i in range(len(episodes))]
    last = returns[-LAST:]
    return {"return_last100": statistics.fmean(last) if last else None,
            "episodes_averaged": len(last), "episodes": len(returns), "env_steps": env_steps,
            "curve": thin(curve)}


def _version(package: str, python: str | None = None) -> str | None:
    if python and python != sys.executable:
        code = f"import importlib.metadata as m; print(m.version({package!r}))"
        out = subprocess.run([python, "-c", code], capture_output=True, text=True)
        return out.stdout.strip() or None
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    """The versions a result was measured with."""
    names = ("torch", "gymnasium", "ale-py", "minatar", "stable-baselines3", "numpy",
             "opencv-python-headless")
    return {"python": platform.python_version(), **{n: _version(n) for n in names}}


def _commit() -> str:
    """The checkout's commit, ``+dirty`` when beyondfit/, conf/ or this script differ."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, text=True, capture_output=True,
                              check=True).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "beyondfit", "conf",
                    "bench/atari.py")
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def result_key(suite: str, method: str, game: str, budget: int, seed: int) -> str:
    """One run's key in its suite's result file."""
    return f"{suite}-{method}-{game}-{budget}-seed{seed}"


def suite_results(results: Path, suite: str) -> dict[str, dict]:
    """Every kept result of ``suite`` (``RESULTS/SUITE.json``), by :func:`result_key`."""
    path = results / f"{suite}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def keep_result(results: Path, suite: str, key: str, result: dict) -> None:
    """Add one result to its suite's file: read, add, write a copy and rename it over the
    file, under an exclusive lock (``.SUITE.lock`` beside it, not kept in git), so results of
    two runs finishing together are both kept."""
    results.mkdir(parents=True, exist_ok=True)
    with open(results / f".{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = suite_results(results, suite)
        kept[key] = result
        path = results / f"{suite}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dict(sorted(kept.items())), indent=1) + "\n")
        os.replace(tmp, path)


def run_one(args: argparse.Namespace, suite: str, method: str, game: str, seed: int) -> dict:
    """Run one job unless its result is kept; keep it."""
    budget = args.budget or METHODS[suite][method][1]
    key = result_key(suite, method, game, budget, seed)
    kept = suite_results(args.results, suite).get(key)
    if kept is not None:
        return kept
    work = Path(args.work) / key
    work.mkdir(parents=True, exist_ok=True)
    print(f"{key}: running (log {work / 'log.txt'})", file=sys.stderr, flush=True)
    g = SUITES[suite][game]
    out = RUNNERS[method](suite, method, g, seed, budget, work, args)
    default = budget == METHODS[suite][method][1]
    out.update(bench_command=f"python bench/atari.py --suite {suite} --run {method} {game} "
               f"{seed}" + ("" if default else f" --budget {budget}"))
    out.update(suite=suite, method=method, game=game, env=g.env, seed=seed, budget=budget,
               env_steps_per_cpu_second=out["env_steps"] / out["cpu_seconds"],
               versions=versions(), commit=_commit(), machine=platform.machine(),
               cpu=cpu_name(), finished_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    keep_result(args.results, suite, key, out)
    ret = out["return_last100"]
    print(f"{key}: return {ret if ret is None else round(ret, 2)}, "
          f"{out['env_steps']} env steps, {out['cpu_seconds']:.0f} CPU s, "
          f"{out['env_steps_per_cpu_second']:.0f} steps/CPU s", file=sys.stderr, flush=True)
    return out


def adopt(args: argparse.Namespace, run_dir: Path, method: str, game: str, seed: int) -> dict:
    """Keep the result of an Atari 100k run started by hand (its run directory finished):
    what :func:`run_preset` would have kept, its CPU from GNU time's files beside it."""
    g = SUITES["atari100k"][game]
    measured = read_protocol(run_dir)
    budget = args.budget or measured["env_steps"]  # the run's own budget, as it ran
    out = {**segments(run_dir), **measured, "adopted_from": str(run_dir),
           "command": " ".join(["python", *preset_command(method, g, seed, budget, run_dir,
                                                           [])[1:-1]])}
    out.update(suite="atari100k", method=method, game=game, env=g.env, seed=seed, budget=budget,
               bench_command=f"python bench/atari.py --suite atari100k --run {method} {game} "
                             f"{seed}",
               env_steps_per_cpu_second=out["env_steps"] / max(out["cpu_seconds"], 1e-9),
               versions=versions(), commit=_commit(), machine=platform.machine(),
               cpu=cpu_name(), finished_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    keep_result(args.results, "atari100k", result_key("atari100k", method, game, budget, seed),
                out)
    return out


def cpu_name() -> str:
    """The CPU's model name (what a result was measured on)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ---------------------------------------------------------------------------------------- table
def kept_runs(results: Path, suite: str,
              seeds: list[int] | None = None) -> dict[tuple[str, str, int], list[dict]]:
    """The kept results of ``suite``, by (game, method, budget)."""
    kept: dict[tuple[str, str, int], list[dict]] = {}
    for r in suite_results(results, suite).values():
        if r["suite"] == suite and (seeds is None or r["seed"] in seeds):
            kept.setdefault((r["game"], r["method"], r["budget"]), []).append(r)
    return kept


def aux_table(results: Path, suite: str, seeds: list[int] | None = None) -> str:
    """Markdown for the auxiliary-loss suite (``minatar-aux``): per game and
    auxiliary loss, each seed's
    last-100 training return and confirming greedy return, the IQM of the seeds' training
    returns with its 95% bootstrap interval (``beyondfit.cli.intervals.iqm_interval``, what
    ``python -m beyondfit.compare`` reports), and CPU time against no auxiliary loss."""
    from beyondfit.cli.intervals import iqm_interval

    kept = kept_runs(results, suite, seeds)
    lines = [f"| game (env steps) | task.aux | seeds | return, last {LAST} training episodes, "
             "per seed | IQM [95% CI] | greedy (confirming eval), per seed | median CPU s | "
             "CPU vs none |", "|---|---|---:|---|---|---|---:|---:|"]
    games, methods = list(SUITES[suite]), list(METHODS[suite])
    for (game, method, budget), runs in sorted(
            kept.items(), key=lambda kv: (games.index(kv[0][0]), kv[0][2],
                                          methods.index(kv[0][1]))):
        runs.sort(key=lambda r: r["seed"])
        rets = [r["return_last100"] for r in runs]
        finite = [x for x in rets if x is not None]
        mid, low, high = iqm_interval(finite) if finite else (None, None, None)
        cpu = statistics.median(r["cpu_seconds"] for r in runs)
        base = kept.get((game, BASELINE[suite][method], budget))
        ratio = f"{cpu / statistics.median(r['cpu_seconds'] for r in base):.2f}x" if base else "–"
        greedy = ", ".join("–" if r["greedy_return"] is None else f"{r['greedy_return']:.2f}"
                           for r in runs)
        lines.append(
            f"| {SUITES[suite][game].env} ({budget:,}) | "
            f"{method.split('-', 2)[2]} | {len(runs)} | "
            f"{', '.join('–' if x is None else f'{x:.2f}' for x in rets)} | "
            f"{'–' if mid is None else f'{mid:.2f} [{low:.2f}, {high:.2f}]'} | "
            f"{greedy} | "
            f"{cpu:.0f} | {ratio} |")
    notes = ["", "PPO (`+task=minatar`, its preset: the zoo's Atari PPO settings but lr "
             "5e-4) with each built-in auxiliary loss summed into the update that trains the "
             "encoder (docs/how-to/self-supervision.md). PPO, not DQN: a PPO run here takes "
             "minutes, a DQN run updating every env step about half an hour, so the 24 runs fit "
             "one session. Return: mean raw score of the last 100 training episodes; greedy: "
             "the run's confirming evaluation (`result.json`, 20 episodes). IQM over the "
             "seeds with the exact bootstrap interval (with 3 runs the IQM is their mean)."]
    return "\n".join(lines + notes) + "\n"


def published_100k() -> dict[str, dict[str, list[float]]]:
    """The published per-run scores by agent (``DrQ_eps``, ``SPR``) and the ``RANDOM`` and
    ``HUMAN`` references, as ``{agent: {Game: [scores]}}`` (references as one-item lists)."""
    out = {}
    for name in ("DrQ_eps", "SPR", "RANDOM", "HUMAN"):
        data = json.loads((DATA_100K / f"{name}.json").read_text())
        out[name] = {g: v if isinstance(v, list) else [v] for g, v in data.items()}
    return out


def hns(score: float, game: str, ref: dict[str, dict[str, list[float]]]) -> float:
    """Human-normalized score: ``(score - random) / (human - random)``."""
    low, high = ref["RANDOM"][game][0], ref["HUMAN"][game][0]
    return (score - low) / (high - low)


def protocol_table(results: Path, seeds: list[int] | None = None) -> str:
    """Markdown for the Atari 100k suite: each run's protocol score, its percentile among the
    published runs of the agent its preset follows, the HNS; per method, the IQM of its runs'
    HNS over the games and seeds it ran (95% stratified bootstrap interval) beside the
    published agent's IQM over the same games, and the issue's bars."""
    import numpy as np

    from beyondfit.cli.intervals import iqm_interval

    ref, suite = published_100k(), "atari100k"
    kept = kept_runs(results, suite, seeds)
    lines = ["| game | method | seeds | score per seed (100 games, epsilon 0.001) | percentile "
             "of the published runs, per seed | mean | published mean, 25th percentile | "
             "HNS per seed | median CPU s | last-100 training return |",
             "|---|---|---:|---|---|---:|---|---|---:|---|"]
    games, methods = list(SUITES[suite]), list(METHODS[suite])
    pooled: dict[str, dict[str, list[float]]] = {}
    for (game, method, budget), runs in sorted(kept.items(), key=lambda kv: (
            methods.index(kv[0][1]), games.index(kv[0][0]), kv[0][2])):
        runs.sort(key=lambda r: r["seed"])
        name = SUITES[suite][game].env.split("/")[1].split("-")[0]
        agent = PRESETS_100K[method][1]
        published = ref[agent][name] if agent else None
        scores = [r.get("score") for r in runs]
        done = [s for s in scores if s is not None]
        pct = ("–" if published is None else ", ".join(
            f"{100 * np.mean(np.asarray(published) < s):.0f}" for s in done))
        mean = statistics.fmean(done) if done else None
        pub = ("–" if published is None else
               f"{agent} {np.mean(published):.1f}, {np.percentile(published, 25):.1f}")
        norm = [hns(s, name, ref) for s in done]
        if budget == METHODS[suite][method][1]:
            pooled.setdefault(method, {}).setdefault(name, []).extend(norm)
        train = ", ".join("–" if r.get("return_last100") is None else
                          f"{r['return_last100']:.1f}" for r in runs)
        lines.append(
            f"| {name} ({budget:,}) | {METHODS[suite][method][0]} | {len(runs)} | "
            f"{', '.join('–' if s is None else f'{s:.1f}' for s in scores)} | {pct} | "
            f"{'–' if mean is None else f'{mean:.1f}'} | {pub} | "
            f"{', '.join(f'{h:.3f}' for h in norm)} | "
            f"{statistics.median(r['cpu_seconds'] for r in runs):.0f} | {train} |")
    lines += ["", "| method | games | runs | IQM of HNS [95% CI] | the published agent's IQM "
              "over the same games [95% CI] |", "|---|---|---:|---|---|"]
    for method, by_game in pooled.items():
        agent = PRESETS_100K[method][1] or "DrQ_eps"
        names = sorted(by_game)
        n = min(len(v) for v in by_game.values())
        ours = np.array([[by_game[g][i] for g in names] for i in range(n)])
        theirs = np.array([[hns(run[j], g, ref) for j, g in enumerate(names)]
                           for run in zip(*(ref[agent][g] for g in names), strict=True)])
        mid, low, high = iqm_interval(ours)
        pmid, plow, phigh = iqm_interval(theirs)
        lines.append(f"| {METHODS[suite][method][0]} | {', '.join(names)} | {ours.size} | "
                     f"{mid:.3f} [{low:.3f}, {high:.3f}] | {agent} {pmid:.3f} "
                     f"[{plow:.3f}, {phigh:.3f}] |")
    notes = ["", "Score: the run's confirming evaluation (`result.json`), 100 full games of "
             "unclipped score with up to 30 no-op starts, the 27,000-step cap and epsilon "
             "0.001, after 100,000 agent steps (the Atari 100k protocol; DrQ_eps.gin, "
             "atari_100k_runner.py). Published: Agarwal et al. 2021's 100 runs per game "
             "(bench/data/atari100k/); percentile: the share of them below our score. HNS: "
             "(score - random) / (human - random). IQM over the runs' HNS, games as strata "
             "(`beyondfit.cli.intervals.iqm_interval`), beside the published agent's over the "
             "same games (DER, with no per-run file published, beside DrQ(eps)'s). CPU: the "
             "run's process, one torch thread, summed over its segments."]
    return "\n".join(lines + notes) + "\n"


def table(results: Path, suite: str, seeds: list[int] | None = None) -> str:
    """Markdown: one row per (game, method, budget) from the kept files, and the notes."""
    if suite == "minatar-aux":
        return aux_table(results, suite, seeds)
    if suite == "atari100k":
        return protocol_table(results, seeds)
    kept = kept_runs(results, suite, seeds)
    lines = [f"| game (env steps) | method | seeds | return, last {LAST} training episodes, per "
             f"seed | mean | median | median CPU s | CPU vs {BASE_NAME[suite]} | "
             "env steps / CPU s | peak RSS MiB | "
             "median wall s |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    order = list(METHODS[suite])
    for (game, method, budget), runs in sorted(
            kept.items(), key=lambda kv: (list(SUITES[suite]).index(kv[0][0]), kv[0][2],
                                          order.index(kv[0][1]))):
        runs.sort(key=lambda r: r["seed"])
        cpu = statistics.median(r["cpu_seconds"] for r in runs)
        base = kept.get((game, BASELINE[suite][method], budget))
        ratio = f"{cpu / statistics.median(r['cpu_seconds'] for r in base):.2f}x" if base else "–"
        rets = [r["return_last100"] for r in runs]
        mean = statistics.fmean(x for x in rets if x is not None) if any(
            x is not None for x in rets) else None
        finite = [x for x in rets if x is not None]
        median = f"{statistics.median(finite):.2f}" if finite else "–"
        lines.append(
            f"| {SUITES[suite][game].env} ({budget:,}) | {METHODS[suite][method][0]} | "
            f"{len(runs)} | {', '.join('–' if x is None else f'{x:.1f}' for x in rets)} | "
            f"{'–' if mean is None else f'{mean:.1f}'} | {median} | {cpu:.0f} | {ratio} | "
            f"{statistics.median(r['env_steps_per_cpu_second'] for r in runs):,.0f} | "
            f"{max(r['peak_rss_mib'] for r in runs):,.0f} | "
            f"{statistics.median(r['wall_seconds'] for r in runs):.0f} |")
    notes = ["", f"Return: mean raw game score (whole games, unclipped) of the last {LAST} "
             "training episodes. CPU seconds: the whole process (start-up included) and its "
             "children, one torch thread each. Peak RSS: the largest of the seeds."]
    if suite == "atari":
        notes += ["", "Env: `gym.make(\"ALE/Breakout-v5\", frameskip=1)` (sticky actions 0.25) "
                  "under each contender's Atari wrappers (noop 30, max-pooled skip 4, episodic "
                  "life, fire reset, clipped reward, 84x84 gray, 4 frames).",
                  "", f"CleanRL `ppo_atari.py` at {CLEANRL_COMMIT[:7]}, run under gymnasium 1.x "
                  "with these edits (copy kept outside the repo):", ""]
        notes += [f"- {edit}" for edit in CLEANRL_EDITS]
    else:
        notes += ["", "Network (every SB3 method): the MinAtar paper's Conv2d(C, 16, 3) + "
                  "Linear(1024, 128), linear heads. PPO: the zoo's Atari PPO settings; DQN: "
                  "the paper's (RMSProp; beyondfit's and the second SB3 DQN with 3-step "
                  "returns), see `bench/atari.py`."]
    return "\n".join(lines + notes) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run one job (``--run``) or every missing one of a suite, then write and print the table."""
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        suite, method, env_id, seed, budget, out = argv[1:7]
        result = sb3_child(suite, method, env_id, int(seed), int(budget))
        Path(out).write_text(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="atari")
    parser.add_argument("--run", nargs=3, metavar=("METHOD", "GAME", "SEED"), help="one run")
    parser.add_argument("--methods", default=None, help="comma-separated (default: all)")
    parser.add_argument("--games", default=None, help="comma-separated (default: each "
                        "method's games)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="default: each method's seeds")
    parser.add_argument("--budget", type=int, default=None,
                        help="env steps of every run (default: each method's budget)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, default=WORK, help="logs and scratch (not kept)")
    parser.add_argument("--cleanrl-script", type=Path, default=CLEANRL_SCRIPT)
    parser.add_argument("--cleanrl-python", type=Path, default=CLEANRL_PYTHON)
    parser.add_argument("--table", action="store_true", help="only the table of kept results")
    parser.add_argument("--override", action="append", metavar="KEY=VALUE",
                        help="an override added to each beyondfit run's command (atari100k: "
                        "e.g. task.confirm_episodes=2 for a smoke run)")
    parser.add_argument("--adopt", nargs=4, metavar=("RUN_DIR", "METHOD", "GAME", "SEED"),
                        help="atari100k: keep the result of a finished run started by hand")
    args = parser.parse_args(argv)
    suite, failed = args.suite, 0
    if args.adopt:
        run_dir, method, game, seed = args.adopt
        adopt(args, Path(run_dir), method, game, int(seed))
    elif args.run:
        method, game, seed = args.run
        if method not in METHODS[suite] or game not in SUITES[suite]:
            parser.error(f"--suite {suite}: METHOD in {sorted(METHODS[suite])}, "
                         f"GAME in {sorted(SUITES[suite])}")
        try:
            run_one(args, suite, method, game, int(seed))
        except RuntimeError as exc:
            failed += 1
            print(f"{suite} {method} {game} seed {seed} failed: {exc}", file=sys.stderr)
    elif not args.table:
        methods = args.methods.split(",") if args.methods else list(METHODS[suite])
        for method in methods:
            _, _, seeds, games = METHODS[suite][method]
            for game in args.games.split(",") if args.games else games:
                for seed in args.seeds or seeds:
                    try:
                        run_one(args, suite, method, game, seed)
                    except RuntimeError as exc:
                        failed += 1
                        print(f"{suite} {method} {game} seed {seed} failed: {exc}",
                              file=sys.stderr, flush=True)
    text = table(args.results, suite, args.seeds)
    if args.results.exists():
        (args.results / f"{suite}.md").write_text(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
