"""Schedules over environment steps: learning rate, entropy coefficient and clip range.

PPO implementations anneal linearly over the env-step budget (CleanRL's ``anneal_lr``, RL-Zoo's
``lin_3e-4``). Here a schedule is applied once per rollout, when the rollout has been collected
and before its first update, from the collector's :attr:`~beyondfit.rl.collect.onpolicy.
RolloutCollector.progress` (the fraction of ``total_env_steps`` taken before that rollout). So
every update of a rollout uses the same values, the first rollout the starting ones, and a
resumed run computes the same values from the restored env-step count: the schedule has no state
of its own to lose. Optimizer steps would be the wrong clock: an early stop at a target KL skips
some of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine
    from beyondfit.rl.collect.onpolicy import RolloutCollector


def env_step_schedules(
    anneal: Mapping[str, float | None] | None, collector: RolloutCollector, loss: Any
) -> list[Callback]:
    """``task.anneal`` (``{lr: 0.0, ent_coef: 0.0, clip_coef: 0.1}``: final values, ``lr`` as a
    fraction of ``optimizer.lr``; missing or ``null``: constant) as the callbacks to give the
    engine: none, or one :class:`EnvStepSchedules`. Any other key names an attribute of the
    loss's ``coefficients`` (a loss of your own may have its own)."""
    anneal = dict(anneal or {})
    for name, value in anneal.items():
        check_number(f"task.anneal.{name}", value, at_least=0, allow_none=True,
                     example=f"task.anneal.{name}=0.0 (the final value; null: constant)")
    lr_end = anneal.pop("lr", None)
    ends = {name: float(value) for name, value in anneal.items() if value is not None}
    if lr_end is None and not ends:
        return []
    return [EnvStepSchedules(collector, lr_end, getattr(loss, "coefficients", None), ends)]


def linear(start: float, end: float, progress: float) -> float:
    """``start`` at progress 0, ``end`` at progress 1, linear in between."""
    return start + (end - start) * progress


class EnvStepSchedules(Callback):
    """Anneal the learning rate and loss coefficients linearly over the env-step budget.

    Args:
        collector: the run's rollout collector (its progress is the clock).
        lr_end: final learning rate as a fraction of the configured one (``0.0``: CleanRL's
            ``anneal_lr``); ``None`` keeps the learning rate constant.
        coefficients: the loss closure's mutable settings (``loss_fn.coefficients``: an object
            with attributes such as ``ent_coef`` and ``clip_coef``).
        ends: final value of each annealed coefficient, by attribute name; each starts from
            the value the loss was built with.

    The learning rate is the optimizer's, so the schedule is a callback: it finds the optimizer
    when training starts and keeps each parameter group's starting value in ``initial_lr``
    (saved with the optimizer's state, as torch's own schedulers do).
    """

    def __init__(
        self,
        collector: RolloutCollector,
        lr_end: float | None = 0.0,
        coefficients: Any = None,
        ends: Mapping[str, float] | None = None,
    ) -> None:
        self.collector, self.lr_end = collector, lr_end
        self.coefficients = coefficients
        ends = dict(ends or {})
        if ends and coefficients is None:
            raise BeyondfitError(
                f"cannot anneal {', '.join(sorted(ends))}: the loss has no adjustable "
                "coefficients (a loss closure exposes them as loss_fn.coefficients, as ppo_loss "
                "does); task.anneal.lr anneals the learning rate of any loss"
            )
        for name in ends:
            if not hasattr(coefficients, name):
                raise BeyondfitError(
                    f"cannot anneal task.anneal.{name}: the loss has no such coefficient (it "
                    f"has {', '.join(sorted(vars(coefficients)))}; the learning rate is lr)"
                )
        self.starts = {name: float(getattr(coefficients, name)) for name in ends}
        self.ends = {name: float(value) for name, value in ends.items()}
        self.optimizer: Any = None

    def on_fit_start(self, engine: Engine) -> None:
        """Find the optimizer and hook into the collector (once, however often fit runs)."""
        if self.lr_end is not None and engine.scheduler is not None:
            raise BeyondfitError(
                "the task anneals the learning rate over env steps (task.anneal.lr) and a "
                "scheduler is set too; drop one (scheduler=none or task.anneal.lr=null)"
            )
        self.optimizer = engine.optimizer
        for group in self.optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        if self.apply not in self.collector.rollout_hooks:
            self.collector.rollout_hooks.append(self.apply)

    def apply(self, collector: RolloutCollector) -> None:
        """Set this rollout's values (a rollout hook of the collector)."""
        progress = collector.progress
        if self.lr_end is not None and self.optimizer is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = linear(group["initial_lr"], group["initial_lr"] * self.lr_end,
                                     progress)
        for name, end in self.ends.items():
            setattr(self.coefficients, name, linear(self.starts[name], end, progress))
