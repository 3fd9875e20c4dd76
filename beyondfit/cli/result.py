"""The run's final record, ``RUN_DIR/result.json``: what the run ended with, in one place.

A run's *result* is the model it ends with, scored once: for a supervised run with early
stopping the restored best weights' validation values (not the last epoch's, ten epochs of
patience later), for an RL run its confirming evaluation on fresh episodes
(:class:`beyondfit.rl.evaluation.confirm.ConfirmingEvaluation`), otherwise the last evaluation. The
run prints it, writes it here (atomically, after every other file of the run), and
``python -m beyondfit.compare``, a search's objective and the trackers report it. The
training-time curve stays in ``metrics.jsonl``.

It also records that the run *finished* and how (``stopped early``, ``solved`` or ``ran its
budget``): ``resume=RUN_DIR`` of such a run changes nothing unless asked to extend it
(``resume_extend=true``).

A callback may add to the record with a ``final_report(engine) -> Mapping | None`` method
(early stopping says which epoch's weights were restored; the confirming evaluation gives its
episodes and the training-time values beside it).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit.checkpoint.resume import resume_run_dir

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

#: The file name inside the run directory.
RESULT_FILE = "result.json"
#: Bumped when a field changes meaning.
FORMAT = 1


def final_record(
    engine: Engine, callbacks: Sequence[Any], objective: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The record of a run that finished (not interrupted): values, how it ended, objective.

    ``values`` are ``engine.last_val`` after every ``on_fit_end`` (early stopping and the
    confirming evaluation set them); ``last_evaluation`` the last evaluation logged during
    training, for comparison. ``objective`` is ``(metric, mode)`` of the ``objective`` section.
    """
    values = {str(k): float(v) for k, v in engine.last_val.items()}
    last_row = engine.history[-1] if engine.history else {}
    record: dict[str, Any] = {
        "format": FORMAT,
        "status": "finished",
        "finished": "stopped early" if engine.stopped_by else "ran its budget",
        "stopped_by": engine.stopped_by,
        "step": int(engine.global_step),
        "epoch": int(engine.epoch),
        "values": values,
        "values_from": "last evaluation" if values else "no evaluation",
        "last_evaluation": {
            str(k): float(v) for k, v in last_row.items() if str(k).startswith("val_")
        },
    }
    for callback in callbacks:
        report = getattr(callback, "final_report", None)
        if callable(report):
            record.update(report(engine) or {})
    if record.get("solved") and engine.stopped_by:
        record["finished"] = "solved"
    if objective is not None:
        metric, mode = objective
        value = values.get(metric)
        record["objective"] = {"metric": metric, "mode": mode, "value": value}
    return record


def write_result(run_dir: str | Path, record: Mapping[str, Any]) -> Path:
    """Write ``record`` as ``RUN_DIR/result.json``, atomically (a reader never sees half)."""
    path = Path(run_dir) / RESULT_FILE
    tmp = path.with_name(RESULT_FILE + ".tmp")
    with tmp.open("w") as f:
        # NaN/inf as null: the file stays strict JSON for any reader.
        json.dump(_finite(record), f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_result(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's record, or ``None`` when it has none (unfinished, an older run, or a file
    that is not a record: :func:`load_result` says why)."""
    return load_result(run_dir)[0]


def load_result(run_dir: str | Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, None)``, or ``(None, why)`` when ``RUN_DIR/result.json`` is there but is no
    record (``(None, None)``: there is none). A run directory may come from elsewhere: only a
    regular file is read (a FIFO would block forever), and no JSON breaks the reader."""
    path = Path(run_dir) / RESULT_FILE
    if not path.exists():
        return None, None
    if not path.is_file():
        return None, "it is not a regular file"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return None, f"it cannot be read ({exc.strerror or type(exc).__name__})"
    except (ValueError, RecursionError):  # not UTF-8 or not JSON; nested past the stack
        return None, "it is not valid JSON of a sane depth"
    if not isinstance(record, dict) or not isinstance(record.get("values"), dict):
        return None, 'it is not a result record (a JSON object with "values")'
    return record, None


def already_finished(resume: Any, extend: bool, run_dir: Path | None = None) -> str | None:
    """The one decision of ``resume=PATH`` on a finished run: the line that says so (the
    run then does nothing), or ``None`` to resume. A run is finished when PATH's run
    directory holds a finished record; ``resume_extend=true`` trains it further, and a run
    given a directory of its own (``run_dir`` other than PATH's) is a branch, not a resume.
    ``run_dir=None``: the run continues in PATH's directory."""
    if resume in (None, "", "null") or extend:
        return None
    home = resume_run_dir(str(resume))
    record = None if home is None else read_result(home)
    if home is None or record is None or record.get("status") != "finished":
        return None
    if run_dir is not None and Path(run_dir).expanduser().resolve() != home:
        return None
    return already_finished_line(home, record)


def already_finished_line(run_dir: Path, record: Mapping[str, Any]) -> str:
    """What ``resume=RUN_DIR`` of a finished run says: what it ended with, where, how to extend."""
    values = record.get("values") or {}
    shown = ", ".join(f"{k} {_number(v)}" for k, v in values.items()) or "no evaluation"
    return (
        f"{run_dir} already finished ({record.get('finished')} at step {record.get('step')}: "
        f"{shown}, {record.get('values_from')}; {run_dir / RESULT_FILE}); nothing was changed. "
        "To train it further add resume_extend=true and a larger budget (train.epochs= or "
        "train.max_steps=; RL: train.epochs=2 task.total_env_steps=MORE)"
    )


def result_value(record: Mapping[str, Any] | None, name: str) -> float | None:
    """``name``'s value in ``record`` (``None`` when absent or not a finite number)."""
    if not record:
        return None
    value = record.get("values", {}).get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return value if math.isfinite(value) else None


def result_line(record: Mapping[str, Any], path: Path) -> str:
    """The one line the run prints: its values, where they come from, how it ended."""
    values = record.get("values") or {}
    shown = ", ".join(f"{k} {_number(v)}" for k, v in values.items()) or "no evaluation"
    return f"result: {shown} ({record.get('values_from')}); {record.get('finished')}; in {path}"


def _number(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value) and abs(value) < 1e5:
        return f"{value:.4f}"
    return str(value)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
