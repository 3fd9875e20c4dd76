"""The update-to-data ratio of off-policy training: how many minibatches a run owes by an env step.

Two ways to say it, as the peers do: ``updates_per_step`` (SB3's ``gradient_steps`` per
``train_freq=1``, CleanRL's one update per step; ``0.5``, ``2``), spread evenly: after ``e`` env
steps ``floor(ratio * (e - learning_starts))`` minibatches in all; or RL-Zoo's ``train_freq``
and ``gradient_steps``: a burst of ``gradient_steps`` minibatches once every ``train_freq`` env
steps are in, from the first multiple of ``train_freq`` past ``learning_starts`` (SB3's DQN on
CartPole: 128 every 256).
"""

from __future__ import annotations

import math

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number


def owed(env_steps: int, learning_starts: int, updates_per_step: float | None, train_freq: int,
         gradient_steps: int) -> int:  # fmt: skip
    """Minibatches due in all once ``env_steps`` transitions are stored (``updates_per_step``
    ``None``: in bursts)."""
    if updates_per_step is None:
        bursts = env_steps // train_freq - learning_starts // train_freq
        return gradient_steps * max(0, bursts)
    return max(0, math.floor(updates_per_step * (env_steps - learning_starts) + 1e-9))


def check_ratio(updates_per_step: float | None, train_freq: int | None,
                 gradient_steps: int) -> tuple[int, int]:  # fmt: skip
    """``(train_freq, gradient_steps)`` checked: one of the two ways to give the ratio."""
    if train_freq is None:
        check_number("task.replay.updates_per_step", updates_per_step, above=0, at_most=1024,
                     example="task.replay.updates_per_step=1 (one minibatch per env step)")
        return 1, 1
    if updates_per_step is not None:
        raise BeyondfitError(
            f"task.replay.updates_per_step={updates_per_step} and task.replay.train_freq="
            f"{train_freq} both set how often to update: set task.replay.updates_per_step=null "
            "to update in bursts (gradient_steps every train_freq env steps), or drop train_freq"
        )
    check_number("task.replay.train_freq", train_freq, integer=True, at_least=1,
                 example="task.replay.train_freq=4 (env steps between bursts of updates)")
    if gradient_steps != -1:
        check_number("task.replay.gradient_steps", gradient_steps, integer=True, at_least=1,
                     example="task.replay.gradient_steps=1 (-1: as many as train_freq)")
    return train_freq, train_freq if gradient_steps == -1 else gradient_steps


def too_short(total: int, learning_starts: int, train_freq: int | None) -> str:
    """Why a budget ends before its first update, naming both keys."""
    if total <= learning_starts:
        return (f"task.total_env_steps={total} is not above task.replay.learning_starts="
                f"{learning_starts} (random actions before the first update): the run would "
                "end before learning anything; raise task.total_env_steps or lower "
                "task.replay.learning_starts")
    return (f"task.total_env_steps={total} ends before the first update: it comes after "
            f"task.replay.learning_starts={learning_starts} env steps, at the next multiple of "
            f"task.replay.train_freq={train_freq}; raise task.total_env_steps or lower one of "
            "those")
