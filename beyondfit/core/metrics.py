"""Per-epoch metric tracking that stays on the device until someone asks for a number."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.checks import fail, is_count


def is_metric_object(value: Any) -> bool:
    """True for stateful metric objects (torchmetrics ``Metric`` and look-alikes).

    They are duck-typed by ``update``/``compute``/``reset`` so that torchmetrics stays an
    optional import and users can bring their own.
    """
    return all(callable(getattr(value, name, None)) for name in ("update", "compute", "reset"))


class MetricTracker:
    """Running means of the scalar entries a loss closure returns, plus metric objects.

    ``update`` adds detached scalars into per-name sums that live on the device, so the
    training step never waits for the host; ``compute`` turns them into Python floats
    with a single synchronisation. Metric objects (e.g. ``torchmetrics.Accuracy``) are fed
    by the closure itself; the tracker only computes and resets them.
    """

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}
        self.objects: dict[str, Any] = {}
        #: Names reported as the sum since the last reset (counts of events), not the mean.
        self.totals: set[str] = set()
        #: Set by a distributed strategy: ``reducer(sums, counts, totals, updated_objects)``
        #: returns ``(values, objects_to_compute)`` over all ranks. It is a collective, so
        #: every rank must call :meth:`compute` at the same points.
        self.reducer: Callable[..., tuple[dict[str, float], list[str]]] | None = None
        # Metric objects' states from a checkpoint, merged into each object when the closure
        # first returns it after a resume (the tracker cannot reach them before).
        self._pending: dict[str, dict[str, Any]] = {}
        # The sums and counts at the last log row: an interval's mean is the difference.
        self._marks: dict[str, torch.Tensor] = {}
        self._marked: dict[str, int] = {}

    def update(self, logs: Mapping[str, Any]) -> None:
        """Add one step's entries (already validated as scalars or metric objects)."""
        sums, counts = self._sums, self._counts
        for name, value in logs.items():
            if isinstance(value, torch.Tensor):
                if value.requires_grad:  # values made without autograd (grad_norm) need no
                    value = value.detach()  # detached view: one op less per step
                total = sums.get(name)
                if total is None:
                    # float32 accumulator: bf16/fp16 sums lose precision over an epoch.
                    sums[name] = value.to(torch.float32, copy=True).reshape(())
                    counts[name] = 1
                else:
                    total.add_(value.reshape(()) if value.dim() else value)
                    counts[name] += 1
            elif isinstance(value, (int, float)):
                total = sums.get(name)
                if total is None:
                    sums[name] = torch.tensor(float(value))
                    counts[name] = 1
                else:
                    total.add_(float(value))
                    counts[name] += 1
            else:
                if self._pending and name not in self.objects:
                    self._resume_object(name, value)
                self.objects[name] = value

    def _resume_object(self, name: str, metric: Any) -> None:
        """Merge the checkpointed partial state of ``name`` into ``metric``.

        The closure has already fed it this step's batch, on top of a fresh state: merging
        (torchmetrics' ``merge_state``: sums add, concatenations join) gives what the
        uninterrupted run holds, bit for bit for sums, which are commutative.
        """
        state = self._pending.pop(name, None)
        if state is None:
            return
        device = getattr(metric, "device", None)
        moved = {
            k: ([t.to(device) for t in v] if isinstance(v, list) else v.to(device))
            for k, v in state["state"].items()
        }
        try:
            metric.merge_state(moved)
        except (AttributeError, RuntimeError, ValueError) as exc:
            # The run goes on (its weights resume exactly); only this epoch's value restarts.
            logging.getLogger("beyondfit").warning(
                "metric object %r cannot continue its checkpointed epoch (%s): its value for "
                "the rest of this epoch counts only the batches after the resume; give it a "
                "merge_state(state) method (torchmetrics metrics have one)", name,
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            )
            return
        if hasattr(metric, "_update_count"):  # torchmetrics counts updates for compute()
            metric._update_count += int(state.get("updates", 0))

    def compute(self, interval: bool = False) -> dict[str, float]:
        """Means (sums for :attr:`totals`) since the last reset, as floats (one host sync);
        with ``interval``, since the last ``compute(interval=True)`` (a log row's: what
        happened between two rows), and the mark moves here. Metric objects hold one state
        per epoch: their values are the epoch's so far either way.

        Names with no updates and metric objects never updated are left out rather than
        reported as NaN: an empty interval has no value.
        """
        logs: dict[str, float] = {}
        objects = self.objects
        sums, counts = self._sums, self._counts
        if interval:
            marks, marked = self._marks, self._marked
            sums = {n: v - marks[n] if n in marks else v for n, v in self._sums.items()
                    if self._counts[n] > marked.get(n, 0)}
            counts = {n: self._counts[n] - marked.get(n, 0) for n in sums}
            self._marks = {n: v.clone() for n, v in self._sums.items()}
            self._marked = dict(self._counts)
        if self.reducer is not None:
            updated = {n: getattr(m, "update_count", 1) != 0 for n, m in self.objects.items()}
            reduced, active = self.reducer(sums, counts, self.totals, updated)
            logs.update(reduced)
            objects = {n: self.objects[n] for n in active}
        elif sums:
            names = list(sums)
            devices = {sums[n].device for n in names}
            means = [sums[n] if n in self.totals else sums[n] / counts[n] for n in names]
            if len(devices) == 1:
                values = torch.stack(means).tolist()
            else:
                values = [m.item() for m in means]
            logs.update(zip(names, values))
        for name, metric in objects.items():
            if getattr(metric, "update_count", 1) == 0 and self.reducer is None:
                continue
            value = metric.compute()
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise BeyondfitError(
                        f"metric object {name!r} computed a tensor of shape {tuple(value.shape)}; "
                        "return a metric whose compute() is a scalar (e.g. average='micro')"
                    )
                value = value.item()
            logs[name] = float(value)
        return logs

    def reset(self) -> None:
        """Forget every sum and reset every metric object seen so far."""
        self._sums.clear()
        self._counts.clear()
        self._marks.clear()
        self._marked.clear()
        self._pending.clear()
        for metric in self.objects.values():
            metric.reset()

    def set_aside(self) -> list[tuple[Any, dict[str, Any]]]:
        """Save the state of every metric object, then reset it; :meth:`bring_back` undoes it.

        An evaluation must start the objects the closure feeds from zero, yet one in the
        middle of an epoch must not cut that epoch's running value. The state is a deep copy
        of the object's attributes (torchmetrics keeps its states as plain tensor
        attributes), so any duck-typed metric object works.
        """
        saved = []
        for name, metric in self.objects.items():
            try:
                saved.append((metric, copy.deepcopy(vars(metric))))
            except (RuntimeError, TypeError) as exc:
                raise BeyondfitError(
                    f"metric object {name!r} cannot be copied to keep training and validation "
                    f"apart ({str(exc).splitlines()[0]}); store detached state in it "
                    "(update it with tensor.detach())"
                ) from None
        for metric, _ in saved:
            metric.reset()
        return saved

    @staticmethod
    def bring_back(saved: list[tuple[Any, dict[str, Any]]]) -> None:
        """Restore the states :meth:`set_aside` saved."""
        for metric, state in saved:
            vars(metric).update(state)

    def state_dict(self) -> dict[str, Any]:
        """Sums, counts and the metric objects' states (``metric_state``, as torchmetrics
        has), for exact resume: a resumed epoch logs what the uninterrupted one does."""
        objects = {
            name: _object_state(metric) for name, metric in self.objects.items()
            if isinstance(getattr(metric, "metric_state", None), Mapping)
        }
        # Objects not seen since the resume (no step yet) keep their checkpointed state.
        objects = {**self._pending, **objects}
        return {"sums": {k: v.cpu() for k, v in self._sums.items()}, "counts": dict(self._counts),
                "objects": objects, "marks": {k: v.cpu() for k, v in self._marks.items()},
                "marked": dict(self._marked)}

    def load_state_dict(self, state: Mapping[str, Any], device: torch.device) -> None:
        """Restore what :meth:`state_dict` returned, placing sums on ``device``; each metric
        object's state is merged into it when the closure first returns it."""
        sums, counts = state.get("sums"), state.get("counts")
        if not isinstance(sums, Mapping) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sums.items()):
            raise fail("sums", sums, "a mapping of names to tensors")
        if not isinstance(counts, Mapping) or not all(
                isinstance(k, str) and is_count(v) for k, v in counts.items()):
            raise fail("counts", counts, "a mapping of names to counts")
        marks, marked = state.get("marks", {}), state.get("marked", {})
        if not isinstance(marks, Mapping) or not all(
                k in sums and isinstance(v, torch.Tensor) and v.shape == sums[k].shape
                for k, v in marks.items()):
            raise fail("marks", marks, "a mapping of tracked names to tensors like their sums")
        if not isinstance(marked, Mapping) or set(marked) != set(marks) or not all(
                is_count(v) and v <= counts[k] for k, v in marked.items()):
            raise fail("marked", marked, "a count per marked name, at most its count")
        self._sums = {k: v.to(device) for k, v in state["sums"].items()}
        self._counts = dict(state["counts"])
        self._marks = {k: v.to(device) for k, v in marks.items()}
        self._marked = dict(marked)
        self._pending = {str(k): dict(v) for k, v in dict(state.get("objects") or {}).items()}


def finite_or_none(value: float) -> float | None:
    """``value`` if it is a finite float, else ``None`` (for writers that must not emit NaN)."""
    return value if math.isfinite(value) else None


def _object_state(metric: Any) -> dict[str, Any]:
    """A metric object's state tensors (copied to the CPU) and its update count."""
    state = {
        k: ([t.detach().cpu().clone() for t in v] if isinstance(v, list)
            else v.detach().cpu().clone())
        for k, v in metric.metric_state.items()
        if isinstance(v, torch.Tensor | list)
    }
    return {"state": state, "updates": int(getattr(metric, "_update_count", 0))}
