"""What every RL collector does the same way, written once: the on-policy
:class:`~beyondfit.rl.collect.onpolicy.RolloutCollector` and the off-policy
:class:`~beyondfit.rl.collect.offpolicy.ReplayCollector` both step a vector env into batches.

- **Sharding** over data-parallel ranks: each rank its own seed (:func:`rank_seed`) and an equal
  share of the env-step budget (and of whatever else a collector lists in ``split``).
- **The sampling generator**: one ``torch.Generator`` on the model's device, seeded with the
  collector's seed, or continued from a checkpoint.
- **Episode statistics**: the finished episodes' mean return and length since the last log row,
  reported by :meth:`EnvCollector.metrics` without a device sync.
- **The envs' state in a checkpoint** (exact resume): each env copy's current observation,
  episode counters and what rebuilds it: the random-generator state its episode started from
  and the actions sent since. On resume each copy is reset from that state and the actions are
  replayed (:meth:`EnvCollector._rebuild_envs`), so the run continues bitwise as if never
  stopped, for envs whose state follows from their seed and actions (Gymnasium's
  classic-control, Box2D and MuJoCo envs, MinAtar's games: their own ``RandomState`` and last
  action are kept too; Atari: the ALE's own generator, which draws v5's sticky actions, is
  kept with its state, ``cloneState(include_rng=True)``). Where a wrapper ends the learner's
  episode while the game goes on (:class:`~beyondfit.rl.envs.suites.EpisodicLife`: a lost life,
  said by its ``game_goes_on``), the unit replayed is the game: the earlier lives' actions
  are kept too, and the rebuild resets between them as the vector env did. Envs in other
  processes (``AsyncVectorEnv``) cannot be replayed: a resume then starts fresh episodes and
  says so in one line.
"""

from __future__ import annotations

import collections
import copy
import logging
import math
import re
from typing import Any

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from beyondfit.core.seeding import rank_seed
from beyondfit.core.state.checks import FieldError, fail, is_count, is_real
from beyondfit.rl.envs.vector import close_envs

log = logging.getLogger("beyondfit.rl")


class EpisodeStats:
    """Sums over the episodes that finished since the last :meth:`take`: count, return, length;
    and the returns of the last :data:`RECENT` episodes an env reported one by one (Gymnasium's
    ``RecordEpisodeStatistics``), whose mean the benchmarks compare (``episode_return_100``)."""

    #: How many reported episodes the trailing mean covers (the usual "last 100 episodes").
    RECENT = 100

    def __init__(self) -> None:
        self.episodes, self.returns, self.lengths = 0, 0.0, 0
        self.recent: collections.deque[float] = collections.deque(maxlen=self.RECENT)

    def add(self, episodes: int, returns: float, lengths: int) -> None:
        """Count ``episodes`` more finished episodes, with the sum of their returns and lengths."""
        self.episodes += int(episodes)
        self.returns += float(returns)
        self.lengths += int(lengths)

    def add_each(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Count finished episodes one by one (their returns and lengths)."""
        self.add(len(returns), float(np.sum(returns)), int(np.sum(lengths)))
        self.recent.extend(float(r) for r in returns)

    def take(self) -> dict[str, float]:
        """The means since the last call (``{}`` when no episode finished: an empty interval
        has no mean, and a NaN would poison plots and stop rules), then start afresh; with
        episodes reported one by one, also the mean of the last :data:`RECENT`."""
        out = {}
        if self.episodes:
            out = {"episode_return": self.returns / self.episodes,
                   "episode_length": self.lengths / self.episodes}
            if self.recent:
                out["episode_return_100"] = sum(self.recent) / len(self.recent)
        self.episodes, self.returns, self.lengths = 0, 0.0, 0
        return out

    def state_dict(self) -> list[Any]:
        """``[episodes, returns, lengths]`` and, when episodes were reported one by one, the
        recent returns: plain data for a checkpoint."""
        state: list[Any] = [self.episodes, self.returns, self.lengths]
        return [*state, list(self.recent)] if self.recent else state

    def load_state_dict(self, state: list[Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.episodes, self.returns, self.lengths = int(state[0]), float(state[1]), int(state[2])
        self.recent.clear()
        if len(state) > 3:
            self.recent.extend(float(r) for r in state[3][-self.RECENT:])


class EnvCollector:
    """The base of the RL collectors: an iterable of batches that steps ``envs``.

    A subclass calls :meth:`_init_collector` in its ``__init__`` and :meth:`_generator_on` at the
    start of each pass; it counts ``env_steps`` and adds finished episodes to ``episodes``.
    """

    #: Metrics that are counts: summed over data-parallel ranks, not averaged.
    metric_totals = ("env_steps",)
    #: Budgets split evenly over data-parallel ranks by :meth:`shard`.
    split: tuple[str, ...] = ("total_env_steps",)

    def _init_collector(self, envs: VectorEnv, seed: int, total_env_steps: int) -> None:
        self.envs, self.seed, self.total_env_steps = envs, seed, total_env_steps
        self.env_steps = 0
        self.episodes = EpisodeStats()
        self._unsharded: dict[str, int] | None = None
        self._generator: torch.Generator | None = None
        self._generator_state: torch.Tensor | None = None  # a checkpoint's, until used
        n = envs.num_envs
        # Per copy: its episode ended in the last step (the next step resets it), and the
        # running episode's return and valid steps so far.
        self._prev_done = np.zeros(n, dtype=bool)
        self._ep_return, self._ep_length = np.zeros(n), np.zeros(n, dtype=np.int64)
        # Per copy: the RNG state its episode started from (None: the seeded first reset),
        # the state kept at its episode's end for the coming autoreset, and the actions sent
        # since the episode started (arrays of rows): what a resume replays.
        self._replayable = hasattr(envs, "envs")
        self._ep_rng: list[dict[str, Any] | None] = [None] * n
        self._next_rng: list[dict[str, Any] | None] = [None] * n
        self._ep_actions: list[list[np.ndarray]] = [[] for _ in range(n)]
        # Per copy: the actions of its game's earlier episodes (lives) when the game went on
        # past them, and whether the episode that just ended leaves its game going on.
        self._game_actions: list[list[np.ndarray]] = [[] for _ in range(n)]
        self._goes_on = np.zeros(n, dtype=bool)
        self._restore: dict[str, Any] | None = None  # env state to rebuild on the next pass

    def shard(self, rank: int, world_size: int) -> Any:
        """Make this the collector of one of ``world_size`` data-parallel processes.

        Each rank steps its own environments with its own seed and takes an equal share of the
        budgets in :attr:`split`, so the run as a whole still takes ``total_env_steps`` and
        every rank yields the same number of batches (as data parallelism requires).
        ``env_steps`` and :meth:`metrics` then describe this rank's share. Idempotent.
        """
        if self._unsharded is None:
            self._unsharded = {"seed": self.seed, **{k: getattr(self, k) for k in self.split}}
        self.seed = rank_seed(self._unsharded["seed"], rank)
        for key in self.split:
            setattr(self, key, -(-self._unsharded[key] // world_size))
        return self

    def _generator_on(self, device: torch.device) -> torch.Generator:
        """The collector's sampling generator on ``device``: seeded, or the checkpoint's."""
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device).manual_seed(self.seed)
            if self._generator_state is not None:
                self._generator.set_state(self._generator_state)
        return self._generator

    def _restore_generator(self, state: torch.Tensor | None) -> None:
        """Use a checkpoint's generator state from the next pass on."""
        self._generator_state, self._generator = state, None

    def metrics(self) -> dict[str, float]:
        """Statistics since the previous call, then restart them; cheap (no device sync):
        always ``env_steps`` (total so far); ``episode_return`` and ``episode_length`` (means
        over the episodes that finished since the last call) only when at least one did."""
        return {"env_steps": float(self.env_steps), **self.episodes.take()}

    def close(self) -> None:
        """Close the environments."""
        close_envs(self.envs)

    # --------------------------------------------------------------- the envs' state, resumed
    def _episode_started(self, i: int) -> None:
        """Env copy ``i`` autoreset: its new episode starts from the state kept at the end, or,
        when its game went on, continues the game (whose actions so far are kept)."""
        if self._goes_on[i]:
            self._game_actions[i].extend(self._ep_actions[i])
            self._goes_on[i] = False
        else:
            self._ep_rng[i], self._next_rng[i] = self._next_rng[i], None
            self._game_actions[i] = []
        self._ep_actions[i] = []

    def _episode_ended(self, i: int) -> None:
        """Env copy ``i``'s episode ended: keep the state its coming autoreset draws from,
        unless its game goes on (then the coming reset continues it: nothing is drawn anew)."""
        if self._replayable:
            self._goes_on[i] = _game_goes_on(self.envs.envs[i])  # type: ignore[attr-defined]
            if not self._goes_on[i]:
                self._next_rng[i] = _rng_state(self.envs, i)

    def _env_state(self, obs: np.ndarray | None) -> dict[str, Any]:
        """The envs' part of a checkpoint: per-copy flags and counters, the finished episodes'
        statistics, and with ``obs`` (the copies' current observations) what rebuilds them."""
        state: dict[str, Any] = {
            "prev_done": self._prev_done.tolist(),
            "ep_return": self._ep_return.tolist(), "ep_length": self._ep_length.tolist(),
            "finished": self.episodes.state_dict(),
        }
        if obs is not None:
            state["obs"] = torch.from_numpy(np.array(obs))
            if self._replayable:
                # Bit-generator states are dicts of ints and strings: plain data.
                state["episode_rng"] = copy.deepcopy(self._ep_rng)
                state["next_rng"] = copy.deepcopy(self._next_rng)
                state["episode_actions"] = [_joined(a) for a in self._ep_actions]
                state["game_actions"] = [_joined(a) for a in self._game_actions]
                state["game_goes_on"] = self._goes_on.tolist()
        return state

    def _check_env_state(self, state: dict[str, Any]) -> None:
        """Refuse, in one line naming the entry, envs' state these envs could not continue
        from: per-copy lists of this run's number of copies, finite returns, observations of
        the space's shape, RNG states the copies' generators take, replayed actions the
        action space holds, as many as the episode's steps."""
        n = self.envs.num_envs
        per_copy = {"prev_done": (lambda v: isinstance(v, bool), "true or false"),
                    "ep_return": (lambda v: is_real(v) and math.isfinite(v), "a finite number"),
                    "ep_length": (is_count, "a whole number >= 0")}
        for key, (test, want) in per_copy.items():
            value = state.get(key)
            if not isinstance(value, list) or len(value) != n or not all(map(test, value)):
                raise fail(key, value, f"a list of {n} entries (one per env copy), each {want}")
        finished = state.get("finished", [0, 0.0, 0])
        recent = finished[3] if isinstance(finished, list) and len(finished) == 4 else []
        if not (isinstance(finished, list) and len(finished) in (3, 4)
                and is_count(finished[0]) and is_real(finished[1])
                and math.isfinite(finished[1]) and is_count(finished[2])
                and isinstance(recent, list) and len(recent) <= EpisodeStats.RECENT
                and all(is_real(r) and math.isfinite(r) for r in recent)):
            raise fail("finished", finished, "[episodes, sum of returns, sum of lengths] and "
                       f"at most {EpisodeStats.RECENT} recent finite returns")
        generator = state.get("generator")
        if generator is not None:
            try:  # a CPU state is tried on a scratch generator; a CUDA one is 16 bytes
                if generator.numel() != 16:
                    torch.Generator().set_state(generator)
            except (AttributeError, RuntimeError, TypeError):
                raise fail("generator", generator, "the state of a torch generator") from None
        obs = state.get("obs")
        if obs is None:
            return
        shape = (n, *self.envs.single_observation_space.shape)
        if not isinstance(obs, torch.Tensor) or tuple(obs.shape) != shape or not bool(
                torch.isfinite(obs.float()).all()):
            raise fail("obs", obs, f"a finite tensor of shape {shape}")
        if "episode_rng" in state:
            self._check_replay(state)

    def _check_replay(self, state: dict[str, Any]) -> None:
        """The replay entries: each RNG state one the copy's generator takes, the actions
        since each episode's start ones its action space holds."""
        n = self.envs.num_envs
        if not self._replayable:
            raise FieldError("episode_rng: the checkpoint replays env copies these envs "
                             f"({type(self.envs).__name__}) cannot rebuild")
        space = self.envs.single_action_space
        # (game_actions and game_goes_on: absent from checkpoints of earlier versions.)
        state = {"game_actions": [None] * n, "game_goes_on": [False] * n, **state}
        for key in ("episode_rng", "next_rng", "episode_actions", "game_actions",
                    "game_goes_on"):
            if not isinstance(state.get(key), list) or len(state[key]) != n:
                raise FieldError(f"{key} is not a list of {n} entries (one per env copy)")
        for i in range(n):
            goes_on = state["game_goes_on"][i]
            if not isinstance(goes_on, bool) or (goes_on and not state["prev_done"][i]):
                raise FieldError(f"game_goes_on[{i}] is {goes_on!r}: true only for a copy "
                                 f"whose episode just ended (prev_done[{i}]), else false")
            for key in ("episode_rng", "next_rng"):
                entry = state[key][i]
                if entry is None:
                    if key == "next_rng" and state["prev_done"][i] and not goes_on:
                        raise FieldError(f"next_rng[{i}] is missing: env copy {i} ended its "
                                         "episode, and its next one starts from that state")
                    continue
                try:
                    _check_rng_state(self.envs.envs[i].unwrapped, entry)
                except (TypeError, ValueError, KeyError, AttributeError):
                    raise FieldError(f"{key}[{i}] is not a state of env copy {i}'s random "
                                     "generator") from None
            for key in ("episode_actions", "game_actions"):
                actions = state[key][i]
                if actions is not None and not (isinstance(actions, torch.Tensor) and all(
                        space.contains(a) for a in actions.numpy())):
                    raise FieldError(f"{key}[{i}] holds actions outside the env's "
                                     f"action space {space}")
            actions = state["episode_actions"][i]
            count = 0 if actions is None else len(actions)
            if not state["prev_done"][i] and count != state["ep_length"][i]:
                raise FieldError(f"episode_actions[{i}] holds {count} actions, but its "
                                 f"episode has run {state['ep_length'][i]} steps "
                                 f"(ep_length[{i}])")

    def _load_env_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_env_state` (checked first by :meth:`_check_env_state`); the envs
        are rebuilt by :meth:`_rebuild_envs` at the start of the next pass."""
        self._prev_done = np.asarray(state["prev_done"], dtype=bool)
        self._ep_return = np.asarray(state["ep_return"], dtype=np.float64)
        self._ep_length = np.asarray(state["ep_length"], dtype=np.int64)
        self.episodes.load_state_dict(state.get("finished", [0, 0.0, 0]))
        self._restore = {"obs": state["obs"].numpy(), "episode_rng": state.get("episode_rng")} \
            if "obs" in state else None
        if "episode_rng" in state:
            self._ep_rng = list(state["episode_rng"])
            self._next_rng = list(state["next_rng"])
            self._ep_actions = [[] if a is None else [a.numpy()]
                                for a in state["episode_actions"]]
            self._game_actions = [[] if a is None else [a.numpy()]
                                  for a in state.get("game_actions", [None] * len(self._ep_rng))]
            self._goes_on = np.asarray(state.get("game_goes_on", [False] * len(self._ep_rng)),
                                       dtype=bool)

    def _rebuild_envs(self, reset: Any) -> np.ndarray:
        """The copies' observations at the start of a pass: ``reset(seed)`` on a fresh run
        (``seed``: the collector's); on a resume, each copy rebuilt from the checkpoint (reset
        from its episode's RNG state, its actions replayed), or, where that is impossible,
        fresh episodes seeded by the progress, said in one line."""
        restore, self._restore = self._restore, None
        if restore is None:
            return reset(self.seed)
        if not self._replayable or restore.get("episode_rng") is None:
            log.warning("resumed with fresh episodes: the envs (%s) cannot be rebuilt from the "
                        "checkpoint, so the run does not continue bitwise",
                        type(self.envs).__name__)
            self._prev_done[:] = False
            return reset(self.seed + self.env_steps)
        n = self.envs.num_envs
        seeds: list[int | None] = []
        for i in range(n):
            state = self._ep_rng[i]
            seeds.append(self.seed + i if state is None else None)
            if state is not None:
                _set_rng_state(self.envs, i, state)
        obs, _ = self.envs.reset(seed=seeds)
        saved = np.asarray(restore["obs"])
        exact = True
        for i in range(n):
            env, ended = self.envs.envs[i], False  # type: ignore[attr-defined]
            # The game from its start: its earlier episodes (each ended, then reset as the
            # vector env did), then the last one, in progress or just ended (the wrappers'
            # state, a lost life's or a game's end, is the run's too).
            for chunk in (*self._game_actions[i], *self._ep_actions[i]):
                for action in chunk:
                    if ended:
                        env.reset()
                    obs[i], _, term, trunc, _ = env.step(action)
                    ended = bool(term or trunc)
            if self._prev_done[i]:
                # Its episode had ended: the next step resets it, from the state kept then
                # when its game ended too.
                if not self._goes_on[i]:
                    _set_rng_state(self.envs, i, self._next_rng[i])
                self.envs._autoreset_envs[i] = True  # type: ignore[attr-defined]
            elif ended:  # an episode in progress with no step yet: just reset
                obs[i] = env.reset()[0]
            exact = exact and np.array_equal(obs[i], saved[i])
        if not exact:
            log.warning("resumed: replaying the episodes in progress did not reproduce their "
                        "observations (the env is not a function of its seed and actions), so "
                        "the run continues from the replayed states, not bitwise")
            saved = np.where(self._prev_done.reshape(n, *([1] * (obs.ndim - 1))), saved, obs)
        return saved.astype(obs.dtype, copy=False)


def _joined(chunks: list[np.ndarray]) -> torch.Tensor | None:
    """Action chunks as one tensor for a checkpoint (``None`` for none)."""
    return torch.from_numpy(np.concatenate(chunks)) if chunks else None


def _game_goes_on(env: Any) -> bool:
    """Whether ``env`` (one copy, wrapped) ended its last episode while its game goes on: a
    wrapper's ``game_goes_on`` says so (:class:`~beyondfit.rl.envs.suites.EpisodicLife`'s lost
    life); no wrapper saying so means an episode is a game."""
    try:
        return bool(env.get_wrapper_attr("game_goes_on"))
    except AttributeError:
        return False


def _rng_state(envs: Any, i: int) -> dict[str, Any]:
    """What env copy ``i`` draws its next episode from, as plain data: its ``np_random``
    generator's state; for an Atari game, the ALE's state with its own generator (which draws
    v5's sticky actions: ``cloneState(include_rng=True)``, serialized bytes); for a MinAtar
    game (whose sticky actions and spawns draw from a ``RandomState`` of its own, and whose
    sticky action repeats the previous episode's last one), that generator's state and the
    last action."""
    env = envs.envs[i].unwrapped
    state: dict[str, Any] = {"np_random": copy.deepcopy(env.np_random.bit_generator.state)}
    ale = getattr(env, "ale", None)
    if ale is not None and hasattr(ale, "cloneState"):
        state["ale"] = ale.cloneState(include_rng=True).serialize()
    game = getattr(env, "game", None)
    if isinstance(getattr(game, "random", None), np.random.RandomState):
        _, keys, pos, has_gauss, cached = game.random.get_state()
        state["game"] = {"keys": keys.tolist(), "pos": int(pos), "has_gauss": int(has_gauss),
                         "cached_gaussian": float(cached),
                         "last_action": int(getattr(game, "last_action", 0))}
    return state


def _set_rng_state(envs: Any, i: int, state: dict[str, Any]) -> None:
    """Put back :func:`_rng_state`'s ``state`` (or a bare generator state, as checkpoints of
    earlier versions hold) into env copy ``i``."""
    env = envs.envs[i].unwrapped
    env.np_random.bit_generator.state = copy.deepcopy(state.get("np_random", state))
    if "ale" in state:
        import ale_py  # the env is an ALE game: its package is imported

        env.ale.restoreState(ale_py.ALEState(state["ale"]))
    game = state.get("game")
    if game is not None:
        keys = np.asarray(game["keys"], dtype=np.uint32)
        env.game.random.set_state(("MT19937", keys, game["pos"], game["has_gauss"],
                                   game["cached_gaussian"]))
        # The game's one generator, as its seed() shares it (a resumed copy was never seeded).
        env.game.env.random = env.game.random
        env.game.last_action = game["last_action"]


def _check_rng_state(env: Any, state: Any) -> None:
    """Raise (TypeError, ValueError, KeyError) unless ``state`` is one :func:`_set_rng_state`
    puts into ``env`` (the unwrapped copy) unchanged."""
    if not isinstance(state, dict):
        raise TypeError(state)
    copy.deepcopy(env.np_random.bit_generator).state = state.get("np_random", state)
    if "ale" in state:
        _check_ale_state(env, state["ale"])
    game = state.get("game")
    if game is None:
        return
    if not isinstance(getattr(getattr(env, "game", None), "random", None),
                      np.random.RandomState):
        raise KeyError("game")
    keys = game["keys"]
    if not (isinstance(keys, list) and len(keys) == 624
            and all(type(k) is int and 0 <= k < 2**32 for k in keys)
            and type(game["pos"]) is int and 0 <= game["pos"] <= 624
            and game["has_gauss"] in (0, 1) and isinstance(game["cached_gaussian"], float)
            and type(game["last_action"]) is int and game["last_action"] >= 0):
        raise ValueError(game)


def _check_ale_state(env: Any, saved: Any) -> None:
    """Raise (TypeError, ValueError, KeyError) unless ``saved`` is a serialized ALE state of
    ``env``'s game: bytes the ALE reads back, naming the ROM (its MD5) this copy runs."""
    ale = getattr(env, "ale", None)
    if ale is None:
        raise KeyError("ale")
    if not isinstance(saved, bytes):
        raise TypeError(saved)
    import ale_py

    rom = re.search(rb"[0-9a-f]{32}", ale.cloneState().serialize())
    if rom is None or rom.group() not in saved:
        raise ValueError("another game's ALE state")
    try:
        ale_py.ALEState(saved)
    except Exception as e:  # the ALE's reader raises SystemError and others
        raise ValueError("not a serialized ALE state") from e
