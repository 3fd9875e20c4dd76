"""Discounted returns and generalized advantage estimation over a vector-env rollout.

Every array is time-major, shape ``(T, N)`` for ``T`` steps of ``N`` environments. Row ``t``
holds the transition ``obs[t] --action[t]--> reward[t], terminated[t], truncated[t]``. ``values``
has one more row: ``values[T]`` is the value of the observation after the last step (the
bootstrap).

The rules, which hold for any autoreset mode as long as ``values[t + 1]`` is the value of the
observation that step ``t`` returned:

- ``terminated``: the episode really ended; nothing comes after it, so no bootstrap.
- ``truncated``: a time limit cut the episode; the future is unknown, so bootstrap from the value of
  the final observation (``values[t + 1]``), then stop.
- either one ends the recursion: nothing flows back across an episode boundary.

With Gymnasium's next-step autoreset, the row after a terminal row is a reset step (its observation
is the final observation, its reward 0, its action ignored): the collector masks it out, and the
rules above make sure its garbage never reaches a real row.
"""

from __future__ import annotations

import numpy as np
import torch

#: A rollout's per-step arrays, ``(T, N)`` (values ``(T + 1, N)``): a tensor or a NumPy array.
Steps = torch.Tensor | np.ndarray


def _as_numpy(x: Steps) -> np.ndarray:
    # The recursion runs row by row: NumPy's per-call cost is a fraction of torch's on tiny rows.
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def discounted_returns(rewards: Steps, values: Steps, terminated: Steps, truncated: Steps,
                       gamma: float) -> torch.Tensor:
    """Monte-Carlo returns to go, ``G[t] = r[t] + gamma * G[t + 1]``, cut at every episode end.

    Bootstraps from ``values[t + 1]`` where a time limit truncated the episode and from
    ``values[T]`` where the rollout itself stops mid-episode; never where it terminated.

    Args:
        rewards, terminated, truncated: shape ``(T, N)``.
        values: shape ``(T + 1, N)``; only the bootstrap entries are read.
        gamma: discount factor in ``[0, 1]``.

    Returns:
        float32 tensor ``(T, N)``.
    """
    r, v = _as_numpy(rewards), _as_numpy(values)
    term, trunc = _as_numpy(terminated).astype(bool), _as_numpy(truncated).astype(bool)
    out = np.zeros(r.shape, dtype=np.float32)
    running = v[-1].astype(np.float32)  # the rollout stops mid-episode: bootstrap
    for t in reversed(range(r.shape[0])):
        running = np.where(trunc[t], v[t + 1], running)  # time limit: bootstrap from final obs
        running = np.where(term[t], 0.0, running)  # real end: no future
        running = r[t] + gamma * running
        out[t] = running
    return torch.from_numpy(out)


def gae_advantages(rewards: Steps, values: Steps, terminated: Steps, truncated: Steps,
                   gamma: float, gae_lambda: float) -> torch.Tensor:
    """Generalized advantage estimates (Schulman et al. 2016), cut at every episode end.

    ``delta[t] = r[t] + gamma * values[t + 1] * (1 - terminated[t]) - values[t]`` and
    ``A[t] = delta[t] + gamma * lambda * (1 - done[t]) * A[t + 1]`` with
    ``done = terminated | truncated``. ``gae_lambda=1`` gives
    ``discounted_returns(...) - values[:-1]``; ``0`` gives the one-step TD error.
    The critic's target is ``A + values[:-1]``.

    Args:
        rewards, terminated, truncated: shape ``(T, N)``.
        values: shape ``(T + 1, N)``, ``values[T]`` is the bootstrap value.
        gamma: discount factor in ``[0, 1]``.
        gae_lambda: bias/variance trade-off in ``[0, 1]``.

    Returns:
        float32 tensor ``(T, N)``.
    """
    r, v = _as_numpy(rewards), _as_numpy(values).astype(np.float32)
    term, trunc = _as_numpy(terminated).astype(bool), _as_numpy(truncated).astype(bool)
    not_term, not_done = ~term, ~(term | trunc)
    deltas = r + gamma * v[1:] * not_term - v[:-1]
    out = np.zeros(r.shape, dtype=np.float32)
    running = np.zeros(r.shape[1], dtype=np.float32)
    for t in reversed(range(r.shape[0])):
        running = deltas[t] + (gamma * gae_lambda) * not_done[t] * running
        out[t] = running
    return torch.from_numpy(out)
