"""The confirming evaluation: an RL run's reported return and its "solved" come from fresh
greedy episodes, beside the training-time evaluation; a stop they do not confirm is withdrawn."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from beyondfit.cli.result import final_record
from beyondfit.core.callbacks import StopRule
from beyondfit.core.engine import Engine
from beyondfit.rl.evaluation.confirm import SEED_OFFSET, ConfirmingEvaluation

from kit import cli


class Scripted:
    """An evaluator whose results are given in advance; records the seeds it was reset with."""

    def __init__(self, returns: list[float]) -> None:
        self.returns, self.seeds = list(returns), []

    def reseed(self, seed: int) -> None:
        self.seeds.append(seed)

    def __call__(self, model: nn.Module) -> dict[str, float]:
        return {"val_return": self.returns.pop(0), "val_length": 1.0}


def test_a_stop_the_fresh_episodes_do_not_confirm_is_withdrawn() -> None:
    confirming = Scripted([400.0, 490.0])  # the first confirmation fails, the second holds
    confirm = ConfirmingEvaluation(lambda n: confirming, episodes=7, seed=3, target=475)
    model = nn.Linear(1, 1)
    engine = Engine(model, lambda m, b: m(b).pow(2).mean(), torch.optim.SGD(model.parameters(),
                    0.01), callbacks=[StopRule("val_return>=475"), confirm], device="cpu")
    batches = [torch.ones(2, 1)] * 10
    engine.fit(batches, val_data=lambda m: {"val_return": 480.0}, eval_every=1, verbose=False)
    assert engine.global_step == 2  # step 1's stop was withdrawn, step 2's confirmed
    assert engine.stopped_by.startswith("val_return>=475")
    assert engine.last_val == {"val_return": 490.0, "val_length": 1.0}  # the reported values
    # Each confirmation on its own seeds, apart from training's and the evaluations'.
    assert confirming.seeds == [3 + SEED_OFFSET, 3 + SEED_OFFSET + 7]
    record = final_record(engine, [confirm])
    assert record["finished"] == "solved" and record["solved"] is True
    assert record["values"] == {"val_return": 490.0, "val_length": 1.0}
    assert record["training_evaluation"] == {"val_return": 480.0}
    assert record["confirming_evaluation"]["attempts"] == 2


def test_at_the_end_of_the_budget_the_final_policy_is_confirmed() -> None:
    confirming = Scripted([470.0])
    confirm = ConfirmingEvaluation(lambda n: confirming, episodes=5, seed=0, target=475)
    model = nn.Linear(1, 1)
    engine = Engine(model, lambda m, b: m(b).pow(2).mean(), torch.optim.SGD(model.parameters(),
                    0.01), callbacks=[StopRule("val_return>=475"), confirm], device="cpu")
    engine.fit([torch.ones(2, 1)] * 3, val_data=lambda m: {"val_return": 10.0}, verbose=False)
    assert engine.global_step == 3 and engine.last_val["val_return"] == 470.0
    record = final_record(engine, [confirm])
    assert record["finished"] == "ran its budget" and record["solved"] is False


@pytest.mark.e2e
def test_cartpole_reports_its_confirming_evaluation(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = cli("+task=cartpole", "task.total_env_steps=2048", "task.confirm_episodes=10",
               "plots=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run_dir / "result.json").read_text())
    confirmed = record["confirming_evaluation"]
    assert confirmed["episodes"] == 10 and confirmed["first_seed"] == SEED_OFFSET
    assert record["values"]["val_return"] == confirmed["val_return"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r["val_return"] for r in rows if "val_return" in r][-1]
    assert record["training_evaluation"]["val_return"] == pytest.approx(last)
    line = next(x for x in done.stdout.splitlines() if x.startswith("CartPole-v1 "))
    shown = re.search(r"confirming evaluation: greedy val_return ([\d.]+) \(target 475\) over "
                      r"10 fresh episodes \(training-time evaluation ([\d.]+) over 20\)", line)
    assert shown, line
    assert float(shown[1]) == pytest.approx(confirmed["val_return"], abs=0.05)
    assert float(shown[2]) == pytest.approx(last, abs=0.05)
    assert line.startswith("CartPole-v1 solved" if confirmed["val_return"] >= 475
                           else "CartPole-v1 not solved")


@pytest.mark.e2e
def test_confirm_episodes_is_checked(tmp_path: Path) -> None:
    done = cli("+task=cartpole", "task.confirm_episodes=-1", f"hydra.run.dir={tmp_path}",
               cwd=tmp_path)
    assert done.returncode == 2
    assert "task.confirm_episodes=-1" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_every_cartpole_run_that_says_solved_holds_over_100_played_episodes(
    tmp_path: Path, seed: int
) -> None:
    run_dir = tmp_path / "run"
    done = cli("+task=cartpole", f"seed={seed}", "plots=false", f"hydra.run.dir={run_dir}",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run_dir / "result.json").read_text())
    played = cli(str(run_dir), "--episodes", "100", module="beyondfit.play", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    mean = float(re.search(r"mean return ([-\d.]+)", played.stdout)[1])
    print(f"seed {seed}: {record['finished']}, confirming "
          f"{record['values']['val_return']:.1f}, training-time "
          f"{record['training_evaluation']['val_return']:.1f}, play x100 {mean:.1f}, "
          f"{record['step']} steps")
    if record["solved"]:
        assert mean >= 475
