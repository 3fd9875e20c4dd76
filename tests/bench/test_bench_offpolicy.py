"""The off-policy bench scripts run as typed, on tiny budgets: beyondfit's algo=sac/td3 beside
SB3's (bench/offpolicy.py and its queue), and the update-cost table (bench/offpolicy_update.py).
Nothing here looks at a time or a return: the scripts write those, tests check the code paths."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Bench scripts run end to end, as their users run them.
pytestmark = pytest.mark.e2e


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_offpolicy_bench_compares_beyondfit_with_sb3_and_keeps_runs(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3")
    bench = load("offpolicy")
    args = ["--seeds", "0", "--budget", "300", "--episodes", "2", "--tasks", "pendulum",
            "--results", str(tmp_path)]
    text = bench.main([*args, "--methods", "beyondfit-sac,sb3-sac,beyondfit-td3,sb3-td3"])
    assert "| Pendulum-v1 (300) | SB3 SAC (RL-Zoo) | 1 |" in text
    assert "| Pendulum-v1 (300) | beyondfit `algo=sac` | 1 |" in text
    assert "| Pendulum-v1 (300) | beyondfit `algo=td3` | 1 |" in text and "1.00x" in text
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == [f"offpolicy-{m}-pendulum-300-eps2-seed0.json"
                    for m in ("beyondfit-sac", "beyondfit-td3", "sb3-sac", "sb3-td3")]
    assert bench.main([*args, "--table"]) == text  # kept runs are read back, not run again
    kept = json.loads((tmp_path / "offpolicy-beyondfit-sac-pendulum-300-eps2-seed0.json")
                      .read_text())
    assert kept["command"] == ("python -m beyondfit +task=pendulum algo=sac "
                               "task.total_env_steps=300 seed=0")
    assert {"torch", "gymnasium", "stable_baselines3", "commit"} <= kept.keys()


def test_offpolicy_queue_runs_its_jobs_one_after_another(tmp_path: Path) -> None:
    env = {**os.environ, "OFFPOLICY_ARGS": f"--budget 200 --episodes 1 --results {tmp_path}"}
    done = subprocess.run(["bash", str(ROOT / "bench" / "offpolicy_queue.sh"),
                           "beyondfit-sac hopper 0", "beyondfit-sac hopper 0"],
                          capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "FAILED" not in done.stdout, done.stdout + done.stderr
    assert done.stdout.count(" start ") == 2 and done.stderr.count("running") == 1  # kept
    assert (tmp_path / "offpolicy-beyondfit-sac-hopper-200-eps1-seed0.json").exists()


def test_update_cost_table_has_every_contender() -> None:
    pytest.importorskip("stable_baselines3")
    text = load("offpolicy_update").main(["--updates", "2", "--rounds", "1"])
    for name in ("beyondfit `algo=sac`", "beyondfit `algo=td3`", "CleanRL-style SAC",
                 "SB3 SAC", "SB3 TD3"):
        assert name in text
    assert "| 1.00x |" in text


@pytest.mark.parametrize("method", ["beyondfit", "sb3"])
def test_dqn_cartpole_bench_runs_a_seed_and_tables_it(tmp_path: Path, method: str) -> None:
    if method == "sb3":
        pytest.importorskip("stable_baselines3")
    bench = load("dqn")
    tiny = ["task.eval_every_env_steps=1500", "task.confirm_episodes=3", "task.hidden=[16]"]
    args = ["--seeds", "0", "--budget", "1500", "--method", method, "--results", str(tmp_path)]
    text = bench.main([*args, *(tiny if method == "beyondfit" else [])])
    summary = __import__("json").loads((tmp_path / "seed0.json").read_text())
    # 1,500 env steps: too few to solve (SB3 collects its 256-step chunks whole: 1,536).
    assert summary["env_steps"] == {"beyondfit": 1500, "sb3": 1536}[method]
    assert not summary["solved"]
    if method == "beyondfit":  # the curve git keeps instead of the per-step rows
        assert summary["curve"]["eval"] and summary["curve"]["eval"][-1][0] <= 1500
        assert 0 < len(summary["curve"]["train"]) <= 50
    assert "| 0 | no |" in text and "0 of 1 solved" in text
    assert bench.main([*args, "--table"]) == text  # kept runs are read back, not run again
