"""What a run shows and writes: metrics files, console lines, a progress bar, TensorBoard,
plots. Each is a :class:`~beyondfit.core.callbacks.Callback` with ``rank_zero_only = True``.

TensorBoard (:mod:`beyondfit.observers.tensorboard`) and plots
(:mod:`beyondfit.observers.plots`) are imported on demand: they pull in optional packages.
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
