"""Diagnostics go to stderr and results to stdout; a skipped artifact or a missing extra says, in
one line, what to install; messages name where a setting came from."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kit import ROOT, cli, cli_batch, docs_text

# checkpoint.monitor names a metric the run never logs: a WARNING at the end of the run.
WARNED = ("+task=regression", "train.epochs=1", "checkpoint.monitor=no_such", "plots=false")
WARNING = "WARNING: checkpoint monitor 'no_such' was never logged"


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` through the shell, as a user types it (redirections included)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


@pytest.mark.e2e
def test_warnings_are_on_stderr_and_results_on_stdout(tmp_path: Path) -> None:
    run = shlex.join([sys.executable, "-m", "beyondfit", *WARNED])
    # 2>/dev/null: the terminal shows the results and no warning ...
    quiet = shell(f"{run} hydra.run.dir=a 2>/dev/null", tmp_path)
    assert quiet.returncode == 0
    assert "result: val_loss" in quiet.stdout and "WARNING" not in quiet.stdout
    # ... and >/dev/null (results into a file, say) still shows the warning.
    saved = shell(f"{run} hydra.run.dir=b > results.txt", tmp_path)
    assert saved.returncode == 0
    assert WARNING in saved.stderr
    results = (tmp_path / "results.txt").read_text()
    assert "result: val_loss" in results and "WARNING" not in results
    # The run's log file keeps both.
    assert "never logged" in (tmp_path / "b" / "beyondfit.log").read_text()


SCRIPT = """
import logging, torch
from beyondfit import Callback, Engine

class WarnAtEpochEnd(Callback):
    def on_epoch_end(self, engine, logs):
        logging.getLogger("beyondfit").warning("a warning from a callback")

model = torch.nn.Linear(2, 1)
engine = Engine(model, lambda m, b: m(b).pow(2).mean(), torch.optim.SGD(model.parameters(), 0.1),
                device="cpu", callbacks=[WarnAtEpochEnd()])
engine.fit([torch.ones(4, 2)], epochs=1)
"""


@pytest.mark.e2e
def test_a_python_api_script_shows_warnings_on_stderr_too(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    done = shell(f"{shlex.quote(sys.executable)} train.py", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "WARNING: a warning from a callback" in done.stderr
    assert "a warning" not in done.stdout and "epoch 1/1" in done.stdout


@pytest.mark.e2e
def test_without_matplotlib_the_skipped_plot_says_what_to_install(tmp_path: Path) -> None:
    patch = "import beyondfit.observers.plots as p; p.has_matplotlib = lambda: False"
    (done,) = cli_batch([["+task=regression", "train.epochs=1", "hydra.run.dir=run"]],
                        cwd=tmp_path, patch=patch)
    assert done["code"] == 0, done["stderr"]
    skipped = [line for line in done["stderr"].splitlines() if "curves.png" in line]
    assert skipped == ['WARNING: curves.png skipped: matplotlib is not installed; pip install '
                       '"beyondfit[plots]" (or pip install matplotlib), or set plots=false to '
                       'skip it without this note']
    assert not (tmp_path / "run" / "curves.png").exists()


@pytest.mark.e2e
def test_the_video_error_names_the_readmes_install_command(tmp_path: Path) -> None:
    if __import__("importlib").util.find_spec("moviepy") is not None:
        pytest.skip("moviepy is installed")
    run_dir = tmp_path / "run"
    done = cli("+task=cartpole", "task.total_env_steps=512", "task.confirm_episodes=2",
               "plots=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    played = cli(str(run_dir), "--video", str(tmp_path / "video"), module="beyondfit.play")
    assert played.returncode == 2
    assert 'pip install -e ".[video]"' in played.stderr
    assert 'pip install -e ".[video]"' in docs_text()


@pytest.mark.e2e
def test_an_mlflow_store_from_the_environment_is_named_as_such(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_TRACKING_URI"] = (tmp_path / "mlruns").as_uri()
    done = cli("+task=regression", "logger=[mlflow]", "train.epochs=1", "plots=false",
               "hydra.run.dir=run", cwd=tmp_path, env=env)  # fmt: skip
    if done.returncode == 0:
        pytest.skip("this MLflow still accepts its file store")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("beyondfit: error: MLflow could not start a run in the store "
                           f"MLFLOW_TRACKING_URI names ({env['MLFLOW_TRACKING_URI']})")
