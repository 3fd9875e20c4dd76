"""Policy-gradient RL on any Gymnasium env: CartPole, Acrobot, Pendulum, yours (``task.env=ID``).

The task is the claim "RL is data, not a second engine" made concrete: a policy (the model), a
rollout collector (the training data: it yields batches and ends after ``total_env_steps``), a loss
closure (the algorithm: REINFORCE, A2C, PPO or your own) and a greedy evaluator (``val_return``,
``val_length``). The engine trains it exactly as it trains a regression.

On the command line an algorithm is one file of the ``algo`` config group
(``conf/algo/ppo.yaml``, picked with ``algo=ppo``): the loss factory and its options
(``task.loss``), the collector settings (``task.collector``) and whether the policy has a
critic (``task.critic``); the learning rate and clipping tuned for a task are in
``conf/experiment/tuned/TASK_ALGO.yaml``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from beyondfit import Task
from beyondfit.core.callbacks import Callback, Stopwatch
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.logs import count
from beyondfit.core.options import check_number
from beyondfit.core.serialization import atomic_save
from beyondfit.rl.algorithm import OffPolicyUpdate
from beyondfit.rl.collector import RolloutCollector
from beyondfit.rl.confirm import ConfirmingEvaluation
from beyondfit.rl.envs import WrapperFn, env_spec, make_vector_env
from beyondfit.rl.evaluate import GreedyEvaluator
from beyondfit.rl.losses import LossFn
from beyondfit.rl.normalization import normalizer_options
from beyondfit.rl.policies import ActorCritic
from beyondfit.rl.schedules import env_step_schedules

if TYPE_CHECKING:
    import torch

    from beyondfit.core.engine import Engine
    from beyondfit.rl.offpolicy import ReplayCollector

#: ``task.collector`` options and their defaults (the collector's; the tuned values per
#: algorithm live in ``conf/algo/*.yaml``).
COLLECTOR_DEFAULTS: dict[str, Any] = {
    "rollout_steps": 64,   # steps per env per rollout
    "gae_lambda": 0.95,    # GAE lambda (with a critic; 1.0: Monte-Carlo return minus baseline)
    "epochs": 1,           # passes over each rollout (PPO: several)
    "minibatches": 1,      # minibatches per pass; the engine takes one optimizer step per batch
    "old_log_prob": True,  # record the collecting policy's log-probs (PPO's ratio needs them)
}  # fmt: skip


def build(
    loss: LossFn,
    env: str = "CartPole-v1",
    wrappers: Sequence[WrapperFn] = (),
    seed: int = 0,
    num_envs: int = 8,
    total_env_steps: int = 100_000,
    gamma: float = 0.99,
    collector: Mapping[str, Any] | None = None,
    critic: bool = True,
    hidden: Sequence[int] = (64, 64),
    activation: str = "tanh",
    log_std_init: float = 0.0,
    eval_every_env_steps: int = 2048,
    eval_episodes: int = 20,
    confirm_episodes: int = 100,
    target_return: float | None = None,
    normalize: bool | Mapping[str, Any] | None = None,
    anneal: Mapping[str, float | None] | None = None,
) -> Task:
    """Build the RL task: policy, rollout collector, the given loss closure, greedy evaluator.

    Args:
        loss: the algorithm, a closure ``loss(policy, batch)`` over a
            :class:`~beyondfit.rl.collector.RolloutBatch` (see :mod:`beyondfit.rl.losses` for
            what it may call on the policy); in the config ``task.loss`` names its factory.
        env: Gymnasium env id, or ``module:EnvId`` to import the module that registers it;
            observations must be a ``Box``, actions ``Discrete`` or ``Box``.
        wrappers: wrapper factories (``env -> env``) applied in order to every env copy, for
            training and evaluation alike; in the config each is
            ``{_target_: WRAPPER_CLASS, _partial_: true, ...options}``.
        seed: seeds the training envs (``seed``), the evaluation envs (``seed + 10_000``) and
            the collector's sampling generator. Weights follow the global seed.
        num_envs: environment copies stepped together.
        total_env_steps: the collector stops after this many env steps (one epoch = one run).
        gamma: discount factor in ``[0, 1]``.
        collector: the collector settings of the algorithm, keys of :data:`COLLECTOR_DEFAULTS`
            (``rollout_steps``, ``gae_lambda``, ``epochs``, ``minibatches``, ``old_log_prob``);
            missing ones take those defaults.
        critic: give the policy a value head; the collector then computes values and GAE
            advantages. ``False`` for a loss that needs no values: the advantages are then the
            discounted returns.
        hidden, activation, log_std_init: policy architecture (see :class:`ActorCritic`).
        eval_every_env_steps: env steps between greedy evaluations (rounded to whole rollouts).
        eval_episodes: greedy episodes per evaluation.
        confirm_episodes: fresh greedy episodes of the confirming evaluation
            (:mod:`beyondfit.rl.confirm`), run when the stop rule fires and at the end: their
            mean is the run's reported return, and "solved" means it reaches the target; 0:
            none (the last in-training evaluation is reported, unconfirmed).
        target_return: what counts as solved in the summary line (and the usual stop rule);
            ``None``: the env's registered ``reward_threshold``, if any.
        normalize: running normalization inside the policy (:mod:`beyondfit.rl.normalization`):
            ``true`` for observations and rewards, or a mapping (``observations``, ``rewards``,
            ``clip``, ``epsilon``); ``null``/``false`` for none.
        anneal: linear schedules over ``total_env_steps`` (:mod:`beyondfit.rl.schedules`):
            ``lr`` is the final learning rate as a fraction of ``optimizer.lr`` (0.0 anneals to
            zero; ``null`` keeps it constant), ``ent_coef`` and ``clip_coef`` (PPO) the final
            values of those coefficients.
    """
    started = time.perf_counter()
    if isinstance(loss, Mapping | list | tuple | OffPolicyUpdate):
        raise BeyondfitError(
            "task.loss is an off-policy algorithm (declared updates, e.g. algo=sac, td3 or dqn), "
            "which needs the off-policy task: set task._target_=beyondfit.tasks.offpolicy.build "
            "(the algo files do), with a Box env for sac and td3, a Discrete one for dqn"
        )
    if not callable(loss):
        raise BeyondfitError(
            f"task.loss is {type(loss).__name__}, not a loss closure: name a loss factory with "
            "task.loss._target_=MODULE.FUNCTION (or pick an algorithm with algo=ppo)"
        )
    check_number("task.gamma", gamma, at_least=0, at_most=1, example="task.gamma=0.99")
    check_run_counts(num_envs=num_envs, total_env_steps=total_env_steps,
                     eval_every_env_steps=eval_every_env_steps, eval_episodes=eval_episodes,
                     confirm_episodes=confirm_episodes)
    settings = {**COLLECTOR_DEFAULTS, **dict(collector or {})}
    unknown = sorted(set(settings) - set(COLLECTOR_DEFAULTS))
    if unknown:
        raise BeyondfitError(
            f"unknown task.collector option(s) {unknown}; known: {', '.join(COLLECTOR_DEFAULTS)}"
        )
    for name in ("rollout_steps", "epochs", "minibatches"):
        check_number(f"task.collector.{name}", settings[name], integer=True, above=0,
                     example=f"task.collector.{name}=16")
    check_number("task.collector.gae_lambda", settings["gae_lambda"], at_least=0, at_most=1,
                 example="task.collector.gae_lambda=0.95")

    envs = make_vector_env(env, num_envs, wrappers)
    try:
        obs_size = int(np.prod(envs.single_observation_space.shape))
        normalizer = normalizer_options(normalize, obs_size, gamma)
        policy = ActorCritic(envs.single_observation_space, envs.single_action_space,
                             hidden=tuple(hidden), value_head=bool(critic),
                             log_std_init=log_std_init, activation=activation,
                             normalizer=normalizer)
        data = RolloutCollector(
            envs, policy,
            num_steps=settings["rollout_steps"], total_env_steps=total_env_steps, gamma=gamma,
            gae_lambda=settings["gae_lambda"], epochs=settings["epochs"],
            minibatches=settings["minibatches"], seed=seed,
            old_log_prob=bool(settings["old_log_prob"]),
            stop_epochs=getattr(loss, "stop_epochs", None),
        )
        evaluator = GreedyEvaluator(env, eval_episodes, seed=seed + 10_000,
                                    progress=lambda: data.env_steps, wrappers=wrappers)
    except BaseException:
        envs.close()
        raise
    rollouts_between_evals = max(1, round(eval_every_env_steps / data.env_steps_per_rollout))
    architecture = {"env": env, "hidden": list(hidden), "activation": activation,
                    "log_std_init": log_std_init, "critic": bool(critic),
                    "wrappers": describe_wrappers(wrappers),
                    "normalizer": None if normalizer is None else normalizer.describe()}
    callbacks, finish = rl_ending(policy, architecture, data, evaluator, env=env,
                                  wrappers=wrappers, seed=seed, target_return=target_return,
                                  eval_episodes=eval_episodes, confirm_episodes=confirm_episodes,
                                  started=started)
    return Task(
        model=policy,
        loss_fn=loss,
        train_data=data,
        val_data=evaluator,
        eval_every=rollouts_between_evals * data.batches_per_rollout,
        finish=finish,
        callbacks=[*callbacks, *env_step_schedules(anneal, data, loss)],
    )


def check_run_counts(*, confirm_episodes: Any, **counts: Any) -> None:
    """An RL task's env and episode counts (``task.num_envs``, ``task.total_env_steps``, ...):
    each a positive whole number; ``confirm_episodes`` may be 0 (no confirming evaluation)."""
    for name, value in counts.items():
        check_number(f"task.{name}", value, integer=True, above=0, example=f"task.{name}=8")
    check_number("task.confirm_episodes", confirm_episodes, integer=True, at_least=0,
                 example="task.confirm_episodes=100 (0: no confirming evaluation)")


def rl_ending(
    model: torch.nn.Module,
    description: Mapping[str, Any],
    data: RolloutCollector | ReplayCollector,
    evaluator: GreedyEvaluator,
    *,
    env: str,
    wrappers: Sequence[WrapperFn],
    seed: int,
    target_return: float | None,
    eval_episodes: int,
    confirm_episodes: int,
    started: float,
    leave_out: Sequence[str] = (),
) -> tuple[list[Callback], Callable[[Engine, Path], list[str]]]:
    """What every RL task does around its training: ``(callbacks, finish)``.

    The callbacks time the training (the summary line's training time) and, with
    ``confirm_episodes``, confirm the score on that many fresh greedy episodes
    (:class:`~beyondfit.rl.confirm.ConfirmingEvaluation`, against ``target_return``, by default
    the env's registered ``reward_threshold``). ``finish`` closes the envs (collector,
    evaluator, confirming evaluation), then :func:`save_and_report` the model's weights (but
    the submodules and parameters named in ``leave_out``: training's alone, such as target
    copies) and ``description``.
    """
    if target_return is None:
        target_return = env_spec(env).reward_threshold
    stopwatch = Stopwatch()
    confirm = None
    if confirm_episodes:
        confirm = ConfirmingEvaluation(lambda n: GreedyEvaluator(env, n, wrappers=wrappers),
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
                               stopwatch=stopwatch, confirm=confirm)

    return [stopwatch] if confirm is None else [stopwatch, confirm], finish


def save_and_report(run_dir: Path, weights: Mapping[str, Any], description: Mapping[str, Any],
                    engine: Engine, env: str, target_return: float | None, eval_episodes: int,
                    env_steps: int, started: float, *, stopwatch: Stopwatch | None = None,
                    confirm: ConfirmingEvaluation | None = None) -> list[str]:  # fmt: skip
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
        how = (f"confirming evaluation: greedy val_return {shown}{wanted} over "
               f"{count(confirm.episodes, 'fresh episode')} (training-time evaluation "
               f"{during:.1f} over {eval_episodes})")
    else:
        how = (f"greedy val_return {shown}{wanted} over {count(eval_episodes, 'episode')} "
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
