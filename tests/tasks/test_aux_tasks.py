"""task.aux on the command line: docs/how-to/self-supervision.md's commands as typed (plus a
tiny budget) from a directory holding the page's ``mymod.py`` (a CURL term of one's own), and a
run with a momentum encoder killed with SIGKILL and resumed, bitwise equal."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from kit import QUIET, cli, doc_section, killed_and_resumed

pytest.importorskip("minatar", reason='the minatar extra: pip install -e ".[minatar]"')

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "self-supervision.md"
#: The page's lines, each with what its logs must carry.
LINES = {
    "python -m beyondfit +task=minatar algo=dqn 'task.aux=[shift]'": ["q/loss"],
    "python -m beyondfit +task=minatar algo=dqn 'task.aux=[self_prediction]' "
    "task.aux_options.self_prediction.weight=2.0": ["q/aux/self_prediction",
                                                     "q/aux/self_prediction/cos"],
    "python -m beyondfit +task=minatar 'task.aux=[shift,reconstruction]'":
        ["aux/reconstruction", "aux/reconstruction/pixels"],
    "python -m beyondfit +task=minatar algo=dqn 'task.aux=[{_target_:mymod.curl}]'":
        ["q/aux/curl", "q/aux/curl/accuracy"],
    "python -m beyondfit +task=minatar 'task.aux=[shift,{_target_:mymod.curl,weight:0.5}]'":
        ["aux/curl"],
    # conf/experiment/atari100k.yaml, on a tiny budget
    "python -m beyondfit +experiment=atari100k 'task.aux=[self_prediction]'":
        ["q/loss", "q/aux/self_prediction", "epsilon"],
}
TINY = ["task.eval_episodes=1", "task.confirm_episodes=1", "logger=[]", *QUIET]
#: What each algorithm's budget needs to reach a few updates.
BUDGET = {"dqn": ["task.total_env_steps=300", "task.replay.learning_starts=100",
                  "task.eval_every_env_steps=300", "engine.log_every=10"],
          "ppo": ["task.total_env_steps=1024", "task.eval_every_env_steps=1024",
                  "engine.log_every=1"],
          # DrQ(eps)'s schedule, shrunk: epsilon falls from the end of the random steps
          "atari100k": ["task.total_env_steps=300", "task.replay.learning_starts=100",
                        "task.agent.exploration_start_steps=100",
                        "task.agent.exploration_steps=100", "task.eval_every_env_steps=300",
                        "engine.log_every=10"]}


def page_lines() -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]


def own_module(where: Path) -> None:
    code = re.findall(r"^```python\n(.*?)^```", doc_section("## Your own term"), re.S | re.M)
    (where / "mymod.py").write_text(code[0])


@pytest.mark.e2e
@pytest.mark.runs(*LINES, "conf/experiment/atari100k.yaml")
@pytest.mark.parametrize("line", list(LINES))
def test_the_pages_commands_train_with_their_terms(tmp_path: Path, line: str) -> None:
    assert page_lines().count(line) == 1
    own_module(tmp_path)
    run = tmp_path / "run"
    budget = BUDGET["atari100k" if "atari100k" in line else "dqn" if "algo=dqn" in line
                    else "ppo"]
    done = cli(*shlex.split(line)[3:], *budget, *TINY, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    logged = {key for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
              for key in row}
    assert set(LINES[line]) <= logged, sorted(logged)
    saved = torch.load(run / "policy.pt", weights_only=True)["model"]
    assert not any(k.split(".")[0] in {"decoder", "curl_head", "curl_w", "spr_projection",
                                       "spr_encoder_target", "curl_encoder_target"}
                   for k in saved), "a term's parts are training's, not the policy's"


@pytest.mark.e2e
def test_a_run_with_a_momentum_encoder_killed_and_resumed_ends_bitwise_equal(
        tmp_path: Path) -> None:
    overrides = ["+task=minatar", "algo=dqn", "task.total_env_steps=700",
                 "task.replay.learning_starts=100", "task.eval_every_env_steps=100000",
                 "task.eval_episodes=1", "task.confirm_episodes=1", "checkpoint.every=25",
                 "task.loss.target_every=20", "task.replay.train_freq=1",
                 "task.aux=[shift,self_prediction]", "task.aux_options.shift.k=1"]
    got, expected, context = killed_and_resumed(overrides, 600, tmp_path, kill_from=150)
    model = expected["model"]
    assert "spr_encoder_target._extra_state" in model, sorted(model)[:20]
    assert model["spr_encoder_target._extra_state"]["calls"] == 600, context
    assert torch.equal(got["model"]["spr_projection_target.module.weight"],
                       model["spr_projection_target.module.weight"]), context
