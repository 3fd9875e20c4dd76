"""What a run writes: metrics files, TensorBoard, plots, experiment trackers. Each is a
:class:`~beyondfit.core.callbacks.Callback` with ``rank_zero_only = True``.

Console lines and the progress bar live with the engine (:mod:`beyondfit.core.console`):
``fit`` shows progress by default, as Keras' ``verbose=1`` does. ``MetricsFile`` is
``beyondfit.MetricsFile``.

TensorBoard (:mod:`beyondfit.observers.tensorboard`), plots (:mod:`beyondfit.observers.plots`)
and the trackers (:mod:`beyondfit.observers.wandb`, :mod:`beyondfit.observers.mlflow`, on
:mod:`beyondfit.observers.tracking`) are imported on demand: they pull in heavy packages
(matplotlib, in the base install) or optional ones (tensorboard, wandb, mlflow).

The names below load on first use (:mod:`beyondfit.core.lazy`), so that the plot command
(``python -m beyondfit.observers.plots RUN_DIR``) reads ``metrics.jsonl`` and draws without
importing torch: that import would be most of its CPU time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from beyondfit.core.lazy import lazy_exports

_EXPORTS = {"CsvFile": "beyondfit.observers.files", "RowWriter": "beyondfit.observers.files"}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # what type checkers see; "X as X" marks each as re-exported
    from beyondfit.observers.files import CsvFile as CsvFile
    from beyondfit.observers.files import RowWriter as RowWriter

__all__ = sorted(_EXPORTS)
