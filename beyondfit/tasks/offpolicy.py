"""Off-policy RL on any Gymnasium env with Box or Discrete actions: SAC, TD3, DQN, yours.

The same claim as the policy-gradient task, for replay: an agent (the model: an actor and a
critic ensemble, or a Q network), a replay collector (the training data: it steps the env with
the agent's exploration rule and yields sampled minibatches until ``total_env_steps``), the
algorithm as the updates its loss factory declares (:mod:`beyondfit.rl.algorithm`: each a
closure, the part of the agent it trains, its step ratio, its target copy) and a greedy
evaluator. This builder knows no algorithm's part names: it gives the agent the parts and
target copies the updates declare, and the command line builds one optimizer per update from
the ``optimizer`` group; the engine steps them in order on every minibatch.

On the command line an algorithm is one file of the ``algo`` group (``conf/algo/sac.yaml``,
``td3.yaml``, ``dqn.yaml``): the loss factory (``task.loss``), the replay settings
(``task.replay``) and the agent (``task.agent``: its ``kind``, sizes, exploration).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from beyondfit import Task
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_learning_rate
from beyondfit.core.update import Update, check_names
from beyondfit.rl.agents import AGENTS
from beyondfit.rl.algorithm import OffPolicyUpdate, attach_parts, check_updates, trained_params
from beyondfit.rl.envs import WrapperFn, make_vector_env
from beyondfit.rl.evaluate import GreedyEvaluator
from beyondfit.rl.offpolicy import ReplayCollector
from beyondfit.tasks.policy_gradient import check_run_counts, describe_wrappers, rl_ending

#: ``task.replay`` options and their defaults (SB3's; the tuned values live in conf/algo).
REPLAY_DEFAULTS: dict[str, Any] = {
    "buffer_size": 1_000_000,  # transitions kept
    "batch_size": 256,         # rows per minibatch
    "learning_starts": 100,    # env steps of random actions before the first update
    "updates_per_step": 1.0,   # minibatches (engine steps) per env step; null: train_freq's
    "train_freq": None,        # or RL-Zoo's: gradient_steps minibatches every train_freq env steps
    "gradient_steps": 1,       # (-1: train_freq of them)
    "save_buffer": True,       # put the buffer in checkpoints (resume= continues exactly)
}  # fmt: skip


def build(
    loss: Sequence[OffPolicyUpdate],
    env: str = "Pendulum-v1",
    wrappers: Sequence[WrapperFn] = (),
    seed: int = 0,
    num_envs: int = 1,
    total_env_steps: int = 20_000,
    replay: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
    optimizers: Mapping[str, Mapping[str, Any]] | None = None,
    eval_every_env_steps: int = 5_000,
    eval_episodes: int = 10,
    target_return: float | None = None,
    gamma: float = 0.99,
    hidden: Sequence[int] = (256, 256),
    activation: str = "relu",
    normalize: Any = None,
    log_std_init: Any = None,
    confirm_episodes: int = 10,
) -> Task:
    """Build the off-policy task: agent, replay collector, the updates the loss declares.

    Args:
        loss: the list of :class:`~beyondfit.rl.algorithm.OffPolicyUpdate` a factory such as
            ``sac_loss`` returns (``task.loss``), stepped in the list's order.
        env, wrappers, seed, num_envs, eval_episodes, target_return: as for the
            policy-gradient task; actions a bounded ``Box`` or ``Discrete``, as the agent takes.
        total_env_steps: env steps (stored transitions) of the whole run.
        replay: keys of :data:`REPLAY_DEFAULTS`.
        agent: ``kind`` (a key of :data:`~beyondfit.rl.agents.AGENTS`: ``actor_critic`` for
            SAC and TD3, ``q`` for DQN) and that class's options (``OffPolicyAgent``:
            ``actor``, ``hidden``, ``critics``, ``init_alpha``, ...; ``QAgent``: ``hidden``,
            ``exploration_fraction``, ...).
        optimizers: one update's own optimizer settings over the ``optimizer`` group's, by
            update name, e.g. ``{"critic": {"lr": 1e-3}}`` (CleanRL's critic rate).
        eval_every_env_steps: env steps between greedy evaluations.
        gamma, hidden, activation: the task's discount and network settings, which the algo
            files hand on (``task.loss.gamma: ${task.gamma}``, ``task.agent.hidden``); read
            there, not here.
        normalize: must be off (running normalization is on-policy only so far).
        log_std_init: unused (the Gaussian actor's log-std depends on the state).
        confirm_episodes: fresh greedy episodes of the confirming evaluation whose mean is
            the reported return (:class:`~beyondfit.rl.confirm.ConfirmingEvaluation`; 0: none).
    """
    started = time.perf_counter()
    updates = check_updates(loss)
    check_run_counts(num_envs=num_envs, total_env_steps=total_env_steps,
                     eval_every_env_steps=eval_every_env_steps, eval_episodes=eval_episodes,
                     confirm_episodes=confirm_episodes)
    if normalize:
        raise BeyondfitError(f"task.normalize={normalize!r}: running normalization is not "
                             "available to the off-policy algorithms; set task.normalize=null")
    settings = _replay_settings(replay)
    kind, options = _agent_options(agent)
    own_settings = _optimizer_settings(optimizers, [u.name for u in updates])
    envs = make_vector_env(env, num_envs, wrappers, sync=True)  # copies a resume can rebuild
    try:
        try:
            model = AGENTS[kind](envs.single_observation_space, envs.single_action_space,
                                 **options)
        except TypeError as exc:
            raise BeyondfitError(f"task.agent options are invalid: {exc}") from None
        # The parts and target copies the algorithm declares, before anything draws random
        # numbers: a target starts equal to its part.
        added = attach_parts(model, updates)
        # One engine Update (an optimizer from the optimizer group) per declared update.
        steps = check_names([
            Update(u.name, u.loss, params=trained_params(model, u), every=u.every,
                   after_step=[getattr(model, u.target.name).update] if u.target else [],
                   optimizer_options=own_settings.get(u.name))
            for u in updates])  # fmt: skip
        data = ReplayCollector(envs, model, total_env_steps=total_env_steps, seed=seed,
                               **settings)
        evaluator = GreedyEvaluator(env, eval_episodes, seed=seed + 10_000,
                                    progress=lambda: data.env_steps, wrappers=wrappers)
        # policy.pt holds the agent alone: the parts the algorithm added (targets) are training's.
        description = {"kind": "offpolicy", "env": env, "wrappers": describe_wrappers(wrappers),
                       "agent": _plain({"kind": kind, **options})}
        callbacks, finish = rl_ending(model, description, data, evaluator, env=env,
                                      wrappers=wrappers, seed=seed, target_return=target_return,
                                      eval_episodes=eval_episodes,
                                      confirm_episodes=confirm_episodes, started=started,
                                      leave_out=added)
    except BaseException:
        envs.close()
        raise
    per_eval = max(1, round(eval_every_env_steps * data.update_ratio))
    return Task(model=model, loss_fn=steps, train_data=data, val_data=evaluator,
                eval_every=per_eval, finish=finish, callbacks=callbacks)


def _replay_settings(replay: Mapping[str, Any] | None) -> dict[str, Any]:
    """``task.replay`` over :data:`REPLAY_DEFAULTS`, its keys checked (the collector checks
    the values)."""
    settings = {**REPLAY_DEFAULTS, **dict(replay or {})}
    extra = sorted(set(settings) - set(REPLAY_DEFAULTS))
    if extra:
        raise BeyondfitError(f"unknown task.replay option(s) {extra}; known: "
                             f"{', '.join(REPLAY_DEFAULTS)}")
    if not isinstance(settings["save_buffer"], bool):
        raise BeyondfitError(f"task.replay.save_buffer={settings['save_buffer']!r} must be true "
                             "or false (true: the buffer goes into checkpoints, so resume= "
                             "continues exactly)")
    return settings


def _agent_options(agent: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """``task.agent`` as its ``kind`` (a key of :data:`~beyondfit.rl.agents.AGENTS`) and
    that class's options."""
    options = dict(agent or {})
    kind = options.pop("kind", "actor_critic")
    if kind not in AGENTS:
        raise BeyondfitError(f"unknown task.agent.kind={kind!r}; choose one of "
                             f"{', '.join(AGENTS)}")
    return kind, options


def _optimizer_settings(optimizers: Any, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``task.optimizers`` checked: ``{update name: {option: value}}`` for updates the loss
    declares (``names``), any ``lr`` by the same rule as ``optimizer.lr``."""
    if not optimizers:
        return {}
    if not isinstance(optimizers, Mapping):
        raise BeyondfitError(f"task.optimizers={optimizers!r} must map closure names to "
                             "optimizer settings, e.g. task.optimizers.critic.lr=0.001")
    settings = {}
    for name, options in optimizers.items():
        if name not in names:
            # A tuned preset may set one (hopper_sac.yaml: alpha) for a loss that lacks it.
            raise BeyondfitError(f"task.optimizers.{name}: the loss has no {name!r} update; "
                                 f"its updates are {', '.join(names)} (task.optimizers=null "
                                 "drops a preset's settings)")
        if not isinstance(options, Mapping):
            raise BeyondfitError(f"task.optimizers.{name}={options!r} must be a mapping of "
                                 f"optimizer settings, e.g. task.optimizers.{name}.lr=0.001")
        settings[name] = {str(key): value for key, value in options.items()}
        if "lr" in settings[name]:
            check_learning_rate(settings[name]["lr"], f"task.optimizers.{name}.lr")
    return settings


def _plain(value: Any) -> Any:
    """Config values as plain JSON-able data (lists, dicts, numbers, strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
