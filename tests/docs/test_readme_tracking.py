"""The documentation's tracking, search and seed-comparison commands, run exactly as typed
in bash.

Each test takes the command lines from the pages' own code blocks, so the pages and what
is tested cannot drift apart. Only where a page writes a placeholder (``DATE``) is the
real directory put in. Long runs: marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from kit import readme_block

#: The lines each test runs, as the coverage test (tests/docs/test_commands_covered.py) knows them.
TRACKING = (
    "python -m beyondfit +task=regression 'logger=[csv,mlflow]'",
    "WANDB_MODE=offline python -m beyondfit +task=regression 'logger=[csv,wandb]'",
)
SEARCH = (
    "python -m beyondfit -m +task=cartpole +search=ppo_optuna task.total_env_steps=15000",
    "python -m beyondfit -m +task=regression hydra/sweeper=optuna hydra.sweeper.n_trials=4 "
    "'optimizer.lr=tag(log,interval(1e-4,1e-1))' train.epochs=20",
)
SEEDS = (
    "python -m beyondfit -m +task=regression seed=0,1,2,3,4 optimizer.lr=0.001,0.01",
    "python -m beyondfit.compare multirun/regression/DATE",
)


def commands(heading: str) -> list[str]:
    """The command lines of the first bash block under ``heading`` in the documentation."""
    return [line for line in readme_block(heading, "bash").splitlines() if line.strip()]


def bash(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)  # fmt: skip


def clean_env(tmp_path: Path) -> dict[str, str]:
    """No tracker settings from the caller; W&B's caches kept inside ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    for name in ("DATA", "CACHE", "CONFIG"):
        env[f"WANDB_{name}_DIR"] = str(tmp_path / f"wandb-{name.lower()}")
    return env


@pytest.mark.slow
@pytest.mark.runs(*TRACKING)
def test_readme_tracking_commands(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from mlflow import MlflowClient
    from wandb_records import offline_runs

    lines = commands("### Tracking runs: Weights & Biases and MLflow")
    assert len(lines) == 2 and "logger=[csv,mlflow]" in lines[0]
    env = clean_env(tmp_path)
    for line in lines:
        result = bash(line, tmp_path, env)
        assert result.returncode == 0, (line, result.stderr[-3000:])
    mlflow_dir, wandb_dir = sorted((tmp_path / "outputs" / "regression").iterdir())
    # MLflow's default store, where the command was typed.
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (tracked,) = client.search_runs([client.get_experiment_by_name("beyondfit").experiment_id])
    assert tracked.info.status == "FINISHED"
    assert tracked.data.tags["beyondfit.run_dir"] == str(mlflow_dir)
    # Every evaluation the run logged, once (early stopping ends it before its 120 epochs).
    evaluated = epoch_rows_with_val_loss(mlflow_dir)
    assert evaluated > 0
    assert len(client.get_metric_history(tracked.info.run_id, "val_loss")) == evaluated
    assert [a.path for a in client.list_artifacts(tracked.info.run_id)] == ["curves.png"]
    (offline,) = offline_runs(wandb_dir)
    epochs = OmegaConf.load(wandb_dir / ".hydra" / "config.yaml").train.epochs  # the run's own
    assert offline.exit_code == 0 and offline.config["train"]["epochs"] == epochs
    logged = epoch_rows_with_val_loss(wandb_dir)
    assert len([r for r in offline.history if "val_loss" in r]) == logged > 0
    assert offline.artifacts[0][2] == ["curves.png"]


def epoch_rows_with_val_loss(run_dir: Path) -> int:
    """How many epoch rows of the run's ``metrics.jsonl`` carry a ``val_loss``."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return sum(row.get("kind") == "epoch" and "val_loss" in row for row in rows)


@pytest.mark.slow
@pytest.mark.runs(*SEARCH)
def test_readme_search_commands(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    lines = commands("### Hyperparameter searches: Optuna")
    assert len(lines) == 2
    env = clean_env(tmp_path)
    for line, task, trials in zip(lines, ("cartpole", "regression"), (6, 4)):
        result = bash(line, tmp_path, env)
        assert result.returncode == 0, (line, result.stderr[-3000:])
        (sweep,) = (tmp_path / "multirun" / task).iterdir()
        assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == [
            str(i) for i in range(trials)
        ]
        results = OmegaConf.load(sweep / "optimization_results.yaml")
        assert results.best_params and isinstance(results.best_value, float)


@pytest.mark.slow
@pytest.mark.runs(*SEEDS)
def test_readme_five_seed_comparison(tmp_path: Path) -> None:
    sweep_line, compare_line = commands("### Sweeps and comparing runs")[:2]
    assert "seed=0,1,2,3,4" in sweep_line
    env = clean_env(tmp_path)
    result = bash(sweep_line, tmp_path, env)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep,) = (tmp_path / "multirun" / "regression").iterdir()
    compare_line = compare_line.replace("multirun/regression/DATE", str(sweep))
    compared = bash(compare_line, tmp_path, env)
    assert compared.returncode == 0, compared.stderr[-3000:]
    iqm_rows = [line for line in compared.stdout.splitlines()
                if line.startswith("| `optimizer.lr=") and "[" in line]  # fmt: skip
    assert len(iqm_rows) == 2 and all(" | 5 | " in row for row in iqm_rows)
    assert (sweep / "compare_scores.png").is_file()
