"""The replay collector: off-policy RL as an iterable of sampled minibatches for the one engine.

Each env step acts in a Gymnasium vector env with the agent's own exploration rule
(``agent.explore``: SAC's sample, TD3's noise, DQN's epsilon-greedy; uniformly random actions
for the first ``learning_starts`` env steps), stores the transitions in a
:class:`~beyondfit.rl.replay.buffer.ReplayBuffer` on the training device (each field in its own
dtype; the frames of image observations once each, uint8 frames as uint8), and then yields as many
minibatches as the update-to-data ratio owes: after ``e`` env steps, ``floor(ratio * (e -
learning_starts))`` minibatches in all, or with RL-Zoo's ``train_freq``/``gradient_steps``,
``gradient_steps`` of them after every ``train_freq`` env steps past ``learning_starts``. The
engine takes one step (every due optimizer once) per minibatch and never knows it is doing RL.
Actions are a ``Box``'s (stored scaled to ``[-1, 1]``) or a ``Discrete`` space's (stored as the
index, ``0`` to ``n - 1``).

Gymnasium 1.x next-step autoreset: the step after an episode's end resets that env copy,
ignores its action and returns the next episode's first observation. That step is no
transition: it is never stored and not counted in ``env_steps``; the episode's last stored
transition has the true final observation as ``next_obs``, with ``terminated`` and
``truncated`` kept apart.

The buffer is allocated when the collector is built, after its real bytes were measured
against the memory (one line naming ``task.replay.buffer_size`` and how many transitions would
fit, when it does not), and its size is the run's first word on it (``replay buffer: 1,000,000
transitions, 7.3 GB on cpu (...)``).

Exact resume: a checkpoint holds the buffer's fields and frames, the sampling generator, the
exploration rule's state at that env step (DQN's epsilon: checked against this run's schedule on
load), and what rebuilds the envs' state: each env copy's random-generator state at its
episode's start and the actions taken since. On resume each copy is reset from that state and
the actions are replayed, so the run continues bitwise as if never stopped (for envs whose state
follows from their seed and actions, as Gymnasium's classic-control and MuJoCo envs' does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.core.state.checks import is_count, is_real
from beyondfit.rl.collect.env_collector import EnvCollector
from beyondfit.rl.collect.update_ratio import check_ratio, owed, too_short
from beyondfit.rl.envs.actions import DiscreteActions, action_columns
from beyondfit.rl.envs.vector import observation_converter, reported_episodes
from beyondfit.rl.replay.buffer import ReplayBatch, ReplayBuffer

log = logging.getLogger("beyondfit.rl")


class ExploringAgent(Protocol):
    """What the collector needs of the model: ``explore(obs, generator, progress)``, the
    actions to take at ``progress`` (the fraction of the run's env steps taken): in ``[-1, 1]``
    for a ``Box``, indices for a ``Discrete`` space. Optionally ``exploration_state(progress)``:
    the rule's values there (``{"epsilon": 0.3}``), kept in checkpoints and checked on resume."""

    def explore(self, obs: torch.Tensor, generator: torch.Generator,
                progress: float) -> torch.Tensor: ...  # fmt: skip

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...


class ReplayCollector(EnvCollector):
    """Iterable of :class:`~beyondfit.rl.replay.buffer.ReplayBatch` minibatches, collected as it
    goes.

    Args:
        envs: a Gymnasium vector env with next-step autoreset (:func:`make_vector_env`);
            ``Box`` or ``Discrete`` actions.
        agent: the model being trained (:class:`ExploringAgent`; on whatever device the
            engine moved it to).
        total_env_steps: iteration ends after this many env steps (transitions stored).
        buffer_size: transitions kept (at most ``total_env_steps`` are allocated).
        batch_size: transitions per minibatch.
        learning_starts: env steps of uniformly random actions before the first minibatch.
        updates_per_step: minibatches per env step (the update-to-data ratio; 0.5: one per
            two env steps, 2: two per env step); ``None`` with ``train_freq``.
        train_freq: RL-Zoo's form of the ratio instead: ``gradient_steps`` minibatches after
            every ``train_freq`` env steps.
        gradient_steps: minibatches after each ``train_freq`` env steps (``-1``: ``train_freq``
            of them).
        seed: seeds the envs (copy ``i`` with ``seed + i``) and the collector's generator
            (random actions, exploration noise, minibatch sampling).
        save_buffer: put the buffer's contents in checkpoints (``False`` for a buffer too large to
            save: a resume then starts from an empty buffer and says so in one line).
        n_step: rewards each sampled transition sums
            (:class:`~beyondfit.rl.replay.buffer.ReplayBatch` ``discount``); 1: one-step
            transitions.
        gamma: the discount of those sums (the task's ``gamma``).
        augment: ``augment(batch, generator) -> batch``, applied to each sampled minibatch
            before it is handed on, drawing from the collector's generator
            (:class:`~beyondfit.rl.algos.augmentation.Augmentation`: ``task.augment``).
    """

    split = ("total_env_steps", "learning_starts")
    #: The buffer makes this state large: ``best.pt``, which keeps the model at its best,
    #: leaves it out (the step files a resume reads carry it).
    bulky_state = True

    def __init__(self, envs: VectorEnv, agent: ExploringAgent, *, total_env_steps: int,
                 buffer_size: int = 1_000_000, batch_size: int = 256, learning_starts: int = 100,
                 updates_per_step: float | None = 1.0, train_freq: int | None = None,
                 gradient_steps: int = 1, seed: int = 0, save_buffer: bool = True,
                 n_step: int = 1, gamma: float = 0.99,
                 augment: Callable[[ReplayBatch, torch.Generator], ReplayBatch] | None = None,
                 ) -> None:
        for name, value in (("total_env_steps", total_env_steps), ("batch_size", batch_size),
                            ("buffer_size", buffer_size)):
            check_number(f"task.{_key(name)}", value, integer=True, above=0)
        check_number("task.replay.learning_starts", learning_starts, integer=True, at_least=0,
                     example="task.replay.learning_starts=1000")
        self.train_freq, self.gradient_steps = check_ratio(updates_per_step, train_freq,
                                                            gradient_steps)
        self._init_collector(envs, seed, total_env_steps)
        self.agent = agent
        self.actions = action_columns(envs.single_action_space, envs.num_envs)
        self.discrete = isinstance(self.actions, DiscreteActions)
        self.batch_size = batch_size
        self.learning_starts = learning_starts
        self.updates_per_step = None if updates_per_step is None else float(updates_per_step)
        self.save_buffer = bool(save_buffer)
        self.n_step, self.gamma = n_step, gamma
        self.augment = augment
        if self._owed(total_env_steps) < 1:
            raise BeyondfitError(too_short(total_env_steps, learning_starts, train_freq))
        self.buffer: ReplayBuffer = self._new_buffer(min(buffer_size, total_env_steps))
        self.yielded = 0  # minibatches yielded (env_steps: transitions stored; resets are none)
        self._obs: np.ndarray | None = None  # the envs' current observations (None: restart)
        self._reports = getattr(envs, "reports_episodes", False)

    # ------------------------------------------------------------------------------ counts
    def _owed(self, env_steps: int) -> int:
        """Minibatches due in all once ``env_steps`` transitions are stored."""
        return owed(min(env_steps, self.total_env_steps), self.learning_starts,
                    self.updates_per_step, self.train_freq, self.gradient_steps)

    @property
    def update_ratio(self) -> float:
        """Minibatches per env step, on average."""
        if self.updates_per_step is None:
            return self.gradient_steps / self.train_freq
        return self.updates_per_step

    def _new_buffer(self, capacity: int) -> ReplayBuffer:
        """The buffer, allocated now (on the CPU; moved to the model's device when iterating
        starts), after its bytes were measured against the memory; its size is logged."""
        envs = self.envs
        buffer = ReplayBuffer(capacity, envs.single_observation_space, envs.single_action_space,
                              num_envs=envs.num_envs, n_step=self.n_step,
                              gamma=self.gamma)  # fmt: skip
        log.info("replay buffer: %s", buffer.describe())
        return buffer

    def __len__(self) -> int:
        """Minibatches of the whole run (the engine's steps): schedulers, bars, epoch ends."""
        return self._owed(self.total_env_steps)

    @property
    def progress(self) -> float:
        """Fraction of the env-step budget taken."""
        return min(1.0, self.env_steps / self.total_env_steps)

    def shard(self, rank: int, world_size: int) -> ReplayCollector:
        """:meth:`EnvCollector.shard` (own seed, a share of the budget and of
        ``learning_starts``), and a buffer of its own."""
        super().shard(rank, world_size)
        capacity = min(self.buffer.capacity, self.total_env_steps)
        if capacity != self.buffer.capacity:
            del self.buffer  # freed before the smaller one is allocated
            self.buffer = self._new_buffer(capacity)
        return self

    # ------------------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[ReplayBatch]:
        """Step the envs and yield minibatches until the budget; a later pass yields nothing."""
        device = next(self.agent.parameters()).device
        self.buffer.to(device)
        self._generator_on(device)
        if self._obs is None:
            self._obs = self._rebuild_envs(lambda seed: self.envs.reset(seed=seed)[0])
        to_obs = observation_converter(device)
        buffer, gen, batch, augment = self.buffer, self._generator, self.batch_size, self.augment
        while True:
            owed = self._owed(self.env_steps)
            # (An empty buffer, after a resume without its contents: collect before sampling.)
            while self.yielded < owed and buffer.size:
                self.yielded += 1  # before the yield: a checkpoint taken there counts it
                sample = buffer.sample(batch, gen)
                yield sample if augment is None else augment(sample, gen)
            if self.env_steps >= self.total_env_steps:
                return
            self._step(to_obs, device)

    def _step(self, to_obs: Any, device: torch.device) -> None:
        """One vector-env step: act, store the valid transitions, count, bookkeep episodes."""
        obs, gen = self._obs, self._generator
        if self.env_steps < self.learning_starts:
            action = self.actions.random(gen, device)
        else:
            with torch.inference_mode():
                action = self.agent.explore(to_obs(obs), gen, self.progress).cpu().numpy()
        action = action.reshape(len(obs), -1)
        sent = self.actions.to_env(action)
        next_obs, reward, term, trunc, info = self.envs.step(sent)
        if self._reports and "episode" in info:  # the env's own episodes (a game, all lives)
            finished = reported_episodes(info)
            if finished is not None:
                self.episodes.add_each(*finished)
        valid = ~self._prev_done  # copies that reset in this step took no transition
        n = len(obs)
        done = term | trunc
        self.env_steps += self.buffer.add(obs, action, reward, next_obs, term, trunc, valid)
        self._ep_return += np.where(valid, reward, 0.0)
        self._ep_length += valid
        for i in range(n):
            if not valid[i]:  # the autoreset: a new episode, from the state kept at its end
                self._episode_started(i)
            else:
                self._ep_actions[i].append(sent[i : i + 1])
        if (done & valid).any():
            for i in np.flatnonzero(done & valid):
                if not self._reports:
                    self.episodes.add(1, self._ep_return[i], self._ep_length[i])
                self._ep_return[i], self._ep_length[i] = 0.0, 0
                self._episode_ended(i)
        self._prev_done = done & valid
        self._obs = next_obs

    # ------------------------------------------------------------------------------ checkpoint
    def metrics(self) -> dict[str, float]:
        """:meth:`EnvCollector.metrics`, and the exploration rule's values now (DQN's
        ``epsilon``), so a run's log says how it explored."""
        return {**super().metrics(), **self._exploration(self.env_steps)}

    def _exploration(self, env_steps: int) -> dict[str, float]:
        """The agent's exploration rule after ``env_steps`` (``{}``: nothing that changes)."""
        rule = getattr(self.agent, "exploration_state", None)
        return {} if rule is None else dict(rule(min(1.0, env_steps / self.total_env_steps)))

    def state_dict(self) -> dict[str, Any]:
        """Counters, generator, buffer (its contents unless ``save_buffer=False``), the exploration
        rule's state and the env state."""
        state: dict[str, Any] = {
            "env_steps": self.env_steps, "yielded": self.yielded,
            "exploration": self._exploration(self.env_steps),
            "buffer": self.buffer.state_dict(contents=self.save_buffer),
            **self._env_state(self._obs),
        }
        if self._generator is not None:
            state["generator"] = self._generator.get_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the envs are rebuilt at the start of the next pass.

        Every entry is checked first against this run (counters within its budget, per-copy
        lists of its number of envs, generator and env RNG states its generators take, replayed
        actions its action space holds), and the buffer checks its own: a state this run could
        not continue from is refused here, never after "resumed from"."""
        check_replay_state(self, state)
        saved, now = state.get("exploration"), self._exploration(int(state["env_steps"]))
        if saved is not None and dict(saved) != now:
            raise BeyondfitError(
                f"the checkpoint's exploration {dict(saved)} at env step {state['env_steps']} is "
                f"not this run's schedule there ({now}): resume with the run's own task.agent "
                "exploration settings and task.total_env_steps"
            )
        had_contents = self.buffer.load_state_dict(state["buffer"])  # the last check: then load
        self.env_steps = int(state["env_steps"])
        self.yielded = int(state["yielded"])
        if not had_contents and int(state["buffer"].get("size", 0)):
            log.warning("resumed without the replay buffer: the checkpoint left out its %d "
                        "transitions (task.replay.save_buffer=false), so training continues "
                        "from an empty buffer, not exactly", int(state["buffer"]["size"]))
        self._load_env_state(state)
        self._restore_generator(state.get("generator"))
        self._obs = None


def _key(name: str) -> str:
    return "total_env_steps" if name == "total_env_steps" else f"replay.{name}"


# ---------------------------------------------------------------- what a saved state must be
# What a replay collector's saved state must be for this run to continue from it.
# :meth:`~beyondfit.rl.collect.offpolicy.ReplayCollector.load_state_dict` calls
# :func:`check_replay_state` before it changes anything (the buffer checks its own fields against
# the spaces: :class:`~beyondfit.rl.replay.buffer.ReplayBuffer`'s ``load_state_dict``): the counters
# within the run's budget (the buffer's transitions among them), a list per env copy of the
# run's number of envs, generator and env RNG states its generators take, replayed actions its
# action space holds. What fails is one line naming the entry; the engine's restore puts every
# part back (whole or nothing).


def check_replay_state(data: ReplayCollector, state: Any) -> None:
    """Refuse, in one line naming the entry, a saved state ``data`` could not continue from."""

    def fail(key: str, value: Any, want: str) -> BeyondfitError:
        shown = (f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                 else repr(value))
        return BeyondfitError(f"{key}={shown[:57] + '...' if len(shown) > 60 else shown} is "
                              f"not {want}")

    if not isinstance(state, dict):
        raise BeyondfitError(f"a {type(state).__name__}, not the replay collector's mapping")
    steps = state.get("env_steps")
    if not is_count(steps) or steps > data.total_env_steps:
        raise fail("env_steps", steps, f"a whole number in [0, {data.total_env_steps}] (this "
                   "run's task.total_env_steps): resume with the run's own budget")
    owed_then = data._owed(steps)
    if not is_count(state.get("yielded")) or state["yielded"] > owed_then:
        raise fail("yielded", state.get("yielded"), f"a whole number in [0, {owed_then}] (the "
                   f"minibatches due after {steps} env steps)")
    explore = state.get("exploration", {})
    if not isinstance(explore, dict) or not all(
            isinstance(k, str) and is_real(v) and 0 <= v <= 1 for k, v in explore.items()):
        raise fail("exploration", explore, "a mapping of names to numbers in [0, 1]")
    buffer = state.get("buffer")
    if not isinstance(buffer, dict):
        raise fail("buffer", buffer, "the replay buffer's state (a mapping)")
    added = buffer.get("added")
    if not is_count(added) or added > steps:
        raise fail("buffer.added", added, f"a whole number in [0, {steps}] (the transitions "
                   f"{steps} env steps stored; fewer after a resume without the buffer)")
    data._check_env_state(state)
