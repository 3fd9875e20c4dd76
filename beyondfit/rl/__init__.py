"""Reinforcement learning as data for the one engine.

A :class:`RolloutCollector` is the training data (an iterable of :class:`RolloutBatch`), a loss
closure from :mod:`beyondfit.rl.algos.onpolicy` is the algorithm, a :class:`GreedyEvaluator` is the
validation. Nothing here runs a training loop::

    envs = make_vector_env("CartPole-v1", 8)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space)
    data = RolloutCollector(envs, policy, num_steps=64, total_env_steps=50_000,
                            epochs=4, minibatches=2)
    engine = Engine(policy, ppo_loss(), torch.optim.Adam(policy.parameters(), 3e-3))
    engine.fit(data, val_data=GreedyEvaluator("CartPole-v1"), eval_every=32)

What serious PPO runs add, each usable on its own: running normalization of observations and
rewards as a submodule of the policy (``ActorCritic(..., normalizer=Normalizer(obs_size))``),
linear schedules over env steps (``EnvStepSchedules(data, lr_end=0.0)`` as an engine callback),
and ``ppo_loss(target_kl=0.02, value_clip=0.2)`` (give the collector ``stop_epochs=
loss.stop_epochs``).

Off-policy: a :class:`ReplayCollector` (stores transitions in a :class:`ReplayBuffer`, yields
sampled :class:`ReplayBatch` minibatches; Box or Discrete actions), an agent
(:class:`OffPolicyAgent`: actor and critic ensemble; :class:`QAgent`: a Q network) and the
updates an algorithm declares (:class:`OffPolicyUpdate`, each with its closure, the part it
trains and its :class:`Target` copy) from :func:`sac_loss`, :func:`td3_loss`, :func:`dqn_loss`
or a factory of your own.
"""

from beyondfit.rl.algos.algorithm import OffPolicyUpdate, Target
from beyondfit.rl.algos.kl_stop import TargetKL
from beyondfit.rl.algos.offpolicy import dqn_loss, sac_loss, td3_loss
from beyondfit.rl.algos.onpolicy import a2c_loss, ppo_loss, reinforce_loss
from beyondfit.rl.algos.schedules import EnvStepSchedules
from beyondfit.rl.collect.normalization import Normalizer
from beyondfit.rl.collect.offpolicy import ReplayCollector
from beyondfit.rl.collect.onpolicy import RolloutBatch, RolloutCollector
from beyondfit.rl.collect.returns import discounted_returns, gae_advantages
from beyondfit.rl.envs.vector import make_vector_env
from beyondfit.rl.evaluation.evaluator import GreedyEvaluator
from beyondfit.rl.nets.agents import OffPolicyAgent, QAgent
from beyondfit.rl.nets.policies import ActorCritic
from beyondfit.rl.replay.buffer import ReplayBatch, ReplayBuffer

__all__ = [
    "ActorCritic",
    "EnvStepSchedules",
    "GreedyEvaluator",
    "Normalizer",
    "OffPolicyAgent",
    "OffPolicyUpdate",
    "QAgent",
    "ReplayBatch",
    "ReplayBuffer",
    "ReplayCollector",
    "RolloutBatch",
    "RolloutCollector",
    "Target",
    "TargetKL",
    "a2c_loss",
    "discounted_returns",
    "dqn_loss",
    "gae_advantages",
    "make_vector_env",
    "ppo_loss",
    "reinforce_loss",
    "sac_loss",
    "td3_loss",
]
