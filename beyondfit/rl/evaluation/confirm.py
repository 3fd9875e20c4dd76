"""A confirming evaluation: the return an RL run reports, measured on fresh episodes.

The in-training evaluations (:class:`~beyondfit.rl.evaluation.evaluator.GreedyEvaluator`, 20
episodes by default) decide *when* to stop; a run that stops the first time one of them reaches the
target has selected a lucky draw. So when the stop rule on ``val_return`` fires, and again
when the budget runs out, :class:`ConfirmingEvaluation` runs a fresh set of greedy episodes
(100 by default for the classic-control tasks) on seeds that neither training nor the
in-training evaluations use. Their mean is the run's reported return (``engine.last_val``,
``result.json``); "solved" means it reaches the target. When the stop rule held on the
training-time evaluation but not on the confirming one, the stop is withdrawn and training
goes on (the next time the rule fires, a new, disjoint set of episodes confirms it).

Seeds: training envs use ``seed .. seed + num_envs - 1``, the in-training evaluations
``seed + 10_000 ..``; confirmation ``k`` (from 0) uses
``seed + 500_000 + k * episodes .. + episodes - 1`` (a second DDP rank trains on
``seed + 1_000_003 ..``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from beyondfit.core.callbacks import Callback, StopRule
from beyondfit.core.evaluation import EvaluationInterrupted
from beyondfit.core.logs import count

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine
    from beyondfit.rl.evaluation.evaluator import GreedyEvaluator

log = logging.getLogger("beyondfit")

#: Offset of the confirming episodes' seeds from the run's seed.
SEED_OFFSET = 500_000


class ConfirmingEvaluation(Callback):
    """Confirm the stop rule (and the final return) on ``episodes`` fresh greedy episodes.

    Args:
        make_evaluator: ``make_evaluator(episodes) -> GreedyEvaluator`` on envs apart from
            training's (called once, when the first confirmation runs).
        episodes: greedy episodes per confirmation.
        seed: the run's seed; the episodes' seeds start at ``seed + SEED_OFFSET``.
        target: the return that counts as solved (``None``: no target).
        metric: the evaluated name the stop rule and the target are about.

    Put it after the :class:`~beyondfit.core.callbacks.StopRule` in the callbacks (the
    command line does). After ``fit``, :attr:`result` holds the last confirmation and
    :attr:`training` the in-training evaluation's values beside it.
    """

    def __init__(
        self,
        make_evaluator: Callable[[int], GreedyEvaluator],
        episodes: int = 100,
        seed: int = 0,
        target: float | None = None,
        metric: str = "val_return",
    ) -> None:
        self.make_evaluator = make_evaluator
        self.episodes, self.seed = int(episodes), int(seed)
        self.target, self.metric = target, metric
        self.evaluator: GreedyEvaluator | None = None
        self.attempts = 0  # confirmations run so far (each on its own seeds)
        self.result: dict[str, float] | None = None
        self.training: dict[str, float] = {}
        self._rules: list[StopRule] = []

    def _confirm(self, engine: Engine) -> dict[str, float]:
        if self.evaluator is None:
            self.evaluator = self.make_evaluator(self.episodes)
        first = self.seed + SEED_OFFSET + self.attempts * self.episodes
        self.evaluator.reseed(first)
        self.attempts += 1
        values = engine.evaluate(self.evaluator)  # eval mode, inference mode, as in training
        self.result = {**values, "episodes": float(self.episodes), "first_seed": float(first),
                       "step": float(engine.global_step)}
        return values

    def on_fit_start(self, engine: Engine) -> None:
        """Find the stop rules about ``metric`` (they run before this callback)."""
        self._rules = [
            cb for cb in engine.callbacks if isinstance(cb, StopRule) and cb.metric == self.metric
        ]

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """A stop this evaluation's rule asked for stands only if fresh episodes confirm it."""
        rules = [r for r in self._rules if (engine.stopped_by or "").startswith(r.rule)]
        if not engine.should_stop or not rules or engine.interrupted:
            return
        values = self._confirm(engine)
        if all(rule.holds(values) for rule in rules):
            return
        log.info(
            "%s held on the training-time evaluation (%s %.1f) but not on the confirming one "
            "(%.1f over %d fresh episodes): training goes on",
            rules[0].rule, self.metric, logs[self.metric], values[self.metric], self.episodes,
        )
        engine.should_stop = False
        engine.stopped_by = None

    def on_fit_end(self, engine: Engine, history: list[dict[str, float]]) -> None:
        """Confirm the final policy (unless just done) and make it the run's reported values."""
        if engine.interrupted:
            return
        self.training = dict(engine.last_val)
        if self.result is None or self.result["step"] != engine.global_step:
            try:
                self._confirm(engine)
            except EvaluationInterrupted:  # a stop signal: a resume confirms again
                self.result = None
                return
        assert self.result is not None
        engine.last_val = {k: v for k, v in self.result.items() if k.startswith("val_")}

    @property
    def policy(self) -> str:
        """How the confirming episodes act: ``greedy`` or ``epsilon E`` (``task.eval_epsilon``)."""
        return getattr(self.evaluator, "policy", "greedy")  # (an evaluator of one's own: greedy)

    @property
    def solved(self) -> bool | None:
        """Whether the last confirmation reached the target (``None``: no target or none run)."""
        if self.target is None or self.result is None:
            return None
        return self.result[self.metric] >= self.target

    def final_report(self, engine: Engine) -> dict[str, Any] | None:
        """For the run's final record: the confirmation, beside the training-time values."""
        if self.result is None:
            return None
        first = int(self.result["first_seed"])
        seeds = (f"seed {first}" if self.episodes == 1 else
                 f"seeds {first}-{first + self.episodes - 1}")
        policy = self.policy
        episodes = (count(self.episodes, "fresh greedy episode") if policy == "greedy" else
                    f"{count(self.episodes, 'fresh episode')} at {policy}")
        return {
            "values_from": f"confirming evaluation, {episodes}, {seeds}",
            "confirming_evaluation": {**self.result, "attempts": self.attempts,
                                      "policy": policy},
            "training_evaluation": dict(self.training),
            "target": self.target,
            "solved": self.solved,
        }

    def close(self) -> None:
        """Close the confirmation's envs."""
        if self.evaluator is not None:
            self.evaluator.close()

    def state_dict(self) -> dict[str, Any]:
        """How many confirmations ran (the next one's seeds) and the last one's values."""
        return {"attempts": self.attempts, "result": self.result}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict`."""
        self.attempts = int(state.get("attempts", 0))
        result = state.get("result")
        self.result = None if result is None else {str(k): float(v) for k, v in result.items()}
