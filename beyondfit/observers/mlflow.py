"""MLflow tracking: ``logger=[csv,mlflow]`` records a run in an MLflow tracking store.

``mlflow`` is an optional extra (``pip install "beyondfit[mlflow]"``: the ``mlflow-skinny``
client and the SQL store it writes locally); it is imported only when an
:class:`MLflowTracker` is made. Where the run goes: ``logger.mlflow.tracking_uri``, else
``MLFLOW_TRACKING_URI``, else MLflow's own default (in MLflow 3, ``sqlite:///mlflow.db`` in
the directory you launched from). Browse it with ``mlflow ui`` (from the full ``mlflow``
package) or read it with ``mlflow.MlflowClient``.

Everything goes through one ``MlflowClient`` and the run's id, never MLflow's global
"active run": a notebook's own active run is left alone, and the jobs of a multirun each
get their own run. What is recorded, and when: :mod:`beyondfit.observers.tracking`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beyondfit.core.errors import BeyondfitError
from beyondfit.observers.tracking import ExperimentTracker, param_text, tracker_library

# MLflow's batch limits (mlflow.utils.validation); 500 characters per value is the
# smallest limit of the store versions in use (6000 since MLflow 2).
_PARAMS_PER_BATCH = 100
_PARAM_VALUE_LIMIT = 500
_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}


def mlflow_module() -> Any:
    """``mlflow``, or a BeyondfitError saying how to install it."""
    return tracker_library("mlflow")


@dataclass(eq=False, repr=False)
class MLflowTracker(ExperimentTracker):
    """Record a beyondfit run as an MLflow run: config as params, rows as metrics, artifacts.

    Args:
        run_dir, config, artifacts, end_at_fit_end: see
            :class:`~beyondfit.observers.tracking.ExperimentTracker`.
        tracking_uri: where runs are stored (``None``: ``MLFLOW_TRACKING_URI`` or MLflow's
            default), e.g. ``sqlite:///mlflow.db`` or ``http://host:5000``.
        experiment: the MLflow experiment, created if it does not exist.
        run_name: the run's name (``None``: the run directory's name).
        tags: extra tags; ``beyondfit.run_dir`` is always set to the run directory.
    """

    tracking_uri: str | None = None
    experiment: str = "beyondfit"
    run_name: str | None = None
    tags: Mapping[str, Any] | None = None

    kind = "mlflow"

    def __post_init__(self) -> None:
        """Import mlflow, check the options; the client is made when the run starts."""
        self.mlflow = mlflow_module()  # fail before training, not after
        super().__post_init__()
        if not isinstance(self.experiment, str) or not self.experiment:
            raise BeyondfitError(
                f"logger.mlflow.experiment={self.experiment!r}; give the experiment's name, "
                "e.g. logger.mlflow.experiment=my_project"
            )
        self.run_name = self.run_name or self.run_dir.resolve().name
        self.tags = {str(k): str(v) for k, v in (self.tags or {}).items()}
        self.client: Any = None

    def start_run(self, run_id: str | None) -> str:
        """Create the run in ``experiment``, or set ``run_id`` running again."""
        from mlflow.exceptions import MlflowException

        try:
            self.client = self.mlflow.MlflowClient(tracking_uri=self.tracking_uri)
            if run_id is not None:
                try:
                    self.client.get_run(run_id)
                except MlflowException:
                    raise BeyondfitError(
                        f"the checkpoint's MLflow run {run_id} is not in the tracking store "
                        f"{self.client.tracking_uri!r}; point logger.mlflow.tracking_uri (or "
                        "MLFLOW_TRACKING_URI) at the store it was logged to"
                    ) from None
                self.client.update_run(run_id, status="RUNNING")
                return run_id
            found = self.client.get_experiment_by_name(self.experiment)
            experiment_id = (
                found.experiment_id if found else self.client.create_experiment(self.experiment)
            )
            tags = {"beyondfit.run_dir": str(self.run_dir.resolve()), **self.tags}
            run = self.client.create_run(experiment_id, run_name=self.run_name, tags=tags)
        except MlflowException as exc:
            raise BeyondfitError(
                f"MLflow could not start a run in {self.store_name()}: "
                f"{str(exc).splitlines()[0]}"
            ) from None
        return str(run.info.run_id)

    def store_name(self) -> str:
        """Where the store came from, for messages: the option, the environment or MLflow."""
        if self.tracking_uri:
            return f"logger.mlflow.tracking_uri={self.tracking_uri}"
        from_env = os.environ.get("MLFLOW_TRACKING_URI")
        if from_env:
            return f"the store MLFLOW_TRACKING_URI names ({from_env})"
        return "its default store"

    def log_params(self, params: Mapping[str, Any], resumed: bool) -> None:
        """The flat config as params; on resume only new keys (MLflow params never change)."""
        from mlflow.entities import Param

        if resumed:
            known = self.client.get_run(self.run_id).data.params
            params = {k: v for k, v in params.items() if k not in known}
        items = [Param(k, param_text(v, _PARAM_VALUE_LIMIT)) for k, v in params.items()]
        for start in range(0, len(items), _PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + _PARAMS_PER_BATCH])

    def log_metrics(self, values: Mapping[str, float], step: int) -> None:
        """One batch per row, every value at the optimizer step."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(name, value, now, step) for name, value in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def log_files(self, files: Sequence[Path]) -> None:
        """Each file at the top of the run's artifacts."""
        for path in files:
            self.client.log_artifact(self.run_id, str(path))

    def end_run(self, status: str) -> None:
        """Mark the run FINISHED, FAILED or KILLED."""
        self.client.set_terminated(self.run_id, status=_STATUS.get(status, "FINISHED"))
