"""Start-up: what the command line loads before it answers, and what waits for the end.

``--help`` and a mistake's one line must not wait for torch (1-2 s to import); a single run
composes its config once; the plot command draws without torch. Times themselves are
``bench/startup.py``'s, never asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from beyondfit.cli.fastpath import mode_is_known

from kit import ROOT, cli


def imported_modules(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -X importtime -m beyondfit ARGS``; the names of the modules it imported."""
    done = cli(*args, cwd=cwd, exe=(sys.executable, "-X", "importtime", "-m", "beyondfit"))
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and line.count("|") == 2}
    return done, names


def torch_modules(names: set[str]) -> list[str]:
    return sorted(n for n in names if n == "torch" or n.startswith("torch."))


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (("--help",), 0, "== Tasks and option groups =="),
        (("+task=nope",), 2, "beyondfit: error: unknown task 'nope'"),
        (("+task=regression", "train.epochs=abc"), 2, "beyondfit: error: train.epochs="),
        (("+task=regression", "trian.epochs=3"), 2, "did you mean train?"),
        ((), 2, "beyondfit: error: no task given"),
        (("+task=regression", "+debug=nope"), 2, "unknown debug 'nope'; available: anomaly, fast"),
    ],
)
def test_help_and_mistakes_answer_without_importing_torch(tmp_path, args, status, says):
    done, names = imported_modules(*args, cwd=tmp_path)
    assert done.returncode == status, done.stderr[-2000:]
    assert says in done.stdout + done.stderr
    assert "beyondfit.cli.app" in names  # the probe saw the command line's imports
    assert torch_modules(names) == []
    assert not (tmp_path / "outputs").exists()  # and no run directory was made


@pytest.mark.e2e
def test_a_single_run_composes_its_config_once_and_says_its_training_time(tmp_path):
    probe = textwrap.dedent(
        f"""
        import sys
        import hydra._internal.hydra as h
        calls = []
        original = h.Hydra.compose_config
        def counted(self, *args, **kwargs):
            calls.append(kwargs.get("run_mode"))
            return original(self, *args, **kwargs)
        h.Hydra.compose_config = counted
        sys.argv = ["beyondfit", "+task=regression", "train.max_steps=2", "plots=false",
                    "hydra.run.dir={tmp_path / 'run'}"]
        from beyondfit.cli.app import main
        main()
        print("COMPOSED", len(calls), file=sys.stderr)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "COMPOSED 1" in done.stderr
    (summary,) = [line for line in (done.stdout + done.stderr).splitlines()
                  if line.startswith("done: ")]
    assert "2 optimizer steps in " in summary and "s of training (" in summary


@pytest.mark.e2e
def test_the_mode_is_probed_when_a_config_or_the_command_line_may_ask_for_a_multirun(tmp_path):
    assert mode_is_known(["+task=regression", "seed=1"], [])
    assert not mode_is_known(["-m", "+task=regression", "seed=0,1"], [])
    assert not mode_is_known(["+task=regression", "hydra.mode=MULTIRUN"], [])
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nseed: 1\n")
    assert mode_is_known(["--config-dir", str(tmp_path), "+experiment=mine"], [tmp_path])
    (tmp_path / "experiment" / "sweep.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n      seed: 0,1\n"
    )
    assert not mode_is_known(["--config-dir", str(tmp_path), "+experiment=sweep"], [tmp_path])


@pytest.mark.e2e
def test_a_config_that_asks_for_a_multirun_still_runs_one(tmp_path):
    """A user's experiment that sets ``hydra.mode: MULTIRUN`` sweeps, as Hydra would."""
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "two.yaml").write_text(textwrap.dedent("""\
        # @package _global_
        defaults:
          - /task: regression
        train:
          max_steps: 1
        plots: false
        hydra:
          mode: MULTIRUN
          sweeper:
            params:
              seed: 0,1
        """))
    done = cli("--config-dir", "conf", "+experiment=two",
               "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir()) == ["0", "1"]


@pytest.mark.e2e
def test_the_plot_command_draws_without_importing_torch(tmp_path: Path) -> None:
    # python -m beyondfit.observers.plots RUN_DIR: torch would be most of its CPU time.
    pytest.importorskip("matplotlib")
    done = cli("+task=regression", "train.epochs=2", "plots=false", "hydra.run.dir=run",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    drawn = cli(str(tmp_path / "run"), cwd=tmp_path,
                exe=(sys.executable, "-X", "importtime", "-m", "beyondfit.observers.plots"))
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    assert (tmp_path / "run" / "curves.png").is_file()
    names = {line.rsplit("|", 1)[1].strip() for line in drawn.stderr.splitlines()
             if line.startswith("import time:") and line.count("|") == 2}
    assert "matplotlib" in names and torch_modules(names) == []


GC_PROBE_TASK = '''
import gc
from pathlib import Path

import torch
from torch import nn

from beyondfit import Task, TensorBatches


def build(seed: int = 0):
    Path("collector.txt").write_text(f"build {gc.isenabled()}\\n")
    torch.manual_seed(seed)
    x = torch.randn(64, 3)
    y = x.sum(1, keepdim=True)

    def loss_fn(model, batch):
        with Path("collector.txt").open("a") as out:
            out.write(f"train {gc.isenabled()} frozen {gc.get_freeze_count() > 0}\\n")
        features, target = batch
        return nn.functional.mse_loss(model(features), target)

    return Task(model=nn.Linear(3, 1), loss_fn=loss_fn,
                train_data=TensorBatches(x, y, batch_size=32))
'''


@pytest.mark.e2e
def test_the_collector_is_paused_while_a_users_task_builds_and_on_while_it_trains(tmp_path):
    """beyondfit/cli/startup_gc.py, through a task written outside the package, in a fresh
    interpreter as a user starts it: the imports and the build ran with the collector off,
    the training with it on and the start-up's heap frozen."""
    (tmp_path / "gcprobe.py").write_text(GC_PROBE_TASK)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "gcprobe.yaml").write_text("_target_: gcprobe.build\n")
    done = cli("--config-dir", "conf", "+task=gcprobe", "train.max_steps=2", "plots=false",
               "hydra.run.dir=run", cwd=tmp_path, fresh=True)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "collector.txt").read_text().splitlines()
    assert lines[0] == "build False", lines
    assert lines[1:] and set(lines[1:]) == {"train True frozen True"}, lines


def test_startup_gc_resumes_only_what_it_paused(monkeypatch):
    import gc

    from beyondfit.cli import startup_gc

    monkeypatch.setattr(startup_gc, "_paused", False)
    frozen = []  # a collection first (the build's cyclic garbage), then the freeze
    monkeypatch.setattr(gc, "collect", lambda: frozen.append("collect"))
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    was_on = gc.isenabled()
    try:
        gc.disable()  # switched off by someone else: resume leaves it off, freezes nothing
        startup_gc.resume()
        assert not gc.isenabled() and not frozen
        gc.enable()
        startup_gc.pause()
        assert not gc.isenabled()
        startup_gc.resume()
        assert gc.isenabled() and frozen == ["collect", True]
        startup_gc.resume()  # once per process
        assert frozen == ["collect", True]
    finally:
        gc.enable() if was_on else gc.disable()
