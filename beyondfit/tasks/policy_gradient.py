"""Policy-gradient RL on any Gymnasium env: CartPole, Acrobot, Pendulum, or ``task.env=ID``.

The task is the claim "RL is data, not a second engine" made concrete: a policy (the model), a
rollout collector (the training data: it yields batches and ends after ``total_env_steps``), a loss
closure (REINFORCE, A2C or PPO) and a greedy evaluator (``val_return``, ``val_length``). The engine
trains it exactly as it trains a regression.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.serialization import atomic_save
from beyondfit.rl.collector import RolloutCollector
from beyondfit.rl.envs import make_vector_env
from beyondfit.rl.evaluate import GreedyEvaluator
from beyondfit.rl.losses import ALGORITHMS, make_loss
from beyondfit.rl.normalization import normalizer_options
from beyondfit.rl.policies import ActorCritic
from beyondfit.rl.schedules import EnvStepSchedules
from beyondfit.tasks import Task

if TYPE_CHECKING:
    from beyondfit.core.engine import Engine

#: Collector settings per algorithm when the config gives none (``task.per_algo``); tuned on
#: CartPole-v1 with 8 envs and Adam at lr 5e-3 for PPO, 3e-3 for the others (bench/cartpole.py).
ALGO_DEFAULTS: dict[str, dict[str, Any]] = {
    "reinforce": {"rollout_steps": 64, "gae_lambda": 1.0, "epochs": 1, "minibatches": 1},
    "a2c": {"rollout_steps": 8, "gae_lambda": 0.9, "epochs": 1, "minibatches": 1},
    "ppo": {"rollout_steps": 64, "gae_lambda": 0.9, "epochs": 10, "minibatches": 3,
            "clip_coef": 0.2},
}
_COLLECTOR_KEYS = ("rollout_steps", "gae_lambda", "epochs", "minibatches")
_LOSS_KEYS = ("vf_coef", "ent_coef", "normalize_advantages", "clip_coef", "value_clip",
              "target_kl")
_PPO_ONLY = ("clip_coef", "value_clip", "target_kl")
# Read by the engine and the optimizer, not here: the task configs point engine.clip_norm and
# optimizer.lr at the chosen algorithm's.
_ENGINE_KEYS = ("clip_norm", "lr")


def build(
    env: str = "CartPole-v1",
    algo: str = "ppo",
    seed: int = 0,
    num_envs: int = 8,
    total_env_steps: int = 100_000,
    gamma: float = 0.99,
    per_algo: Mapping[str, Mapping[str, Any]] | None = None,
    vf_coef: float = 0.5,
    ent_coef: float = 0.0,
    normalize_advantages: bool = True,
    hidden: Sequence[int] = (64, 64),
    activation: str = "tanh",
    log_std_init: float = 0.0,
    eval_every_env_steps: int = 2048,
    eval_episodes: int = 20,
    target_return: float | None = None,
    normalize: bool | Mapping[str, Any] | None = None,
    anneal: Mapping[str, float | None] | None = None,
) -> Task:
    """Build the RL task: policy, rollout collector, loss closure, greedy evaluator.

    Args:
        env: Gymnasium env id; observations must be a ``Box``, actions ``Discrete`` or ``Box``.
        algo: ``reinforce``, ``a2c`` or ``ppo``.
        seed: seeds the training envs (``seed``), the evaluation envs (``seed + 10_000``) and
            the collector's sampling generator. Weights follow the global seed.
        num_envs: environment copies stepped together.
        total_env_steps: the collector stops after this many env steps (one epoch = one run).
        gamma: discount factor in ``[0, 1]``.
        per_algo: per-algorithm collector/loss settings (``rollout_steps``, ``gae_lambda``,
            ``epochs``, ``minibatches``, ``clip_coef``, ...); ``algo`` picks one entry, merged
            over :data:`ALGO_DEFAULTS`. Keys of this function (``vf_coef``...) may appear too,
            and ``clip_norm`` and ``lr``, which the shipped configs hand to
            ``engine.clip_norm`` and ``optimizer.lr``.
        vf_coef, ent_coef, normalize_advantages: loss options shared by the algorithms.
        hidden, activation, log_std_init: policy architecture (see :class:`ActorCritic`).
        eval_every_env_steps: env steps between greedy evaluations (rounded to whole rollouts).
        eval_episodes: greedy episodes per evaluation.
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
    if algo not in ALGORITHMS:
        raise BeyondfitError(
            f"unknown task.algo={algo!r}; choose one of {', '.join(ALGORITHMS)}, e.g. task.algo=ppo"
        )
    if not isinstance(gamma, int | float) or not 0.0 <= gamma <= 1.0:
        raise BeyondfitError(f"task.gamma={gamma!r} must lie in [0, 1], e.g. task.gamma=0.99")
    for name, value in (("num_envs", num_envs), ("total_env_steps", total_env_steps),
                        ("eval_every_env_steps", eval_every_env_steps),
                        ("eval_episodes", eval_episodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise BeyondfitError(
                f"task.{name}={value!r} must be a positive integer, e.g. task.{name}=8"
            )
    settings = {**ALGO_DEFAULTS[algo], **dict((per_algo or {}).get(algo) or {})}
    known = _COLLECTOR_KEYS + _LOSS_KEYS + _ENGINE_KEYS
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise BeyondfitError(
            f"unknown setting(s) {unknown} in task.per_algo.{algo}; known: {', '.join(known)}"
        )
    where = f"task.per_algo.{algo}"
    for name in ("rollout_steps", "epochs", "minibatches"):
        value = settings[name]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise BeyondfitError(
                f"{where}.{name}={value!r} must be a positive integer, e.g. {where}.{name}=16"
            )
    if not 0.0 <= settings["gae_lambda"] <= 1.0:
        raise BeyondfitError(
            f"{where}.gae_lambda={settings['gae_lambda']!r} must lie in [0, 1], e.g. 0.95"
        )
    loss_options = {"vf_coef": vf_coef, "ent_coef": ent_coef,
                    "normalize_advantages": normalize_advantages}
    loss_options.update({k: settings[k] for k in _LOSS_KEYS if k in settings})
    if algo != "ppo":
        for key in _PPO_ONLY:
            loss_options.pop(key, None)
    anneal = dict(anneal or {})
    unknown = sorted(set(anneal) - {"lr", "ent_coef", "clip_coef"})
    if unknown:
        raise BeyondfitError(f"unknown task.anneal key(s) {unknown}; known: lr, ent_coef, "
                             "clip_coef (final values; lr as a fraction of optimizer.lr)")
    lr_end = anneal.pop("lr", None)
    anneal = {k: v for k, v in anneal.items() if v is not None}
    for name, value in [("lr", lr_end), *anneal.items()]:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or value < 0):
            raise BeyondfitError(
                f"task.anneal.{name}={value!r} must be a number >= 0 (the final value) or null"
            )

    loss_fn = make_loss(algo, **loss_options)
    envs = make_vector_env(env, num_envs)
    try:
        obs_size = int(np.prod(envs.single_observation_space.shape))
        normalizer = normalizer_options(normalize, obs_size, gamma)
        policy = ActorCritic(envs.single_observation_space, envs.single_action_space,
                             hidden=tuple(hidden), log_std_init=log_std_init,
                             activation=activation, normalizer=normalizer)
        collector = RolloutCollector(
            envs, policy,
            num_steps=settings["rollout_steps"], total_env_steps=total_env_steps, gamma=gamma,
            gae_lambda=settings["gae_lambda"], epochs=settings["epochs"],
            minibatches=settings["minibatches"], seed=seed, log_probs=algo == "ppo",
            stop_epochs=getattr(loss_fn, "stop_epochs", None),
        )
        evaluator = GreedyEvaluator(env, eval_episodes, seed=seed + 10_000,
                                    progress=lambda: collector.env_steps)
    except BaseException:
        envs.close()
        raise
    callbacks = []
    if lr_end is not None or anneal:
        callbacks.append(EnvStepSchedules(collector, lr_end, getattr(loss_fn, "coefficients", None),
                                          anneal))
    if target_return is None:
        target_return = gym.spec(env).reward_threshold
    rollouts_between_evals = max(1, round(eval_every_env_steps / collector.env_steps_per_rollout))
    architecture = {"env": env, "algo": algo, "hidden": list(hidden), "activation": activation,
                    "log_std_init": log_std_init,
                    "normalizer": None if normalizer is None else normalizer.describe()}

    def finish(engine: Engine, run_dir: Path) -> list[str]:
        """Save the policy, close the envs, and say whether the run solved the env."""
        # A checkpoint-shaped file (weights under "model"), self-describing for python -m beyondfit.play.
        atomic_save({"model": policy.state_dict(), "policy": architecture},
                    Path(run_dir) / "policy.pt")
        (Path(run_dir) / "policy.json").write_text(json.dumps(architecture, indent=2) + "\n")
        collector.close()
        evaluator.close()
        score = engine.last_val.get("val_return")
        if target_return is None:
            verdict = "trained (no target return)"
        elif score is not None and score >= target_return:
            verdict = "solved"
        else:
            verdict = "not solved"
        shown = "n/a" if score is None else f"{score:.1f}"
        wanted = "" if target_return is None else f" (target {target_return:g})"
        return [
            f"{env} {verdict}: greedy val_return {shown}{wanted} over {eval_episodes} episodes "
            f"after {collector.env_steps} env steps, {time.perf_counter() - started:.1f}s wall",
            f"policy saved to {Path(run_dir) / 'policy.pt'}; watch it with "
            f"python -m beyondfit.play {run_dir}",
        ]

    return Task(
        model=policy,
        loss_fn=loss_fn,
        train_data=collector,
        val_data=evaluator,
        eval_every=rollouts_between_evals * collector.batches_per_rollout,
        finish=finish,
        callbacks=callbacks,
    )
