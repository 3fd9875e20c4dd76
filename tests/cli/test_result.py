"""The run's final record (``result.json``): what a run prints is what ``compare``, a search's
objective and the trackers report — the restored model's values, not the last epoch's."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from beyondfit.cli.compare import final_value, find_runs
from beyondfit.cli.result import read_result

from kit import cli

# A task whose validation curve is scripted by a buffer that counts training epochs (restored
# with the weights): "dips" is best at epoch 1 and worse after it, "flat" never changes. Ranked
# by the last logged val_loss "flat" wins (0.5 < 0.9); by the restored model's, "dips" (0.1).
SCRIPTED = '''
import torch
from beyondfit.core.early_stopping import EarlyStopping
from beyondfit import Task

CURVES = {"dips": [0.1, 0.9, 0.9, 0.9, 0.9, 0.9], "flat": [0.5] * 6}


class Scripted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))


def build(curve: str = "flat", seed: int = 0) -> Task:
    values = torch.tensor(CURVES[curve])
    model = Scripted()

    def loss_fn(model, batch):
        if model.training:
            model.seen += 1
            return (model.w ** 2).sum() + batch.sum()
        return values[model.seen - 1] + 0 * model.w.sum()

    return Task(model=model, loss_fn=loss_fn, train_data=[torch.zeros(1)],
                val_data=[torch.zeros(1)], callbacks=[EarlyStopping("val_loss", patience=3)])
'''


@pytest.mark.e2e
def test_a_ten_run_sweep_with_early_stopping_compares_what_each_run_printed(
    tmp_path: Path,
) -> None:
    seeds = ",".join(str(s) for s in range(10))
    done = cli("-m", "+task=regression", f"seed={seeds}", "task.early_stopping.patience=2",
               "train.epochs=40", "plots=false", "logger=[]", "hydra.sweep.dir=sweep",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [float(v) for v in re.findall(r"validation R2: model (-?[\d.]+)", done.stdout)]
    assert len(printed) == 10
    runs = find_runs([tmp_path / "sweep"])
    assert [r.path.name for r in runs] == [str(i) for i in range(10)]
    used = [final_value(run, "val_r2") for run in runs]
    assert [round(v, 4) for v in used] == printed  # what compare uses is what each run printed
    # ... which is not the last logged epoch (early stopping restored an earlier one).
    last = [[r["val_r2"] for r in run.rows if "val_r2" in r][-1] for run in runs]
    assert sum(abs(a - b) > 1e-6 for a, b in zip(used, last)) >= 5
    for run in runs:
        record = read_result(run.path)
        assert record["finished"] == "stopped early"
        # The best epoch's weights, or the least-squares start no epoch beat.
        assert record["values_from"].startswith(("restored best weights of epoch",
                                                 "the starting weights"))
    done = cli(str(tmp_path / "sweep"), "--metric", "val_r2", module="beyondfit.compare")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| `regression`"))
    mean = float(row.split("|")[3].split("±")[0])
    assert mean == pytest.approx(statistics.fmean(used), abs=5e-5)


@pytest.mark.e2e
def test_an_optuna_search_picks_the_trial_with_the_best_restored_score(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    (tmp_path / "scripted.py").write_text(SCRIPTED)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "scripted.yaml").write_text(
        "_target_: scripted.build\ncurve: flat\nseed: ${seed}\n"
    )
    done = cli("--config-dir", "conf", "-m", "+task=scripted", "hydra/sweeper=optuna",
               "hydra/sweeper/sampler=grid", "task.curve=choice(dips,flat)",
               "train.epochs=6", "plots=false", "logger=[]", "hydra.sweep.dir=sweep",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    sweep = tmp_path / "sweep"
    trials = {}
    for trial in sorted(p for p in sweep.iterdir() if p.is_dir()):
        curve = OmegaConf.load(trial / ".hydra" / "config.yaml").task.curve
        rows = [json.loads(line) for line in (trial / "metrics.jsonl").read_text().splitlines()]
        last = [r["val_loss"] for r in rows if "val_loss" in r][-1]
        trials[curve] = (read_result(trial)["values"]["val_loss"], last)
    assert trials["dips"] == pytest.approx((0.1, 0.9)) and trials["flat"] == pytest.approx(
        (0.5, 0.5))
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    assert results.best_params == {"task.curve": "dips"}  # the last logged value says "flat"
    assert results.best_value == pytest.approx(0.1)
