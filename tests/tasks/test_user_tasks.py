"""A task of one's own, written outside the package, on the command line: config dirs, the
unknown-task check and --help, swapping a builder, and one line for every mistake."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from beyondfit import BeyondfitError
from beyondfit.cli.app import check_choices
from beyondfit.cli.builders import build_task
from beyondfit.cli.run import available
from beyondfit.cli.targets import swapped_targets

from kit import cli, one_line_exit_2

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = '''
import torch
from beyondfit import Task, TensorBatches


def build(seed: int = 0, width: int = 8, batch_size: int = 32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 3, generator=g)
    y = x.sum(1, keepdim=True)
    model = torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 1))

    def loss_fn(model, batch):
        features, target = batch
        return torch.nn.functional.mse_loss(model(features), target)

    return Task(model=model, loss_fn=loss_fn,
                train_data=TensorBatches(x[:200], y[:200], batch_size=batch_size, seed=seed),
                val_data=[(x[200:], y[200:])])


def raises(seed: int = 0, width: int = 8):
    size = -1
    return torch.zeros(size)  # a bug in the user's builder


def wrong_type(seed: int = 0, width: int = 8):
    return {"model": None}


def bad_model(seed: int = 0, width: int = 8):
    task = build(seed)
    task.model = "not a module"
    return task


def pair(seed: int = 0, width: int = 8):
    """Two optimizers, neither built here: the command line's optimizer group builds both,
    the second with a rate of its own."""
    from beyondfit import Update

    task = build(seed, width)
    model = torch.nn.ModuleDict({"first": task.model[0], "last": task.model[2]})

    def loss_fn(model, batch):
        features, target = batch
        out = model["last"](torch.relu(model["first"](features)))
        return torch.nn.functional.mse_loss(out, target)

    task.model = model
    task.loss_fn = [Update("first", loss_fn, params=model["first"]),
                    Update("last", loss_fn, params=model["last"], optimizer_options={"lr": 0.01})]
    return task


not_callable = 3
'''

TASK_YAML = """\
# @package _global_
task:
  _target_: {target}
  seed: ${{seed}}
  width: 8
train:
  epochs: 2
"""


def user_project(root: Path, **targets: str) -> Path:
    """``root/mymod.py`` and one ``root/conf/task/NAME.yaml`` per ``NAME=target``."""
    (root / "conf" / "task").mkdir(parents=True)
    (root / "mymod.py").write_text(USER_MODULE)
    for name, target in targets.items():
        (root / "conf" / "task" / f"{name}.yaml").write_text(TASK_YAML.format(target=target))
    return root


@pytest.mark.e2e
def test_config_dir_task_runs_with_checkpoints_logs_and_plots(tmp_path: Path) -> None:
    user_project(tmp_path, mine="mymod.build")
    done = cli("--config-dir", "conf", "+task=mine", "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("val_loss" in row for row in rows)
    assert (run / "metrics.csv").is_file() and list((run / "checkpoints").glob("step-*.pt"))
    assert (run / "curves.png").is_file()  # drawn before the command returned


@pytest.mark.e2e
def test_a_users_task_with_two_optimizers_gets_both_from_the_optimizer_group(
        tmp_path: Path) -> None:
    user_project(tmp_path, pair="mymod.pair")
    done = cli("--config-dir", "conf", "+task=pair", "optimizer.lr=0.05", "engine.clip_norm=1.0",
               "engine.log_every=1", "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    logged = {key: value for row in rows for key, value in row.items()}
    assert logged["first/lr"] == 0.05 and logged["last/lr"] == 0.01  # the group's, its own
    assert "first/grad_norm" in logged and "last/grad_norm" in logged  # engine.clip_norm: both


@pytest.mark.e2e
def test_hydra_searchpath_and_the_console_script_find_the_task_too(tmp_path: Path) -> None:
    user_project(tmp_path, mine="mymod.build")
    script = shutil.which("beyondfit")
    if script is None:
        pytest.skip("the beyondfit console script is not installed (pip install -e .)")
    # The console script's sys.path starts with its bin directory: mymod must still import.
    done = cli("hydra.searchpath=[file://conf]", "+task=mine", "hydra.run.dir=run",
               cwd=tmp_path, exe=(script,))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


@pytest.mark.e2e
def test_help_and_the_unknown_task_check_list_the_users_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user_project(tmp_path, mine="mymod.build", other="mymod.build")
    help_text = cli("--config-dir", "conf", "--help", cwd=tmp_path)
    assert help_text.returncode == 0
    tasks = ", ".join(sorted([*available("task"), "mine", "other"]))  # shipped + the user's
    assert f"task: {tasks}" in help_text.stdout
    monkeypatch.chdir(tmp_path)
    check_choices(["--config-dir", "conf", "+task=mine"])  # known: no exit
    check_choices(["--config-dir=conf", "-m", "+task=mine,other"])
    check_choices(["hydra.searchpath=[file://conf]", "+task=other"])
    for args in (["--config-dir", "conf", "+task=nine"], ["+task=mine"],
                 ["+task=cartpole", "algo=c51"]):
        with pytest.raises(SystemExit) as info:
            check_choices(args)
        assert info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3
    shipped_and_mine = ", ".join(sorted([*available("task"), "mine", "other"]))
    assert f"unknown task 'nine'; available: {shipped_and_mine}" in err[0]
    assert f"looked for nine.yaml in {tmp_path / 'conf' / 'task'}" in err[0]
    assert "unknown task 'mine'" in err[1] and "--config-dir DIR" in err[1]
    assert f"unknown algo 'c51'; available: {', '.join(available('algo'))}" in (
        err[2]
    )
    assert "(pick with algo=NAME; your own: DIR/algo/c51.yaml with --config-dir DIR)" in err[2]


@pytest.mark.e2e
def test_a_missing_config_dir_is_one_line(tmp_path: Path) -> None:
    done = cli("--config-dir", "confs", "+task=mine", cwd=tmp_path)
    one_line_exit_2(done, "--config-dir confs: no such directory")


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("nomod.build", ["task._target_='nomod.build'", "no module named 'nomod'",
                         "directory you launch from"]),
        ("mymod.raises", ["task (mymod.raises) raised RuntimeError", "(at mymod.py:"]),
        ("mymod.wrong_type", ["returned dict, not a beyondfit Task", "return Task("]),
    ],
)
def test_every_mistake_in_a_users_builder_is_one_line_and_exit_2(
    tmp_path: Path, target: str, words: list[str]
) -> None:
    user_project(tmp_path, mine=target)
    done = cli("--config-dir", "conf", "+task=mine", "hydra.run.dir=run", cwd=tmp_path)
    one_line_exit_2(done, *words)


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("mymod.nothing", ["'mymod.nothing'", "mymod has no attribute 'nothing'"]),
        ("mymod.not_callable", ["is a int, not callable"]),
        ("mymod.bad_model", ["returned a Task whose model is str, not a torch.nn.Module"]),
        ("broken.build", ["importing broken raised ZeroDivisionError", "(at broken.py:2)"]),
        ("needs_missing.build", ["importing needs_missing failed", "no_such_dependency"]),
        ("mymod", ["'mymod' is a module, not callable"]),
    ],
)
def test_more_mistakes_name_the_key_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, words: list[str]
) -> None:
    user_project(tmp_path)
    (tmp_path / "broken.py").write_text("x = 1\ny = 1 / 0\n")
    (tmp_path / "needs_missing.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = OmegaConf.create({"_target_": target, "seed": 0})
    with pytest.raises(BeyondfitError) as info:
        build_task(cfg)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_a_swapped_builder_gets_only_the_options_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """+task=regression task._target_=mymod.build: regression's options that mymod.build does
    not take are left out (one warning naming them); those it takes are passed."""
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR

    user_project(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    overrides = ["+task=regression", "task._target_=mymod.build", "task.batch_size=50"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides)
    assert swapped_targets(overrides) == {"task"}
    with caplog.at_level("WARNING", logger="beyondfit"):
        task = build_task(cfg.task, swapped_targets(overrides))
    assert task.train_data.batch_size == 50  # passed: mymod.build takes batch_size
    assert caplog.messages == [
        "task: mymod.build takes no option(s) data, dropout, early_stopping, hidden, val_fraction, "
        "wide; left out"
    ]
    assert cfg.task.wide is True  # the run's config (what checkpoints store) keeps them all
    with pytest.raises(BeyondfitError) as info:  # not swapped: an option too many is a mistake
        build_task(cfg.task, swapped=[])
    assert str(info.value) == (
        "task: mymod.build takes no option(s) data, dropout, early_stopping, hidden, val_fraction, "
        "wide; its options: batch_size, seed, width"
    )


@pytest.mark.e2e
def test_swapping_the_builder_on_the_command_line_runs(tmp_path: Path) -> None:
    user_project(tmp_path)
    # regression's batch_size is "auto", which mymod.build (batch_size: int) would receive.
    done = cli("+task=regression", "task._target_=mymod.build", "task.batch_size=32",
               "hydra.run.dir=run", "train.epochs=2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    left_out = "takes no option(s) data, dropout, early_stopping, hidden, val_fraction, wide"
    assert f"mymod.build {left_out}" in done.stdout + done.stderr
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


def test_the_resume_command_keeps_the_config_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beyondfit.cli.app import config_dir_args

    monkeypatch.chdir(tmp_path)
    args = ["--config-dir", "conf", "+task=mine", "-cd=other", "hydra.searchpath=[file://x]"]
    assert config_dir_args(args) == [
        "--config-dir", str(tmp_path / "conf"), "--config-dir", str(tmp_path / "other"),
        "hydra.searchpath=[file://x]",
    ]
