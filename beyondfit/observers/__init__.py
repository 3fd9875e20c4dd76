"""What a run writes: metrics files, TensorBoard, plots, experiment trackers. Each is a
:class:`~beyondfit.core.callbacks.Callback` with ``rank_zero_only = True``.

Console lines and the progress bar live with the engine (:mod:`beyondfit.core.console`):
``fit`` shows progress by default, as Keras' ``verbose=1`` does. ``MetricsFile`` is
``beyondfit.MetricsFile``.

TensorBoard (:mod:`beyondfit.observers.tensorboard`), plots (:mod:`beyondfit.observers.plots`)
and the trackers (:mod:`beyondfit.observers.wandb`, :mod:`beyondfit.observers.mlflow`, on
:mod:`beyondfit.observers.tracking`) are imported on demand: they pull in optional packages.
"""

from beyondfit.observers.files import CsvFile, RowWriter

__all__ = [
    "CsvFile",
    "RowWriter",
]
