"""Off-policy actor-critic RL on any Gymnasium env with Box actions: SAC, TD3, yours.

The same claim as the policy-gradient task, for replay: an agent (the model: actor, critic
ensemble, target copies, temperature), a replay collector (the training data: it steps the env
and yields sampled minibatches until ``total_env_steps``), the algorithm as one named loss
closure per optimizer (``critic``, ``actor``, ``alpha``: see :mod:`beyondfit.rl.offpolicy_losses`)
and a greedy evaluator. The command line builds one optimizer per closure from the
``optimizer`` group and the engine steps them in order on every minibatch.

On the command line an algorithm is one file of the ``algo`` group (``conf/algo/sac.yaml``,
``td3.yaml``): the loss factory (``task.loss``), the replay settings (``task.replay``) and the
agent (``task.agent``: actor kind, sizes, target networks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from beyondfit import Task
from beyondfit.core.callbacks import Stopwatch
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_learning_rate
from beyondfit.rl.agents import OffPolicyAgent
from beyondfit.rl.confirm import ConfirmingEvaluation
from beyondfit.rl.envs import WrapperFn, env_spec, make_vector_env
from beyondfit.rl.evaluate import GreedyEvaluator
from beyondfit.rl.offpolicy import ReplayCollector
from beyondfit.tasks.contract import UpdateSpec
from beyondfit.tasks.policy_gradient import check_run_counts, describe_wrappers, rl_finish

#: ``task.replay`` options and their defaults (SB3's; the tuned values live in conf/algo).
REPLAY_DEFAULTS: dict[str, Any] = {
    "buffer_size": 1_000_000,  # transitions kept
    "batch_size": 256,         # rows per minibatch
    "learning_starts": 100,    # env steps of random actions before the first update
    "updates_per_step": 1.0,   # minibatches (engine steps) per env step
    "save_buffer": True,       # put the buffer in checkpoints (resume= continues exactly)
}  # fmt: skip
#: Which parameters each named closure's optimizer trains, and which target copy follows it.
PARTS = {"critic": ("critic", "critic_target"), "actor": ("actor", "actor_target"),
         "alpha": ("log_alpha", None)}


def build(
    loss: Mapping[str, Callable[..., Any]],
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
    """Build the off-policy task: agent, replay collector, one update per loss closure.

    Args:
        loss: ``{name: closure}`` from a factory such as ``sac_loss`` (``task.loss``); names
            among ``critic``, ``actor``, ``alpha``, stepped in the mapping's order.
        env, wrappers, seed, num_envs, eval_episodes, target_return: as for the
            policy-gradient task; actions must be a bounded ``Box``.
        total_env_steps: env steps (stored transitions) of the whole run.
        replay: keys of :data:`REPLAY_DEFAULTS`.
        agent: options of :class:`~beyondfit.rl.agents.OffPolicyAgent` (``actor``, ``hidden``,
            ``critics``, ``critic_target``, ``actor_target``, ``init_alpha``, ...).
        optimizers: one closure's own optimizer settings over the ``optimizer`` group's, by
            closure name, e.g. ``{"critic": {"lr": 1e-3}}`` (CleanRL's critic rate).
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
    if not isinstance(loss, Mapping) or not loss or not all(callable(f) for f in loss.values()):
        raise BeyondfitError(
            f"task.loss gave {type(loss).__name__}, not a mapping of named loss closures: an "
            "off-policy loss factory returns {'critic': fn, 'actor': fn, ...} (see "
            "beyondfit.rl.offpolicy_losses), or pick one with algo=sac or algo=td3"
        )
    unknown = sorted(set(loss) - set(PARTS))
    if unknown:
        raise BeyondfitError(f"task.loss returned closures named {unknown}; each name picks "
                             f"the parameters it trains: use {', '.join(PARTS)}")
    check_run_counts(num_envs=num_envs, total_env_steps=total_env_steps,
                     eval_every_env_steps=eval_every_env_steps, eval_episodes=eval_episodes,
                     confirm_episodes=confirm_episodes)
    if normalize:
        raise BeyondfitError(f"task.normalize={normalize!r}: running normalization is not "
                             "available to the off-policy algorithms; set task.normalize=null")
    settings = {**REPLAY_DEFAULTS, **dict(replay or {})}
    extra = sorted(set(settings) - set(REPLAY_DEFAULTS))
    if extra:
        raise BeyondfitError(f"unknown task.replay option(s) {extra}; known: "
                             f"{', '.join(REPLAY_DEFAULTS)}")
    options = dict(agent or {})
    own_settings = _optimizer_settings(optimizers, loss)
    envs = make_vector_env(env, num_envs, wrappers)
    try:
        try:
            model = OffPolicyAgent(envs.single_observation_space, envs.single_action_space,
                                   **options)
        except TypeError as exc:
            raise BeyondfitError(f"task.agent options are invalid: {exc}") from None
        data = ReplayCollector(envs, model, total_env_steps=total_env_steps, seed=seed,
                               buffer_size=settings["buffer_size"],
                               batch_size=settings["batch_size"],
                               learning_starts=settings["learning_starts"],
                               updates_per_step=settings["updates_per_step"],
                               save_buffer=bool(settings["save_buffer"]))
        evaluator = GreedyEvaluator(env, eval_episodes, seed=seed + 10_000,
                                    progress=lambda: data.env_steps, wrappers=wrappers)
    except BaseException:
        envs.close()
        raise
    updates = []
    for name, closure in loss.items():
        params_name, target_name = PARTS[name]
        params = getattr(model, params_name)
        if params is None:
            raise BeyondfitError(f"task.loss has an {name!r} closure but the agent has no "
                                 f"{params_name} (set task.agent.init_alpha)")
        target = getattr(model, target_name) if target_name else None
        updates.append(UpdateSpec(name, closure, [params] if name == "alpha" else params,
                                  every=int(getattr(closure, "every", 1)),
                                  after_step=[target.update] if target is not None else [],
                                  optimizer_options=own_settings.get(name, {})))
    if target_return is None:
        target_return = env_spec(env).reward_threshold
    stopwatch = Stopwatch()  # training time, for the summary line
    callbacks: list[Any] = [stopwatch]
    confirm = None
    if confirm_episodes:
        confirm = ConfirmingEvaluation(lambda n: GreedyEvaluator(env, n, wrappers=wrappers),
                                       confirm_episodes, seed, target_return)
        callbacks.append(confirm)
    description = {"kind": "offpolicy", "env": env, "wrappers": describe_wrappers(wrappers),
                   "agent": _plain(options)}
    finish = rl_finish(model, description, data, evaluator, env=env, target_return=target_return,
                       eval_episodes=eval_episodes, started=started, stopwatch=stopwatch,
                       confirm=confirm)
    per_eval = max(1, round(eval_every_env_steps * settings["updates_per_step"]))
    return Task(model=model, loss_fn=updates, train_data=data, val_data=evaluator,
                eval_every=per_eval, finish=finish, callbacks=callbacks)


def _optimizer_settings(optimizers: Any, loss: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``task.optimizers`` checked: ``{closure name: {option: value}}`` for closures of the
    loss, any ``lr`` by the same rule as ``optimizer.lr``."""
    if not optimizers:
        return {}
    if not isinstance(optimizers, Mapping):
        raise BeyondfitError(f"task.optimizers={optimizers!r} must map closure names to "
                             "optimizer settings, e.g. task.optimizers.critic.lr=0.001")
    settings = {}
    for name, options in optimizers.items():
        if name not in loss:
            # A tuned preset may set one (hopper_sac.yaml: alpha) for a loss that lacks it.
            raise BeyondfitError(f"task.optimizers.{name}: the loss has no {name!r} closure; "
                                 f"its closures are {', '.join(loss)} (task.optimizers=null "
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
