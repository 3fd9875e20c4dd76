"""Smoke runs of bench/atari.py: its docstring's smoke command lines, as typed there, on tiny
budgets into a temporary folder, and the readers of the other contenders' output.

Nothing here looks at a return or a timing: the benchmark reports them.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "atari.py"


@pytest.fixture(scope="module")
def atari():
    spec = importlib.util.spec_from_file_location("bench_atari", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def smoke_lines(module) -> list[str]:
    """The docstring's smoke command lines (those writing into /tmp/pixels), as typed (a
    line ending in a backslash continues on the next, as in a shell)."""
    text = module.__doc__.replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines()
            if line.strip().startswith("python bench/atari.py") and "/tmp/pixels" in line]


FIELDS = {"return_last100", "episodes", "env_steps", "cpu_seconds", "wall_seconds",
          "peak_rss_mib", "env_steps_per_cpu_second", "versions", "settings", "bench_command",
          "return_source", "curve", "seed", "budget", "suite", "method", "game"}


@pytest.mark.parametrize("suite", ["minatar", "atari"])
def test_docstring_smoke_command_writes_a_result_and_the_table(atari, suite, tmp_path):
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("ale_py" if suite == "atari" else "minatar")
    if suite == "atari":
        pytest.importorskip("cv2")  # AtariWrapper's frame resizing
    (line,) = [c for c in smoke_lines(atari) if "sb3-ppo" in c
               and ("--suite minatar " in c) == (suite == "minatar")]
    argv = [a.replace("/tmp/pixels", str(tmp_path / "pixels")) for a in shlex.split(line)]
    argv = [sys.executable if a == "python" else a for a in argv]
    argv += ["--work", str(tmp_path / "work")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    budget = int(argv[argv.index("--budget") + 1])
    kept = json.loads((tmp_path / "pixels" / f"{suite}.json").read_text())  # the suite's file
    assert list(kept) == [f"{suite}-sb3-ppo-breakout-{budget}-seed1"]
    result = kept[f"{suite}-sb3-ppo-breakout-{budget}-seed1"]
    assert FIELDS <= set(result)
    assert result["env_steps"] >= budget and result["cpu_seconds"] > 0
    assert result["peak_rss_mib"] > 0 and result["torch_threads"] == 1
    assert result["versions"]["stable-baselines3"] and result["versions"]["torch"]
    table = (tmp_path / "pixels" / f"{suite}.md").read_text()
    assert "| SB3 PPO" in table and f"({budget:,})" in table and table in done.stdout
    # Kept: the same command does not run again (a queue resumes).
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "running" not in again.stderr
    assert json.loads((tmp_path / "pixels" / f"{suite}.json").read_text()) == kept


def run_suite_smoke_line(atari, suite: str, tmp_path) -> dict:
    """The docstring's smoke line of ``suite``, as typed into ``tmp_path``: its one result."""
    (line,) = [c for c in smoke_lines(atari) if f"--suite {suite} " in c]
    argv = [a.replace("/tmp/pixels", str(tmp_path / "pixels")) for a in shlex.split(line)]
    argv = [sys.executable if a == "python" else a for a in argv]
    argv += ["--work", str(tmp_path / "work")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads((tmp_path / "pixels" / f"{suite}.json").read_text()).values()
    return result


def test_aux_suite_smoke_command_runs_beyondfit_with_the_auxiliary_loss(atari, tmp_path):
    pytest.importorskip("minatar")
    result = run_suite_smoke_line(atari, "minatar-aux", tmp_path)
    assert result["method"] == "beyondfit-ppo-self_prediction" and result["budget"] == 2048
    assert "task.aux=[self_prediction]" in result["command"] and result["env_steps"] >= 2048
    stem = "minatar-aux-beyondfit-ppo-self_prediction-breakout-2048-seed1"
    run_dir = tmp_path / "work" / stem / "run"
    logged = (run_dir / "metrics.jsonl").read_text()
    assert '"aux/self_prediction"' in logged  # the auxiliary term was trained and logged
    table = (tmp_path / "pixels" / "minatar-aux.md").read_text()
    row = next(r for r in table.splitlines() if r.startswith("| MinAtar/Breakout-v1"))
    assert "| self_prediction | 1 |" in row and f"{result['return_last100']:.2f}" in row
    # the minatar suite's table does not take the aux suite's files
    assert "aux" not in atari.table(tmp_path / "pixels", "minatar")


def test_sb3_dqn_with_3_step_returns_is_the_papers_dqn_given_n_steps_3(atari, tmp_path):
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("minatar")
    (line,) = [c for c in smoke_lines(atari) if "sb3-dqn-n3" in c]
    argv = [a.replace("/tmp/pixels", str(tmp_path / "pixels")) for a in shlex.split(line)]
    argv = [sys.executable if a == "python" else a for a in argv]
    done = subprocess.run([*argv, "--work", str(tmp_path / "work")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads((tmp_path / "pixels" / "minatar.json").read_text()).values()
    assert result["method"] == "sb3-dqn-n3" and result["env_steps"] >= 600
    assert result["settings"] == {**atari.MINATAR_DQN, "n_steps": 3}
    assert "| SB3 DQN (MinAtar paper, 3-step returns) | 1 |" in done.stdout


def test_atari100k_smoke_command_runs_the_drqeps_preset_and_places_it_among_published_runs(
        atari, tmp_path):
    pytest.importorskip("ale_py")
    result = run_suite_smoke_line(atari, "atari100k", tmp_path)
    assert result["method"] == "beyondfit-drqeps" and result["budget"] == 1700
    assert "+experiment=atari100k task.env=ALE/Breakout-v5" in result["command"]
    assert result["env_steps"] > 1600 and result["score"] is not None  # updates ran
    assert result["score_policy"] == "epsilon 0.001" and result["score_episodes"] == 2
    assert result["segments"] == 1 and result["cpu_seconds"] > 0
    table = (tmp_path / "pixels" / "atari100k.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| Breakout (1,700)"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    published = json.loads((atari.DATA_100K / "DrQ_eps.json").read_text())["Breakout"]
    assert cells[4] == f"{100 * sum(p < result['score'] for p in published) / 100:.0f}"
    assert cells[6].startswith("DrQ_eps 19.8, ")


def test_the_atari100k_iqm_pools_runs_with_games_as_strata_beside_the_published_agent(
        atari, tmp_path):
    """Two seeds on two games at the full budget: the IQM row is over those four HNS values
    (of four, the middle two: scipy's trim_mean(0.25)), beside DrQ(eps)'s over the same
    games from the published files."""
    results = tmp_path / "results"
    for game, scores in (("assault", (600.0, 560.0)), ("boxing", (9.0, 12.0))):
        for seed, score in enumerate(scores, start=1):
            key = atari.result_key("atari100k", "beyondfit-drqeps", game, 100_000, seed)
            atari.keep_result(results, "atari100k", key, {
                "suite": "atari100k", "method": "beyondfit-drqeps", "game": game,
                "seed": seed, "budget": 100_000, "score": score, "cpu_seconds": 10.0,
                "return_last100": None})
    text = atari.protocol_table(results)
    ref = atari.published_100k()
    ours = [atari.hns(s, g, ref) for g, ss in (("Assault", (600, 560)), ("Boxing", (9, 12)))
            for s in ss]
    row = next(line for line in text.splitlines() if line.startswith("| DrQ(eps)"))
    middle = sorted(ours)[1:3]
    assert f"| {sum(middle) / 2:.3f} [" in row and "| Assault, Boxing | 4 |" in row
    drq = sorted(atari.hns(s, g, ref) for g in ("Assault", "Boxing") for s in ref["DrQ_eps"][g])
    assert f"DrQ_eps {sum(drq[50:150]) / 100:.3f} [" in row


def test_the_atari_suite_runs_beyondfit_with_one_greedy_game_as_the_peers_evaluate_nothing(
        atari, tmp_path):
    """``--suite atari --run beyondfit-ppo``: the task's own evaluations (8 games twice, then
    10 confirming ones) are left out of the timed run, but for one greedy game at its end."""
    pytest.importorskip("ale_py")
    argv = [sys.executable, str(SCRIPT), "--suite", "atari", "--run", "beyondfit-ppo",
            "breakout", "1", "--budget", "1024", "--results", str(tmp_path / "pixels"),
            "--work", str(tmp_path / "work")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "pixels" / "atari.json").read_text())[
        "atari-beyondfit-ppo-breakout-1024-seed1"]
    assert "task.confirm_episodes=0" in result["command"]
    assert "task.eval_episodes=1" in result["command"] and result["greedy_return"] is not None
    run_dir = tmp_path / "work" / "atari-beyondfit-ppo-breakout-1024-seed1" / "run"
    evaluations = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                   if '"kind": "val"' in line]
    assert len(evaluations) == 1


def test_cleanrl_stdout_reader(atari):
    text = ("SPS: 271\nglobal_step=904, episodic_return=[2.]\n"
            "global_step=1256, episodic_return=4.0\nother line\n")
    assert atari.cleanrl_returns(text) == [(904, 2.0), (1256, 4.0)]


def test_beyondfit_command_and_run_directory_reader(atari, tmp_path):
    game = atari.SUITES["minatar"]["space_invaders"]
    cmd = atari.beyondfit_command("minatar", "beyondfit-dqn", game, 2, 500_000, tmp_path)
    assert cmd[1:6] == ["-m", "beyondfit", "+task=minatar", "algo=dqn",
                        "task.env=MinAtar/SpaceInvaders-v1"]
    assert "seed=2" in cmd and "task.total_env_steps=500000" in cmd and "threads=1" in cmd
    rows = [{"kind": "train", "step": i, "env_steps": 1000.0 * i, "episode_return": float(i),
             "episodes": 30} for i in range(1, 6)]
    rows.insert(2, {"kind": "val", "step": 2, "val_return": 9.0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "result.json").write_text(json.dumps(
        {"format": 1, "finished": "ran its budget", "values": {"val_return": 7.5}}))
    out = atari.read_beyondfit(tmp_path)
    # the last 100 episodes: 30 of row 5, 30 of row 4, 30 of row 3, 10 of row 2
    assert out["return_last100"] == pytest.approx((30 * 5 + 30 * 4 + 30 * 3 + 10 * 2) / 100)
    assert out["env_steps"] == 5000 and out["greedy_return"] == 7.5
    assert out["episodes_averaged"] == 100


def test_the_queue_lists_runs_the_script_knows(atari):
    # bench/atari_queue.sh's runs, as DRY_RUN=1 lists them: each a method, game and seed of
    # its suite, so an hour-long queue never stops at a typo.
    listed = subprocess.run(["bash", str(ROOT / "bench" / "atari_queue.sh")], check=True,
                            capture_output=True, text=True,
                            env={"DRY_RUN": "1", "PATH": "/usr/bin:/bin"})
    lines = listed.stdout.splitlines()
    assert lines and all(line.startswith("python bench/atari.py ") for line in lines)
    for line in lines:
        words = shlex.split(line)[2:]
        suite = words[words.index("--suite") + 1] if "--suite" in words else "atari"
        method, game, seed = words[words.index("--run") + 1:][:3]
        _, _, seeds, games = atari.METHODS[suite][method]
        assert game in games and int(seed) in seeds, line


def test_results_of_two_runs_finishing_together_are_both_kept(atari, tmp_path):
    """Each run adds its key to the suite's one file under a lock: 2 processes x 20 results
    added at once, none lost."""
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import atari; from pathlib import "
              "Path\nfor i in range(20): atari.keep_result(Path(sys.argv[2]), 'minatar', "
              "f'{sys.argv[3]}-{i}', {'i': i})")
    writers = [subprocess.Popen([sys.executable, "-c", script, str(SCRIPT.parent),
                                 str(tmp_path), name]) for name in ("a", "b")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    kept = atari.suite_results(tmp_path, "minatar")
    assert sorted(kept) == sorted(f"{n}-{i}" for n in "ab" for i in range(20))
