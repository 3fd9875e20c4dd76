"""docs/how-to/pixels.md's commands, as typed (plus a tiny budget) from a directory holding the
page's ``myenc.py``: a user's own encoder trains PPO on MinAtar without a package edit, and
``play`` replays it only with ``--allow-import``."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kit import cli, doc_section

pytest.importorskip("minatar", reason='the minatar extra: pip install -e ".[minatar]"')

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "pixels.md"
OWN = ("python -m beyondfit +task=minatar "
       "'task.encoder={_target_:myenc.Impala,_partial_:true,channels:32}'")
PLAY = "python -m beyondfit.play outputs/minatar/DATE --allow-import myenc"
TINY = ["task.total_env_steps=2048", "task.eval_every_env_steps=2048", "task.eval_episodes=1",
        "task.confirm_episodes=1", "plots=false", "logger=[]", "progress.bar=false"]


def page_lines() -> list[str]:
    """Every command line of the page's bash blocks, comments dropped."""
    blocks = re.findall(r"^```bash\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]


@pytest.mark.e2e
@pytest.mark.runs(OWN, PLAY)
def test_an_own_encoder_from_the_page_trains_and_plays(tmp_path: Path) -> None:
    assert OWN in page_lines() and PLAY in page_lines()
    code = re.findall(r"^```python\n(.*?)^```", doc_section("## The encoder"), re.S | re.M)
    (tmp_path / "myenc.py").write_text(code[0])
    run = tmp_path / "outputs" / "minatar" / "run"
    done = cli(*shlex.split(OWN)[3:], *TINY, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "policy.json").read_text().count('"channels": 32') == 1
    play = shlex.split(PLAY.replace("outputs/minatar/DATE", str(run)))
    played = cli(*play[3:], "--episodes", "1", module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, played.stderr[-2000:]
    assert "mean return" in played.stdout
