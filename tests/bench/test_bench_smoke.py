"""Smoke runs of the benchmark scripts: their code paths work and the numbers they compare agree.

Nothing here looks at a timing: the benchmarks report times, tests only check correctness
(the engine ends bitwise equal to the raw loop it is timed against).
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Examples and bench scripts run end to end, as their users run them.
pytestmark = pytest.mark.e2e

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def overhead():
    return _load("overhead")


@pytest.mark.parametrize("size", ["tiny", "medium"])
def test_overhead_engine_rows_reproduce_the_raw_loops(overhead, size):
    base = overhead.SIZES[size]
    small = overhead.Size(base.name, base.layers, base.batch, 3, 2, base.task, 1)
    rows = {k: c for k, c in overhead.contenders("bar").items() if not c.lightning}
    results = overhead.measure(small, rows, repeats=1, warmup=0)
    for key, contender in rows.items():
        row = results[key]
        assert len(row.step) == 1 and row.step[0] > 0
        if contender.reference is None:
            assert row.same is None
        else:
            assert row.same is True, f"{key} does not end equal to {contender.reference}"
    text = overhead.table(small, results)
    assert all(c.label in text for c in rows.values()) and "**NO**" not in text


@pytest.mark.parametrize(("block", "expected"), [(1, "ababab"), (2, "aabbaabb"), (4, "aaaabbbb")])
def test_overhead_lockstep_interleaves_turns_of_block_steps(overhead, block, expected):
    """The baton hands over after every ``block`` steps (1: step k of each contender runs
    before step k+1)."""
    order = []
    steps = len(expected) // 2

    def contender(name):
        def run(problem, timer):
            timer.begin()
            for _ in range(steps):
                order.append(name)
                timer.tick()
            return overhead.Result(timer.costs, {})

        return run

    problem = overhead.Problem.build(overhead.Size("t", (2, 1), 2, 1, 1, "regression", 1))
    runs = [contender("a"), contender("b")]
    results = overhead.run_lockstep(problem, runs, time.thread_time, block)
    assert "".join(order) == expected
    assert [len(r.costs) for r in results] == [steps, steps]


def test_overhead_lightning_rows_reproduce_the_raw_loop(overhead):
    pytest.importorskip("lightning")
    base = overhead.SIZES["tiny"]
    small = overhead.Size(base.name, base.layers, base.batch, 3, 2, base.task, 1)
    rows = {k: c for k, c in overhead.contenders("bar").items()
            if k in ("raw_dataloader", "lightning_minimal", "lightning_log_bar")}
    results = overhead.measure(small, rows, repeats=1, warmup=0)
    assert results["lightning_minimal"].same is True
    assert results["lightning_log_bar"].same is True


def test_overhead_engine_adds_few_torch_ops_per_step(overhead):
    """Counted, not timed: the engine's step is the raw step plus the non-finite check (of the
    loss and the gradients together) and grad_norm."""
    base = overhead.SIZES["tiny"]
    small = overhead.Size(base.name, base.layers, base.batch, 20, 2, base.task, 1)
    problem = overhead.Problem.build(small)
    raw_ops, raw_py, _ = overhead.count_work(problem, overhead.raw_slicing)
    ops, py, _ = overhead.count_work(problem, overhead.engine_batches)
    # loss + gradient norm and its .item() for the non-finite check, one add_ for grad_norm;
    # bookkeeping per epoch besides.
    assert ops - raw_ops <= 4, "the engine's hot path grew torch ops: run bench/overhead.py"
    assert py > raw_py


def test_overhead_command_line(overhead, capsys):
    overhead.main(["--sizes", "tiny", "--repeats", "1", "--warmup", "0", "--no-lightning",
                   "--steps-per-epoch", "2", "--epochs", "1", "--only", "engine_batches"])
    out = capsys.readouterr().out
    assert "| raw loop, DataLoader |" in out and "engine, TensorBatches" in out


def _startup_smoke(only: str) -> dict:
    startup = _load("startup")
    results = startup.main(["--repeats", "1", "--warmup", "0", "--only", only])
    commands = {"help", "mistake"} & set(only.split(","))
    assert set(results) == {"raw", *only.split(","), *(["import_torch"] if commands else [])}
    for samples in results.values():
        assert samples.wall[0] > 0 and samples.cpu[0] > 0
        assert samples.exit[0] >= samples.wall[0]
    return results


def test_startup_api_script_reaches_its_first_step():
    _startup_smoke("api")


def test_startup_cli_reaches_its_first_step_and_help_and_a_mistake_exit():
    """The README's table as typed, on one round: the CLI row and the two commands."""
    results = _startup_smoke("cli,help,mistake")
    assert results["help"].exit_cpu[0] > 0 and results["mistake"].exit[0] > 0
    # --help is read against import torch measured in the same round
    assert results["help"].torch_ratio[0] > 0 and results["mistake"].torch_ratio[0] > 0


@pytest.mark.slow
def test_startup_lightning_and_torch_alone_reach_their_first_step():
    pytest.importorskip("lightning")
    _startup_smoke("lightning,import_torch")


def test_cartpole_bench_runs_beyondfit_the_raw_loop_and_the_throughput_table():
    cartpole = _load("cartpole")
    ours = cartpole.run_beyondfit(0, budget=1024, eval_every=512)
    raw = cartpole.run_raw(0, budget=1024, eval_every=512)
    for result in (ours, raw):
        assert result["env_steps"] >= 1024 and result["train_seconds"] > 0
    collector, bare, with_critic = cartpole.throughput(8, env_steps=512, repeats=1)
    assert min(collector, bare, with_critic) > 0


def test_tabular_bench_scores_every_model_on_held_out_rows():
    pytest.importorskip("torchmetrics")
    tabular = _load("tabular")
    problems = [
        tabular.Problem("tiny", "smooth 120x4", "regression",
                        lambda: tabular.smooth_table(120, 4), True),
        tabular.Problem("wine", "wine", "classification", lambda: tabular.wine()[:2]),
        tabular.Problem("ordinal", "ordinal 300x7", "classification",  # text column and labels
                        lambda: tabular.class_tables.ordinal_table(300), nonlinear=True),
    ]
    results = {p.name: tabular.measure(p, 1, ["train.epochs=40", "plots=false"])
               for p in problems}
    for result in results.values():
        assert set(result["score"]) == {"beyondfit", "beyondfit val", "MLP", "HGB", "linear"}
        assert result["time"]["beyondfit"] > 0 and result["time"]["MLP"] > 0
    assert results["wine"]["score"]["beyondfit"] > 0.8  # scored on rows the run never saw
    assert results["ordinal 300x7"]["score"]["beyondfit"] > 0.6  # 3 classes: chance is 1/3
    text = tabular.table(results, problems)
    assert "| smooth 120x4 | R² |" in text and "| wine | accuracy |" in text
    assert "| ordinal 300x7 | accuracy |" in text and "max(MLP, HGB) - 0.02" in text


@pytest.mark.slow
@pytest.mark.parametrize("key", ["ordinal1200", "quadrant5000", "threshold15000"])
def test_tabular_nonlinear_classification_tables_meet_the_bar(key):
    """Issue 24's bar on one split: the defaults within 0.02 of the better of sklearn's MLP
    and gradient boosting on held-out rows (bench/README.md has the 3-split medians)."""
    pytest.importorskip("torchmetrics")
    tabular = _load("tabular")
    problem = tabular.KEYS[key]
    scores = tabular.measure(problem, 1, ["plots=false"])["score"]
    assert scores["beyondfit"] >= max(scores["MLP"], scores["HGB"]) - 0.02, scores


def test_pg_tasks_bench_runs_both_methods_and_tabulates_stored_results(tmp_path):
    """bench/pg_tasks.py on a 512-step Hopper budget: both methods' code paths, the result
    files, and a table read back from them (no run repeated once its file exists)."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("mujoco")
    pg = _load("pg_tasks")
    bench = pg.Bench("hopper", "Hopper-v5", 512, None, None)
    pg.METHODS["beyondfit"] = lambda b, s: pg.run_beyondfit(
        b, s, ("task.collector.rollout_steps=256", "task.collector.minibatches=2",
               "task.collector.epochs=1", "task.eval_episodes=2"))
    pg.run_missing(tmp_path, [("beyondfit", bench, 0), ("sb3", bench, 0)])
    for method in ("beyondfit", "sb3"):
        (result,) = pg.load(tmp_path, method, bench, seeds=1)
        assert result["env_steps"] == 512 and result["cpu_seconds"] > 0
        assert result["evaluations"][-1][0] == 512
    pg.METHODS["sb3"] = pg.METHODS["beyondfit"] = None  # stored: neither runs again
    pg.run_missing(tmp_path, [("beyondfit", bench, 0), ("sb3", bench, 0)])
    text = pg.table(tmp_path, {"hopper": bench}, seeds=1)
    assert "beyondfit `+task=hopper`" in text and "SB3 PPO (RL-Zoo)" in text


def test_pg_tasks_docstring_smoke_line_runs_the_listed_seeds_once(tmp_path):
    """The docstring's smoke line, as typed (into a temporary folder instead of /tmp/pg):
    ``--seed-list`` runs and tabulates exactly the seeds it names, each result file records
    what the run trained with, and a second call runs nothing (the queue resumes)."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("mujoco")
    pg = _load("pg_tasks")
    (line,) = [" ".join(x.split()) for x in pg.__doc__.splitlines()
               if x.strip().startswith("python bench/pg_tasks.py") and "/tmp/pg" in x]
    argv = [a.replace("/tmp/pg", str(tmp_path / "pg")) for a in shlex.split(line)]
    argv = [sys.executable if a == "python" else a for a in argv]
    done = subprocess.run(argv, cwd=BENCH.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(p.name for p in (tmp_path / "pg").iterdir())
    assert files == ["beyondfit-hopper-2048-seed1.json", "sb3-hopper-2048-seed1.json"]
    mine = json.loads((tmp_path / "pg" / files[0]).read_text())
    assert mine["seed"] == 1 and mine["env_steps"] == 2048
    assert mine["settings"]["tuned"] == "hopper_ppo" and mine["settings"]["task"]["seed"] == 1
    sb3 = json.loads((tmp_path / "pg" / files[1]).read_text())
    assert sb3["settings"]["n_steps"] == 512 and sb3["settings"]["normalize"] is True
    rows = [r for r in done.stdout.splitlines() if r.startswith("| Hopper-v5 (2,048)")]
    assert len(rows) == 2 and all("| 1 |" in r for r in rows)  # one seed each: seed 1
    again = subprocess.run(argv, cwd=BENCH.parent, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "running" not in again.stderr


def test_reinforce_raw_reference_loop_trains_and_evaluates():
    raw = _load("reinforce_raw")
    result = raw.train(0, max_env_steps=1024, eval_every=512)
    assert result["env_steps"] >= 1024 and result["train_seconds"] > 0



@pytest.fixture
def compile_bench(monkeypatch):
    """bench/compile.py with every graph traced for real but run as Python (no C++ build):
    its code paths in seconds; the timings are the bench's own business."""
    import torch

    from beyondfit.core.compile import graphs

    real = torch.compile
    monkeypatch.setattr(graphs, "inductor", lambda gm, example_inputs, patches: gm.forward)
    monkeypatch.setattr(torch, "compile", lambda fn=None, **kw: real(fn, **{"backend": "eager",
                                                                             **kw}))
    return _load("compile")


def test_compile_bench_mlp_rows_run_and_stay_close_to_the_raw_loop(compile_bench):
    """``python bench/compile.py --parts mlp`` (the README's row) on a tiny budget."""
    keys = [k for k in compile_bench.MLP_ROWS if k != "lightning"]
    text = compile_bench.main(["--parts", "mlp", "--sizes", "tiny", "--steps-per-epoch", "3",
                               "--epochs", "2", "--repeats", "1", "--no-lightning"])
    assert all(compile_bench.MLP_ROWS[k][0] in text for k in keys)
    assert "| beyondfit engine, eager |" in text and "| bitwise |" in text  # the eager engine
    drifts = [float(line.split("max |diff| ")[1].rstrip(" |"))
              for line in text.splitlines() if "max |diff|" in line]
    assert drifts and max(drifts) < 1e-3  # compiled rows: close to the raw loop, not bitwise


def test_a_missing_peer_leaves_its_rows_out_in_one_line(compile_bench, monkeypatch, capsys):
    """Lightning (the ``bench`` extra) absent: the MLP table comes without its row, and stderr
    says so in one line instead of a traceback from the middle of the lockstep runs."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "lightning" else find_spec(name, *a))
    text = compile_bench.main(["--parts", "mlp", "--sizes", "tiny", "--steps-per-epoch", "2",
                               "--epochs", "1", "--repeats", "1"])
    assert "| beyondfit engine, eager |" in text and "Lightning" not in text
    notes = [line for line in capsys.readouterr().err.splitlines() if "lightning" in line]
    assert notes == ['lightning is not installed: its rows are left out (pip install -e '
                     '".[bench]" adds them; --no-lightning leaves them out without this note)']


def test_compile_bench_sac_rows_run(compile_bench):
    """``python bench/compile.py --parts sac`` (the README's row) on a tiny budget."""
    text = compile_bench.main(["--parts", "sac", "--envs", "Pendulum-v1", "--updates", "2",
                               "--rounds", "2", "--no-sb3"])
    for label in ("beyondfit `algo=sac`, eager", "beyondfit `algo=sac`, `engine.compile=true`",
                  "CleanRL SAC by hand, eager", "CleanRL SAC compiled the LeanRL way"):
        assert f"| {label} |" in text
    # Each ratio is the median of per-round ratios: a contender against itself is exactly 1.
    eager = next(line for line in text.splitlines() if "`algo=sac`, eager |" in line)
    cleanrl = next(line for line in text.splitlines() if "CleanRL SAC by hand, eager |" in line)
    assert eager.split("|")[3].strip() == "1.00" and cleanrl.split("|")[4].strip() == "1.00"


@pytest.mark.slow  # three command-line runs, one compiling with an empty inductor cache
def test_compile_bench_whole_runs_time_eager_cold_and_warm(monkeypatch):
    bench = _load("compile")
    monkeypatch.setattr(bench, "E2E", {"tiny": ["+task=regression", "train.epochs=1"]})
    text = bench.measure_e2e(["tiny"])
    rows = [line.strip("|").split("|") for line in text.splitlines()[-2:]]
    assert [cells[0].strip() for cells in rows] == ["tiny", bench.FLOOR_LABEL]
    assert all(float(c) > 0 for cells in rows for c in cells[1:])


def test_trial_breaks_runs_its_kinds_of_case(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """bench/trial_breaks.py on three cases, one of each way it runs one: a forged off-policy
    checkpoint resumed (the forging, re-sealing and byte comparison), compare on a FIFO (a
    command of another entry point) and a logger's blocked target (a training command). Each
    kind the trial broke has tests of its own beside its module; ``--small`` (one case of
    each of the eight kinds, ~1 min) and the whole catalogue are run by hand."""
    trial = _load("trial_breaks")
    cases = ("sac-data-none", "compare-result-fifo", "logger-target-os-system")
    code = trial.main(["--only", ",".join(cases), "--work", str(tmp_path / "work"),
                       "--out", str(tmp_path / "table.md")])
    text = capsys.readouterr().out
    assert code == 0, text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(cases)  # header + cases
    assert "**BROKE**" not in text and "**YES**" not in text  # no break, no traceback
    assert "| sac-data-none | off-policy checkpoint (SAC) | refused | 2 | yes | no | yes | yes |" \
        in text
    assert (tmp_path / "table.md").read_text().startswith("# Issue 29's adversarial trial")


def test_reading_path_counts_every_span_and_reports_each_algorithms_total(
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """``python bench/reading.py``: how many lines a reader reads from an algorithm's config to
    its optimizer steps (SAC, TD3, DQN from pixels). Every span the script names still exists
    (a renamed definition is an error, not a silent zero) and its totals add up; the counts are
    reported, not held to a bound (a bound cost commits that only moved lines around)."""
    import subprocess

    reading = _load("reading")
    for algo in ("sac", "td3", "dqn-pixels"):
        assert reading.main(["--algo", algo]) == 0
        text = capsys.readouterr().out
        total = next(line for line in text.splitlines() if line.startswith("| **"))
        lines, code = (int(cell.strip(" *")) for cell in total.strip("|").split("|")[2:])
        rows = reading.count(reading.PATHS[algo])
        assert (lines, code) == (sum(r[2] for r in rows), sum(r[3] for r in rows))
        assert all(r[2] >= r[3] > 0 for r in rows)
    with pytest.raises(SystemExit, match="no definition 'nosuch'"):
        reading.count([("beyondfit/rl/algos/algorithm.py", ["nosuch"])])
    with pytest.raises(SystemExit, match=r"git cannot show conf/algo/sac\.yaml at 0000000"):
        reading.count(reading.PATH_AT_ISSUE, "0000000")  # as in a shallow clone: one line
    known = subprocess.run(["git", "cat-file", "-e", reading.ISSUE_COMMIT], cwd=BENCH.parent,
                           capture_output=True).returncode == 0
    if known:  # a shallow clone lacks the issue's commit
        assert reading.main(["--issue"]) == 0
        assert f"SAC's path at {reading.ISSUE_COMMIT}" in capsys.readouterr().out
