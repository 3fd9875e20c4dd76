"""beyondfit.cli.compare: a real 2-seed multirun, then grouping, bands, tables and bad input."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from beyondfit import BeyondfitError
from beyondfit.cli.compare import band, compare, find_runs, group_runs, main

pytest.importorskip("matplotlib")


def is_png(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.e2e
def test_two_seed_multirun_then_compare(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    launched = subprocess.run(
        [
            sys.executable, "-m", "beyondfit", "-m", "+task=regression", "seed=0,1",
            "train.epochs=2", "plots=false", f"hydra.sweep.dir={sweep}",
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    for job in ("0", "1"):  # each run in its own directory, with its own config and log
        assert (sweep / job / "metrics.jsonl").is_file()
        assert (sweep / job / ".hydra" / "overrides.yaml").is_file()
        assert "epoch 2/2 - loss:" in (sweep / job / "beyondfit.log").read_text()
    seeds = [json.loads((sweep / j / "metrics.jsonl").read_text().splitlines()[-1]) for j in "01"]
    assert seeds[0]["val_loss"] != seeds[1]["val_loss"]  # the seed did change the run

    compared = subprocess.run(
        [sys.executable, "-m", "beyondfit.compare", str(sweep)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    width, height = is_png(sweep / "compare.png")
    assert 600 <= width <= 2000 and 200 <= height <= 600
    table = (sweep / "compare.md").read_text()
    assert "| setting | runs | val_loss | val_r2 | loss |" in table
    row = next(line for line in table.splitlines() if line.startswith("| `regression`"))
    assert row.split(" | ")[1] == "2"  # both seeds in one setting
    assert " ± " in row
    assert table in compared.stdout


def fake_run(path: Path, overrides: list[str], seed: int, losses: list[float]) -> Path:
    """A run directory as the CLI leaves it: metrics rows plus Hydra's record of the launch."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (path / ".hydra" / "config.yaml").write_text(f"seed: {seed}\n")
    rows = []
    for i, loss in enumerate(losses, 1):
        rows.append({"kind": "val", "epoch": i, "step": 10 * i, "val_loss": loss})
        rows.append({"kind": "epoch", "epoch": i, "step": 10 * i, "loss": loss + 0.1,
                     "val_loss": loss})  # fmt: skip
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    jobs = [("0.1", 0, [1.0, 0.5]), ("0.01", 0, [1.0, 0.9]), ("0.1", 1, [0.8, 0.3]),
            ("0.01", 1, [1.2, 1.1])]  # fmt: skip
    for num, (lr, seed, losses) in enumerate(jobs):
        fake_run(root / str(num), ["+task=regression", f"optimizer.lr={lr}", f"seed={seed}",
                                   "hydra.verbose=false"], seed, losses)  # fmt: skip
    return root


def test_runs_group_by_setting_ignoring_seed(sweep: Path) -> None:
    settings = group_runs(find_runs([sweep]))
    assert [(s.label, len(s.runs)) for s in settings] == [
        ("optimizer.lr=0.1", 2),
        ("optimizer.lr=0.01", 2),
    ]
    assert [r.seed for r in settings[0].runs] == [0, 1]


def test_table_gives_final_mean_and_std_and_goes_to_out(sweep: Path, tmp_path: Path) -> None:
    png, md = compare([sweep], out=tmp_path / "report")
    assert png == tmp_path / "report" / "compare.png" and md.parent == png.parent
    assert not (sweep / "compare.md").exists()
    lines = md.read_text().splitlines()
    assert "| setting | runs | val_loss | loss |" in lines
    # lr=0.1: final val_loss 0.5 and 0.3 -> mean 0.4, sample std 0.14.
    assert "| `optimizer.lr=0.1` | 2 | 0.4 ± 0.14 | 0.5 ± 0.14 |" in lines
    assert "| `optimizer.lr=0.01` | 2 | 1 ± 0.14 | 1.1 ± 0.14 |" in lines
    is_png(png)


def test_plain_run_dirs_each_form_a_setting(tmp_path: Path) -> None:
    for name, loss in (("a", 0.2), ("b", 0.4)):
        (tmp_path / name).mkdir()
        rows = [{"kind": "val", "epoch": 1, "step": 5, "val_loss": loss}]
        (tmp_path / name / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    _, md = compare([tmp_path / "a", tmp_path / "b"])
    assert md == tmp_path / "a" / "compare.md"  # into the first directory given
    text = md.read_text()
    assert "| `a` | 1 | 0.2 |" in text and "| `b` | 1 | 0.4 |" in text


def test_band_averages_where_runs_overlap_and_never_extends_a_run() -> None:
    steps, mean, low, high = band([([1, 2, 3], [1.0, 2.0, 3.0]), ([1, 3], [3.0, 5.0])])
    assert steps == [1, 2, 3]
    assert mean == [2.0, 3.0, 4.0]  # the second run is interpolated at step 2
    assert low == [1.0, 2.0, 3.0] and high == [3.0, 4.0, 5.0]
    steps, mean, _, _ = band([([1, 2], [1.0, 1.0]), ([1, 2, 3], [3.0, 3.0, 9.0])])
    assert mean == [2.0, 2.0, 9.0]  # step 3: only the run that reached it


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        ([str(tmp_path / "nowhere")], "is not a directory"),
        ([str(tmp_path / "empty")], "no runs under"),
        ([str(sweep), "--metric", "val_acc"], "--metric val_acc was never logged"),
    ]
    (tmp_path / "empty").mkdir()
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("beyondfit.compare: error: ") and message in err
        assert err.count("\n") == 1


def test_requested_metric_only(sweep: Path) -> None:
    _, md = compare([sweep], metrics=["loss"])
    assert "| setting | runs | loss |" in md.read_text()
    with pytest.raises(BeyondfitError, match="give at least one"):
        compare([])


# ---------------------------------------------------------------------- IQM and its interval
def hand_percentile(ordered: list[float], q: float) -> float:
    """numpy's default (linear) percentile, written out."""
    position = q / 100 * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def hand_iqm(values: tuple[float, ...] | list[float]) -> float:
    ordered = sorted(values)
    cut = len(ordered) // 4  # int(0.25 * n), as scipy.stats.trim_mean
    middle = ordered[cut : len(ordered) - cut]
    return sum(middle) / len(middle)


def hand_interval(scores: list[float]) -> tuple[float, float]:
    """The bootstrap percentile interval over every one of the n**n resamples."""
    import itertools

    iqms = sorted(hand_iqm(r) for r in itertools.product(scores, repeat=len(scores)))
    return hand_percentile(iqms, 2.5), hand_percentile(iqms, 97.5)


FIVE_SEEDS = [0.9, 0.5, 0.3, 0.7, 2.0]


def test_iqm_and_its_interval_match_a_hand_computation() -> None:
    from beyondfit.cli.intervals import iqm, iqm_interval

    # Sorted 0.3 0.5 0.7 0.9 2.0: one value cut from each end, the middle three averaged.
    assert iqm(FIVE_SEEDS) == pytest.approx((0.5 + 0.7 + 0.9) / 3)
    center, low, high = iqm_interval(FIVE_SEEDS)
    assert center == pytest.approx(0.7)
    assert (low, high) == pytest.approx(hand_interval(FIVE_SEEDS), abs=1e-12)
    assert low < center < high
    assert iqm([4.0]) == 4.0 and iqm_interval([4.0]) == (4.0, 4.0, 4.0)
    assert iqm([1.0, 2.0, 6.0]) == 3.0  # below 4 scores nothing is cut: the mean


def test_sampled_interval_is_reproducible_and_close_to_the_exact_one() -> None:
    import itertools

    import numpy as np

    from beyondfit.cli.intervals import iqm_interval

    scores = [0.9, 0.5, 0.3, 0.7, 2.0, 1.1, 0.6]  # 7**7 resamples: drawn, not enumerated
    sampled = iqm_interval(scores)
    assert iqm_interval(scores) == sampled  # seeded: the same scores, the same interval
    every = np.array(list(itertools.product(range(7), repeat=7)))
    ordered = np.sort(np.asarray(scores)[every], axis=1)
    exact = np.percentile(ordered[:, 1:6].mean(axis=1), [2.5, 97.5])
    assert sampled[1:] == pytest.approx(tuple(exact), abs=0.02)


def test_bootstrap_is_stratified_by_task() -> None:
    from beyondfit.cli.intervals import iqm_interval

    # Task 2 scores 10 on every run. Each resample keeps three of task 2's runs, so the pooled
    # IQM stays between that of (1,1,1,10,10,10) and that of (3,3,3,10,10,10).
    center, low, high = iqm_interval([[1.0, 10.0], [2.0, 10.0], [3.0, 10.0]], reps=2000)
    assert center == pytest.approx((2 + 3 + 10 + 10) / 4)
    assert 5.5 <= low <= center <= high <= 6.5


def test_compare_of_a_five_seed_sweep_prints_iqm_and_its_95_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep"
    for seed, score in enumerate(FIVE_SEEDS):
        fake_run(sweep / str(seed), ["+task=regression", f"seed={seed}"], seed, [1.5, score])
    main([str(sweep)])
    out = capsys.readouterr().out
    low, high = hand_interval(FIVE_SEEDS)
    assert f"| `regression` | 5 | 0.7 [{low:.4g}, {high:.4g}] |" in out
    assert "95% stratified bootstrap interval" in out
    assert "| `regression` | 5 | 0.88 ± 0.66 |" in out  # the mean ± std table is still there
    width, height = is_png(sweep / "compare_scores.png")
    assert width >= 400 and height >= 200


# ------------------------------------------------------------- run directories from elsewhere
DEEP = "[" * 200_000 + "]" * 200_000  # json.loads recurses once per level: a RecursionError


@pytest.mark.e2e
def test_a_result_json_that_is_a_fifo_is_skipped_saying_why(tmp_path: Path) -> None:
    import os

    from kit import cli

    run = fake_run(tmp_path / "run", ["+task=regression", "seed=0"], 0, [1.0, 0.5])
    os.mkfifo(run / "result.json")  # reading it would wait for a writer forever
    done = cli(str(run), module="beyondfit.compare", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "result.json was ignored" in done.stderr
    assert "not a regular file" in done.stderr
    assert "| `regression` | 1 | 0.5 |" in (run / "compare.md").read_text()
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "metrics.jsonl")  # no rows to compare: one line
    done = cli(str(tmp_path / "fifo"), module="beyondfit.compare", timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "metrics.jsonl' is not a regular file" in done.stderr


def test_a_deeply_nested_result_or_row_and_a_row_that_is_not_an_object_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = fake_run(tmp_path / "run", ["+task=regression", "seed=0"], 0, [1.0, 0.5])
    (run / "result.json").write_text(DEEP)
    with (run / "metrics.jsonl").open("a") as f:
        f.write(DEEP + "\n[1, 2]\n\"text\"\n7\n")
        f.write(json.dumps({"kind": "val", "step": "late", "val_loss": 9.0}) + "\n")
        f.write(json.dumps({"kind": "val", "step": 40, "val_loss": 10**400}) + "\n")
    main([str(run)])
    captured = capsys.readouterr()
    assert "| `regression` | 1 | 0.5 |" in captured.out  # the good rows, compared as before
    assert captured.err.count("\n") == 1 and "result.json was ignored" in captured.err


def test_a_deeply_nested_hydra_record_is_one_warning_and_a_config_is_never_parsed_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = fake_run(tmp_path / "run", ["+task=regression", "seed=0"], 0, [1.0, 0.5])
    (run / ".hydra" / "overrides.yaml").write_text(DEEP)  # PyYAML composes it recursively
    main([str(run)])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "overrides.yaml was ignored, it cannot be read" in err
    # Only the config's top-level seed line is read: a deep one is no seed, and no error.
    (run / ".hydra" / "overrides.yaml").write_text("- +task=regression\n")
    (run / ".hydra" / "config.yaml").write_text(DEEP)
    assert find_runs([run])[0].seed is None
    (run / ".hydra" / "config.yaml").write_text("task:\n  seed: 9\nseed: 4  \nx: 1\n")
    assert find_runs([run])[0].seed == 4
    assert capsys.readouterr().err == ""


def test_a_result_value_too_large_for_a_float_is_not_a_value(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "run", ["+task=regression", "seed=0"], 0, [1.0, 0.5])
    (run / "result.json").write_text('{"values": {"val_loss": 1%s}}' % ("0" * 400))
    _, md = compare([run])  # no OverflowError: the result has no finite val_loss, as a NaN
    text = md.read_text()
    assert "| `regression` | 1 | – (0 of 1: 1 with a non-finite result left out) | 0.6 |" in text


def test_out_naming_a_file_is_one_line(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "report.md").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        main([str(sweep), "--out", str(tmp_path / "report.md")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("beyondfit.compare: error: --out ") and err.count("\n") == 1
    assert "report.md" in err and "is a file" in err and "folder" in err
    assert (tmp_path / "report.md").read_text() == "mine"  # nothing lost
