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

A mean is over the runs with a finite final value: a run whose result is NaN or infinite, or
that never logged the metric, is left out, and the table says how many of the setting's runs
the mean is over and which were left out.

Output: ``compare.png``, ``compare_scores.png`` and ``compare.md`` in the first DIR, or in
``--out``.

Each run is read once, one run at a time: its metrics file is reduced to the names it logged
and the curves of those a panel can show, its launch record to its overrides and seed (the
``seed:`` line of its config, not the whole file), so ten thousand runs take memory for their
curves, not for their rows.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beyondfit.cli.intervals import REPS, iqm_interval
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
    """One run directory: the names it logged, the curves a comparison draws, the overrides it
    was launched with, its final record."""

    path: Path
    names: tuple[str, ...] = ()  # the numeric names it logged, in the order first logged
    keys: frozenset[str] = frozenset()  # every key of its rows
    overrides: list[str] = field(default_factory=list)
    seed: Any = None
    result: dict[str, Any] | None = None
    curves: dict[str, tuple[array, array]] = field(default_factory=dict)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Its metrics file's rows, read again now (a comparison keeps only its curves)."""
        return read_metrics(self.path / METRICS)

    def series(self, name: str) -> tuple[Sequence[float], Sequence[float]]:
        """``(steps, values)`` of ``name`` as :func:`~beyondfit.observers.plots.series` reads
        them; a name it was not kept for is read from the file again (never, for the names a
        panel shows or ``--metric`` asks for)."""
        if name not in self.curves:
            if name not in self.keys:
                return (), ()
            self.curves[name] = _compact(series(read_metrics(self.path / METRICS), name))
        return self.curves[name]


#: The metrics file of a run directory.
METRICS = "metrics.jsonl"


def read_run(file: Path, wanted: Iterable[str] = ()) -> Run | None:
    """The run whose metrics file is ``file`` (``None`` when it has no rows): its rows are read,
    reduced to the curves of the names a panel would show (or ``wanted``), and let go."""
    rows = read_metrics(file)
    if not rows:
        return None
    numeric: dict[str, None] = {}  # in the order each first holds a number (panels' order)
    keys: set[str] = set()
    waiting: set[str] = set()  # keys seen, none of their values a number yet ("kind")
    shapes: set[tuple[str, ...]] = set()  # rows of one kind share their keys
    for row in rows:
        turned = any(isinstance(row.get(k), int | float) for k in waiting)
        shape = tuple(row)
        if shape in shapes and not turned:
            continue
        shapes.add(shape)
        for key, value in row.items():
            number = isinstance(value, int | float)
            if key not in keys:
                keys.add(key)
                if not number:
                    waiting.add(key)
            elif not (key in waiting and number):
                continue
            if number:
                numeric[key] = None
                waiting.discard(key)
    names = tuple(sys.intern(n) for n in numeric)
    kept = {n for shown in panels([dict.fromkeys(names, 0.0)]).values() for n in shown}
    kept.update(n for n in wanted if n in keys)
    curves = {sys.intern(n): _compact(series(rows, n)) for n in kept}
    overrides, seed = _launch_info(file.parent)
    return Run(file.parent, names, frozenset(sys.intern(k) for k in keys), overrides, seed,
               _result(file.parent), curves)


def _compact(curve: tuple[Sequence[float], Sequence[float]]) -> tuple[array, array]:
    steps, values = curve
    return array("d", steps), array("d", values)


@dataclass
class Setting:
    """Runs that differ only by seed."""

    label: str
    runs: list[Run]


def _natural_key(path: Path) -> list[Any]:
    # Multirun job folders 0, 1, ..., 10 sort as numbers, not as text.
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def find_runs(dirs: Sequence[str | Path], metrics: Iterable[str] = ()) -> list[Run]:
    """Every run under ``dirs`` (a folder holding ``metrics.jsonl``), in launch order, each
    read by :func:`read_run` (keeping the curves of ``metrics`` too)."""
    wanted = list(metrics)
    runs: list[Run] = []
    for given in dirs:
        root = Path(given)
        if not root.is_dir():
            raise BeyondfitError(f"{str(root)!r} is not a directory; give run or sweep directories")
        files = sorted(root.rglob(METRICS), key=lambda p: _natural_key(p.parent))
        if not files:
            raise BeyondfitError(
                f"no runs under {str(root)!r} (no metrics.jsonl found); give the directory "
                "of a run or of a multirun sweep"
            )
        for file in files:
            run = read_run(file, wanted)
            if run is not None:
                runs.append(run)
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

    Read as plain data, never resolved: a run directory is data, and resolving its config would
    run its resolvers (``${oc.env:SECRET}`` into the report) or recurse without end. The seed
    is the ``seed=`` override, else the config's top-level ``seed:`` line: only that line is
    parsed (a whole config is ~10 ms of YAML, the most of a large comparison's time).
    """
    hydra_dir = run_dir / ".hydra"
    if not hydra_dir.is_dir():
        return [], None
    overrides = _read_yaml(hydra_dir / "overrides.yaml")
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        overrides = []
    given = [o.partition("=")[2] for o in overrides if o.partition("=")[0] in ("seed", "+seed")]
    seed = _plain_int(given[-1]) if given else None
    if seed is None:
        seed = _config_seed(hydra_dir / "config.yaml")
    return overrides, seed


def _plain_int(text: str) -> int | None:
    """``text`` as a YAML integer (``7``, ``0x10``), or ``None``."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_SEED_LINE = re.compile(r"seed:[ \t]*(\S.*?)[ \t]*$")


def _config_seed(path: Path) -> int | None:
    """The top-level ``seed:`` of a Hydra ``config.yaml``: its first such line (Hydra writes
    one key per line, ``seed`` near the top), read up to there only; ``None`` with a warning
    when the file cannot be read."""
    if not path.is_file():
        return None
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                found = _SEED_LINE.match(line)
                if found:
                    seed = _plain_int(found.group(1))
                    if seed is None:  # a damaged record: said, as an unreadable file is
                        _warn(path, f"its seed: {found.group(1)[:40]!r} is not a whole number")
                    return seed
    except (OSError, UnicodeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _warn(path, f"it cannot be read ({reason})")
    return None


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
    order: dict[str, None] = {}
    for s in settings:
        for run in s.runs:
            order.update(dict.fromkeys(run.names))
    names: list[str] = []
    for panel_names in panels([dict.fromkeys(order, 0.0)]).values():
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
    grid = np.unique(np.concatenate([np.asarray(s, dtype=float) for s, _ in curves]))
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
    an RL run's confirming evaluation), else its last logged value (None: never logged, or a
    result that is not a finite number)."""
    if run.result is not None and name in run.result["values"]:
        return result_value(run.result, name)
    _, values = run.series(name)
    return values[-1] if values else None


#: Why a run is left out of a mean: its final value is NaN or infinite (or no number), or it
#: never logged the metric.
NONFINITE, NEVER_LOGGED = "with a non-finite result", "that never logged it"


@dataclass
class Finals:
    """One metric's final values over a setting's runs: the finite ones (what a mean is
    over), and the runs left out, by why."""

    values: list[float]
    total: int
    left_out: dict[str, list[Run]] = field(default_factory=dict)

    def count(self) -> str:
        """How many runs the values are of: ``5``, or ``4 of 5: 1 with a non-finite result
        left out``."""
        if not self.left_out:
            return str(self.total)
        why = " and ".join(f"{len(runs)} {reason}" for reason, runs in self.left_out.items())
        return f"{len(self.values)} of {self.total}: {why} left out"


def finals_of(setting: Setting, name: str) -> Finals:
    """``name``'s final value in each run of ``setting`` (:func:`final_value`), the runs
    without a finite one set apart."""
    found = Finals([], len(setting.runs))
    for run in setting.runs:
        value = final_value(run, name)
        if value is not None and math.isfinite(value):
            found.values.append(value)
            continue
        resulted = run.result is not None and name in run.result["values"]
        why = NONFINITE if resulted or run.series(name)[1] else NEVER_LOGGED
        found.left_out.setdefault(why, []).append(run)
    return found


def finals(setting: Setting, name: str) -> list[float]:
    """The final value of ``name`` in each run of ``setting`` that logged a finite one."""
    return finals_of(setting, name).values


#: Resamples x runs one bootstrap holds at once (numpy keeps ~3 arrays of that many 8-byte
#: values): 50,000 resamples up to 100 runs, fewer above (at least :data:`MIN_REPS`). The
#: full 50,000 over 10,000 runs was 12 GB and minutes per metric.
BOOTSTRAP_VALUES = 5_000_000
MIN_REPS = 1_000


def bootstrap_reps(runs: int) -> int:
    """The resamples drawn for the interval of ``runs`` runs' scores."""
    return max(MIN_REPS, min(REPS, BOOTSTRAP_VALUES // max(runs, 1)))


class Scores:
    """Every setting's :class:`Finals` and IQM interval per metric, each computed once (the
    tables and ``compare_scores.png`` share them)."""

    def __init__(self) -> None:
        self._finals: dict[tuple[int, str], Finals] = {}
        self._intervals: dict[tuple[int, str], tuple[float, float, float]] = {}

    def finals(self, setting: Setting, name: str) -> Finals:
        key = (id(setting), name)
        if key not in self._finals:
            self._finals[key] = finals_of(setting, name)
        return self._finals[key]

    def interval(self, setting: Setting, name: str) -> tuple[float, float, float] | None:
        """``(iqm, low, high)`` of the finite final values, or ``None`` when there are none."""
        values = self.finals(setting, name).values
        if not values:
            return None
        key = (id(setting), name)
        if key not in self._intervals:
            self._intervals[key] = iqm_interval(values, reps=bootstrap_reps(len(values)))
        return self._intervals[key]


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


def _interval_text(found: tuple[float, float, float] | None) -> str:
    if found is None:
        return "–"
    center, low, high = found
    return f"{_short(center, 4)} [{_short(low, 4)}, {_short(high, 4)}]"


def _finals_table(settings: Sequence[Setting], names: Sequence[str],
                  cell: Callable[[Setting, str], str], scores: Scores) -> str:
    """A markdown table: one row per setting, ``cell`` of each metric. The runs column says
    how many runs the row's values are of; where that differs from metric to metric, each
    cell that is of fewer than all says its own count."""
    header = ["setting", "runs", *names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for setting in settings:
        found = [scores.finals(setting, name) for name in names]
        counts = {f.count() for f in found}
        cells = [cell(setting, name) for name in names]
        if len(counts) == 1:
            runs = counts.pop()
        else:
            runs = str(len(setting.runs))
            cells = [text + (f" ({f.count()})" if f.left_out else "")
                     for text, f in zip(cells, found, strict=True)]
        lines.append("| " + " | ".join([f"`{setting.label}`", runs, *cells]) + " |")
    return "\n".join(lines) + "\n"


def table(settings: Sequence[Setting], names: Sequence[str],
          scores: Scores | None = None) -> str:
    """A markdown table: one row per setting, final value of each metric as mean ± std."""
    scores = scores or Scores()
    return _finals_table(settings, names,
                         lambda s, name: _mean_std(scores.finals(s, name).values), scores)


def iqm_table(settings: Sequence[Setting], names: Sequence[str],
              scores: Scores | None = None) -> str:
    """A markdown table: per setting and metric, the IQM of the final values [95% interval]."""
    scores = scores or Scores()
    return _finals_table(settings, names,
                         lambda s, name: _interval_text(scores.interval(s, name)), scores)


def left_out_note(settings: Sequence[Setting], names: Sequence[str], scores: Scores,
                  shown: int = 10) -> str:
    """The runs left out of the means, named (the first ``shown``), or ``""``."""
    entries = [f"`{run.path}` ({name}, {why[5:] if why == NONFINITE else 'never logged'})"
               for setting in settings for name in names
               for why, runs in scores.finals(setting, name).left_out.items() for run in runs]
    if not entries:
        return ""
    more = f", and {len(entries) - shown} more" if len(entries) > shown else ""
    return f"\nLeft out of the values above: {', '.join(entries[:shown])}{more}.\n"


def plot_scores(settings: Sequence[Setting], names: Sequence[str], out: Path,
                scores: Scores | None = None) -> Path:
    """One panel per metric: each run's final value per setting, its IQM and 95% interval."""
    scores = scores or Scores()
    fig, axes = new_figure(len(names), height=max(2.4, 0.9 + 0.45 * len(settings)))
    rows = list(range(len(settings)))[::-1]  # the first setting on top
    for ax, name in zip(axes, names):
        labels = []
        for row, (i, setting) in zip(rows, enumerate(settings)):
            values = scores.finals(setting, name).values
            labels.append(f"{setting.label} (n={len(values)})")
            interval = scores.interval(setting, name)
            if interval is None:
                continue
            color = f"C{i % 10}"
            # Runs with equal scores spread a little vertically, so each dot shows.
            jitter = [row + 0.12 * (k % 5 - 2) / 2 for k in range(len(values))]
            ax.scatter(values, jitter, s=14, color=color, alpha=0.6, linewidths=0)
            center, low, high = interval
            ax.errorbar([center], [row], xerr=[[center - low], [high - center]], fmt="D",
                        color=color, markersize=6, capsize=4, linewidth=2)  # fmt: skip
        ax.set_yticks(rows, labels, fontsize=7)
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
            curves = [run.series(name) for run in setting.runs]
            grid, mean, low, high = band(curves)
            if not grid:
                continue
            label = f"{setting.label} (n={sum(1 for steps, _ in curves if len(steps))})"
            ax.plot(grid, mean, color=color, linewidth=1.5, label=label)
            if len(setting.runs) > 1:
                ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
        ax.set_title(name)
        ax.set_xlabel("optimizer step")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("mean across seeds; shaded: min to max", fontsize=9)
    return save_png(fig, out)


def seed_ranges(seeds: Iterable[Any]) -> str:
    """The distinct seeds, in order, consecutive ones as a range: ``0-399, 1000``."""
    ordered = sorted({seed for seed in seeds if seed is not None})
    spans: list[list[int]] = []
    for seed in ordered:
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return ", ".join(f"{a}" if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}"
                     for a, b in spans)


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
    settings = group_runs(find_runs(dirs, metrics or ()))
    names = list(metrics) if metrics else metric_names(settings)
    logged = {n for s in settings for run in s.runs for n in run.keys}
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
    scores = Scores()
    png = plot(settings, names, out_dir / "compare.png")
    plot_scores(settings, names, out_dir / "compare_scores.png", scores)
    sources = ", ".join(f"`{d}`" for d in dirs)
    seeds = seed_ranges(r.seed for s in settings for r in s.runs)
    largest = max(len(s.runs) for s in settings)
    reps = (f"{REPS:,} resamples" if bootstrap_reps(largest) == REPS else
            f"{REPS:,} resamples; for a setting of over {BOOTSTRAP_VALUES // REPS} runs, "
            f"{BOOTSTRAP_VALUES:,} / runs, at least {MIN_REPS:,}")
    text = (
        f"# Comparison of {sum(len(s.runs) for s in settings)} runs\n\n"
        f"From {sources}"
        + (f"; seeds {seeds}" if seeds else "")
        + ". Final values, mean ± std across the runs of each setting: each run's result "
        "(`result.json`: the values of the model it ended with, e.g. the restored best "
        "weights or an RL run's confirming evaluation), else its last logged value "
        "(curves: `compare.png`). A run whose result is NaN or infinite, or that never logged "
        "a value, is left out, and the runs column says so.\n\n"
        + table(settings, names, scores) + left_out_note(settings, names, scores)
        + "\nInterquartile mean (IQM: the mean of the middle 50% of the runs) of the final "
        f"values, with its 95% stratified bootstrap interval over the runs of each setting "
        f"({reps}; Agarwal et al. 2021; every run's value: `compare_scores.png`).\n\n"
        + iqm_table(settings, names, scores)
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
