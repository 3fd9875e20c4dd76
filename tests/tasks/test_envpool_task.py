"""``+task=atari`` with its copies in envpool (``task.vectorization=envpool``) on the command
line: PPO end to end with a resume that says it starts fresh episodes, the off-policy task's
refusal, and envpool hidden as one line naming ``pip install envpool``."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from kit import QUIET, cli

pytestmark = pytest.mark.e2e  # every test here starts a command line

pytest.importorskip("ale_py", reason='the atari extra: pip install -e ".[atari]"')

TINY = ["task.eval_episodes=1", "task.confirm_episodes=1", "logger=[]", *QUIET]
#: docs/how-to/pixels.md's line.
LINE = "python -m beyondfit +task=atari task.vectorization=envpool"


def quiet(stderr: str) -> str:
    """stderr without the ALE's banner and its bindings' exit-time leak report."""
    return "\n".join(line for line in stderr.splitlines() if not any(
        word in line for word in ("A.L.E", "Stella", "leaked", "nanobind", "skipped remainder")))


@pytest.mark.runs(LINE)
def test_ppo_runs_on_envpool_and_a_resume_starts_fresh_episodes_saying_so(tmp_path: Path
                                                                          ) -> None:
    pytest.importorskip("envpool")
    done = cli(*shlex.split(LINE)[3:], "+debug=fast", cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, quiet(done.stderr)
    assert "resumed from the step-1 checkpoint and trained to step 2" in out
    assert "resumed with fresh episodes: the envs (EnvPoolVectorEnv) cannot be rebuilt" in out
    assert "episode_return" in out  # the games' own scores, reported by the pool


def test_the_off_policy_task_refuses_envpool_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("envpool")
    done = cli("+task=atari", "algo=dqn", "task.vectorization=envpool", *TINY, cwd=tmp_path)
    assert done.returncode == 2
    assert "task.vectorization=envpool: the off-policy task needs env copies of its own" in (
        done.stderr)
    assert quiet(done.stderr).strip().count("\n") == 0


def test_envpool_hidden_is_one_line_naming_pip_install(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "envpool.py").write_text("raise ImportError('No module named envpool')\n")
    done = cli("+task=atari", "task.vectorization=envpool", *TINY,
               f"hydra.run.dir={tmp_path / 'r'}", cwd=tmp_path,
               env={**os.environ, "PYTHONPATH": str(blocked)}, fresh=True)
    assert done.returncode == 2
    assert "needs the envpool package, which is not installed: pip install envpool" in (
        done.stderr)
    assert quiet(done.stderr).strip().count("\n") == 0
