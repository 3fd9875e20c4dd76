"""What a run shows and writes: metrics files, console lines, a progress bar, TensorBoard,
plots, experiment trackers. Each is a :class:`~beyondfit.core.callbacks.Callback` with
``rank_zero_only = True``.

TensorBoard (:mod:`beyondfit.observers.tensorboard`), plots (:mod:`beyondfit.observers.plots`)
and the trackers (:mod:`beyondfit.observers.wandb`, :mod:`beyondfit.observers.mlflow`, on
:mod:`beyondfit.observers.tracking`) are imported on demand: they pull in optional packages.
"""

from beyondfit.observers.console import ConsoleLogger, ProgressBar, format_logs, progress_callback
from beyondfit.observers.files import CsvFile, MetricsFile, RowWriter

__all__ = [
    "ConsoleLogger",
    "CsvFile",
    "MetricsFile",
    "ProgressBar",
    "RowWriter",
    "format_logs",
    "progress_callback",
]
