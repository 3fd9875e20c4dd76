"""The README's "Your own task" section, run as typed, from an empty directory outside the
repository: scaffold, train, test, sweep, compare, resume; a loss and an env of one's own."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kit import CORRIDOR_ENV, cli, doc_section, readme_block, rows

ROOT = Path(__file__).resolve().parents[2]
#: The section's command lines, as the coverage test (docs/test_commands_covered.py) knows them.
WALKTHROUGH = (
    "python -m beyondfit.new my_task",
    "python -m beyondfit --config-dir conf +task=my_task",
    "python -m pytest tests/test_my_task.py",
    "python -m beyondfit --config-dir conf -m +task=my_task seed=0,1",
    "python -m beyondfit.compare multirun/my_task/DATE",
    "python -m beyondfit --config-dir conf +task=my_task train.epochs=25 "
    "resume=outputs/my_task/DATE resume_extend=true",
)
LOSS_AND_ENV = (
    "python -m beyondfit +task=cartpole task.loss._target_=mymod.my_loss",
    "python -m beyondfit --config-dir conf +task=cartpole algo=mine",
    "python -m beyondfit +task=cartpole task.env=myenvs:Corridor-v0 task.target_return=60",
    "python -m beyondfit +task=cartpole 'task.wrappers=[{_target_:gymnasium.wrappers.TimeLimit,"
    "_partial_:true,max_episode_steps:200}]' task.target_return=195",
)


def section_commands() -> list[list[str]]:
    """The bash blocks of the section, each a list of command lines (comments dropped)."""
    section = doc_section("Your own task")
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def run_as_typed(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One README line in ``cwd``; ``DATE`` is the one run or sweep directory there is."""
    args = shlex.split(line, comments=True)
    for i, arg in enumerate(args):
        if "DATE" in arg:
            prefix, _, rest = arg.partition("=") if "=" in arg else ("", "", arg)
            parent = cwd / rest.split("DATE")[0]
            (only,) = sorted(parent.iterdir())
            value = rest.replace("DATE", only.name)
            args[i] = f"{prefix}={value}" if prefix else value
    assert args[0] == "python", line
    if args[1:3] == ["-m", "beyondfit"]:  # the command line itself: forked from a warm process
        return cli(*args[3:], cwd=cwd, timeout=900)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the package, installed
    return subprocess.run([sys.executable, *args[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.e2e
@pytest.mark.runs(*WALKTHROUGH)
def test_scaffold_run_test_sweep_compare_resume_as_the_readme_says(tmp_path: Path) -> None:
    walkthrough = section_commands()[0]
    assert [" ".join(line.split("#")[0].split()) for line in walkthrough] == list(WALKTHROUGH)
    for line in walkthrough:
        done = run_as_typed(line, tmp_path)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    config = (tmp_path / "conf" / "task" / "my_task.yaml").read_text()
    shown = readme_block("Your own task", "yaml")
    for line in shown.splitlines():  # the page's yaml is the scaffold's
        key = line.split("#")[0].rstrip()
        if key and not key.endswith(":"):
            assert key in config, key
    (run_dir,) = (tmp_path / "outputs" / "my_task").iterdir()
    epochs = [r for r in rows(run_dir) if r.get("kind") == "epoch"]
    assert [r["epoch"] for r in epochs] == list(range(1, 26))  # 20, then resumed to 25
    assert epochs[19]["val_accuracy"] > 0.9  # measured 0.98 after the scaffold's 20 epochs
    assert (run_dir / "curves.png").is_file()  # drawn before the command returned
    for artifact in ("metrics.csv", "checkpoints/best.pt"):
        assert (run_dir / artifact).is_file(), artifact
    (sweep,) = (tmp_path / "multirun" / "my_task").iterdir()
    assert [rows(sweep / job)[-1]["epoch"] for job in "01"] == [20, 20]
    assert (sweep / "compare.png").is_file()
    assert "| `my_task` | 2 |" in (sweep / "compare.md").read_text()


USER_LOSS = '''
"""A policy-gradient loss of one's own: PPO's surrogate with a KL penalty, no clipping."""


def my_loss(beta: float = 3.0, vf_coef: float = 0.5):
    def loss_fn(policy, batch):
        log_prob, _ = policy.log_prob_entropy(batch.obs, batch.actions)
        adv = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
        log_ratio = log_prob - batch.old_log_prob
        ratio = log_ratio.exp()
        kl = ((ratio - 1) - log_ratio).mean()
        value_loss = 0.5 * (policy.value(batch.obs) - batch.returns).pow(2).mean()
        return {"loss": -(ratio * adv).mean() + beta * kl + vf_coef * value_loss,
                "kl": kl.detach()}

    return loss_fn
'''

# A copy of conf/algo/ppo.yaml whose task.loss block (every option of PPO's loss) is the user's.
LOSS_BLOCK = "\n  loss:\n    _target_: mymod.my_loss\n    beta: 1.0\n"
USER_ALGO = re.sub(r"\n  loss:\n(    .*\n)+", LOSS_BLOCK,
                   (ROOT / "conf" / "algo" / "ppo.yaml").read_text())

USER_ENVS = CORRIDOR_ENV + '''

gym.register("Corridor-v0", entry_point="myenvs:Corridor", max_episode_steps=64)
'''


@pytest.mark.slow
@pytest.mark.runs(*LOSS_AND_ENV)
def test_the_readmes_loss_and_env_commands_run_and_solve(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(USER_LOSS)
    (tmp_path / "myenvs.py").write_text(USER_ENVS)
    (tmp_path / "conf" / "algo").mkdir(parents=True)
    assert "mymod.my_loss" in USER_ALGO  # a copy of conf/algo/ppo.yaml with the loss replaced
    (tmp_path / "conf" / "algo" / "mine.yaml").write_text(USER_ALGO)
    blocks = [readme_block(title, "bash") for title in ("Your own policy-gradient loss",
                                                        "Your own env")]
    lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert len(lines) == 4
    for line in lines:
        done = run_as_typed(line, tmp_path)
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
        solved = " solved: confirming evaluation: greedy val_return"
        assert solved in done.stdout + done.stderr, line
