"""The refit (beyondfit/cli/refit.py): after early stopping chose the epoch count, the model is
trained again from its initial weights on the training and validation rows together; the run
ends with it, saves it as refit.pt and says so; a run killed during it refits again to the
same weights; a task of one's own asks for it through Task.refit_data."""

from __future__ import annotations

import json
import logging
import textwrap
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from beyondfit import BeyondfitError, EarlyStopping, Task, TensorBatches
from beyondfit.cli import run as cli_run
from beyondfit.cli.refit import chosen_epochs
from beyondfit.tasks.classification import build

from kit import cli, one_line_exit_2, task_config

pytest.importorskip("torchmetrics")
config = partial(task_config, "classification")


def table(path: Path, n: int = 200, seed: int = 0) -> Path:
    """Two classes by the sign of a product of two columns, a third column of noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = (x[:, 0] * x[:, 1] > 0).astype(int)
    np.savez(path, x=x, y=y)
    return path


def run_keeping_task(cfg, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Task:
    """Run the command line's ``run`` and hand back the task it built."""
    kept = {}
    build_task = cli_run.build_task

    def keep(task_cfg):
        kept["task"] = build_task(task_cfg)
        return kept["task"]

    monkeypatch.setattr(cli_run, "build_task", keep)
    cli_run.run(cfg, run_dir)
    return kept["task"]


FAST = ("train.epochs=12", "task.early_stopping.patience=3", "task.members=2", "plots=false",
        "logger=[]")


def test_the_run_ends_with_the_refit_model_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = table(tmp_path / "t.npz")
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        task = run_keeping_task(config(f"task.data.path={data}", *FAST), tmp_path / "run",
                                monkeypatch)
    stopper = next(cb for cb in task.callbacks if isinstance(cb, EarlyStopping))
    epochs = stopper.best_epoch
    assert epochs > 0 and chosen_epochs(task.callbacks) == epochs
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    # 200 rows: 160 train, 40 validate, all 200 in the refit (batches of 32: 7 a pass).
    assert record["refit"] == {"epochs": epochs, "steps": 7 * epochs, "rows": 200,
                               "file": "refit.pt"}
    assert record["values_from"].endswith(
        f"then refit on training and validation rows for {epochs} epochs, the model the run "
        "ends with (refit.pt)")
    assert record["values"] == pytest.approx(stopper.best_logs)  # the chosen epoch's figures
    refit = torch.load(tmp_path / "run" / "refit.pt", weights_only=True)["model"]
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)["model"]
    final = task.model.state_dict()
    assert all(torch.equal(final[k], refit[k]) for k in final)  # the model the run ends with
    assert not all(torch.equal(best[k], refit[k]) for k in best)  # not the chosen run's
    assert f"for the {epochs} epochs early stopping chose ({7 * epochs} optimizer steps)" \
        in caplog.text


def test_the_refit_starts_from_the_initial_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same refit by hand: the task as built (the seed's weights), all rows, the epochs."""
    data = table(tmp_path / "t.npz")
    cfg = config(f"task.data.path={data}", *FAST)
    task = run_keeping_task(cfg, tmp_path / "run", monkeypatch)
    epochs = chosen_epochs(task.callbacks)
    from beyondfit.cli.builders import build_optimizer, build_scheduler, engine_options
    from beyondfit.core.engine import Engine
    from beyondfit.core.seeding import seed_everything

    seed_everything(0)  # as build_run seeds before building
    fresh = build(data={"path": str(data)}, members=2, early_stopping={"patience": 3})
    options = engine_options(cfg.engine)
    options.pop("strategy", None)
    engine = Engine(fresh.model, fresh.loss_fn, build_optimizer(cfg.optimizer),
                    scheduler=build_scheduler(cfg.scheduler), device="cpu", **options)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        engine.fit(fresh.refit_data, epochs=epochs, verbose=False)
    refit = torch.load(tmp_path / "run" / "refit.pt", weights_only=True)["model"]
    assert all(torch.equal(v, refit[k]) for k, v in fresh.model.state_dict().items())


@pytest.mark.e2e
def test_a_run_killed_in_its_refit_resumes_to_the_same_model(tmp_path: Path) -> None:
    """Killed after training, before the refit ended: the checkpoints are complete, neither
    refit.pt nor result.json is there. resume= refits again, to the same weights."""
    data = table(tmp_path / "t.npz")
    args = ("+task=classification", f"task.data.path={data}", *FAST, "hydra.run.dir=run")
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "run"
    first = torch.load(run_dir / "refit.pt", weights_only=True)["model"]
    record = json.loads((run_dir / "result.json").read_text())
    (run_dir / "refit.pt").unlink()
    (run_dir / "result.json").unlink()  # as a kill during the refit leaves the run
    again = cli(*args, "resume=run", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "refit: trained again from the initial weights" in again.stdout
    second = torch.load(run_dir / "refit.pt", weights_only=True)["model"]
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert json.loads((run_dir / "result.json").read_text())["refit"] == record["refit"]


def test_refit_off_or_nothing_chosen_keeps_the_runs_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = table(tmp_path / "t.npz")
    run_keeping_task(config(f"task.data.path={data}", *FAST, "task.refit=false"),
                     tmp_path / "off", monkeypatch)
    assert not (tmp_path / "off" / "refit.pt").exists()
    assert "refit" not in json.loads((tmp_path / "off" / "result.json").read_text())
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        task = run_keeping_task(
            config(f"task.data.path={data}", *FAST, "task.early_stopping=null"),
            tmp_path / "every", monkeypatch)
    assert task.refit_data is None  # without early stopping nothing chooses the epochs
    assert not (tmp_path / "every" / "refit.pt").exists()


def test_a_stopper_that_chose_nothing_skips_the_refit_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from beyondfit.cli.refit import refit

    task = build(data=None, members=1, early_stopping={"patience": 1})
    weights = {k: v.clone() for k, v in task.model.state_dict().items()}
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        assert refit(task, config(), tmp_path, weights) == {"refit": None}  # never fit
    assert "refit: skipped, no epoch count was chosen" in caplog.text
    assert not (tmp_path / "refit.pt").exists()


@pytest.mark.e2e
def test_a_bad_refit_setting_is_one_line(tmp_path: Path) -> None:
    one_line_exit_2(cli("+task=classification", "task.refit=sometimes",
                        f"hydra.run.dir={tmp_path}"), "task.refit")


def test_task_check_names_a_refit_data_that_is_no_batches() -> None:
    task = Task(model=torch.nn.Linear(1, 1), loss_fn=lambda m, b: m(b).sum(),
                train_data=[torch.ones(1, 1)], refit_data=5)
    with pytest.raises(BeyondfitError, match="refit_data is int, not an iterable of batches"):
        task.check()


OWN_TASK = '''\
import torch
from beyondfit import EarlyStopping, Task, TensorBatches


def build(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(300, 4, generator=g)
    y = x[:, :1] * x[:, 1:2] + 0.1 * torch.randn(300, 1, generator=g)
    model = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def loss_fn(model, batch):
        inputs, target = batch
        return torch.nn.functional.mse_loss(model(inputs), target)

    return Task(model=model, loss_fn=loss_fn,
                train_data=TensorBatches(x[:240], y[:240], batch_size=30, seed=seed),
                val_data=[(x[240:], y[240:])],
                callbacks=[EarlyStopping("val_loss", patience=3)],
                refit_data=TensorBatches(x, y, batch_size=30, seed=seed))
'''


@pytest.mark.e2e
def test_a_task_of_ones_own_asks_for_a_refit(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(OWN_TASK)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "mine.yaml").write_text(textwrap.dedent("""\
        # @package _global_
        task:
          _target_: mine.build
          seed: ${seed}
        """))
    done = cli("--config-dir", "conf", "+task=mine", "train.epochs=30", "plots=false",
               "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    epochs = record["early_stopping"]["best_epoch"]
    assert record["refit"] == {"epochs": epochs, "steps": 10 * epochs, "rows": 300,
                               "file": "refit.pt"}
    assert (tmp_path / "run" / "refit.pt").is_file()


def test_tensor_batches_rows_are_what_the_refit_counts() -> None:
    from beyondfit.cli.refit import _rows

    assert _rows(TensorBatches(torch.zeros(7, 2), torch.zeros(7), batch_size=3)) == 7
    assert _rows([torch.zeros(7, 2)]) is None


def test_an_overfit_check_does_not_refit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = table(tmp_path / "t.npz")
    task = run_keeping_task(config(f"task.data.path={data}", *FAST, "+debug=overfit",
                                   "train.epochs=3"), tmp_path / "run", monkeypatch)
    assert task.refit_data is None and not (tmp_path / "run" / "refit.pt").exists()
    assert "refit" not in json.loads((tmp_path / "run" / "result.json").read_text())


class _Term(KeyboardInterrupt):
    signal_name, exit_code = "SIGTERM", 143  # as the command line's SIGTERM outside training


@pytest.mark.parametrize(("raised", "name", "code"), [(KeyboardInterrupt, "SIGINT", 130),
                                                      (_Term, "SIGTERM", 143)])
def test_a_signal_in_the_refit_stops_as_a_signal_in_training_does(
    raised: type, name: str, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or SIGTERM) while refitting: the run stops like one interrupted after training,
    naming its last checkpoint (the command line prints the resume command); no result.json."""
    from beyondfit.checkpoint.interrupt import TrainingInterrupted

    def interrupted(*args, **kwargs):
        raise raised

    monkeypatch.setattr(cli_run, "refit", interrupted)
    data = table(tmp_path / "t.npz")
    with pytest.raises(TrainingInterrupted) as stop:
        cli_run.run(config(f"task.data.path={data}", *FAST), tmp_path / "run")
    assert (stop.value.signal_name, stop.value.exit_code, stop.value.finished) == (name, code, True)
    assert stop.value.checkpoint is not None and stop.value.checkpoint.is_file()
    assert "after training finished" in str(stop.value)
    assert not (tmp_path / "run" / "result.json").exists()


def test_task_check_refuses_a_refit_of_updates() -> None:
    from beyondfit import Update

    model = torch.nn.Linear(1, 1)
    task = Task(model=model, loss_fn=[Update("q", lambda m, b: m(b).sum())],
                train_data=[torch.ones(1, 1)], refit_data=[torch.ones(1, 1)])
    with pytest.raises(BeyondfitError, match="refit_data is given with a list of Update"):
        task.check()
