"""Bounds before allocation: what a config's sizes need at the least, against the machine.

A width of 100,000,000 (``task.hidden=[100000000]``), a million critics or a batch of a billion
rows does not fail when it is asked for: the allocator grows until the system kills the run,
or fails deep inside torch. So before anything is built, :func:`check_sizes` adds up a lower
bound of the memory the sizes in the config imply (every input and output taken as one value
wide, so the estimate never refuses what fits) and refuses, in one line naming the keys, a
config that cannot fit this machine's memory (the GPU's, when training there).

The bound, in float32 values: each network's weights, their gradients and two Adam moments;
one batch's activations through every network, kept for the backward pass; the replay
buffer's transitions, at the bytes :func:`beyondfit.rl.replay.buffer.replay_bytes` gives for the
smallest spaces (one-value observations and actions: 24 bytes each). The config does not
know the env's observations, so the buffer measures its own real bytes again when it is built
(before it allocates anything: a 1,000,000-transition Atari buffer is 7.3 GB) and refuses, in
one line naming ``task.replay.buffer_size`` and how many transitions would fit, one larger than
the memory.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from beyondfit.core.errors import BeyondfitError

FLOAT = 4  # bytes


def check_sizes(task: Mapping[str, Any], device: str = "auto") -> None:
    """Refuse a ``task`` config whose sizes cannot fit this machine's memory, in one line."""
    terms = needs(task)
    total = sum(size for _, size in terms)
    memory, where = machine_memory(device)
    if total <= memory:
        return
    shown = ", ".join(f"{_gb(size)} for {what}" for what, size in
                      sorted(terms, key=lambda t: -t[1]) if size >= total / 10)
    raise BeyondfitError(f"this config needs at least {_gb(total)} of memory, more than "
                         f"{where} has ({_gb(memory)}): {shown}; choose smaller values")


def needs(task: Mapping[str, Any]) -> list[tuple[str, int]]:
    """``(what, bytes)`` lower bounds of what ``task``'s sizes allocate."""
    agent = _section(task, "agent")
    replay = task.get("replay") if isinstance(task.get("replay"), Mapping) else None
    collector = _section(task, "collector")
    hidden = _widths(agent.get("hidden", task.get("hidden")))
    nets = f"task.hidden={_short(hidden)}"
    if replay is not None:  # off-policy: critics and their targets, an actor and its target
        critics = _count(agent.get("critics", 2)) if agent.get("kind") != "q" else 0
        copies = 2 * critics + 2
        nets += f", task.agent.critics={critics}" if critics else ""
        batch = _count(replay.get("batch_size"))
        rows = f"task.replay.batch_size={batch}"
    elif collector:  # on-policy: a minibatch of a rollout of num_envs x rollout_steps
        copies = 2  # the actor and the critic
        from beyondfit.rl.envs.vector import MAX_ENVS  # (an RL task: gymnasium loads anyway)

        envs = _count(task.get("num_envs"))
        envs = envs if envs <= MAX_ENVS else 1  # more: the task's own line names the limit
        steps = _count(collector.get("rollout_steps"))
        batch = envs * steps // _count(collector.get("minibatches"))
        rows = f"task.num_envs={envs} x task.collector.rollout_steps={steps}"
    else:
        copies, batch = 1, _count(task.get("batch_size"))
        rows = f"task.batch_size={batch}"
    terms = []
    if hidden:
        weights = sum(a * b for a, b in itertools.pairwise(hidden))
        weights += hidden[0] + hidden[-1]  # from and to at least one value
        terms.append((f"the networks ({nets})", weights * copies * 4 * FLOAT))
        terms.append((f"a batch's activations ({rows}, {nets})",
                      batch * sum(hidden) * copies * 2 * FLOAT))
    if replay is not None:
        kept = min(_count(replay.get("buffer_size")), _count(task.get("total_env_steps")))
        transition = _smallest_transition()
        terms.append((f"the replay buffer (task.replay.buffer_size={kept})", kept * transition))
        terms.append((f"a batch ({rows})", batch * transition))
    return terms


def _smallest_transition() -> int:
    """The replay buffer's bytes for one transition of the smallest spaces (a one-value
    observation and action)."""
    import gymnasium as gym  # (an off-policy task: gymnasium loads anyway)

    from beyondfit.rl.replay.buffer import replay_bytes

    one = gym.spaces.Box(-1.0, 1.0, (1,))
    return replay_bytes(1, one, one)


def _section(task: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = task.get(key)
    return value if isinstance(value, Mapping) else {}


def machine_memory(device: str = "auto") -> tuple[int, str]:
    """``(bytes, name)`` of the memory a run on ``device`` has (the GPU's when training on CUDA,
    else the RAM within a container's and this process's limits):
    :func:`beyondfit.core.device.machine_memory`."""
    from beyondfit.core.device import machine_memory as memory

    return memory(device)


def out_of_memory_line(exc: BaseException) -> str | None:
    """One line for an allocation the allocator refused (torch's CPU or GPU allocator, or
    Python's ``MemoryError``); ``None`` for any other exception."""
    text = " ".join(str(exc).split())
    gpu = type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in text
    if not (gpu or isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
            "can't allocate memory" in text or "out of memory" in text.lower()))):
        return None
    size = re.search(r"tried to allocate (\d+) bytes", text, re.I)
    gpu_size = re.search(r"tried to allocate ([\d.]+ [KMGT]i?B)", text, re.I)
    asked = (f" (an allocation of {_gb(int(size.group(1)))} was refused)" if size
             else f" (an allocation of {gpu_size.group(1)} was refused)" if gpu_size else "")
    where = "the GPU has" if gpu else "this machine (or this process's ulimit -v) gives"
    return (f"out of memory{asked}: this config's sizes (task.hidden, the batch size, "
            f"task.replay.buffer_size, task.num_envs) need more memory than {where}; choose "
            "smaller values")


def _widths(value: Any) -> list[int]:
    """Positive layer widths, or ``[]`` for what is sized later ("auto") or is no list."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, str | Mapping) or not isinstance(value, Iterable):
        return []
    items = list(value)
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in items)
    return items if items and ok else []


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _short(widths: list[int]) -> str:
    return str(widths) if len(widths) <= 4 else f"[{widths[0]}, ..., {widths[-1]}]"


def _gb(size: float) -> str:
    from beyondfit.core.device import gigabytes

    return gigabytes(size)
