"""The README's commands not run elsewhere, each as typed plus a tiny budget (the extra
overrides after it), in the order a reader meets them; ``DATE``, ``RUN_A`` and ``RUN_B`` are
the directories the earlier commands made. Every shipped task, algo and experiment preset runs
here or in another test (``tests/docs/test_commands_covered.py`` checks)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kit import cli

EPOCHS = ("train.epochs=2",)
RL = ("task.total_env_steps=1024", "task.confirm_episodes=2", "plots=false")
# Each README line -> the overrides that make it tiny (none: it is quick as it is).
TABLES = {
    "python -m beyondfit +task=regression": EPOCHS,
    "python -m beyondfit +task=regression optimizer=sgd optimizer.lr=0.01 seed=3 device=cpu":
        EPOCHS,
    "python -m beyondfit +task=regression task.data.path=my.csv task.data.target=price": EPOCHS,
    "python -m beyondfit +task=regression hydra.run.dir=runs/first": EPOCHS,
    "python -m beyondfit +task=classification": EPOCHS,
    "python -m beyondfit +task=classification task.data.path=animals.csv "
    "task.data.target=species": EPOCHS,
    "python -m beyondfit +task=autoencoder task.latent_dim=8": EPOCHS,
    "python -m beyondfit": (),
    "python -m beyondfit +task=regression +logger=tensorboard": EPOCHS,
    "python -m beyondfit +task=regression 'logger=[]' plots=false": EPOCHS,
    "python -m beyondfit --help": (),
    "python -m beyondfit +task=cartpole --cfg job": (),
    "python -m beyondfit.compare outputs/regression/RUN_A outputs/regression/RUN_B": (),
}
TABLE_PRESETS = ("conf/task/regression.yaml", "conf/task/classification.yaml",
                 "conf/task/autoencoder.yaml")
MUJOCO = ("task.total_env_steps=256", "task.eval_episodes=1", "task.confirm_episodes=1",
          "plots=false")
REINFORCEMENT = {
    # The quick start's second half (the first installs this checkout, as the suite has).
    "pip install -e . && python -m beyondfit +task=cartpole": RL,
    "python -m beyondfit +task=cartpole": RL,
    "python -m beyondfit +task=cartpole algo=a2c seed=3": RL,
    "python -m beyondfit +task=acrobot": RL,
    "python -m beyondfit +task=pendulum": RL,
    "python -m beyondfit +task=cartpole task.env=CartPole-v0 task.target_return=195": RL,
    "python -m beyondfit.play outputs/cartpole/DATE --episodes 5": (),
    "python -m beyondfit +task=lunarlander": (*RL, "task.eval_episodes=2"),
    "python -m beyondfit +task=hopper": MUJOCO,
    "python -m beyondfit +task=halfcheetah": MUJOCO,
    "python -m beyondfit +task=cartpole task.normalize=true task.anneal.lr=0.0 "
    "task.loss.target_kl=0.02 task.loss.value_clip=0.2": RL,
}
RL_PRESETS = ("conf/task/cartpole.yaml", "conf/task/acrobot.yaml", "conf/task/pendulum.yaml",
              "conf/task/lunarlander.yaml", "conf/task/hopper.yaml", "conf/task/halfcheetah.yaml",
              "conf/base/rl.yaml", "conf/algo/a2c.yaml", "conf/algo/ppo.yaml",
              "conf/experiment/tuned/cartpole_ppo.yaml", "conf/experiment/tuned/cartpole_a2c.yaml",
              "conf/experiment/tuned/cartpole_reinforce.yaml",
              "conf/experiment/tuned/acrobot_ppo.yaml", "conf/experiment/tuned/pendulum_ppo.yaml",
              "conf/experiment/tuned/lunarlander_ppo.yaml", "conf/experiment/tuned/mujoco_ppo.yaml",
              "conf/experiment/tuned/hopper_ppo.yaml", "conf/experiment/tuned/halfcheetah_ppo.yaml")
SWEEPS = {
    "python -m beyondfit -m +experiment=cartpole_ppo_sweep": RL,
    "python -m beyondfit.compare multirun/cartpole/DATE --out reports/ppo": (),
}
RESUME = (
    "python -m beyondfit +task=regression hydra.run.dir=runs/a checkpoint.every=100",
    "python -m beyondfit +task=regression resume=runs/a/checkpoints/step-00000300.pt",
    "python -m beyondfit +task=regression checkpoint.every=100 resume=runs/a",
    "python -m beyondfit +task=regression resume=runs/a/checkpoints/best.pt hydra.run.dir=runs/b",
)


def as_typed(line: str, extra: tuple[str, ...], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a README line in ``cwd`` with ``extra`` overrides after it; placeholders filled."""
    args = shlex.split(line.split("&& ")[-1])
    assert args[:2] == ["python", "-m"], line
    for i, arg in enumerate(args):
        for name in ("DATE", "RUN_A", "RUN_B"):
            if name in arg:
                parent = cwd / arg.split(name)[0]
                found = sorted(p.name for p in parent.iterdir() if p.is_dir())
                args[i] = arg.replace(name, found[1 if name == "RUN_B" else 0])
    return cli(*args[3:], *extra, module=args[2], cwd=cwd)


def run_all(cases: dict[str, tuple[str, ...]], cwd: Path) -> dict[str, str]:
    """Run each case in order; every one exits 0 (a bare ``python -m beyondfit``: 2)."""
    out = {}
    for line, extra in cases.items():
        done = as_typed(line, extra, cwd)
        expected = 2 if line == "python -m beyondfit" else 0
        assert done.returncode == expected, f"{line}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
        out[line] = done.stdout + done.stderr
    return out


def write_tables(cwd: Path) -> None:
    """The README's ``my.csv`` (a price column) and ``animals.csv`` (text labels)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 3))
    price = 3 * x[:, 0] - x[:, 1] + rng.normal(0, 0.3, 240)
    kind = rng.choice(["flat", "house"], 240)
    rows = ["size,age,rooms,kind,price", *(f"{a:.3f},{b:.3f},{c:.3f},{k},{p:.3f}"
                                           for (a, b, c), k, p in zip(x, kind, price))]
    (cwd / "my.csv").write_text("\n".join(rows) + "\n")
    species = np.where(x[:, 0] > 0.5, "cat", np.where(x[:, 1] > 0, "dog", "bird"))
    rows = ["weight,height,legs,species", *(f"{a:.3f},{b:.3f},{c:.3f},{s}"
                                            for (a, b, c), s in zip(x, species))]
    (cwd / "animals.csv").write_text("\n".join(rows) + "\n")


@pytest.mark.e2e
@pytest.mark.runs(*TABLES, *TABLE_PRESETS)
def test_readme_table_and_output_commands(tmp_path: Path) -> None:
    write_tables(tmp_path)
    out = run_all(TABLES, tmp_path)
    assert "validation R2: model" in out["python -m beyondfit +task=regression"]
    assert "no task given" in out["python -m beyondfit"]
    assert (tmp_path / "runs" / "first" / "result.json").is_file()
    assert list((tmp_path / "outputs" / "regression").glob("*/tensorboard"))
    assert "task:" in out["python -m beyondfit +task=cartpole --cfg job"]
    assert "Comparison of 2 runs" in out[next(k for k in TABLES if "RUN_A" in k)]


@pytest.mark.e2e
@pytest.mark.slow  # a dozen RL runs, MuJoCo's and Box2D's among them: minutes on 2 cores
@pytest.mark.runs(*REINFORCEMENT, *RL_PRESETS, "conf/algo/reinforce.yaml")
def test_readme_rl_commands(tmp_path: Path) -> None:
    pytest.importorskip("Box2D")
    pytest.importorskip("mujoco")
    out = run_all(REINFORCEMENT, tmp_path)
    assert "mean return" in out["python -m beyondfit.play outputs/cartpole/DATE --episodes 5"]
    for line, text in out.items():
        if "+task=" in line:
            assert "confirming evaluation" in text, line
    # The third algorithm, not in the README's commands: a preset all the same.
    done = cli("+task=cartpole", "algo=reinforce", *RL, "hydra.run.dir=reinforce", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "reinforce_loss" in (tmp_path / "reinforce" / ".hydra" / "config.yaml").read_text()


@pytest.mark.runs(*SWEEPS, "conf/experiment/cartpole_ppo_sweep.yaml",
                  "conf/experiment/regression_lr_sweep.yaml")
@pytest.mark.e2e
def test_readme_sweep_presets(tmp_path: Path) -> None:
    run_all(SWEEPS, tmp_path)
    (sweep,) = (tmp_path / "multirun" / "cartpole").iterdir()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1", "2"]
    compared = (tmp_path / "reports" / "ppo" / "compare.md").read_text()
    assert "| `cartpole_ppo_sweep` | 3 |" in compared
    done = cli("-m", "+experiment=regression_lr_sweep", "seed=0", "train.epochs=2",
               "hydra.sweep.dir=lr", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((tmp_path / "lr").glob("*/result.json"))) == 2  # two learning rates


@pytest.mark.e2e
@pytest.mark.runs(*RESUME)
def test_readme_resume_commands(tmp_path: Path) -> None:
    # 30 epochs of 12 steps without early stopping: checkpoints 100, 200, 300 and 360.
    tiny = ("train.epochs=30", "task.early_stopping=null")
    first, chosen, again, branch = RESUME
    done = as_typed(first, tiny, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    run_a = tmp_path / "runs" / "a"
    # "... the run is killed ...": after its last checkpoint, before it recorded its end.
    (run_a / "result.json").unlink()
    done = as_typed(chosen, tiny, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "step-00000300.pt" in done.stdout and (run_a / "result.json").is_file()
    done = as_typed(again, tiny, tmp_path)  # finished by now: says so, changes nothing
    assert done.returncode == 0 and "already finished" in done.stdout, done.stderr[-2000:]
    done = as_typed(branch, tiny, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "runs" / "b" / "result.json").read_text())["status"] == \
        "finished"
