"""Learning curves from ``metrics.jsonl``: ``curves.png`` at the end of a run.

Panels, each drawn only when the run logged its values: the loss (``loss`` and
``val_loss``), the return for RL (``episode_return`` of the training episodes and
``val_return`` of the evaluation episodes), and up to three other validation metrics
(``val_r2``, ``val_mae``, ...). The x axis is the optimizer step.

matplotlib is an optional extra (``pip install "beyondfit[plots]"``), imported only when a
plot is drawn. Drawing goes through the Agg canvas of a bare ``Figure``, never pyplot, so
it neither needs a display nor switches the backend of a notebook that calls it.

The command line draws in-process when training ends (``on_fit_end``), so that a run's files
are complete when its command returns: a script that runs a job and then copies its plot finds
it. Importing matplotlib and drawing cost about a second of CPU (0.5 s to import, 0.3-0.5 s to
draw); drawing in a separate process instead cost more (a second interpreter and its imports)
and hid almost none of it, since little is left to do after training. The PNG is written
atomically; a drawing that fails is one warning line on stderr, never a failed run.
``python -m beyondfit.observers.plots RUN_DIR`` draws (or redraws) a run's curves without
importing torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback
from beyondfit.core.errors import BeyondfitError

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")

_MISSING = (
    "plotting needs matplotlib, which is not installed; "
    'pip install "beyondfit[plots]" (or pip install matplotlib), or set plots=false'
)
#: Panel title -> the names it shows, in order (a panel with none of them is left out).
PANELS: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "val_loss"),
    "return": ("episode_return", "val_return"),
}
#: Validation values that are not worth a panel of their own.
_NOT_METRICS = {"val_loss", "val_return", "val_length"}

Series = tuple[list[float], list[float]]


def has_matplotlib() -> bool:
    """True when matplotlib can be imported (checked without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def skipped_without_matplotlib(name: str, unless: str = "") -> None:
    """The one stderr line for a plot not written because matplotlib is missing."""
    logging.getLogger("beyondfit").warning(
        '%s skipped: matplotlib is not installed; pip install "beyondfit[plots]" (or pip '
        "install matplotlib)%s", name, unless,
    )


def require_matplotlib() -> None:
    """Raise a BeyondfitError saying how to install matplotlib when it is missing."""
    if not has_matplotlib():
        raise BeyondfitError(_MISSING)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``: every line that is a JSON object. Any other line is
    skipped: a torn last line from a killed run, or what a file from elsewhere may hold (an
    array, a number, JSON nested deeper than the stack)."""
    path = Path(path)
    if path.exists() and not path.is_file():  # a FIFO would block forever
        raise BeyondfitError(
            f"{str(path)!r} is not a regular file; give the directory of a beyondfit run"
        )
    if not path.is_file():
        raise BeyondfitError(
            f"no metrics file at {str(path)!r}; is this a beyondfit run directory?"
        )
    rows = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def series(rows: Sequence[Mapping[str, Any]], name: str) -> Series:
    """``(steps, values)`` of one logged name, in step order, one value per step.

    ``val_`` names come from the evaluation rows. Training names come from the epoch rows
    when the run has at least two epochs (one clean point per epoch, as Keras shows them),
    otherwise from the log-interval rows (RL runs are usually one long "epoch").
    """
    if name.startswith("val_"):
        kinds: tuple[str, ...] = ("val",)
        if not any(r.get("kind") == "val" and name in r for r in rows):
            kinds = ("epoch",)  # rows written before a run had evaluation rows of its own
    else:
        epochs = sum(1 for r in rows if r.get("kind") == "epoch" and name in r)
        kinds = ("epoch",) if epochs >= 2 else ("train", "epoch")
    by_step: dict[float, float] = {}
    for row in rows:
        step, value = _number(row.get("step")), _number(row.get(name))
        if row.get("kind") in kinds and step is not None and value is not None:
            by_step[step] = value  # later rows of a step win
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def _number(value: Any) -> float | None:
    """``value`` as a float, or ``None`` when it is no number (a string, or an integer too
    large for a float)."""
    if not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def panels(rows: Sequence[Mapping[str, Any]], max_metrics: int = 3) -> dict[str, list[str]]:
    """The panels worth drawing for these rows: title -> names with at least one value."""
    present: dict[str, None] = {}
    for row in rows:
        for name, value in row.items():
            if isinstance(value, (int, float)):
                present.setdefault(name, None)
    chosen = {title: [n for n in names if n in present] for title, names in PANELS.items()}
    chosen = {title: names for title, names in chosen.items() if names}
    others = [n for n in present if n.startswith("val_") and n not in _NOT_METRICS]
    if others[:max_metrics]:
        chosen["validation metrics"] = others[:max_metrics]
    return chosen


def new_figure(panel_count: int, width: float = 4.2, height: float = 3.2) -> tuple[Any, list[Any]]:
    """A bare Agg figure with ``panel_count`` side-by-side axes (no pyplot, no display)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * panel_count, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(fig.subplots(1, panel_count, squeeze=False)[0])


def save_png(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` atomically (a reader never sees half a PNG)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no half-written file left beside the run's
        raise
    return path


def use_log_scale(values: Sequence[float]) -> bool:
    """Log y when every value is positive and they span more than a factor of 30."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 30


def plot_run(run_dir: str | Path, out: str | Path | None = None, title: str | None = None) -> Path:
    """Draw the learning curves of the run in ``run_dir`` into ``out`` (default ``curves.png``).

    Returns the PNG's path. Raises :class:`BeyondfitError` when there is no metrics file,
    nothing to plot, or no matplotlib.
    """
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    chosen = panels(rows)
    if not chosen:
        raise BeyondfitError(f"{str(run_dir)!r} has no logged values to plot yet")
    fig, axes = new_figure(len(chosen))
    for ax, (panel, names) in zip(axes, chosen.items()):
        drawn: list[float] = []
        for name in names:
            steps, values = series(rows, name)
            if not steps:
                continue
            marker = "o" if len(steps) <= 30 else None  # sparse evaluations: show the points
            ax.plot(steps, values, label=name, marker=marker, markersize=3, linewidth=1.5)
            drawn += values
        if panel == "loss" and use_log_scale(drawn):
            ax.set_yscale("log")
        ax.set_title(panel)
        ax.set_xlabel("optimizer step")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_png(fig, Path(out) if out is not None else run_dir / "curves.png")


class CurvesPlot(Callback):
    """Write ``curves.png`` into the run directory when training ends.

    It draws in ``on_fit_end`` itself, whichever way the fit ended (its budget, early
    stopping, a stop rule, or an interruption the engine handled): the PNG is on disk when
    ``fit`` returns or raises. A run with nothing logged yet, or a drawing that fails (a full
    disk), is one warning line, not an error: training is over and its other files stay good.

    Args:
        run_dir: the folder holding ``metrics.jsonl`` (the PNG goes beside it).
        title: a title above the panels (the CLI gives the task's name).
    """

    rank_zero_only = True  # under DDP: one writer (rank 0), not one per rank

    def __init__(self, run_dir: str | Path, title: str | None = None) -> None:
        require_matplotlib()  # fail before training, not after it
        self.run_dir = Path(run_dir)
        self.title = title
        self.path: Path | None = None

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Draw the curves; a failure is reported as one line, not raised."""
        try:
            self.path = plot_run(self.run_dir, title=self.title)
        except Exception as exc:  # a report, not the run: never lose the run over it
            reason = str(exc) if isinstance(exc, BeyondfitError) else _error_line(exc)
            log.warning("curves.png not written: %s", reason)
            return
        log.info("learning curves in %s", self.path)


def _error_line(exc: BaseException) -> str:
    """``OSError: [Errno 28] No space left on device``: an exception's first line, named."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m beyondfit.observers.plots RUN_DIR [--title T]``: draw ``curves.png``."""
    parser = argparse.ArgumentParser(prog="python -m beyondfit.observers.plots",
                                     description="Draw RUN_DIR/curves.png from its metrics.")
    parser.add_argument("run_dir")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    try:
        plot_run(args.run_dir, title=args.title)
    except (BeyondfitError, OSError) as exc:  # one line, as the command line's warnings
        reason = str(exc) if isinstance(exc, BeyondfitError) else _error_line(exc)
        print(f"beyondfit: warning: curves.png not written: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
