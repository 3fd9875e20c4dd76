"""What the supervised tasks share: reading the table, encoding and scaling it, sizing the model.

Regression and classification differ only in what the target is (numbers, or labels) and in
the loss. Everything else lives here once: the data source (a bundled set or the user's
file), the feature encoding fitted on training rows (:mod:`beyondfit.data.encoding`),
standardization with training statistics, the checks that make a table unusable (more
inputs than training rows), the sizes that adapt to the table (hidden layers, batch size),
early stopping, and the ``preprocessing.json`` a run leaves beside its checkpoints.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from beyondfit.core.early_stopping import EarlyStopping
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.data.batches import TensorBatches
from beyondfit.data.encoding import FeatureEncoding, fit_encoding
from beyondfit.data.tables import Column, Table, read_table
from beyondfit.nets import EnsembleClassifier, WideAndDeep, mlp
from beyondfit.tasks.contract import Task

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

log = logging.getLogger("beyondfit")

#: ``task.data`` keys the supervised tasks understand.
DATA_KEYS = ("path", "target", "missing")
#: Early stopping when a task is built without saying (the task yamls say the same).
DEFAULT_EARLY_STOPPING: Mapping[str, Any] = MappingProxyType({"patience": 10})


@dataclass
class Features:
    """Standardized model inputs of the training and validation rows, and how they were made.

    Attributes:
        train: training inputs, standardized with their own mean and standard deviation.
        val: validation inputs, standardized with the training statistics.
        encoding: how the table's columns became inputs (fitted on training rows).
        mean: per-input training mean; ``std``: per-input training standard deviation
            (1 for an input constant over the training rows).
        extra: what the task adds to the saved record (target name, classes, target scaling).
    """

    train: torch.Tensor
    val: torch.Tensor
    encoding: FeatureEncoding
    mean: torch.Tensor
    std: torch.Tensor
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """JSON-ready: the encoding, the scaling, and what the task adds (classes, target)."""
        return {
            **self.encoding.to_dict(),
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            **self.extra,
        }


def read_source(
    data: Mapping[str, Any] | None,
    name: str,
    bundled: Callable[[], tuple[np.ndarray, np.ndarray]],
) -> Table:
    """The user's table when ``data.path`` is set, else the task's bundled set: the ``(x, y)``
    arrays ``bundled()`` returns (:mod:`beyondfit.data.bundled`), as the table ``name``."""
    data = dict(data or {})
    unknown = sorted(set(data) - set(DATA_KEYS))
    if unknown:
        raise BeyondfitError(
            f"unknown task.data option(s) {unknown}; the options are {', '.join(DATA_KEYS)}"
        )
    if data.get("path"):
        target = data.get("target")
        # narrow: the rule prepare_features holds (more training rows than inputs), checked
        # on the table's shape before its cells are parsed.
        return read_table(Path(str(data["path"])).expanduser(),
                          None if target is None else target, narrow=True)
    x, y = bundled()
    return table_from_arrays(name, x, y)


def table_from_arrays(
    name: str, x: np.ndarray, y: np.ndarray, feature_names: Sequence[str] | None = None
) -> Table:
    """Wrap in-memory arrays (a bundled set) as a :class:`Table` of numeric columns."""
    names = list(feature_names or [f"x{j}" for j in range(x.shape[1])])
    features = [Column(n, x[:, j].astype(np.float64), True) for j, n in enumerate(names)]
    target = Column("y", y if y.dtype == object else y.astype(np.float64), y.dtype != object)
    return Table(Path(name), features, target)


def refuse_missing_target(table: Table) -> None:
    """A target cell cannot be imputed: name the first row that lacks one."""
    gaps = np.nonzero(table.target.missing())[0]
    if len(gaps):
        raise table.error(
            f"has no target value ({table.target.name!r}) at {table.where(int(gaps[0]))} "
            f"({len(gaps)} row(s) in all); fill or drop those rows"
        )


def prepare_features(
    table: Table, train_rows: torch.Tensor, val_rows: torch.Tensor, missing: str = "impute"
) -> Features:
    """Encode and standardize the features, fitted on ``train_rows``; notes are logged."""
    train_np = train_rows.numpy()
    encoding, notes = fit_encoding(table, train_np, missing)
    for note in notes:
        log.warning("%s", note)
    x = torch.from_numpy(encoding.transform(table.features))
    n_train, width = len(train_rows), x.shape[1]
    if width >= n_train:
        widest = max(encoding.columns, key=lambda c: len(c.categories))
        why = (
            f", {len(widest.categories)} of them from text column {widest.name!r}"
            if len(widest.categories) > 1 else ""
        )
        raise table.error(
            f"gives {width} input columns{why} but only {n_train} training rows; a model "
            "needs more rows than columns: add rows or drop columns"
        )
    mean = x[train_rows].mean(0)
    std = x[train_rows].std(0).nan_to_num(0.0)
    # A column constant over the training rows stays as it is (scale 1), rather than
    # turning a different validation value into a huge input.
    std = torch.where(std > 1e-8, std, torch.ones_like(std))
    x = (x - mean) / std
    return Features(x[train_rows], x[val_rows], encoding, mean, std)


def auto_hidden(hidden: Any, n_train: int) -> list[int]:
    """``hidden`` as a list of widths; ``"auto"``: two layers, wider for larger tables.

    64 units per layer under 1,000 training rows (a small noisy table is fit by the linear
    path and a little more), 128 up to 20,000, 256 beyond.
    """
    if hidden == "auto":
        width = 64 if n_train < 1000 else 128 if n_train < 20_000 else 256
        return [width, width]
    if isinstance(hidden, int) and not isinstance(hidden, bool):
        hidden = [hidden]
    ok = isinstance(hidden, Sequence) and not isinstance(hidden, str) and all(
        isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden
    )
    if not ok:
        raise BeyondfitError(
            f"task.hidden={hidden!r}; give 'auto' or a list of positive layer widths, "
            "e.g. task.hidden=[64,64]"
        )
    widths = [int(h) for h in hidden]
    return widths


def table_net(x_train: torch.Tensor, n_out: int, *, hidden: Any, batch_size: Any,
              dropout: float, wide: bool, encoder: torch.nn.Module | None = None,
              members: int = 1) -> torch.nn.Module:  # fmt: skip
    """The network both table tasks train on ``x_train``'s inputs: an MLP of ``hidden`` widths
    (:func:`auto_hidden`) with ``n_out`` outputs, beside a linear path when ``wide``
    (:class:`~beyondfit.nets.WideAndDeep`); ``encoder`` (a
    :class:`~beyondfit.nets.PiecewiseLinear`) re-codes the MLP path's inputs. ``members`` > 1
    (classification only): that many such networks as one
    :class:`~beyondfit.nets.EnsembleClassifier`. Refused in one line, before anything is
    built, when it cannot fit in memory (:func:`check_net_fits`)."""
    widths = auto_hidden(hidden, len(x_train))
    n_in = x_train.shape[1]
    check_net_fits([n_in, *widths, n_out],
                   min(auto_batch_size(batch_size, len(x_train)), len(x_train)), widths,
                   copies=members)
    if members > 1:
        return EnsembleClassifier(n_in, widths, n_out, members, dropout=dropout, wide=wide,
                                  encoder=encoder)
    if wide:
        return WideAndDeep(n_in, widths, n_out, dropout=dropout, encoder=encoder)
    deep = mlp([n_in if encoder is None else encoder.n_out, *widths, n_out], dropout=dropout)
    return deep if encoder is None else torch.nn.Sequential(encoder, deep)


def check_net_fits(sizes: Sequence[int], batch_size: int, hidden: Sequence[int],
                   key: str = "task.hidden", copies: int = 1) -> None:
    """Refuse, before it is built, a network of layer ``sizes`` (inputs first; the setting
    ``key=hidden``) whose weights with their gradients and two Adam moments, and one batch's
    activations, cannot fit in the memory there is. The command line's bound
    (``cli/bounds.py``) takes every input one value wide; here the table's columns are known,
    so ``task.hidden=[100000000]`` over 10 columns is one line, not an allocation that grows
    until the system stops it. ``copies``: that many such networks side by side (an
    ensemble's members)."""
    import itertools

    from beyondfit.core.device import gigabytes, machine_memory

    weights = sum((a + 1) * b for a, b in itertools.pairwise(sizes))
    need = copies * (4 * 4 * weights + 2 * 4 * batch_size * sum(sizes[1:]))
    memory, where = machine_memory("cpu")  # a task builds its model on the CPU
    if need > memory:
        widths = list(hidden)
        fewer = (f" (the figure counts {copies} ensemble members: fewer, e.g. task.members=1, "
                 "need less)") if copies > 1 else ""
        raise BeyondfitError(
            f"{key}={widths if len(widths) <= 4 else [widths[0], '...', widths[-1]]} over "
            f"{sizes[0]} input values needs at least {gigabytes(need)} of memory (weights, "
            f"gradients, optimizer moments, a batch of {batch_size}), more than {where} has "
            f"({gigabytes(memory)}); choose smaller widths, e.g. {key}=[64,64]{fewer}"
        )


def auto_batch_size(batch_size: Any, n_train: int) -> int:
    """``batch_size`` as a number; ``"auto"``: about 1/30 of the training rows, 32 to 256.

    Small tables keep small batches (more updates per epoch); large ones take larger batches
    so that an epoch stays a few dozen steps and a run on a few thousand rows takes seconds.
    """
    if batch_size == "auto":
        return int(min(256, max(32, 2 ** round(np.log2(max(n_train, 1) / 30)))))
    return int(check_number("task.batch_size", batch_size, integer=True, at_least=1,
                            example="task.batch_size=64"))


def early_stopping_callbacks(
    options: Mapping[str, Any] | None,
    monitor: str,
    mode: str,
    start_logs: Mapping[str, float] | None = None,
) -> list[Any]:
    """The task's callbacks: an :class:`EarlyStopping` from ``task.early_stopping``, or none.

    ``options`` is ``null`` (off) or a mapping of :class:`EarlyStopping` arguments; the task
    gives the default monitor and mode, and the logs of the starting weights if it knows them.
    """
    if options is None or options is False:
        return []
    if not isinstance(options, Mapping):
        raise BeyondfitError(
            f"task.early_stopping={options!r}; give null (off) or options such as "
            "task.early_stopping.patience=20"
        )
    settings: dict[str, Any] = {"monitor": monitor, "mode": mode, **dict(options)}
    if start_logs is not None and settings["monitor"] in start_logs:
        settings.setdefault("start_logs", start_logs)
    try:
        return [EarlyStopping(**settings)]
    except TypeError as exc:
        raise BeyondfitError(
            f"task.early_stopping: {exc}; the options are monitor, mode, patience, "
            "min_delta, restore_best_weights, start_from, start_logs"
        ) from None


def stopping_lines(callbacks: Sequence[Any]) -> list[str]:
    """What early stopping did, for the report (nothing when it was off)."""
    lines = []
    for stopper in callbacks:
        if not isinstance(stopper, EarlyStopping):
            continue
        if stopper.restored and stopper.best_epoch == 0:
            lines.append(
                "early stopping: no epoch beat the starting weights, which the model now holds"
            )
            continue
        if not stopper.restored:
            lines.append("early stopping: no evaluation improved; the last weights are kept")
            continue
        how = "stopped early" if stopper.stopped else "ran every epoch"
        lines.append(
            f"early stopping: {how}; best {stopper.monitor} {stopper.best:.4f} at epoch "
            f"{stopper.best_epoch}, whose weights the model now holds"
        )
    return lines


def write_preprocessing(run_dir: Path, record: Mapping[str, Any]) -> str:
    """Save ``preprocessing.json`` (encoding, scaling, classes) into the run; the report line."""
    path = Path(run_dir) / "preprocessing.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=float) + "\n")
    tmp.replace(path)
    return f"input encoding and scaling: {path}"


def table_task(
    model: torch.nn.Module,
    loss_fn: Callable[..., Any],
    features: Features,
    targets: tuple[torch.Tensor, torch.Tensor],
    *,
    batch_size: Any,
    seed: int,
    early_stopping: Mapping[str, Any] | None,
    summary: Callable[[Engine], str],
    details: Callable[[Engine, Path], list[str]] | None = None,
    start_logs: Mapping[str, float] | None = None,
    refit: bool = False,
) -> Task:
    """The :class:`~beyondfit.Task` of a table: shuffled training batches (``batch_size``
    or the automatic size), and the whole validation split as one batch (exact metrics).
    ``refit``: the training and validation rows together as the task's ``refit_data``, in
    batches of the same size (:mod:`beyondfit.cli.refit`; only with early stopping on).

    ``features`` and ``targets`` (training, validation) are the two splits. Early stopping
    (``task.early_stopping``, see :func:`early_stopping_callbacks`) watches ``val_loss``;
    ``start_logs`` are the starting weights' values, if the task knows them. The report is
    ``summary`` (the model beside its baseline), what early stopping did, ``details`` (the
    task's own lines and files) and where ``preprocessing.json`` went.
    """
    callbacks = early_stopping_callbacks(early_stopping, "val_loss", "min", start_logs)
    y_train, y_val = targets

    def finish(engine: Engine, run_dir: Path) -> list[str]:
        lines = [summary(engine), *stopping_lines(callbacks)]
        if details is not None:
            lines += details(engine, run_dir)
        lines.append(write_preprocessing(run_dir, features.record()))
        return lines

    size = auto_batch_size(batch_size, len(features.train))
    every_row = None
    if refit and callbacks:
        every_row = TensorBatches(torch.cat([features.train, features.val]),
                                  torch.cat([y_train, y_val]), batch_size=size, seed=seed)
    return Task(
        model=model,
        loss_fn=loss_fn,
        train_data=TensorBatches(features.train, y_train, batch_size=size, seed=seed),
        val_data=[(features.val, y_val)],
        finish=finish,
        callbacks=callbacks,
        refit_data=every_row,
    )
