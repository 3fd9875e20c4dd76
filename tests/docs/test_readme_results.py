"""The README's PPO MuJoCo rows and bench/results/ppo-mujoco.md say what the stored runs say.

A number the project prints is the number the experiment produced: both places are compared
with the result files ``bench/pg_tasks.py`` wrote (``bench/results/METHOD-TASK-300000-seedN.json``),
through the script's own ``table``, so an edited file or a row left behind after a rerun fails.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from kit import bench_script

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
SEEDS = [1, 2, 3]
ENVS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5"}


def pg_tasks():
    return bench_script("pg_tasks")


def numbers(text: str) -> list[float]:
    """The numbers in ``text``, thousands separators removed."""
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", text)]


@pytest.mark.parametrize("task", sorted(ENVS))
def test_the_readme_ppo_mujoco_row_is_the_stored_runs(task: str) -> None:
    module = pg_tasks()
    bench = module.benches(300_000, 16_384)[task]
    runs = {m: module.load(RESULTS, m, bench, SEEDS) for m in ("beyondfit", "sb3")}
    assert all(len(r) == len(SEEDS) for r in runs.values()), "a seed's result file is missing"
    (row,) = [line for line in (ROOT / "README.md").read_text().splitlines()
              if line.startswith(f"| {ENVS[task]}, PPO at 300k, unseen seeds 1-3")]
    _, ours, peer, command = row.split("|")[1:5]
    assert "--seed-list 1 2 3" in command and task in command
    for cell, method in ((ours, "beyondfit"), (peer, "sb3")):
        finals = [r["final_return"] for r in runs[method]]
        median, *per_seed = numbers(cell.split("median", 1)[1])[:1 + len(SEEDS)]
        assert median == pytest.approx(statistics.median(finals), abs=0.05), (method, cell)
        assert per_seed == [round(f) for f in finals], (method, cell)
    ratio = (statistics.median(r["cpu_seconds"] for r in runs["beyondfit"])
             / statistics.median(r["cpu_seconds"] for r in runs["sb3"]))
    assert f"{ratio:.2f}x SB3's CPU" in ours


def test_the_ppo_mujoco_results_page_holds_the_table_the_script_prints() -> None:
    module = pg_tasks()
    benches = module.benches(300_000, 16_384)
    printed = module.table(RESULTS, {k: benches[k] for k in ENVS}, SEEDS)
    page = (RESULTS / "ppo-mujoco.md").read_text()
    assert printed in page
