"""Start-up: what the command line loads before it answers, and what waits for the end.

``--help`` and a mistake's one line must not wait for torch (1-2 s to import); ``--help``
builds one repository of the search path for its list of config groups, and says what Hydra
itself says, from the files as they are now; a single run composes its config once; the plot
command draws without torch. Times themselves are ``bench/startup.py``'s, never asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from beyondfit.cli.fastpath import groups_listed_once, mode_is_known

from kit import ROOT, cli


def imported_modules(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -X importtime -m beyondfit ARGS``; the names of the modules it imported."""
    done = cli(*args, cwd=cwd, exe=(sys.executable, "-X", "importtime", "-m", "beyondfit"))
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and line.count("|") == 2}
    return done, names


def torch_modules(names: set[str]) -> list[str]:
    return sorted(n for n in names if n == "torch" or n.startswith("torch."))


def heavy_modules(names: set[str]) -> list[str]:
    """torch's and matplotlib's modules among ``names`` (seconds of CPU between them)."""
    return sorted(n for n in names if n.split(".")[0] in ("torch", "matplotlib"))


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (("--help",), 0, "== Tasks and option groups =="),
        (("+task=cartpole", "algo=sac", "--help"), 0, "task: acrobot, atari"),
        (("--hydra-help",), 0, "Hydra (1."),
        (("+task=nope",), 2, "beyondfit: error: unknown task 'nope'"),
        (("+task=regression", "train.epochs=abc"), 2, "beyondfit: error: train.epochs="),
        (("+task=regression", "trian.epochs=3"), 2, "did you mean train?"),
        ((), 2, "beyondfit: error: no task given"),
        (("+task=regression", "+debug=nope"), 2, "unknown debug 'nope'; available: anomaly, fast"),
    ],
)
def test_help_and_mistakes_answer_without_importing_torch_or_matplotlib(
    tmp_path, args, status, says
):
    done, names = imported_modules(*args, cwd=tmp_path)
    assert done.returncode == status, done.stderr[-2000:]
    assert says in done.stdout + done.stderr
    assert "beyondfit.cli.app" in names  # the probe saw the command line's imports
    assert heavy_modules(names) == []
    assert not (tmp_path / "outputs").exists()  # and no run directory was made


# Hydra's own help: the app run by Hydra alone, without the command line's shortcuts around it.
HYDRA_ALONE = """
import sys
import beyondfit.__main__
sys.argv = [beyondfit.__main__.__file__, *sys.argv[1:]]  # as under python -m beyondfit
from beyondfit.cli.app import _app
_app()
"""


def user_config_dir(root: Path) -> Path:
    """A user's config directory: a task, a group of its own (one option a folder down) and
    an optimizer."""
    conf = root / "conf"
    for name, text in {
        "task/mine.yaml": "_target_: mymod.build\nwidth: 8\n",
        "mygroup/first.yaml": "# @package _global_\nseed: 1\n",
        "mygroup/deeper/second.yaml": "# @package _global_\nseed: 2\n",
        "optimizer/mine.yaml": "_target_: torch.optim.SGD\n_partial_: true\nlr: 0.5\n",
    }.items():
        (conf / name).parent.mkdir(parents=True, exist_ok=True)
        (conf / name).write_text(text)
    (root / "more" / "extra").mkdir(parents=True)
    (root / "more" / "extra" / "one.yaml").write_text("# @package _global_\nthreads: 3\n")
    return conf


@pytest.mark.e2e
@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("-h",),
        ("+task=cartpole", "algo=sac", "optimizer=sgd", "--help"),
        ("+task=regression", "--help", "--resolve"),
        ("--hydra-help",),
        ("--config-dir", "conf", "--help"),
        ("--config-dir=conf", "+task=mine", "optimizer=mine", "+mygroup=first", "--help"),
        ("--config-dir", "conf", "hydra.searchpath=[file://more]", "+extra=one", "--help"),
    ],
)
def test_help_is_hydras_own_help_word_for_word(tmp_path, args):
    """Every config group and its options (shipped, the user's, a folder down), the composed
    config: what Hydra alone prints, character for character."""
    user_config_dir(tmp_path)
    ours = cli(*args, cwd=tmp_path)
    hydras = cli(*args, cwd=tmp_path, exe=(sys.executable, "-c", HYDRA_ALONE))
    assert ours.returncode == hydras.returncode == 0, ours.stderr[-2000:] + hydras.stderr[-2000:]
    assert ours.stdout == hydras.stdout
    if "--config-dir" in " ".join(args):
        assert "mygroup: first" in ours.stdout and "mygroup/deeper: second" in ours.stdout
        assert "task: acrobot, atari" in ours.stdout and ", mine, " in ours.stdout


@pytest.mark.e2e
def test_help_shows_a_config_file_added_or_changed_at_once(tmp_path):
    conf = user_config_dir(tmp_path)

    def helped(*args: str) -> str:
        done = cli("--config-dir", "conf", *args, "--help", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert "mygroup: first\n" in helped()
    (conf / "mygroup" / "third.yaml").write_text("value: 3\n")
    (conf / "newgroup").mkdir()
    (conf / "newgroup" / "only.yaml").write_text("value: 4\n")
    listed = helped()
    assert "mygroup: first, third\n" in listed and "newgroup: only\n" in listed
    (conf / "mygroup" / "first.yaml").unlink()
    assert "mygroup: third\n" in helped()
    assert "lr: 0.5\n" in helped("optimizer=mine")
    (conf / "optimizer" / "mine.yaml").write_text(
        "_target_: torch.optim.SGD\n_partial_: true\nlr: 0.25\nmomentum: 0.9\n")
    changed = helped("optimizer=mine")
    assert "lr: 0.25\n" in changed and "momentum: 0.9\n" in changed


@pytest.mark.e2e
def test_help_builds_one_repository_for_its_list_of_groups(tmp_path):
    """Hydra alone builds a repository of the search path (a deep copy of every source) per
    question about a group, 109 for the shipped tree; the command line builds one for the
    composition and one for the whole list, and leaves Hydra's loader as it found it."""
    probe = textwrap.dedent(
        """
        import sys
        import hydra._internal.config_repository as repository
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        built = []
        original = repository.CachingConfigRepository.__init__
        def counted(self, *args, **kwargs):
            built.append(1)
            original(self, *args, **kwargs)
        repository.CachingConfigRepository.__init__ = counted
        before = ConfigLoaderImpl.get_group_options
        sys.argv = ["beyondfit", *sys.argv[1:]]
        from beyondfit.cli.app import main
        try:
            main()
        finally:  # Hydra exits after its help
            print("BUILT", len(built), ConfigLoaderImpl.get_group_options is before,
                  file=sys.stderr)
        """
    )
    user_config_dir(tmp_path)
    done = cli("--config-dir", "conf", "+task=mine", "--help", cwd=tmp_path,
               exe=(sys.executable, "-c", probe))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "BUILT 2 True" in done.stderr
    assert "mygroup/deeper: second" in done.stdout


def test_groups_are_listed_once_only_within_a_help_and_hydra_is_put_back():
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    original = ConfigLoaderImpl.get_group_options
    with groups_listed_once(["+task=regression", "seed=1"]):
        assert ConfigLoaderImpl.get_group_options is original  # a run: Hydra's own
    for flag in ("--help", "-h", "--hydra-help"):
        with groups_listed_once(["+task=regression", flag]):
            assert ConfigLoaderImpl.get_group_options is not original
        assert ConfigLoaderImpl.get_group_options is original
    with pytest.raises(RuntimeError), groups_listed_once(["--help"]):
        raise RuntimeError("a failed help")
    assert ConfigLoaderImpl.get_group_options is original


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
