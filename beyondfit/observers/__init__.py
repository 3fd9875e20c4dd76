"""What a run writes: metrics files, TensorBoard, plots. Each is a
:class:`~beyondfit.core.callbacks.Callback` with ``rank_zero_only = True``.

Console lines and the progress bar live with the engine (:mod:`beyondfit.core.console`):
``fit`` shows progress by default, as Keras' ``verbose=1`` does. TensorBoard
(:mod:`beyondfit.observers.tensorboard`) and plots (:mod:`beyondfit.observers.plots`) are
imported on demand: they pull in optional packages.
"""

from beyondfit.core.console import ConsoleLogger, ProgressBar, format_logs, progress_callback
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
