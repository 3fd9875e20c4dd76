"""compare's counts and cost (issue 47): a mean is over the runs with a finite result, and the
table says how many of the setting's runs that is and which were left out (it said "runs 5"
over a mean of 4); a comparison keeps each run's curves, not its rows, reads one line of its
config, and bounds the bootstrap's memory (10,000 runs took 116 s and 12.4 GB)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from beyondfit.cli.compare import bootstrap_reps, compare, find_runs, main

pytest.importorskip("matplotlib")


def run_dir(path: Path, seed: int, val_loss: float | str | None, *, losses: int = 2,
            lr: str = "0.1", extra: dict[str, float] | None = None) -> Path:
    """A run as the CLI leaves it; ``val_loss`` its result (a JSON token: NaN, Infinity),
    ``None`` for no result.json."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text(
        f"- +task=regression\n- optimizer.lr={lr}\n- seed={seed}\n")
    (path / ".hydra" / "config.yaml").write_text(f"seed: {seed}\n")
    rows = []
    for i in range(1, losses + 1):
        rows.append({"kind": "val", "epoch": i, "step": 10 * i, "val_loss": 1.0 / i,
                     **(extra or {})})
        rows.append({"kind": "epoch", "epoch": i, "step": 10 * i, "loss": 2.0 / i,
                     "val_loss": 1.0 / i})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if val_loss is not None:
        (path / "result.json").write_text(f'{{"values": {{"val_loss": {val_loss}}}}}')
    return path


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "null", '"0.3"'])
def test_a_run_whose_result_is_not_finite_is_left_out_and_the_count_says_so(
        tmp_path: Path, token: str) -> None:
    sweep = tmp_path / "sweep"
    for seed, value in enumerate(["0.1", "0.2", token, "0.3", "0.4"]):
        run_dir(sweep / str(seed), seed, value)
    _, md = compare([sweep], metrics=["val_loss"])
    text = md.read_text()
    row = "| `regression` | 4 of 5: 1 with a non-finite result left out | 0.25 ± 0.13 |"
    assert row in text, text
    assert f"Left out of the values above: `{sweep / '2'}` (val_loss, a non-finite result)." \
        in text
    count = "| `regression` | 4 of 5: 1 with a non-finite result left out |"
    assert text.count(count) == 2  # the mean ± std table and the IQM table


def test_metrics_with_different_counts_say_each_its_own(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    sweep = tmp_path / "sweep"
    run_dir(sweep / "0", 0, "NaN", extra={"val_r2": 0.5})
    run_dir(sweep / "1", 1, "0.2", extra={"val_r2": 0.7})
    run_dir(sweep / "2", 2, "0.4")  # never logged val_r2
    main([str(sweep), "--metric", "val_loss", "--metric", "val_r2", "--metric", "loss"])
    out = capsys.readouterr().out
    assert ("| `regression` | 3 | 0.3 ± 0.14 (2 of 3: 1 with a non-finite result left out) | "
            "0.6 ± 0.14 (2 of 3: 1 that never logged it left out) | 1 ± 0 |") in out, out
    assert f"`{sweep / '2'}` (val_r2, never logged)" in out


def test_every_run_counted_when_every_result_is_finite(tmp_path: Path) -> None:
    for seed in range(3):
        run_dir(tmp_path / "sweep" / str(seed), seed, f"0.{seed + 1}")
    _, md = compare([tmp_path / "sweep"], metrics=["val_loss"])
    text = md.read_text()
    assert "| `regression` | 3 | 0.2 ± 0.1 |" in text and "Left out" not in text
    assert "seeds 0-2." in text


def test_a_comparison_keeps_curves_not_rows(tmp_path: Path) -> None:
    """100 runs of 400 epochs (1,600 rows): their rows as dicts were ~60 MB; their curves
    are a few."""
    for seed in range(100):
        run_dir(tmp_path / "sweep" / str(seed), seed, "0.5", losses=400,
                extra={f"val_extra_{k}": 0.5 for k in range(8)})
    tracemalloc.start()
    try:
        runs = find_runs([tmp_path / "sweep"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(runs) == 100 and runs[0].seed == 0
    assert peak < 20e6, peak / 1e6
    assert set(runs[0].curves) == {"loss", "val_loss", "val_extra_0", "val_extra_1",
                                   "val_extra_2"}  # what a panel can show
    steps, values = runs[0].series("val_extra_7")  # any other name: read again, on demand
    assert len(steps) == 400 and values[-1] == 0.5


def test_the_bootstrap_of_a_large_setting_is_bounded() -> None:
    assert bootstrap_reps(5) == bootstrap_reps(100) == 50_000  # small sweeps as before
    assert bootstrap_reps(400) == 12_500 and bootstrap_reps(10_000) == 1_000
    assert 400 * bootstrap_reps(400) <= 5_000_000
