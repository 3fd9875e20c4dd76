"""The run's counters in one object with one ``state_dict``: what a checkpoint must restore.

A *step* is one optimizer update (``global_step``); a *micro-batch* is one call of the loss
closure (``batch_in_epoch`` counts them); with ``accumulate=k`` a step spans ``k`` of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class TrainState:
    """Counters of a run, all saved in checkpoints.

    Attributes:
        global_step: optimizer steps applied.
        epoch: completed passes over the training data.
        batch_in_epoch: micro-batches consumed in the current epoch.
        skipped_steps: micro-batches dropped for non-finite values.
        evaluated_at: optimizer step of this epoch's last evaluation (-1: none yet).
        data_exhausted: this epoch's pass over the data has ended (only its end remains).
    """

    global_step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    skipped_steps: int = 0
    evaluated_at: int = -1
    data_exhausted: bool = False

    def state_dict(self) -> dict[str, Any]:
        """The counters as plain values."""
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; counters a older checkpoint lacks keep their default."""
        for field in fields(self):
            if field.name in state:
                setattr(self, field.name, type(field.default)(state[field.name]))
