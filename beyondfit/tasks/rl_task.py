"""What every RL task does around its algorithm, once: the checks of its env and episode
counts, the greedy evaluation and the confirming one, the saved policy and the closing lines.

The policy-gradient task (:mod:`beyondfit.tasks.policy_gradient`) and the off-policy one
(:mod:`beyondfit.tasks.offpolicy`) build their model, data and optimizers, then hand them to
:func:`rl_task`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondfit import Task
from beyondfit.core.callbacks import Callback, Stopwatch
from beyondfit.core.logs import count
from beyondfit.core.options import check_number
from beyondfit.core.state.serialization import atomic_save
from beyondfit.rl.envs.vector import MAX_ENVS, WrapperFn, env_spec
from beyondfit.rl.evaluation.confirm import ConfirmingEvaluation
from beyondfit.rl.evaluation.evaluator import GreedyEvaluator

if TYPE_CHECKING:
    import torch

    from beyondfit.core.engine import Engine
    from beyondfit.rl.collect.offpolicy import ReplayCollector
    from beyondfit.rl.collect.onpolicy import RolloutCollector


def check_run_counts(*, confirm_episodes: Any, **counts: Any) -> None:
    """An RL task's env and episode counts (``task.num_envs``, ``task.total_env_steps``, ...):
    each a positive whole number; ``confirm_episodes`` may be 0 (no confirming evaluation).

    The greedy evaluations play their episodes at once, one env copy each: ``eval_episodes``
    and ``confirm_episodes`` are bounded as ``num_envs`` is, by their own key and before any
    env is built (the confirming evaluation's envs are made only at the run's end)."""
    for name, value in counts.items():
        bound = MAX_ENVS if name in _ENV_COPIES else None
        check_number(f"task.{name}", value, integer=True, above=0, at_most=bound,
                     example=f"task.{name}={_EXAMPLES.get(name, 8)}")
    check_number("task.confirm_episodes", confirm_episodes, integer=True, at_least=0,
                 at_most=MAX_ENVS,
                 example="task.confirm_episodes=100 (0: no confirming evaluation)")


#: The counts that are env copies run at once (task.num_envs: the training envs say theirs).
_ENV_COPIES = ("eval_episodes",)
_EXAMPLES = {"eval_episodes": 20, "total_env_steps": 100000, "eval_every_env_steps": 2048}


def rl_task(
    model: torch.nn.Module,
    loss_fn: Any,
    data: RolloutCollector | ReplayCollector,
    description: Mapping[str, Any],
    *,
    env: str,
    wrappers: Sequence[WrapperFn],
    seed: int,
    eval_every: int,
    eval_episodes: int,
    target_return: float | None,
    confirm_episodes: int,
    started: float,
    callbacks: Sequence[Callback] = (),
    leave_out: Sequence[str] = (),
    env_kwargs: Mapping[str, Any] | None = None,
    eval_epsilon: float = 0.0,
) -> Task:
    """The :class:`~beyondfit.Task` of an RL algorithm: what every RL task does around it.

    It evaluates greedily every ``eval_every`` optimizer steps on its own envs (seeds from
    ``seed + 10_000``), times the training (the summary line's training time) and, with
    ``confirm_episodes``, confirms the score on that many fresh greedy episodes
    (:class:`~beyondfit.rl.evaluation.confirm.ConfirmingEvaluation`, against ``target_return``, by
    default the env's registered ``reward_threshold``). Its ``finish`` closes the envs (collector,
    evaluator, confirming evaluation), then :func:`save_and_report` the model's weights (but
    the submodules and parameters named in ``leave_out``: training's alone, such as target
    copies) and ``description``. ``eval_epsilon``: both evaluations act epsilon-greedy with
    that chance of a random action (``task.eval_epsilon``: the Atari 100k protocol's 0.001).
    """
    evaluator = GreedyEvaluator(env, eval_episodes, seed=seed + 10_000,
                                progress=lambda: data.env_steps, wrappers=wrappers,
                                env_kwargs=env_kwargs, epsilon=eval_epsilon)
    if target_return is None:
        target_return = env_spec(env).reward_threshold
    stopwatch = Stopwatch()
    confirm = None
    if confirm_episodes:
        confirm = ConfirmingEvaluation(lambda n: GreedyEvaluator(
                                           env, n, wrappers=wrappers, env_kwargs=env_kwargs,
                                           key="task.confirm_episodes", epsilon=eval_epsilon),
                                       confirm_episodes, seed, target_return)

    def finish(engine: Engine, run_dir: Path) -> list[str]:
        """Save the policy, close the envs, and say whether the run solved the env."""
        data.close()
        evaluator.close()
        if confirm is not None:
            confirm.close()
        weights = {key: value for key, value in model.state_dict().items()
                   if key.split(".", 1)[0] not in leave_out}
        return save_and_report(run_dir, weights, description, engine, env,
                               target_return, eval_episodes, data.env_steps, started,
                               stopwatch=stopwatch, confirm=confirm, policy=evaluator.policy)

    ending = [stopwatch] if confirm is None else [stopwatch, confirm]
    return Task(model=model, loss_fn=loss_fn, train_data=data, val_data=evaluator,
                eval_every=eval_every, finish=finish, callbacks=[*ending, *callbacks])


def save_and_report(run_dir: Path, weights: Mapping[str, Any], description: Mapping[str, Any],
                    engine: Engine, env: str, target_return: float | None, eval_episodes: int,
                    env_steps: int, started: float, *, stopwatch: Stopwatch | None = None,
                    confirm: ConfirmingEvaluation | None = None,
                    policy: str = "greedy") -> list[str]:  # fmt: skip
    """Write ``policy.pt`` and ``policy.json``; the RL tasks' closing lines (solved or not).

    With a confirming evaluation the reported return is its mean over fresh episodes, the
    training-time one beside it; ``stopwatch`` gives the training time apart.
    """
    # A checkpoint-shaped file (weights under "model"), self-describing for
    # python -m beyondfit.play.
    atomic_save({"model": weights, "policy": description}, Path(run_dir) / "policy.pt")
    (Path(run_dir) / "policy.json").write_text(json.dumps(description, indent=2) + "\n")
    score = engine.last_val.get("val_return")
    if target_return is None:
        verdict = "trained (no target return)"
    elif score is not None and score >= target_return:
        verdict = "solved"
    else:
        verdict = "not solved"
    shown = "n/a" if score is None else f"{score:.1f}"
    wanted = "" if target_return is None else f" (target {target_return:g})"
    if confirm is not None and confirm.training:
        during = confirm.training.get("val_return", float("nan"))
        how = (f"confirming evaluation: {policy} val_return {shown}{wanted} over "
               f"{count(confirm.episodes, 'fresh episode')} (training-time evaluation "
               f"{during:.1f} over {eval_episodes})")
    else:
        how = (f"{policy} val_return {shown}{wanted} over {count(eval_episodes, 'episode')} "
               "(unconfirmed)")
    total = time.perf_counter() - started
    timing = (f"{total:.1f}s wall" if stopwatch is None else
              f"{stopwatch.seconds:.1f}s of training ({total:.1f}s with building the task and "
              "evaluations)")
    return [
        f"{env} {verdict}: {how} after {env_steps} env steps, {timing}",
        f"policy saved to {Path(run_dir) / 'policy.pt'}; watch it with "
        f"python -m beyondfit.play {run_dir}",
    ]


def describe_wrappers(wrappers: Sequence[WrapperFn]) -> list[dict[str, Any]] | None:
    """The wrappers as config entries (``{"_target_": ..., **options}``) that
    ``python -m beyondfit.play`` can rebuild; ``None`` if one is not a class or a partial of one
    with plain options (a lambda, say)."""
    described = []
    for wrapper in wrappers:
        func = getattr(wrapper, "func", wrapper)  # a (Hydra) partial keeps its target here
        options = dict(getattr(wrapper, "keywords", None) or {})
        if getattr(wrapper, "args", ()) or not isinstance(func, type | type(describe_wrappers)):
            return None
        name = getattr(func, "__qualname__", "")
        if "<" in name or not all(
            isinstance(v, str | int | float | bool | type(None)) for v in options.values()
        ):
            return None
        described.append({"_target_": f"{func.__module__}.{name}", **options})
    return described
