"""Off-policy RL on any Gymnasium env with Box or Discrete actions: SAC, TD3, DQN, yours.

The same claim as the policy-gradient task, for replay: an agent (the model: an actor and a
critic ensemble, or a Q network), a replay collector (the training data: it steps the env with
the agent's exploration rule and yields sampled minibatches until ``total_env_steps``), the
algorithm as the updates its loss factory declares (:mod:`beyondfit.rl.algos.algorithm`: each a
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
from beyondfit.core.options import check_number
from beyondfit.rl.algos.algorithm import OffPolicyUpdate, engine_updates
from beyondfit.rl.algos.augmentation import resolve as resolve_augment
from beyondfit.rl.algos.auxiliary import resolve as resolve_aux
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.envs.vector import WrapperFn, close_envs, make_vector_env
from beyondfit.rl.nets.agents import AGENTS
from beyondfit.rl.nets.encoders import describe_encoder
from beyondfit.rl.nets.heads import describe_head
from beyondfit.tasks.rl_task import check_run_counts, describe_wrappers, rl_task

#: ``task.replay`` options and their defaults (SB3's; the tuned values live in conf/algo).
REPLAY_DEFAULTS: dict[str, Any] = {
    "buffer_size": 1_000_000,  # transitions kept
    "batch_size": 256,         # rows per minibatch
    "learning_starts": 100,    # env steps of random actions before the first update
    "updates_per_step": 1.0,   # minibatches (engine steps) per env step; null: train_freq's
    "train_freq": None,        # or RL-Zoo's: gradient_steps minibatches every train_freq env steps
    "gradient_steps": 1,       # (-1: train_freq of them)
    "save_buffer": True,       # put the buffer in checkpoints (resume= continues exactly)
    "n_step": 1,               # rewards a sampled transition sums (3: Rainbow's n-step returns)
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
    encoder: Any = "auto",
    env_kwargs: Mapping[str, Any] | None = None,
    vectorization: str = "auto",
    aux: Sequence[Any] = (),
    aux_options: Mapping[str, Any] | None = None,
    augment: Sequence[Any] = (),
    eval_epsilon: float = 0.0,
    **policy_gradient: Any,
) -> Task:
    """Build the off-policy task: agent, replay collector, the updates the loss declares.

    Args:
        loss: the list of :class:`~beyondfit.rl.algos.algorithm.OffPolicyUpdate` a factory such as
            ``sac_loss`` returns (``task.loss``), stepped in the list's order.
        replay: keys of :data:`REPLAY_DEFAULTS`.
        agent: ``kind`` (:data:`~beyondfit.rl.nets.agents.AGENTS`: ``actor_critic`` for SAC and
            TD3, ``q`` for DQN) and that class's options (``actor``, ``hidden``, ...).
        optimizers: each update's own settings over the ``optimizer`` group's, by its name.
        total_env_steps: env steps (stored transitions) of the whole run.
        env, wrappers, seed, num_envs, eval_every_env_steps, eval_episodes, target_return,
            confirm_episodes, encoder, env_kwargs, vectorization, aux, aux_options: as for
            :func:`beyondfit.tasks.policy_gradient.build` (the encoder inside the Q network
            or the critic; the copies stepped here: ``async``, ``envpool`` refused).
        augment: transforms of every sampled minibatch before the losses read it
            (:mod:`beyondfit.rl.algos.augmentation`: ``shift``, ``intensity``, your own).
        eval_epsilon: the evaluations' chance of a random action (DQN; 0: greedy).
        gamma, hidden, activation, normalize, log_std_init: the task's; the algo files hand
            the first three on (``task.agent.hidden``). ``normalize`` and the policy-gradient
            policy's options (``critic_hidden``, ``init``) must be off.
    """
    started = time.perf_counter()
    check_run_counts(num_envs=num_envs, total_env_steps=total_env_steps,
                     eval_every_env_steps=eval_every_env_steps, eval_episodes=eval_episodes,
                     confirm_episodes=confirm_episodes)
    _refuse_policy_gradient_options(normalize, **policy_gradient)
    settings = _replay_settings(replay)
    envs = make_vector_env(env, num_envs, wrappers, sync=True, env_kwargs=env_kwargs,
                           vectorization=vectorization)  # copies a resume can rebuild
    try:
        model, described = _agent(agent, envs, encoder, env, wrappers, env_kwargs, total_env_steps)
        auxiliary = resolve_aux(aux, aux_options, *_spaces(envs))
        updates, added = engine_updates(model, loss, optimizers, auxiliary)  # one optimizer each
        data = ReplayCollector(envs, model, total_env_steps=total_env_steps, seed=seed,
                               gamma=gamma, augment=resolve_augment(augment, _spaces(envs)[0]),
                               **settings)
        return rl_task(model, updates, data, described, env=env, wrappers=wrappers, seed=seed,
                       eval_every=max(1, round(eval_every_env_steps * data.update_ratio)),
                       eval_episodes=eval_episodes, target_return=target_return,
                       confirm_episodes=confirm_episodes, started=started, leave_out=added,
                       env_kwargs=env_kwargs, eval_epsilon=eval_epsilon)
    except BaseException:
        close_envs(envs)
        raise


def _refuse_policy_gradient_options(normalize: Any, critic_hidden: Any = None,
                                    init: Any = None) -> None:
    """The task keys of conf/base/rl.yaml only a policy-gradient policy reads: set, each is one
    line saying what the off-policy agent does instead."""
    if normalize:
        raise BeyondfitError(f"task.normalize={normalize!r}: running normalization is not "
                             "available to the off-policy algorithms; set task.normalize=null")
    if critic_hidden is not None or init not in (None, "default"):
        raise BeyondfitError("task.critic_hidden and task.init shape the policy-gradient policy; "
                             "an off-policy agent's critics are sized by +task.agent.critic_hidden"
                             "=[...] and start from torch's initialization: set both to null")


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


def _spaces(envs: Any) -> tuple[Any, Any]:
    return envs.single_observation_space, envs.single_action_space


def _agent(agent: Mapping[str, Any] | None, envs: Any, encoder: Any, env: str,
           wrappers: Sequence[WrapperFn], env_kwargs: Mapping[str, Any] | None,
           total_env_steps: int) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """The agent ``task.agent`` describes (its ``kind``, a key of
    :data:`~beyondfit.rl.nets.agents.AGENTS`, and that class's options; ``encoder`` unless it names
    its own) for ``envs``' spaces, and what ``policy.json`` says of it and its env as plain
    data: the agent alone (the parts the algorithm adds, targets, are training's).
    ``exploration_steps`` (DQN's epsilon decay in env steps, as papers state it, whatever the
    run's length) becomes the ``exploration_fraction`` of this run."""
    options = dict(agent or {})
    options.setdefault("encoder", encoder)
    for key, fraction, bound in (("exploration_steps", "exploration_fraction", "above"),
                                 ("exploration_start_steps", "exploration_start", "at_least")):
        if (steps := options.pop(key, None)) is None:
            continue
        if options.get("kind", "actor_critic") != "q":
            raise BeyondfitError(f"task.agent.{key} is DQN's epsilon schedule "
                                 "(task.agent.kind=q); this agent explores with noise")
        steps = check_number(f"task.agent.{key}", steps, **{bound: 0})
        options[fraction] = min(1.0, steps / total_env_steps)
    if options.get("exploration_start", 0.0) >= 1.0:
        raise BeyondfitError(f"task.agent.exploration_start_steps is at or past "
                             f"task.total_env_steps={total_env_steps}: epsilon would never fall")
    kind = options.pop("kind", "actor_critic")
    if kind not in AGENTS:
        raise BeyondfitError(f"unknown task.agent.kind={kind!r}; choose one of "
                             f"{', '.join(AGENTS)}")
    try:
        model = AGENTS[kind](envs.single_observation_space, envs.single_action_space, **options)
    except TypeError as exc:
        raise BeyondfitError(f"task.agent options are invalid: {exc}") from None
    options["encoder"] = describe_encoder(options["encoder"])
    if "head" in options:
        options["head"] = describe_head(options["head"])
    return model, {"kind": "offpolicy", "env": env, "wrappers": describe_wrappers(wrappers),
                   "agent": _plain({"kind": kind, **options}),
                   "env_kwargs": dict(env_kwargs or {})}


def _plain(value: Any) -> Any:
    """Config values as plain JSON-able data (lists, dicts, numbers, strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
