"""The rollout collector: reinforcement learning as an iterable of batches for the one engine.

Each rollout runs the current policy for ``num_steps`` steps in ``N`` vector environments under
``torch.inference_mode``, then turns the ``(T, N)`` transitions into one flat batch with
advantages and returns. For PPO it yields ``epochs x minibatches`` shuffled minibatches of the
same rollout; for REINFORCE and A2C one batch. The engine takes an optimizer step per yielded
batch and never knows it is doing RL. Iteration ends by itself once ``total_env_steps``
environment steps have been taken.

Gymnasium 1.x next-step autoreset: when step ``t`` ends an episode (terminated or truncated), it
returns the episode's *final* observation; step ``t + 1`` then ignores its action, resets, and
returns the first observation of the next episode with reward 0. That ``t + 1`` transition
belongs to no episode and is never learned from (the ``valid`` mask). The final observation is
still useful: the value computed at ``t + 1`` is exactly the bootstrap a truncated episode needs
(see :mod:`beyondfit.rl.collect.returns`).

Exact resume: a checkpoint holds what the next batch depends on, taken at any step: the
envs' state (:class:`~beyondfit.rl.collect.env_collector.EnvCollector`: each copy's observation,
episode counters, and the RNG state its episode started from with the actions since, replayed
on resume), the rollout being trained on with its epoch, its shuffle and the minibatches
already yielded, the sampling generator, the reward scaling's running returns and the
observation moments not yet folded in. A run killed mid-rollout and resumed yields the same
batches as one never stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, get_type_hints

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.state.checks import check_fields, fail, is_count, is_real
from beyondfit.rl.collect.env_collector import EnvCollector
from beyondfit.rl.collect.normalization import batch_moments
from beyondfit.rl.collect.returns import discounted_returns, gae_advantages
from beyondfit.rl.envs import vector as env_api
from beyondfit.rl.nets.policies import ActorCritic


class RolloutBatch(NamedTuple):
    """Flat transitions from one rollout (or a minibatch of it); every field has leading size ``B``.

    What a policy-gradient loss reads (field names follow Stable-Baselines3's rollout buffer).
    Only valid transitions are in it: the reset step that Gymnasium's next-step autoreset inserts
    after an episode's end never is.

    Attributes:
        obs: observations the actions were taken in, ``(B, *obs_shape)``, raw: float32 for
            float spaces, the space's own dtype otherwise (uint8 frames, bool boards; the
            policy's encoder makes floats of them).
        actions: the sampled actions, ``(B,)`` int64 or ``(B, *action_shape)`` float32
            (unclipped: what the policy sampled, not what the env received).
        old_log_prob: their log-probabilities under the policy that collected them (the
            denominator of PPO's ratio), ``(B,)``; ``None`` when the collector was built with
            ``old_log_prob=False``.
        old_values: the critic's values of ``obs`` at collection time, ``(B,)``; ``None`` when
            the policy has no critic.
        advantages: ``(B,)``. With a critic: GAE(gamma, lambda) (``lambda=1``: return minus
            baseline). Without: the discounted returns themselves.
        returns: discounted returns-to-go, ``(B,)``: with a critic ``advantages + old_values``
            (the critic's regression target, bootstrapped at truncations and at the rollout's
            end); without one, cut there (nothing to bootstrap from).

    With ``transitions=True`` the collector yields :class:`RolloutTransitions` instead: these
    fields, with the same values, and each transition's ``next_obs``, ``terminated`` and
    ``truncated`` (what a self-supervised term reads; the task asks for them when ``task.aux``
    names a term). A run that asks for none gets exactly this batch.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    old_log_prob: torch.Tensor | None
    old_values: torch.Tensor | None
    advantages: torch.Tensor
    returns: torch.Tensor


# Built from RolloutBatch's fields, not a second list of them: the collector makes one from a
# batch (``RolloutTransitions(*batch, next_obs=...)``), so the two can never drift apart.
RolloutTransitions = NamedTuple("RolloutTransitions", [
    *get_type_hints(RolloutBatch).items(),
    ("next_obs", torch.Tensor),
    ("terminated", torch.Tensor),
    ("truncated", torch.Tensor),
])
RolloutTransitions.__doc__ = """A :class:`RolloutBatch` (the same fields, the same values) with
    what a self-supervised term on the encoder reads besides (the collector's
    ``transitions=True``).

    Attributes:
        obs, actions, old_log_prob, old_values, advantages, returns: as :class:`RolloutBatch`.
        next_obs: the observation each action led to, as ``obs``: at an episode's end its
            true last observation (under next-step autoreset every valid transition has one;
            never the next episode's first).
        terminated: ``(B,)`` float32, 1.0 where the episode ended for good at this step.
        truncated: ``(B,)`` float32, 1.0 where a time limit cut the episode at this step.
    """


class RolloutCollector(EnvCollector):
    """Iterable of training batches collected by running ``policy`` in ``envs``.

    Args:
        envs: a Gymnasium vector env with next-step autoreset (see :func:`make_vector_env`).
        policy: the model being trained; the collector uses its current parameters at every
            step, on whatever device the engine moved it to.
        num_steps: steps per environment per rollout (``T``); a rollout has ``T * N`` transitions.
        total_env_steps: iteration stops once this many env steps (summed over envs) were taken.
        gamma: discount factor.
        gae_lambda: GAE lambda; 1.0 gives Monte-Carlo returns minus the baseline.
        epochs: passes over each rollout (PPO); 1 for on-policy one-shot algorithms.
        minibatches: minibatches per pass; each pass reshuffles.
        seed: seeds the environments and the collector's own sampling/shuffling generator.
        old_log_prob: record the collecting policy's log-probabilities (PPO's ratio needs them;
            REINFORCE and A2C do not, and skip computing them).

    A policy with a critic (``policy.has_critic``) gets its values computed once per rollout
    and GAE advantages; without one, no value is computed and the advantages are the
    discounted returns (``gae_lambda`` is then unused).
        stop_epochs: optional ``() -> bool`` asked after each epoch over a rollout; ``True``
            skips that rollout's remaining epochs (PPO's early stop at a target KL: see
            :class:`beyondfit.rl.algos.kl_stop.TargetKL`). Under several ranks it must answer the
            same on every rank.
        transitions: yield :class:`RolloutTransitions`: each transition's ``next_obs``,
            ``terminated`` and ``truncated`` besides (what a self-supervised term reads).

    Running normalization: when the policy has a ``normalizer``
    (:class:`~beyondfit.rl.collect.normalization.Normalizer`), the collector is the one place that
    updates it. Observation statistics change only *between* rollouts: a rollout's
    observations are folded in just before the next rollout starts, so the collection and
    every update of a rollout see the same normalization. Rewards are divided by the running
    std of the discounted return, updated with each rollout's returns before its advantages
    are computed. Episode statistics always report the raw rewards.

    Hooks: :attr:`rollout_hooks` are called with the collector after each rollout is
    collected, before its first batch is yielded (schedules over env steps read
    :attr:`progress` there).

    Observability without host syncs on the hot path: ``env_steps`` is a plain int, and
    :meth:`metrics` returns (and restarts) episode statistics since its last call; the engine
    adds them to its log rows.
    """

    def __init__(
        self,
        envs: VectorEnv,
        policy: ActorCritic,
        *,
        num_steps: int,
        total_env_steps: int,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        epochs: int = 1,
        minibatches: int = 1,
        seed: int = 0,
        old_log_prob: bool = True,
        stop_epochs: Callable[[], bool] | None = None,
        transitions: bool = False,
    ) -> None:
        for name, value in (("rollout_steps", num_steps), ("total_env_steps", total_env_steps),
                            ("epochs", epochs), ("minibatches", minibatches)):
            if not isinstance(value, int) or value <= 0:
                raise BeyondfitError(f"{name}={value!r} must be a positive integer, e.g. {name}=32")
        for name, value in (("gamma", gamma), ("gae_lambda", gae_lambda)):
            if not 0.0 <= value <= 1.0:
                raise BeyondfitError(f"{name}={value!r} must lie in [0, 1], e.g. {name}=0.99")
        if minibatches > num_steps * envs.num_envs:
            raise BeyondfitError(
                f"minibatches={minibatches} exceeds the rollout size {num_steps} steps x "
                f"{envs.num_envs} envs; use fewer minibatches or longer rollouts"
            )
        self._init_collector(envs, seed, total_env_steps)
        self.policy, self.num_steps = policy, num_steps
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.epochs, self.minibatches = epochs, minibatches
        self.old_log_prob = old_log_prob
        self.critic = bool(getattr(policy, "has_critic", True))
        self.stop_epochs = stop_epochs
        self.transitions = bool(transitions)
        self.rollout_hooks: list[Callable[[RolloutCollector], None]] = []
        self.normalizer = getattr(policy, "normalizer", None)
        self._pending_moments: torch.Tensor | None = None  # last rollout's obs, not folded in
        self._running_return = np.zeros(envs.num_envs)  # discounted, for reward scaling
        self._epochs_run = [0, 0]  # epochs and rollouts since metrics(), with stop_epochs
        self._rollout_start = 0  # env steps before the current rollout
        self._to_env = env_api.action_converter(envs.single_action_space)
        self.rollouts = 0
        self._next_obs: np.ndarray | None = None  # None: the envs need a (seeded) reset
        # The rollout being trained on: its batch, the epochs done, the current epoch's
        # shuffle and the minibatches of it yielded (what a checkpoint taken mid-rollout holds).
        self._batch: RolloutBatch | RolloutTransitions | None = None
        self._epoch, self._perm, self._yielded = 0, None, 0

    @property
    def env_steps_per_rollout(self) -> int:
        """Environment steps one rollout takes (``num_steps * num_envs``)."""
        return self.num_steps * self.envs.num_envs

    @property
    def progress(self) -> float:
        """Fraction of the env-step budget taken *before* the current rollout: 0 while the
        first rollout is trained on (CleanRL's annealing convention)."""
        return min(1.0, self._rollout_start / self.total_env_steps)

    @property
    def batches_per_rollout(self) -> int:
        """Batches (= optimizer steps) the collector yields per rollout."""
        return self.epochs * self.minibatches

    def __len__(self) -> int:
        """Batches one full pass yields: whole rollouts until the env-step budget, x epochs x
        minibatches. It lets schedulers and progress bars know the run's length."""
        rollouts = -(-self.total_env_steps // self.env_steps_per_rollout)
        return rollouts * self.batches_per_rollout

    # ----------------------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[RolloutBatch]:
        """Yield batches until ``total_env_steps``; a later call continues from there (a
        resumed run from the checkpoint's rollout, epoch and minibatch)."""
        device = next(self.policy.parameters()).device
        self._generator_on(device)
        if self._next_obs is None:
            # A fresh run seeds with `seed`; a resumed one rebuilds the envs' state.
            self._next_obs = self._rebuild_envs(lambda seed: env_api.reset_envs(self.envs, seed))
        if self._batch is not None:  # resumed mid-rollout: its schedules, then the rest of it
            self._batch = type(self._batch)(*(None if f is None else f.to(device)
                                              for f in self._batch))
            self._perm = None if self._perm is None else self._perm.to(device)
            for hook in self.rollout_hooks:
                hook(self)
            yield from self._epochs()
        while self.env_steps < self.total_env_steps:
            self._batch, self._epoch = self._collect(device), 0
            for hook in self.rollout_hooks:
                hook(self)
            yield from self._epochs()

    def _epochs(self) -> Iterator[RolloutBatch | RolloutTransitions]:
        """The current rollout's remaining epochs; then it is dropped."""
        while self._epoch < self.epochs:
            yield from self._epoch_batches()
            self._epoch += 1
            self._perm, self._yielded = None, 0
            # Asked after every epoch, the last too, so the monitor starts afresh each rollout.
            if self.stop_epochs is not None and self.stop_epochs():
                break
        if self.stop_epochs is not None:
            self._epochs_run[0] += min(self._epoch, self.epochs)
            self._epochs_run[1] += 1
        self._batch = None

    def _epoch_batches(self) -> Iterator[RolloutBatch | RolloutTransitions]:
        """The current epoch's (remaining) batches: the rollout itself, or ``minibatches``
        shuffled parts of it."""
        batch = self._batch
        assert batch is not None
        if self.minibatches == 1:
            if not self._yielded:
                self._yielded = 1  # before the yield: a checkpoint taken there counts it
                yield batch
            return
        # Always exactly `minibatches` batches per epoch (sizes differ by at most one),
        # so optimizer steps per rollout stay fixed whatever the number of valid steps.
        if self._perm is None:
            self._perm = torch.randperm(batch.obs.shape[0], generator=self._generator,
                                        device=batch.obs.device)
        # One gather per field and epoch; the minibatches are then contiguous views.
        chunks = [None if f is None else f[self._perm].tensor_split(self.minibatches)
                  for f in batch]
        while self._yielded < self.minibatches:
            i = self._yielded
            self._yielded += 1  # before the yield: a checkpoint taken there counts it
            yield type(batch)(*(None if c is None else c[i] for c in chunks))

    def _collect(self, device: torch.device) -> RolloutBatch | RolloutTransitions:
        """Run one rollout and return its valid transitions with advantages and returns."""
        T, N = self.num_steps, self.envs.num_envs
        policy, envs, to_env, gen = self.policy, self.envs, self._to_env, self._generator
        normalizer = self.normalizer
        if normalizer is not None and self._pending_moments is not None:
            # The previous rollout and all its updates are done: now its observations count.
            normalizer.merge_observations(self._pending_moments)
            self._pending_moments = None
        self._rollout_start = self.env_steps
        to_obs = env_api.observation_converter(device)
        # The step loop only appends: any per-step NumPy/torch call shows up in the throughput.
        obs_steps, action_steps, reward_steps, term_steps, trunc_steps = [], [], [], [], []
        out_steps: list[torch.Tensor] = []  # the policy's outputs (logits or means), for logp
        log_probs, next_obs = self.old_log_prob, self._next_obs
        reports = getattr(envs, "reports_episodes", False)
        # A shared CNN encodes each step's frames once, for the actions and the values.
        inline = self.critic and getattr(policy, "shares_encoder", False)
        value_steps: list[torch.Tensor] = []
        # What a resume replays: the actions sent, and the episodes' starts and ends.
        replay, sent_steps, ended = self._replayable, [], self._prev_done
        started = np.zeros(N, dtype=np.int64)  # per copy: its episode's first step here
        with torch.inference_mode():
            for t in range(T):
                obs = to_obs(next_obs)
                if inline:
                    out, value = policy.forward_and_value(obs)
                    value_steps.append(value)
                else:
                    out = policy(obs)
                action = policy.draw(out, generator=gen)
                if log_probs:
                    out_steps.append(out)
                sent = to_env(action)
                try:  # free in Python 3.11 unless it raises
                    next_obs, reward, term, trunc, info = envs.step(sent)
                except Exception as e:
                    raise env_api.env_error(envs, f"env step {self.env_steps + t * N}", e) from None
                if reports and "episode" in info:  # the env's own episodes (a game, all lives)
                    finished = env_api.reported_episodes(info)
                    if finished is not None:
                        self.episodes.add_each(*finished)
                if replay:
                    sent_steps.append(sent)
                    if ended.any():  # these copies reset in this step: a new episode
                        for i in np.flatnonzero(ended):
                            # The ended episode's actions in this rollout, then the new one
                            # from the step after this reset step.
                            if started[i] < t:  # (at t=0 it ended in the last rollout)
                                self._ep_actions[i].append(
                                    np.stack(sent_steps[started[i]:t])[:, i])
                            self._episode_started(i)
                            started[i] = t + 1
                    ended = term | trunc
                    if ended.any():
                        for i in np.flatnonzero(ended):
                            self._episode_ended(i)
                obs_steps.append(obs)
                action_steps.append(action)
                reward_steps.append(reward)
                term_steps.append(term)
                trunc_steps.append(trunc)
            obs_steps.append(to_obs(next_obs))
            obs_all = torch.stack(obs_steps)  # (T + 1, N, *obs_shape)
            actions = torch.stack(action_steps)  # (T, N, *action_shape)
            values = None
            if inline:
                values = torch.stack([*value_steps, policy.value(obs_all[T])])
            elif self.critic:
                # The policy did not change during the rollout: the values of every step come
                # from one batched critic pass instead of T small ones.
                values = policy.value(obs_all.flatten(0, 1)).view(T + 1, N)
            # Likewise the log-probabilities (PPO's denominator): one batched call, not T.
            logp = None
            if log_probs:
                logp = policy.log_prob(torch.cat(out_steps), actions.flatten(0, 1))
        rewards = env_api.finite_rewards(reward_steps, envs, self.env_steps)
        terminated, truncated = np.stack(term_steps), np.stack(trunc_steps)
        done = terminated | truncated
        # The step after an episode's end is a reset: it belongs to no episode, never learned from.
        valid = np.empty_like(done)
        valid[0], valid[1:] = ~self._prev_done, ~done[:-1]
        self._record_episodes(rewards, done, valid, count=not reports)  # raw rewards
        if replay:  # each copy's actions since its episode started (after its reset step)
            sent_all = np.stack(sent_steps)
            for i in range(N):
                self._ep_actions[i].append(sent_all[started[i]:, i])
        if normalizer is not None:
            rewards = normalizer.scale_rewards(rewards, done, valid, self._running_return)
        self._next_obs, self._prev_done = next_obs, done[-1]
        self.env_steps += T * N
        self.rollouts += 1

        # Indexing outside inference mode makes ordinary tensors that autograd may save.
        # (Indices once: a boolean mask would search for the kept rows again for every field.)
        keep = torch.from_numpy(np.flatnonzero(valid)).to(device)
        if values is None:
            # No critic, nothing to bootstrap from: returns stop at truncations and at the
            # rollout's end, and they are the advantages (REINFORCE without a baseline).
            no_bootstrap = np.zeros((T + 1, N), dtype=np.float32)
            flat_returns = discounted_returns(rewards, no_bootstrap, terminated, truncated,
                                              self.gamma).to(device).reshape(-1)[keep]
            flat_values, flat_adv = None, flat_returns
        else:
            advantages = gae_advantages(rewards, values, terminated, truncated, self.gamma,
                                        self.gae_lambda).to(device)
            flat_values = values[:T].reshape(-1)[keep]
            flat_adv = advantages.reshape(-1)[keep]
            flat_returns = flat_adv + flat_values
        flat_obs = obs_all[:T].flatten(0, 1)[keep]
        if normalizer is not None and normalizer.obs is not None:
            self._pending_moments = batch_moments(flat_obs.flatten(1).float())
        batch = RolloutBatch(
            obs=flat_obs,
            actions=actions.flatten(0, 1)[keep],
            old_log_prob=None if logp is None else logp[keep],
            old_values=flat_values,
            advantages=flat_adv,
            returns=flat_returns,
        )
        if not self.transitions:
            return batch

        def flags(x: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(x.astype(np.float32)).to(device).reshape(-1)[keep]

        # obs_all[t + 1] is step t's next observation: at an episode's end its final one.
        return RolloutTransitions(*batch, next_obs=obs_all[1:].flatten(0, 1)[keep],
                                  terminated=flags(terminated), truncated=flags(truncated))

    def _record_episodes(self, rewards: np.ndarray, done: np.ndarray, valid: np.ndarray,
                         count: bool = True) -> None:
        """Carry each copy's running episode return and length over the rollout, adding the
        episodes that ended in it to the statistics unless ``count`` is false (the env reports
        them itself), without a per-step loop.

        Per env, the running return (carried over from the previous rollout) summed up to the env's
        last episode end is the total return of all its episodes that ended here; what follows
        that point is carried into the next rollout. Lengths likewise, counting valid steps only.
        """
        if not done.any():  # the common case once episodes are long: only carry the sums
            self._ep_return = self._ep_return + rewards.sum(axis=0)
            self._ep_length = self._ep_length + valid.sum(axis=0)
            return
        run_return = self._ep_return + np.cumsum(rewards, axis=0)  # (T, N); a reset step adds 0
        run_length = self._ep_length + np.cumsum(valid, axis=0)
        ended = done.any(axis=0)
        last = done.shape[0] - 1 - np.argmax(done[::-1], axis=0)  # last end row per env
        envs = np.arange(done.shape[1])
        return_at_last = np.where(ended, run_return[last, envs], 0.0)
        length_at_last = np.where(ended, run_length[last, envs], 0)
        if count:
            self.episodes.add(done.sum(), return_at_last.sum(), length_at_last.sum())
        self._ep_return = run_return[-1] - return_at_last
        self._ep_length = run_length[-1] - length_at_last

    # ----------------------------------------------------------------------------- observability
    def metrics(self) -> dict[str, float]:
        """:meth:`EnvCollector.metrics`, and with an early stop (``stop_epochs``) the mean
        ``update_epochs`` run per rollout since the last call."""
        out = super().metrics()
        if self._epochs_run[1]:  # with an early stop: epochs actually run per rollout
            out["update_epochs"] = self._epochs_run[0] / self._epochs_run[1]
            self._epochs_run[:] = [0, 0]
        return out

    # ----------------------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Everything the next batch depends on: counters, the sampling generator, the
        observation moments of the last rollout not yet folded into the normalizer, the reward
        scaling's running returns, the envs' state (:class:`EnvCollector`) and, mid-rollout,
        the rollout with its epoch, shuffle and minibatches yielded. (The normalizer's
        statistics are buffers of the policy: they travel with its weights.)"""
        state: dict[str, Any] = {
            "env_steps": self.env_steps, "rollouts": self.rollouts,
            "rollout_start": self._rollout_start,
            "running_return": self._running_return.tolist(),
            "epochs_run": list(self._epochs_run),
            **self._env_state(self._next_obs),
        }
        if self._generator is not None:
            state["generator"] = self._generator.get_state()
        if self._pending_moments is not None:
            state["pending_obs_moments"] = self._pending_moments.cpu()
        if hasattr(self.stop_epochs, "state_dict"):  # the epoch's KL so far (target_kl)
            state["stop_epochs"] = self.stop_epochs.state_dict()
        if self._batch is not None:
            state["rollout"] = {
                "fields": {k: None if v is None else v.cpu()
                           for k, v in self._batch._asdict().items()},
                "epoch": self._epoch, "yielded": self._yielded,
                "perm": None if self._perm is None else self._perm.cpu(),
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, checked whole first (one line naming what does not fit
        this run); the envs are rebuilt at the start of the next pass. A checkpoint of an
        earlier version, without the envs' state, resumes with fresh episodes (said then)."""
        check_fields(state, {"env_steps": "count", "rollouts": "count", "generator": "generator",
                             "pending_obs_moments": "tensor", "rollout_start": "count"})
        exact = "prev_done" in state
        if exact:
            self._check_env_state(state)
            self._check_progress(state)
            rollout = state.get("rollout")
            if rollout is not None:
                self._check_rollout(rollout)
            if "stop_epochs" in state and hasattr(self.stop_epochs, "load_state_dict"):
                self.stop_epochs.load_state_dict(state["stop_epochs"])  # checked, then loaded
        self.env_steps = int(state["env_steps"])
        self.rollouts = int(state["rollouts"])
        self._rollout_start = int(state.get("rollout_start", self.env_steps))
        self._pending_moments = state.get("pending_obs_moments")
        self._restore_generator(state.get("generator"))
        self._next_obs, self._batch, self._epoch, self._perm, self._yielded = (
            None, None, 0, None, 0)
        if not exact:
            self._restore = {"episode_rng": None}  # fresh episodes, seeded by the progress
            return
        self._load_env_state(state)
        self._running_return = np.asarray(state["running_return"], dtype=np.float64)
        self._epochs_run = [int(x) for x in state["epochs_run"]]
        if rollout is not None:
            kind = RolloutTransitions if "next_obs" in rollout["fields"] else RolloutBatch
            self._batch = kind(**rollout["fields"])
            self._epoch, self._yielded = int(rollout["epoch"]), int(rollout["yielded"])
            self._perm = rollout["perm"]

    def _check_progress(self, state: dict[str, Any]) -> None:
        """The counters beside the envs' state: a rollout's start at most the steps taken,
        a running return per env copy, epoch counts."""
        n = self.envs.num_envs
        if state["rollout_start"] > state["env_steps"]:
            raise fail("rollout_start", state["rollout_start"],
                       f"at most env_steps={state['env_steps']}")
        running = state.get("running_return")
        if not (isinstance(running, list) and len(running) == n
                and all(is_real(v) and math.isfinite(v) for v in running)):
            raise fail("running_return", running, f"a list of {n} finite numbers")
        epochs_run = state.get("epochs_run")
        if not (isinstance(epochs_run, list) and len(epochs_run) == 2
                and all(is_count(v) for v in epochs_run)):
            raise fail("epochs_run", epochs_run, "[epochs, rollouts], two whole numbers")

    def _check_rollout(self, rollout: Any) -> None:
        """A saved rollout this run could go on training on: the batch fields of its kind,
        one row per transition (at most a rollout's), observations and actions of the
        spaces' shapes and dtypes, finite values, the epoch and minibatch within this run's
        and the shuffle a permutation of the rows."""
        if not isinstance(rollout, dict) or not isinstance(rollout.get("fields"), dict):
            raise fail("rollout", rollout, "the rollout being trained on (a mapping)")
        fields = rollout["fields"]
        want = RolloutTransitions._fields if self.transitions else RolloutBatch._fields
        if tuple(fields) != want:
            raise fail("rollout.fields", sorted(fields), f"the fields {list(want)}")
        rows = fields["obs"].shape[0] if isinstance(fields["obs"], torch.Tensor) else -1
        if not 1 <= rows <= self.env_steps_per_rollout:
            raise fail("rollout.fields.obs", fields["obs"],
                       f"one row per transition, at most {self.env_steps_per_rollout}")
        space = self.envs.single_observation_space
        for key, value in fields.items():
            if value is None:
                if key in ("obs", "actions", "advantages", "returns") or (
                        key in RolloutTransitions._fields[len(RolloutBatch._fields):]):
                    raise fail(f"rollout.fields.{key}", value, "a tensor")
                continue
            if not isinstance(value, torch.Tensor) or value.shape[:1] != (rows,) or (
                    value.is_floating_point() and not bool(torch.isfinite(value).all())):
                raise fail(f"rollout.fields.{key}", value, f"a finite tensor of {rows} rows")
        dtype = torch.float32 if np.dtype(space.dtype).kind == "f" else torch.from_numpy(
            np.zeros(0, dtype=space.dtype)).dtype  # as observation_converter makes them
        for key in ("obs", "next_obs"):
            obs = fields.get(key)
            if obs is not None and (tuple(obs.shape[1:]) != space.shape or obs.dtype != dtype):
                raise fail(f"rollout.fields.{key}", obs, f"observations of shape {space.shape}")
        actions, n = fields["actions"], getattr(self.envs.single_action_space, "n", None)
        if n is not None and (actions.is_floating_point() or bool((actions < 0).any())
                              or bool((actions >= int(n)).any())):
            raise fail("rollout.fields.actions", actions, f"action indices in [0, {int(n)})")
        epoch, yielded, perm = rollout.get("epoch"), rollout.get("yielded"), rollout.get("perm")
        if not (is_count(epoch) and epoch < self.epochs):
            raise fail("rollout.epoch", epoch, f"a whole number below epochs={self.epochs}")
        if not (is_count(yielded) and yielded <= self.minibatches):
            raise fail("rollout.yielded", yielded,
                       f"a whole number up to minibatches={self.minibatches}")
        if perm is None:
            if yielded and self.minibatches > 1:
                raise fail("rollout.perm", perm, "the epoch's shuffle (minibatches were drawn)")
        elif not (isinstance(perm, torch.Tensor) and perm.dtype == torch.int64
                  and torch.equal(perm.sort().values, torch.arange(rows))):
            raise fail("rollout.perm", perm, f"a permutation of the {rows} rows")
