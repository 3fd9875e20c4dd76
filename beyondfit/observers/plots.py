"""Learning curves from ``metrics.jsonl``: ``curves.png`` at the end of a run.

Panels, each drawn only when the run logged its values: the loss (``loss`` and
``val_loss``), the return for RL (``episode_return`` of the training episodes and
``val_return`` of the evaluation episodes, with the task's ``target_return`` as a dashed line),
one panel per other logged term of the loss (``policy_loss``, ``q/td``, ``q/cql``,
``aux/recon``, ..., each with its ``val_`` twin), and up to three other validation metrics
(``val_r2``, ``val_mae``, ...). The optimizers' own values (``lr``, ``grad_norm``,
``skipped_steps``) and the collector's (``env_steps``, ``episode_*``) get no panel of their
own. Four panels a row. The x axis is the environment steps for an RL run (its rows log
``env_steps``; an evaluation row's are read off the training rows around it), else the
optimizer step.

matplotlib is a dependency of the base install, imported only when a plot is drawn (never by
``import beyondfit`` or ``--help``). Drawing goes through the Agg canvas of a bare ``Figure``,
never pyplot, so it neither needs a display nor switches the backend of a notebook that calls
it.

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
import bisect
import importlib.util
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
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
#: Logged names that are no term of a loss: the row's place, an optimizer's own values (also as
#: ``NAME/lr``, ...) and the RL collector's statistics (``episode_*`` too).
_NOT_TERMS = {"epoch", "step", "env_steps", "lr", "grad_norm", "skipped_steps"}
#: At most this many panels: a loss logging more terms has its first ones drawn.
MAX_PANELS = 16
#: Panels a row.
COLUMNS = 4

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


def panels(rows: Sequence[Mapping[str, Any]], max_metrics: int = 3,
           terms: bool = False) -> dict[str, list[str]]:  # fmt: skip
    """The panels worth drawing for these rows: title -> names with at least one value.

    ``terms``: besides the loss and the return, a panel for each other term the loss logged
    (titled by its name, with its ``val_`` twin), in the order first logged; ``False`` (what
    ``compare`` shows): the loss, the return and the validation metrics only.
    """
    present: dict[str, None] = {}
    for row in rows:
        for name, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                present.setdefault(name, None)
    chosen = {title: [n for n in names if n in present] for title, names in PANELS.items()}
    chosen = {title: names for title, names in chosen.items() if names}
    shown = {n for names in chosen.values() for n in names}
    if terms:
        for name in present:
            if name in shown or name.startswith(("val_", "episode_")) or (
                    name.rsplit("/", 1)[-1] in _NOT_TERMS):
                continue
            chosen[name] = [name] + ([f"val_{name}"] if f"val_{name}" in present else [])
            shown.update(chosen[name])
    others = [n for n in present
              if n.startswith("val_") and n not in _NOT_METRICS and n not in shown]
    if others[:max_metrics]:
        chosen["validation metrics"] = others[:max_metrics]
    return chosen


def env_steps(rows: Sequence[Mapping[str, Any]]) -> Callable[[float], float] | None:
    """The env steps at an optimizer step, read off the rows that log ``env_steps`` (an RL
    collector's running total); ``None`` when no row logs it (not an RL run).

    A step between two logged ones (an evaluation row logs none) gets the count of the last
    logged step before it: never more env steps than the run had taken, and exact for an
    on-policy evaluation, which runs between two rollouts (interpolating would put it halfway
    into the next one); an off-policy run is at most a log interval's env steps behind."""
    by_step: dict[float, float] = {}
    for row in rows:
        step, count = _number(row.get("step")), _number(row.get("env_steps"))
        if row.get("kind") != "val" and step is not None and count is not None:
            by_step[step] = count  # later rows of a step win, as in series()
    if not by_step:
        return None
    steps = sorted(by_step)
    counts = [by_step[s] for s in steps]

    def at(step: float) -> float:
        return counts[max(0, bisect.bisect_right(steps, step) - 1)]

    return at


def _by_env_steps(steps: Sequence[float], values: Sequence[float],
                  to_env_steps: Callable[[float], float]) -> Series:  # fmt: skip
    """A curve's points against env steps; the steps of one rollout share a count, and the last
    value logged at a count stands for it (a curve, not a comb of vertical strokes)."""
    by_count: dict[float, float] = {}
    for step, value in zip(steps, values):
        by_count[to_env_steps(step)] = value
    counts = sorted(by_count)
    return counts, [by_count[c] for c in counts]


def target_return(run_dir: str | Path) -> float | None:
    """The task's ``target_return`` as the run's config says it (``.hydra/``, a resumed run's
    newest), else its ``result.json``'s ``target``; ``None`` when it has none (null, or no
    config: a run of the Python API)."""
    run_dir = Path(run_dir)
    for config in (run_dir / ".hydra" / "resume" / "config.yaml",
                   run_dir / ".hydra" / "config.yaml"):
        if config.is_file():
            try:
                from omegaconf import OmegaConf

                value = OmegaConf.select(OmegaConf.load(config), "task.target_return",
                                         default=None, throw_on_resolution_failure=False)
            except Exception:  # a config we cannot read draws no line, it fails no plot
                value = None
            return _finite(value)
    try:
        return _finite(json.loads((run_dir / "result.json").read_text()).get("target"))
    except (OSError, ValueError, AttributeError, RecursionError):
        return None


def _finite(value: Any) -> float | None:
    number = None if isinstance(value, bool) else _number(value)
    return number if number is not None and math.isfinite(number) else None


def new_figure(panel_count: int, width: float = 4.2, height: float = 3.2,
               columns: int | None = None) -> tuple[Any, list[Any]]:  # fmt: skip
    """A bare Agg figure with ``panel_count`` axes, ``columns`` a row (default: all in one
    row), no pyplot and no display; the axes in reading order."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = min(panel_count, columns or panel_count)
    lines = -(-panel_count // columns)
    fig = Figure(figsize=(width * columns, height * lines), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(lines, columns, squeeze=False).flat)
    for spare in axes[panel_count:]:  # the last row's empty places
        spare.remove()
    return fig, axes[:panel_count]


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


def curves_figure(rows: Sequence[Mapping[str, Any]], title: str | None = None,
                  target: float | None = None) -> Any:  # fmt: skip
    """The learning curves of these metrics rows as a figure (see the module's docstring for
    its panels); ``target``: a dashed line on the return panel. Raises
    :class:`BeyondfitError` when there is nothing to plot."""
    chosen = panels(rows, terms=True)
    if not chosen:
        raise BeyondfitError("no logged values to plot yet")
    if len(chosen) > MAX_PANELS:
        log.info("curves.png draws %d panels; left out: %s", MAX_PANELS,
                 ", ".join(list(chosen)[MAX_PANELS:]))
        chosen = dict(list(chosen.items())[:MAX_PANELS])
    to_env_steps = env_steps(rows)
    fig, axes = new_figure(len(chosen), columns=COLUMNS)
    for ax, (panel, names) in zip(axes, chosen.items()):
        drawn: list[float] = []
        for name in names:
            if to_env_steps is not None and not name.startswith("val_"):
                # The interval rows only: a one-epoch run's epoch row is its whole mean, not
                # a point of the curve at its last env step.
                steps, values = series([r for r in rows if r.get("kind") == "train"], name)
                if not steps:
                    steps, values = series(rows, name)
            else:
                steps, values = series(rows, name)
            if not steps:
                continue
            if to_env_steps is not None:
                steps, values = _by_env_steps(steps, values, to_env_steps)
            marker = "o" if len(steps) <= 30 else None  # sparse evaluations: show the points
            ax.plot(steps, values, label=name, marker=marker, markersize=3, linewidth=1.5)
            drawn += values
        if panel == "return" and target is not None:
            ax.axhline(target, color="0.35", linestyle="--", linewidth=1,
                       label=f"target {target:g}")
        if panel == "loss" and use_log_scale(drawn):
            ax.set_yscale("log")
        ax.set_title(panel)
        ax.set_xlabel("env steps" if to_env_steps is not None else "optimizer step")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_run(run_dir: str | Path, out: str | Path | None = None, title: str | None = None,
             target: float | None = None) -> Path:  # fmt: skip
    """Draw the learning curves of the run in ``run_dir`` into ``out`` (default ``curves.png``).

    ``target``: the return to draw as a line (default: the run's ``task.target_return``, see
    :func:`target_return`). Returns the PNG's path. Raises :class:`BeyondfitError` when there
    is no metrics file, nothing to plot, or no matplotlib.
    """
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    if not panels(rows, terms=True):
        raise BeyondfitError(f"{str(run_dir)!r} has no logged values to plot yet")
    fig = curves_figure(rows, title, target if target is not None else target_return(run_dir))
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
        target: the return to draw as a line on the return panel (default: the run's
            ``task.target_return``, read from its ``.hydra/config.yaml``; none without one).
    """

    rank_zero_only = True  # under DDP: one writer (rank 0), not one per rank

    def __init__(self, run_dir: str | Path, title: str | None = None,
                 target: float | None = None) -> None:  # fmt: skip
        require_matplotlib()  # fail before training, not after it
        self.run_dir = Path(run_dir)
        self.title = title
        self.target = target
        self.path: Path | None = None

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Draw the curves; a failure is reported as one line, not raised."""
        try:
            self.path = plot_run(self.run_dir, title=self.title, target=self.target)
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
