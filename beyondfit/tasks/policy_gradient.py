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

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from beyondfit import Task
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.core.update import Update
from beyondfit.rl.algos.algorithm import OffPolicyUpdate
from beyondfit.rl.algos.auxiliary import resolve as resolve_aux
from beyondfit.rl.algos.onpolicy import LossFn
from beyondfit.rl.algos.schedules import env_step_schedules
from beyondfit.rl.collect.normalization import normalizer_options
from beyondfit.rl.collect.onpolicy import RolloutCollector
from beyondfit.rl.envs.vector import WrapperFn, close_envs, make_vector_env
from beyondfit.rl.nets.encoders import describe_encoder
from beyondfit.rl.nets.policies import ActorCritic
from beyondfit.tasks.rl_task import check_run_counts, describe_wrappers, rl_task

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
    encoder: Any = "auto",
    env_kwargs: Mapping[str, Any] | None = None,
    vectorization: str = "auto",
    aux: Sequence[Any] = (),
    aux_options: Mapping[str, Any] | None = None,
    critic_hidden: Sequence[int] | None = None,
    init: str | None = "orthogonal",
) -> Task:
    """Build the RL task: policy, rollout collector, the given loss closure, greedy evaluator.

    Args:
        loss: the algorithm, a closure ``loss(policy, batch)`` over a
            :class:`~beyondfit.rl.collect.onpolicy.RolloutBatch` (see
            :mod:`beyondfit.rl.algos.onpolicy` for what it may call on the policy); in the
            config ``task.loss`` names its factory.
        env: Gymnasium env id, or ``module:EnvId`` to import the module that registers it;
            observations must be a ``Box``, actions ``Discrete`` or ``Box``.
        wrappers: wrapper factories (``env -> env``) applied in order to every env copy,
            for training and evaluation alike; in the config each is
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
        critic_hidden: the critic's hidden sizes when they differ from the actor's (SB3's
            ``net_arch=dict(pi=..., vf=...)``); ``None``: ``hidden``.
        init: how the policy's layers start (a built-in CNN encoder's too): ``orthogonal``
            (CleanRL's ``layer_init``, SB3's ``ortho_init``) or
            ``default`` (torch's, SB3's ``ortho_init=False``); ``None``: orthogonal (the
            config's ``null``, "the algorithm's own").
        eval_every_env_steps: env steps between greedy evaluations (rounded to whole rollouts).
        eval_episodes: greedy episodes per evaluation.
        confirm_episodes: fresh greedy episodes of the confirming evaluation
            (:mod:`beyondfit.rl.evaluation.confirm`), run when the stop rule fires and at the end:
            their mean is the run's reported return, and "solved" means it reaches the target; 0:
            none (the last in-training evaluation is reported, unconfirmed).
        target_return: what counts as solved in the summary line (and the usual stop rule);
            ``None``: the env's registered ``reward_threshold``, if any.
        normalize: running normalization inside the policy
            (:mod:`beyondfit.rl.collect.normalization`): ``true`` for observations and rewards,
            or a mapping (``observations``, ``rewards``, ``clip``, ``epsilon``);
            ``null``/``false`` for none.
        anneal: linear schedules over ``total_env_steps`` (:mod:`beyondfit.rl.algos.schedules`):
            ``lr`` is the final learning rate as a fraction of ``optimizer.lr`` (0.0 anneals to
            zero; ``null`` keeps it constant), ``ent_coef`` and ``clip_coef`` (PPO) the final
            values of those coefficients.
        encoder: what reads the observations, the trunk policy and value heads share
            (:func:`~beyondfit.rl.nets.encoders.make_encoder`): ``auto`` (a CNN for images, a
            flatten for vectors), ``flat``, ``nature``, ``minatar``, or your own factory
            ``observation_space -> nn.Module``.
        env_kwargs: keyword arguments of each env copy's ``gym.make`` (Atari's
            ``frameskip=1`` under ``AtariPreprocessing``).
        vectorization: how the training env copies are stepped
            (:data:`~beyondfit.rl.envs.vector.VECTORIZATIONS`: ``auto``, ``sync``, ``async``,
            ``envpool``; ``auto`` takes envpool for an Atari id where it is installed).
        aux, aux_options: auxiliary self-supervised terms on the encoder
            (:mod:`beyondfit.rl.algos.auxiliary`): ``shift``, ``reconstruction``,
            ``self_prediction`` or your own, summed into ``loss`` under its one optimizer; the
            rollout batches then carry ``next_obs`` and the done flags.
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

    envs = make_vector_env(env, num_envs, wrappers, env_kwargs=env_kwargs,
                           vectorization=vectorization)
    try:
        obs_size = int(np.prod(envs.single_observation_space.shape))
        normalizer = normalizer_options(normalize, obs_size, gamma)
        policy = ActorCritic(envs.single_observation_space, envs.single_action_space,
                             hidden=hidden, value_head=bool(critic),
                             log_std_init=log_std_init, activation=activation,
                             normalizer=normalizer, encoder=encoder,
                             critic_hidden=critic_hidden,
                             init="orthogonal" if init is None else init)
        auxiliary = resolve_aux(aux, aux_options, envs.single_observation_space,
                                envs.single_action_space)
        loss_fn: Any = loss
        added: list[str] = []
        if auxiliary is not None:
            # The terms' parts join the policy (and so its optimizer); their momentum copies
            # follow each optimizer step, as a target network's do.
            _, hooks, added = auxiliary.attach(policy)
            loss_fn = [Update("", auxiliary.wrap(loss), after_step=hooks)]
        data = RolloutCollector(
            envs, policy,
            num_steps=settings["rollout_steps"], total_env_steps=total_env_steps, gamma=gamma,
            gae_lambda=settings["gae_lambda"], epochs=settings["epochs"],
            minibatches=settings["minibatches"], seed=seed,
            old_log_prob=bool(settings["old_log_prob"]),
            stop_epochs=getattr(loss, "stop_epochs", None), transitions=auxiliary is not None,
        )
        rollouts_between_evals = max(1, round(eval_every_env_steps / data.env_steps_per_rollout))
        architecture = {"env": env, "hidden": list(hidden),
                        "critic_hidden": None if critic_hidden is None else list(critic_hidden),
                        "activation": activation,
                        "log_std_init": log_std_init, "critic": bool(critic),
                        "wrappers": describe_wrappers(wrappers),
                        "normalizer": None if normalizer is None else normalizer.describe(),
                        "encoder": describe_encoder(encoder), "env_kwargs": dict(env_kwargs or {})}
        return rl_task(policy, loss_fn, data, architecture, env=env, wrappers=wrappers, seed=seed,
                       eval_every=rollouts_between_evals * data.batches_per_rollout,
                       eval_episodes=eval_episodes, target_return=target_return,
                       confirm_episodes=confirm_episodes, started=started,
                       callbacks=env_step_schedules(anneal, data, loss), env_kwargs=env_kwargs,
                       leave_out=added)
    except BaseException:
        close_envs(envs)
        raise
