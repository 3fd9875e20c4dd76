"""The README's "Off-policy: DQN and your own algorithm" section, run as typed (plus a tiny budget)
from an empty directory outside the repository: the DQN commands, and an algorithm of one's own
(SAC plus a second critic ensemble, a part the package never heard of) written from the
section's python and yaml blocks and run from ``--config-dir`` with no package edit."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import torch

from beyondfit.core.state.serialization import safe_load

from kit import cli, readme_block, rows

HEADING = "## Off-policy: DQN and your own algorithm"
# The smallest budget that still trains: keys the commands set themselves are replaced.
TINY = {"task.total_env_steps": "400", "task.replay.learning_starts": "100",
        "task.eval_episodes": "1", "task.eval_every_env_steps": "1000", "task.hidden": "[16]",
        "task.confirm_episodes": "1", "progress.bar": "false", "plots": "false",
        "device": "cpu"}
COMMANDS = (
    "python -m beyondfit +task=cartpole algo=dqn",
    "python -m beyondfit +task=cartpole algo=dqn task.loss.double=false",
    "python -m beyondfit +task=acrobot algo=dqn",
    "python -m beyondfit +task=lunarlander algo=dqn",
    "python -m beyondfit --config-dir conf +task=pendulum algo=two_ensembles",
)


def block(kind: str) -> str:
    return readme_block(HEADING, kind)


def with_tiny_budget(line: str, run_dir: Path) -> list[str]:
    """The line's arguments after ``python -m beyondfit``, its ``key=value`` ones under
    :data:`TINY`'s, in a run directory of the test's."""
    words = shlex.split(line.split("  #")[0])
    assert words[:3] == ["python", "-m", "beyondfit"], line
    flags = [w for w in words[3:] if "=" not in w]  # --config-dir conf
    given = dict(w.split("=", 1) for w in words[3:] if "=" in w)
    return [*flags, *(f"{k}={v}" for k, v in {**given, **TINY}.items()),
            f"hydra.run.dir={run_dir}"]


@pytest.mark.e2e
@pytest.mark.runs(*COMMANDS)
def test_readme_dqn_and_own_algorithm_commands_run_as_typed(tmp_path: Path) -> None:
    pytest.importorskip("Box2D")  # LunarLander
    (tmp_path / "mymod.py").write_text(block("python"))
    (tmp_path / "conf" / "algo").mkdir(parents=True)
    (tmp_path / "conf" / "algo" / "two_ensembles.yaml").write_text(block("yaml"))
    lines = [line for line in block("bash").splitlines() if line.strip()]
    assert [line.split("  #")[0].strip() for line in lines] == list(COMMANDS)
    for i, line in enumerate(lines):
        done = cli(*with_tiny_budget(line, tmp_path / f"run{i}"), cwd=tmp_path)
        assert done.returncode == 0, (line, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and "warning" not in done.stderr.lower(), \
            (line, done.stderr[-2000:])

    # The algorithm of one's own: the new part trained by its own optimizer, its copy following.
    own = tmp_path / f"run{len(lines) - 1}"
    logged = set().union(*(row for row in rows(own) if row["kind"] == "train"))
    assert {"critic/loss", "critic2/loss", "critic2/q", "actor/loss", "alpha/loss"} <= logged
    (checkpoint,) = (own / "checkpoints").glob("step-*.pt")
    state = safe_load(checkpoint)
    steps = state["updates"]["critic2"]["steps"]
    assert steps == 300  # one per env step after learning_starts
    model = state["model"]
    assert model["critic2_target._extra_state"] == {"calls": steps}
    assert model["critic2.layers.0.weight"].shape[0] == 3  # members=3
    assert not torch.equal(model["critic2.layers.0.weight"],
                           model["critic2_target.module.layers.0.weight"])
    policy = safe_load(own / "policy.pt")["model"]
    assert not any(k.startswith(("critic2", "critic_target")) for k in policy)
