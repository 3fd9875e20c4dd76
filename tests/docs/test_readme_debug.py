"""The README's research-loop commands, run as typed, in order, in a fresh directory."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from kit import cli, readme_block

SECTION = "The research loop: debug runs, profiling"


def readme_commands() -> list[list[str]]:
    block = readme_block(SECTION, "bash")
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.strip()]


def only_run(outputs: Path) -> Path:
    (run,) = [p for p in outputs.rglob("metrics.jsonl")]
    return run.parent


@pytest.mark.e2e
@pytest.mark.runs("python -m beyondfit +task=cartpole +debug=fast",
                  "python -m beyondfit --config-dir conf +task=my_task +debug=fast "
                  "debug.anomaly=true",
                  "python -m beyondfit +task=autoencoder +debug=overfit",
                  "python -m beyondfit +task=regression +debug=profile")
def test_the_readme_research_loop_commands_run_as_typed(tmp_path: Path) -> None:
    commands = readme_commands()
    assert [c[:3] for c in commands] == [["python", "-m", "beyondfit"],
                                         ["python", "-m", "beyondfit.new"]] + \
        [["python", "-m", "beyondfit"]] * 3
    said = []
    for command in commands:
        module, args = command[2], command[3:]
        done = cli(*args, cwd=tmp_path, module=module)
        assert done.returncode == 0, (command, (done.stdout + done.stderr)[-3000:])
        said.append(done.stdout + done.stderr)
    fast, _, mine, overfit, profile = said
    for out in (fast, mine):
        assert "debug: resumed from the step-1 checkpoint and trained to step 2" in out
    debug_runs = tmp_path / "outputs" / "debug"
    assert sorted(p.name for p in debug_runs.iterdir()) == [
        "autoencoder", "cartpole", "my_task", "regression"]
    rows = [json.loads(line) for line in
            (only_run(debug_runs / "autoencoder") / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in rows if r.get("kind") == "epoch"][-1]["loss"] < 1e-3
    assert "debug: overfitting 1 fixed training batch(es)" in overfit
    assert "profile: 5 steps" in profile and "closure and backward" in profile
    assert list((only_run(debug_runs / "regression") / "profile").glob("*.pt.trace.json"))
