"""Searches with Hydra's Optuna sweeper: the app returns each trial's objective, a diverged
trial scores the worst value without stopping the search, and the presets compose."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from beyondfit import BeyondfitError
from beyondfit.cli.app import check_choices
from beyondfit.cli.run import CONF_DIR, objective

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")


def search(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "beyondfit", "-m", *args, "plots=false", "hydra.sweep.dir=sweep"],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def final(run_dir: Path, name: str) -> float:
    """The trial's result (``result.json``): the restored model's value."""
    return json.loads((run_dir / "result.json").read_text())["values"][name]


@pytest.mark.e2e
@pytest.mark.runs("conf/search/mlp_optuna.yaml")
def test_three_trial_search_on_a_tiny_task_writes_optunas_results(tmp_path: Path) -> None:
    result = search("+task=regression", "+search=mlp_optuna", "hydra.sweeper.n_trials=3",
                    "train.epochs=3",
                    cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "sweep"
    trials = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in trials] == ["0", "1", "2"]
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    assert results.name == "optuna"
    assert set(results.best_params) == {
        "optimizer.lr", "optimizer.weight_decay", "task.hidden", "task.dropout"
    }  # fmt: skip
    # Optuna got each trial's result val_loss: the best is the lowest of the three runs'.
    finals = {p.name: final(p, "val_loss") for p in trials}
    assert results.best_value == pytest.approx(min(finals.values()), rel=1e-9)
    best = min(finals, key=finals.get)
    overrides = OmegaConf.load(sweep / best / ".hydra" / "overrides.yaml")
    lr = next(o for o in overrides if o.startswith("optimizer.lr="))
    assert float(lr.partition("=")[2]) == pytest.approx(results.best_params["optimizer.lr"])


@pytest.mark.e2e
def test_a_diverged_trial_scores_the_worst_value_and_the_search_goes_on(tmp_path: Path) -> None:
    # SGD at lr 1000 (the largest optimizer.lr the config accepts) diverges in a few steps.
    result = search("+task=regression", "hydra/sweeper=optuna", "hydra/sweeper/sampler=grid",
                    "optimizer=sgd", "optimizer.lr=choice(0.001,1000)", "train.epochs=2",
                    cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    failed = [line for line in result.stderr.splitlines() if "trial failed" in line]
    assert len(failed) == 1
    assert failed[0].startswith("beyondfit: trial failed, scored inf: non-finite loss")
    results = OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml")
    assert results.best_params == {"optimizer.lr": 0.001}
    assert math.isfinite(results.best_value)


@pytest.mark.e2e
def test_a_search_against_its_objective_stops_at_once_with_one_line(tmp_path: Path) -> None:
    result = search("+task=regression", "+search=mlp_optuna", "objective.mode=max",
                    cwd=tmp_path)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("beyondfit")]
    assert errors == [  # (Optuna itself logs that it created the study)
        "beyondfit: error: hydra.sweeper.direction=minimize but objective.mode=max; set "
        "hydra.sweeper.direction=maximize (or objective.mode to match)"
    ]
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "sweep").glob("*/metrics.jsonl"))  # no trial trained


def test_a_missing_sweeper_plugin_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if "optuna" in name else real(name, *a))  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        check_choices(["-m", "+search=ppo_optuna"])
    assert exit_info.value.code == 2
    assert 'pip install "beyondfit[search]"' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        check_choices(["-m", "+search=cartpole_sweep"])
    assert "unknown search 'cartpole_sweep'" in capsys.readouterr().err


def compose_search(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


@pytest.mark.e2e
@pytest.mark.runs("conf/search/ppo_optuna.yaml", "conf/algo/ppo.yaml")
def test_cartpole_preset_searches_ppos_settings_on_a_tiny_budget(tmp_path: Path) -> None:
    # The README's command, as typed, with two trials of 1,024 env steps each.
    result = search("+task=cartpole", "+search=ppo_optuna", "hydra.sweeper.n_trials=2",
                    "task.total_env_steps=1024", "task.confirm_episodes=5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "sweep"
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    assert set(results.best_params) == {
        "optimizer.lr", "task.loss.clip_coef", "task.collector.epochs",
        "task.collector.rollout_steps",
    }  # fmt: skip
    finals = {p.name: final(p, "val_return") for p in sweep.iterdir() if p.is_dir()}
    assert sorted(finals) == ["0", "1"]
    assert results.best_value == pytest.approx(max(finals.values()))  # maximized
    best = max(finals, key=finals.get)
    config = OmegaConf.load(sweep / best / ".hydra" / "config.yaml")
    assert config.task.collector.epochs == results.best_params["task.collector.epochs"]
    assert config.task.loss._target_ == "beyondfit.rl.algos.onpolicy.ppo_loss"
    # The RL tasks score their result's greedy return; supervised ones their val_loss.
    assert compose_search("+task=acrobot").objective.metric == "val_return"
    assert dict(compose_search("+task=autoencoder").objective) == {"metric": "val_loss",
                                                                   "mode": "min"}  # fmt: skip


def test_objective_is_the_last_finite_value_or_the_worst() -> None:
    cfg = OmegaConf.create({"objective": {"metric": "val_loss", "mode": "min"}})
    history = [{"loss": 2.0, "val_loss": 1.5}, {"loss": 1.0, "val_loss": 0.5}, {"loss": 0.9}]
    assert objective(cfg, history) == 0.5  # the last row that has it
    assert objective(cfg, [{"val_loss": float("nan")}]) == math.inf
    assert objective(cfg, [{"loss": 1.0}]) == math.inf  # never logged
    rl = OmegaConf.create({"objective": {"metric": "val_return", "mode": "max"}})
    assert objective(rl, [{"val_return": 500.0}]) == 500.0
    assert objective(rl, [{"val_return": float("inf")}]) == -math.inf
    assert objective(OmegaConf.create({}), [{"val_loss": 0.25}]) == 0.25  # the default


def test_objective_is_the_results_value_when_the_run_has_one() -> None:
    cfg = OmegaConf.create({"objective": {"metric": "val_loss", "mode": "min"}})
    history = [{"loss": 2.0, "val_loss": 0.3}, {"loss": 1.0, "val_loss": 0.9}]
    restored = {"values": {"val_loss": 0.3}}  # early stopping restored the first epoch
    assert objective(cfg, history, restored) == 0.3  # not the last logged 0.9
    assert objective(cfg, history, {"values": {"val_loss": None}}) == math.inf  # a NaN
    train = OmegaConf.create({"objective": {"metric": "loss", "mode": "min"}})
    assert objective(train, history, restored) == 1.0  # not in the result: the last logged


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"metric": "val_loss", "mode": "down"}, r"objective\.mode='down'; use min or max"),
        ({"metric": "val_loss", "goal": "min"}, r"unknown objective option\(s\) \['goal'\]"),
    ],
)
def test_bad_objective_names_the_key(section: dict, message: str) -> None:
    with pytest.raises(BeyondfitError, match=message):
        objective(OmegaConf.create({"objective": section}), [{"val_loss": 1.0}])
