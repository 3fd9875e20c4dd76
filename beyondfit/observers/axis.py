"""The x-axis of a run's curves in every tracker: env steps for RL, optimizer steps otherwise.

PPO takes tens of optimizer steps per rollout and DQN one per env step: drawn against
optimizer steps, their curves do not line up. Every RL paper and peer (SB3, CleanRL) plots
against env steps, so a run whose training data counts them (an RL collector's ``env_steps``)
is recorded against that count in TensorBoard, W&B and MLflow, as ``curves.png`` draws it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine


def x_step(engine: Engine) -> int:
    """Where a row logged now goes on the x-axis: the training data's ``env_steps`` when it
    counts them (an RL collector), else the engine's optimizer step."""
    count = getattr(engine.train_data, "env_steps", None)
    if isinstance(count, int | float) and not isinstance(count, bool):
        return int(count)
    return engine.global_step
