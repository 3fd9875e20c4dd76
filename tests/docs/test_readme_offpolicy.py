"""The README's off-policy section, run as typed (plus a tiny budget), from an empty directory:
every command of its bash block, with the loss module its python block shows."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from kit import cli, readme_block

HEADING = "## Off-policy: SAC and TD3"
# The smallest budget that still trains: keys the commands set themselves are replaced.
TINY = {"task.total_env_steps": "120", "task.replay.learning_starts": "40",
        "task.eval_episodes": "1", "task.confirm_episodes": "1",
        "task.eval_every_env_steps": "1000", "task.hidden": "[16]",
        "progress.bar": "false", "plots": "false", "device": "cpu"}


def block(kind: str) -> str:
    return readme_block(HEADING, kind)


@pytest.mark.e2e
@pytest.mark.runs(
    "python -m beyondfit +task=pendulum algo=sac",
    "python -m beyondfit +task=pendulum algo=td3",
    "python -m beyondfit +task=hopper algo=sac task.total_env_steps=50000",
    "python -m beyondfit +task=halfcheetah algo=sac task.total_env_steps=50000",
    "python -m beyondfit +task=pendulum algo=sac task.env=MountainCarContinuous-v0 "
    "task.total_env_steps=50000",
    "python -m beyondfit +task=pendulum algo=sac task.loss._target_=mymod.my_loss",
    "python -m beyondfit +task=pendulum algo=sac 'task.optimizers={critic:{lr:0.002}}'",
    "python -m beyondfit.play outputs/pendulum/DATE --episodes 3",
    "conf/algo/sac.yaml", "conf/algo/td3.yaml",
    "conf/experiment/tuned/pendulum_sac.yaml", "conf/experiment/tuned/pendulum_td3.yaml",
    "conf/experiment/tuned/mujoco_sac.yaml", "conf/experiment/tuned/hopper_sac.yaml",
    "conf/experiment/tuned/halfcheetah_sac.yaml", "conf/experiment/tuned/mujoco_td3.yaml",
    "conf/experiment/tuned/hopper_td3.yaml", "conf/experiment/tuned/halfcheetah_td3.yaml",
)
def test_readme_offpolicy_commands_run_as_typed(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(block("python"))
    lines = [line.split("  #")[0].strip() for line in block("bash").splitlines() if line.strip()]
    assert len(lines) == 8 and lines[-1].startswith("python -m beyondfit.play")
    for line in lines[:-1]:
        words = shlex.split(line)
        assert words[:3] == ["python", "-m", "beyondfit"], line
        given = dict(w.split("=", 1) for w in words[3:])
        args = [f"{k}={v}" for k, v in {**given, **TINY}.items()]
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 0, (line, done.stderr[-2000:])
        if "mymod" in line:  # it takes every option algo=sac gives: none left out
            assert "WARNING" not in done.stderr, done.stderr[-2000:]
    for env in ("hopper", "halfcheetah"):  # TD3's MuJoCo presets, not in the README's lines
        args = [f"{k}={v}" for k, v in {"+task": env, "algo": "td3", **TINY}.items()]
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 0, (env, done.stderr[-2000:])
    (run_dir,) = [d for d in sorted((tmp_path / "outputs" / "pendulum").iterdir())][-1:]
    words = shlex.split(lines[-1].replace("outputs/pendulum/DATE", str(run_dir)))
    played = cli(*words[3:], module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    assert played.stdout.count("episode ") == 3
