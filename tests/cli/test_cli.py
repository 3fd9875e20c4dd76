"""Hydra done right: help, resolved config, logs, paths, presets, the console script, start-up."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from beyondfit import BeyondfitError
from beyondfit.cli.app import check_choices
from beyondfit.cli.run import CONF_DIR, available, no_task_message, output_callbacks

from kit import cli

# Optional or heavy libraries the supervised path must not import unless asked. (Hydra
# imports every installed plugin's small config module at start-up, the Optuna sweeper's
# too, but that one imports optuna only when a search runs.)
HEAVY = (
    "gymnasium", "tensorboard", "matplotlib", "sklearn", "torchmetrics", "wandb", "mlflow",
    "optuna", "Box2D", "mujoco",
)  # fmt: skip


@pytest.mark.e2e
def test_help_lists_tasks_option_groups_and_usage() -> None:
    result = cli("--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"task: {', '.join(available('task'))}" in out
    assert f"experiment: {', '.join(available('experiment'))}" in out
    assert "logger: csv, mlflow, tensorboard, wandb" in out
    assert "search: mlp_optuna, ppo_optuna" in out
    assert "optimizer: " in out and "scheduler: " in out
    assert "python -m beyondfit -m +task=regression seed=0,1,2" in out
    assert "python -m beyondfit.compare" in out


@pytest.mark.e2e
def test_cfg_job_prints_the_resolved_config() -> None:
    result = cli("+task=regression", "seed=7", "--cfg", "job")
    assert result.returncode == 0, result.stderr
    assert "${" not in result.stdout  # interpolations resolved
    task = result.stdout.split("\ntask:\n", 1)[1]
    assert "  seed: 7\n" in task  # task.seed: ${seed} followed the override
    assert "_target_: beyondfit.tasks.regression.build" in task


def test_experiment_presets_pick_the_task_and_a_sweep() -> None:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        sweep = compose(
            "config", overrides=["+experiment=regression_lr_sweep"], return_hydra_config=True
        )
        cartpole = compose("config", overrides=["+experiment=cartpole_ppo_sweep"])
    assert sweep.task._target_ == "beyondfit.tasks.regression.build"
    assert sweep.train.epochs == 60  # the preset wins over the task's own default (120)
    assert dict(sweep.hydra.sweeper.params) == {"optimizer.lr": "0.001,0.01", "seed": "0,1,2"}
    assert cartpole.task.loss._target_ == "beyondfit.rl.algos.onpolicy.ppo_loss"
    assert cartpole.train.stop is None


def test_unknown_logger_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        check_choices(["+task=regression", "logger=[csv,neptune]"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "beyondfit: error: unknown logger 'neptune'; available: csv, mlflow, tensorboard, wandb "
        "(pick with logger=[NAME,...] or +logger=NAME)\n"
    )
    check_choices(["+task=regression", "logger=[csv,tensorboard]", "+logger=tensorboard"])
    check_choices(["+task=regression", "logger=[csv,mlflow,wandb]"])


def test_bad_progress_and_logger_sections_name_the_key() -> None:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("config", overrides=["+task=regression", "+progress.colour=red"])
        bad_logger = compose("config", overrides=["+task=regression", "+logger.neptune.project=x"])
    with pytest.raises(BeyondfitError, match=r"unknown progress option\(s\) \['colour'\]"):
        output_callbacks(cfg, Path("unused"))
    with pytest.raises(BeyondfitError, match=r"unknown logger\(s\) \['neptune'\]"):
        output_callbacks(bad_logger, Path("unused"))


@pytest.mark.e2e
def test_relative_data_path_job_log_and_console_lines(tmp_path: Path) -> None:
    """From a launch directory: a relative data path still works when Hydra changes into
    the run directory; the library's lines land in the console (bare) and in the job log."""
    rows = ["a,b,y"] + [f"{i % 7},{i % 5},{(i % 7) - 2 * (i % 5)}" for i in range(60)]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    result = cli(
        "+task=regression", "task.data.path=table.csv", "task.data.target=y", "train.epochs=2",
        "hydra.job.chdir=true", "hydra.run.dir=run", "plots=false", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "run"
    console = [line for line in result.stdout.splitlines() if line.startswith("epoch 2/2")]
    assert console and console[0].startswith("epoch 2/2 - loss: ")  # Keras-style, no prefix
    log = (run_dir / "beyondfit.log").read_text()
    assert "[beyondfit][INFO] - epoch 2/2 - loss: " in log
    assert "validation R2" in log
    saved = (run_dir / ".hydra" / "config.yaml").read_text()
    assert "path: table.csv" in saved  # the config records what the user typed
    header = (run_dir / "metrics.csv").read_text().splitlines()[0]
    assert header.startswith("kind,epoch,step,") and "val_loss" in header


@pytest.mark.e2e
def test_console_script_behaves_like_python_m() -> None:
    script = shutil.which("beyondfit")
    if script is None:
        pytest.skip("the beyondfit console script is not installed (pip install -e .)")
    no_task = cli(exe=(script,))
    assert no_task.returncode == 2
    assert no_task.stderr == f"beyondfit: error: {no_task_message()}\n"
    help_text = cli("--help", exe=(script,))
    assert help_text.returncode == 0 and f"task: {', '.join(available('task'))}" in help_text.stdout


@pytest.mark.e2e
def test_import_is_light() -> None:
    # torch too: the names load on first use (beyondfit/__init__.py)
    code = f"import sys, beyondfit; print([m for m in {(*HEAVY, 'torch')!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.e2e
def test_a_supervised_run_starts_without_heavy_imports(tmp_path: Path) -> None:
    """Snapshot ``sys.modules`` at the first training step and at the end of a CLI run."""
    probe = textwrap.dedent(
        f"""
        import json, sys
        from beyondfit.core.engine import Engine
        HEAVY = {HEAVY!r}
        seen = {{}}
        original = Engine.train_step
        def step(self, batch):
            seen.setdefault("first_step", [m for m in HEAVY if m in sys.modules])
            return original(self, batch)
        Engine.train_step = step
        sys.argv = ["beyondfit", "+task=regression", "train.epochs=1", "hydra.run.dir={tmp_path}"]
        from beyondfit.cli.app import main
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, exc.code
        seen["end"] = [m for m in HEAVY if m in sys.modules]
        print(json.dumps(seen))
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["first_step"] == []
    # At the very end curves.png is drawn (plots=auto), which is matplotlib's only use.
    assert [m for m in seen["end"] if m != "matplotlib"] == []
    assert (tmp_path / "curves.png").is_file()  # drawn before run() returned


def test_csv_logger_widens_its_header_and_cuts_back_on_resume(tmp_path: Path) -> None:
    """logger=csv: one table whose columns grow as names appear, resumable like metrics.jsonl."""
    import csv

    from beyondfit.observers.files import CsvFile

    class FakeEngine:
        epoch, global_step = 0, 4

    path = tmp_path / "metrics.csv"
    table = CsvFile(path)
    table.on_log(FakeEngine(), {"loss": 1.5})  # type: ignore[arg-type]
    state = table.state_dict()
    table.on_eval_end(FakeEngine(), {"val_loss": float("nan"), "val_r2": 0.25})  # type: ignore[arg-type]
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["kind", "epoch", "step", "loss", "val_loss", "val_r2"]
    assert rows[0]["loss"] == "1.5" and rows[0]["val_r2"] == ""
    assert rows[1]["val_loss"] == "" and rows[1]["val_r2"] == "0.25"  # NaN written as empty
    resumed = CsvFile(path)
    assert resumed.rows == 2
    before = path.read_text()
    resumed.load_state_dict(state)
    assert path.read_text() == before  # a restore changes no file: another part may refuse
    resumed.on_fit_start(FakeEngine())  # type: ignore[arg-type]
    assert path.read_text().splitlines()[1:] == ["train,1,4,1.5,,"]
