"""Compare runs: ``python -m beyondfit.compare DIR [DIR ...] [--out DIR]``.

Each DIR is a run directory (it holds ``metrics.jsonl``) or any folder above some, such as
a Hydra multirun sweep (``multirun/regression/DATE/`` with ``0/``, ``1/``, ...). Runs are
grouped into *settings* by their command-line overrides, ignoring ``seed`` and ``hydra.*``:
``-m +task=regression optimizer.lr=0.01,0.1 seed=0,1,2`` gives two settings of three seeds.
For each setting the PNG draws the mean curve across seeds and shades the spread
(min to max; at each step, over the runs that reached it); the markdown table gives each
key metric's final value as mean ± std (the run's result, ``result.json``, where it has one:
the model it ended with, not the last epoch logged; see :mod:`beyondfit.cli.result`), and a
second table its interquartile mean (IQM)
with a 95% stratified bootstrap interval over the seeds (:mod:`beyondfit.cli.intervals`,
the method of Agarwal et al. 2021). ``compare_scores.png`` draws every run's final value
per setting beside that IQM and interval.

Output: ``compare.png``, ``compare_scores.png`` and ``compare.md`` in the first DIR, or in
``--out``.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beyondfit.cli.intervals import iqm_interval
from beyondfit.cli.result import RESULT_FILE, load_result, result_value
from beyondfit.core.errors import BeyondfitError
from beyondfit.observers.plots import (
    new_figure,
    panels,
    read_metrics,
    require_matplotlib,
    save_png,
    series,
)


@dataclass
class Run:
    """One run directory: its rows, the overrides it was launched with, its final record."""

    path: Path
    rows: list[dict[str, Any]]
    overrides: list[str] = field(default_factory=list)
    seed: Any = None
    result: dict[str, Any] | None = None


@dataclass
class Setting:
    """Runs that differ only by seed."""

    label: str
    runs: list[Run]


def _natural_key(path: Path) -> list[Any]:
    # Multirun job folders 0, 1, ..., 10 sort as numbers, not as text.
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def find_runs(dirs: Sequence[str | Path]) -> list[Run]:
    """Every run under ``dirs`` (a folder holding ``metrics.jsonl``), in launch order."""
    runs: list[Run] = []
    for given in dirs:
        root = Path(given)
        if not root.is_dir():
            raise BeyondfitError(f"{str(root)!r} is not a directory; give run or sweep directories")
        files = sorted(root.rglob("metrics.jsonl"), key=lambda p: _natural_key(p.parent))
        if not files:
            raise BeyondfitError(
                f"no runs under {str(root)!r} (no metrics.jsonl found); give the directory "
                "of a run or of a multirun sweep"
            )
        for file in files:
            rows = read_metrics(file)
            if rows:
                overrides, seed = _launch_info(file.parent)
                runs.append(Run(file.parent, rows, overrides, seed, _result(file.parent)))
    if not runs:
        raise BeyondfitError("the runs found have empty metrics files: nothing to compare")
    return runs


def _result(run_dir: Path) -> dict[str, Any] | None:
    """The run's record, or ``None``, with a warning when result.json is there but no record."""
    record, why = load_result(run_dir)
    if why is not None:
        _warn(run_dir / RESULT_FILE, f"{why}; its last logged values are used")
    return record


def _warn(path: Path, why: str) -> None:
    print(f"beyondfit: warning: {path} was ignored, {why}", file=sys.stderr)


def _launch_info(run_dir: Path) -> tuple[list[str], Any]:
    """The run's overrides and seed, from the ``.hydra/`` folder Hydra writes (if any).

    Read as plain YAML, never resolved: a run directory is data, and resolving its config would
    run its resolvers (``${oc.env:SECRET}`` into the report) or recurse without end.
    """
    hydra_dir = run_dir / ".hydra"
    if not hydra_dir.is_dir():
        return [], None
    overrides = _read_yaml(hydra_dir / "overrides.yaml")
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        overrides = []
    config = _read_yaml(hydra_dir / "config.yaml")
    seed = config.get("seed") if isinstance(config, dict) else None
    return overrides, seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _read_yaml(path: Path) -> Any:
    """A YAML file's plain content, or ``None`` (with a warning) when it cannot be read."""
    if not path.is_file():
        return None
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, RecursionError, yaml.YAMLError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _warn(path, f"it cannot be read ({reason})")
        return None


def _override_key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def group_runs(runs: Sequence[Run]) -> list[Setting]:
    """Group runs that differ only by seed; label each group by the overrides that vary.

    Runs without Hydra metadata (written from the Python API) are each their own setting,
    labelled by their directory.
    """

    def setting_of(run: Run) -> tuple[str, ...] | None:
        if not run.overrides and run.seed is None:
            return None
        kept = [o for o in run.overrides if _override_key(o) != "seed"]
        return tuple(sorted(o for o in kept if not _override_key(o).startswith("hydra.")))

    keys = [setting_of(run) for run in runs]
    known = [set(k) for k in keys if k is not None]
    shared = set.intersection(*known) if known else set()
    groups: dict[Any, Setting] = {}
    for run, key in zip(runs, keys):
        if key is None:
            group_key: Any = ("dir", str(run.path))
            label = run.path.name
        else:
            group_key = key
            label = " ".join(o for o in key if o not in shared) or _common_label(key)
        groups.setdefault(group_key, Setting(label, [])).runs.append(run)
    return list(groups.values())


def _common_label(key: tuple[str, ...]) -> str:
    # Every run shares these overrides: name the setting by its task (or all of them).
    tasks = [o.partition("=")[2] for o in key if _override_key(o) in ("task", "experiment")]
    return " ".join(tasks) or " ".join(key) or "all runs"


def metric_names(settings: Sequence[Setting]) -> list[str]:
    """The key metrics of these runs: the loss, returns and validation metrics they logged."""
    rows = [row for s in settings for run in s.runs for row in run.rows]
    names: list[str] = []
    for panel_names in panels(rows).values():
        names += [n for n in panel_names if n not in names]
    # Evaluation values first: they are what a comparison is usually about.
    return sorted(names, key=lambda n: not n.startswith("val_"))


def band(curves: Sequence[tuple[list[float], list[float]]]) -> tuple[list[float], ...]:
    """Mean, min and max across several ``(steps, values)`` curves, at every step any has.

    At each step only the curves whose range covers it count (a run stopped early is not
    extended); inside its range a curve is interpolated linearly, so seeds that logged at
    different steps still line up. Returns ``(steps, mean, low, high)``.
    """
    import numpy as np

    curves = [(s, v) for s, v in curves if s]
    if not curves:
        return [], [], [], []
    grid = np.array(sorted({x for s, _ in curves for x in s}))
    stacked = np.full((len(curves), len(grid)), np.nan)
    for i, (s, v) in enumerate(curves):
        inside = (grid >= s[0]) & (grid <= s[-1])
        stacked[i, inside] = np.interp(grid[inside], s, v)
    return (
        grid.tolist(),
        np.nanmean(stacked, 0).tolist(),
        np.nanmin(stacked, 0).tolist(),
        np.nanmax(stacked, 0).tolist(),
    )


def final_value(run: Run, name: str) -> float | None:
    """``name`` in the run's result (``result.json``: the restored model's validation values,
    an RL run's confirming evaluation), else its last logged value (None: never logged)."""
    if run.result is not None and name in run.result["values"]:
        return result_value(run.result, name)
    _, values = series(run.rows, name)
    return values[-1] if values else None


def _short(value: float, digits: int) -> str:
    # `digits` significant digits, but never 2e+02 for a plain 202.
    text = f"{value:.{digits}g}"
    return f"{value:.0f}" if "e+" in text else text


def _mean_std(values: Sequence[float]) -> str:
    if not values:
        return "–"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return _short(mean, 4)
    return f"{_short(mean, 4)} ± {_short(statistics.stdev(values), 2)}"


def _iqm_interval(values: Sequence[float]) -> str:
    if not values:
        return "–"
    center, low, high = iqm_interval(values)
    return f"{_short(center, 4)} [{_short(low, 4)}, {_short(high, 4)}]"


def finals(setting: Setting, name: str) -> list[float]:
    """The final value of ``name`` in each run of ``setting`` that logged a finite one."""
    values = [final_value(run, name) for run in setting.runs]
    return [v for v in values if v is not None and math.isfinite(v)]


def _finals_table(
    settings: Sequence[Setting], names: Sequence[str], cell: Callable[[list[float]], str]
) -> str:
    """A markdown table: one row per setting, ``cell`` of each metric's :func:`finals`."""
    header = ["setting", "runs", *names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for setting in settings:
        cells = [f"`{setting.label}`", str(len(setting.runs))]
        cells += [cell(finals(setting, name)) for name in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table(settings: Sequence[Setting], names: Sequence[str]) -> str:
    """A markdown table: one row per setting, final value of each metric as mean ± std."""
    return _finals_table(settings, names, _mean_std)


def iqm_table(settings: Sequence[Setting], names: Sequence[str]) -> str:
    """A markdown table: per setting and metric, the IQM of the final values [95% interval]."""
    return _finals_table(settings, names, _iqm_interval)


def plot_scores(settings: Sequence[Setting], names: Sequence[str], out: Path) -> Path:
    """One panel per metric: each run's final value per setting, its IQM and 95% interval."""
    fig, axes = new_figure(len(names), height=max(2.4, 0.9 + 0.45 * len(settings)))
    rows = list(range(len(settings)))[::-1]  # the first setting on top
    for ax, name in zip(axes, names):
        for row, (i, setting) in zip(rows, enumerate(settings)):
            values = finals(setting, name)
            if not values:
                continue
            color = f"C{i % 10}"
            # Runs with equal scores spread a little vertically, so each dot shows.
            jitter = [row + 0.12 * (k % 5 - 2) / 2 for k in range(len(values))]
            ax.scatter(values, jitter, s=14, color=color, alpha=0.6, linewidths=0)
            center, low, high = iqm_interval(values)
            ax.errorbar([center], [row], xerr=[[center - low], [high - center]], fmt="D",
                        color=color, markersize=6, capsize=4, linewidth=2)  # fmt: skip
        ax.set_yticks(rows, [f"{s.label} (n={len(s.runs)})" for s in settings], fontsize=7)
        ax.set_ylim(-0.6, len(settings) - 0.4)
        ax.set_title(f"final {name}")
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle("dots: runs; diamond: IQM with its 95% stratified bootstrap interval",
                 fontsize=9)  # fmt: skip
    return save_png(fig, out)


def plot(settings: Sequence[Setting], names: Sequence[str], out: Path) -> Path:
    """One panel per metric; per setting, the mean across seeds and a min-max band."""
    fig, axes = new_figure(len(names))
    colors = [f"C{i % 10}" for i in range(len(settings))]
    for ax, name in zip(axes, names):
        for color, setting in zip(colors, settings):
            grid, mean, low, high = band([series(run.rows, name) for run in setting.runs])
            if not grid:
                continue
            label = f"{setting.label} (n={len(setting.runs)})"
            ax.plot(grid, mean, color=color, linewidth=1.5, label=label)
            if len(setting.runs) > 1:
                ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
        ax.set_title(name)
        ax.set_xlabel("optimizer step")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("mean across seeds; shaded: min to max", fontsize=9)
    return save_png(fig, out)


def compare(
    dirs: Sequence[str | Path], out: str | Path | None = None, metrics: Sequence[str] | None = None
) -> tuple[Path, Path]:
    """Compare the runs under ``dirs``; write ``compare.png``, ``compare_scores.png`` and
    ``compare.md`` into ``out``.

    ``out`` defaults to the first of ``dirs``; ``metrics`` defaults to the key metrics the
    runs logged. Returns the paths of the curves' PNG and of the markdown tables.
    """
    if not dirs:
        raise BeyondfitError("give at least one run or sweep directory")
    out_dir = Path(out) if out is not None else Path(dirs[0])
    if out is not None and out_dir.exists() and not out_dir.is_dir():
        raise BeyondfitError(f"--out {str(out_dir)!r} is a file, not a folder; give a folder "
                             "for compare.png, compare_scores.png and compare.md")
    require_matplotlib()
    settings = group_runs(find_runs(dirs))
    names = list(metrics) if metrics else metric_names(settings)
    logged = {n for s in settings for run in s.runs for row in run.rows for n in row}
    unknown = [n for n in names if n not in logged]
    if unknown:
        raise BeyondfitError(
            f"--metric {', '.join(unknown)} was never logged by these runs; "
            f"logged: {', '.join(sorted(n for n in logged if n not in ('kind', 'epoch', 'step')))}"
        )
    if not names:
        raise BeyondfitError("these runs logged no loss, return or validation values to compare")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BeyondfitError(f"--out {str(out_dir)!r} cannot be made a folder "
                             f"({exc.strerror or exc}); give a folder you can write to") from None
    png = plot(settings, names, out_dir / "compare.png")
    plot_scores(settings, names, out_dir / "compare_scores.png")
    sources = ", ".join(f"`{d}`" for d in dirs)
    seeds = sorted({str(r.seed) for s in settings for r in s.runs if r.seed is not None})
    text = (
        f"# Comparison of {sum(len(s.runs) for s in settings)} runs\n\n"
        f"From {sources}"
        + (f"; seeds {', '.join(seeds)}" if seeds else "")
        + ". Final values, mean ± std across the runs of each setting: each run's result "
        "(`result.json`: the values of the model it ended with, e.g. the restored best "
        "weights or an RL run's confirming evaluation), else its last logged value "
        "(curves: `compare.png`).\n\n" + table(settings, names)
        + "\nInterquartile mean (IQM: the mean of the middle 50% of the runs) of the final "
        "values, with its 95% stratified bootstrap interval over the runs of each setting "
        "(Agarwal et al. 2021; every run's value: `compare_scores.png`).\n\n"
        + iqm_table(settings, names)
    )
    md = out_dir / "compare.md"
    md.write_text(text)
    return png, md


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry: ``python -m beyondfit.compare DIR [DIR ...] [--out DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m beyondfit.compare",
        description="Overlay the runs of a sweep (mean and spread across seeds per setting) "
        "into compare.png, with markdown tables of final metrics in compare.md: mean ± std, "
        "and the interquartile mean with its 95%% stratified bootstrap interval (also drawn, "
        "run by run, in compare_scores.png).",
    )
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="run or multirun sweep directories")
    parser.add_argument("--out", help="folder for the PNGs and compare.md (default: first DIR)")
    parser.add_argument(
        "--metric", action="append", metavar="NAME",
        help="a logged name to compare (repeatable; default: loss, val_loss, returns, val metrics)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        png, md = compare(args.dirs, args.out, args.metric)
    except BeyondfitError as exc:
        print(f"beyondfit.compare: error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(md.read_text())
    print(f"wrote {png}, {png.with_name('compare_scores.png')} and {md}")


if __name__ == "__main__":
    main()
