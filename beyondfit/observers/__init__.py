"""What a run writes: metrics files, TensorBoard, plots, experiment trackers. Each is a
:class:`~beyondfit.core.callbacks.Callback` with ``rank_zero_only = True``.

Console lines and the progress bar live with the engine (:mod:`beyondfit.core.console`):
``fit`` shows progress by default, as Keras' ``verbose=1`` does; they are re-exported here.

TensorBoard (:mod:`beyondfit.observers.tensorboard`), plots (:mod:`beyondfit.observers.plots`)
and the trackers (:mod:`beyondfit.observers.wandb`, :mod:`beyondfit.observers.mlflow`, on
:mod:`beyondfit.observers.tracking`) are imported on demand: they pull in optional packages.
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
