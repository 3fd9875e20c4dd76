"""Q heads: what turns an encoder's features into Q values ``(B, n_actions)``.

A head is one part of the Q network (:class:`~beyondfit.rl.nets.agents.QNetwork`), named by
``task.agent.head``: a name of :data:`HEADS`, or a head of one's own
(``task.agent.head={_target_: mymod.MyHead, _partial_: true}``), built as
``head(features=F, n_actions=A, hidden=[...], activation="relu")`` and checked on a batch of
two before training. Every head returns the same thing, Q values ``(B, n_actions)``, which
every loss and the acting read (``model.q(obs)``).

- :func:`mlp_head` (``mlp``, the default): an MLP ``features -> hidden... -> n_actions``
  (DQN's; ``hidden=[]`` is the Nature DQN's linear layer on the CNN's 512 features).
- :class:`DuelingHead` (``dueling``, Wang et al. 2016): a value stream and an advantage stream,
  ``Q = V + A - mean_a A``, each an MLP of ``hidden`` (Dopamine's DrQ(eps) and DER: linear
  streams on the 512 features; SPR's original: 256-unit streams).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.nets import mlp


def mlp_head(features: int, n_actions: int, hidden: Sequence[int] = (),
             activation: str = "relu") -> nn.Module:  # fmt: skip
    """Q values as an MLP of the features: ``features -> hidden... -> n_actions`` (its layers
    keep the names DQN checkpoints and policy files have always had: ``q.head.0.weight``)."""
    return mlp([features, *tuple(hidden), n_actions], activation)


class DuelingHead(nn.Module):
    """``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``: a value and an advantage stream over the
    same features, each an MLP of ``hidden``; the advantages' mean over actions is zero, so
    ``V`` is the state's value (Wang et al. 2016, Eq. 9)."""

    def __init__(self, features: int, n_actions: int, hidden: Sequence[int] = (),
                 activation: str = "relu") -> None:  # fmt: skip
        super().__init__()
        self.value = mlp([features, *tuple(hidden), 1], activation)
        self.advantage = mlp([features, *tuple(hidden), n_actions], activation)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``(B, n_actions)``."""
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(1, keepdim=True)


#: ``task.agent.head``: what each name builds, ``factory(features, n_actions, hidden, activation)``.
HEADS: dict[str, Callable[..., nn.Module]] = {"mlp": mlp_head, "dueling": DuelingHead}


def make_head(head: str | Callable[..., nn.Module], features: int, n_actions: int,
              hidden: Sequence[int], activation: str) -> nn.Module:  # fmt: skip
    """The head ``task.agent.head`` names: a key of :data:`HEADS` or a factory of one's own
    (a class or a partial), called with ``features``, ``n_actions``, ``hidden`` and
    ``activation``; a module returning ``(B, n_actions)`` floats for ``(B, features)``
    features, or one line naming ``task.agent.head`` and what is wrong."""
    if isinstance(head, str):
        if head not in HEADS:
            raise BeyondfitError(f"unknown task.agent.head={head!r}; choose one of "
                                 f"{', '.join(HEADS)}, or your own: "
                                 "task.agent.head={_target_: mymod.MyHead, _partial_: true}")
        return HEADS[head](features, n_actions, hidden, activation)
    if not callable(head):
        raise BeyondfitError(f"task.agent.head is a {type(head).__name__}: a name "
                             f"({', '.join(HEADS)}) or a factory of a module")
    name = _name(head)
    try:
        module = head(features=features, n_actions=n_actions, hidden=list(hidden),
                      activation=activation)
    except Exception as exc:
        raise BeyondfitError(f"task.agent.head {name} could not be built with features="
                             f"{features}, n_actions={n_actions}, hidden={list(hidden)}, "
                             f"activation={activation!r}: {type(exc).__name__}: {exc}") from None
    if not isinstance(module, nn.Module):
        raise BeyondfitError(f"task.agent.head {name} built a {type(module).__name__}, not a "
                             "torch.nn.Module")
    try:
        with torch.no_grad():
            out = module(torch.zeros(2, features))
    except Exception as exc:
        raise BeyondfitError(f"task.agent.head {name} failed on features of shape "
                             f"(2, {features}): {type(exc).__name__}: {exc}") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, n_actions) \
            or not out.is_floating_point():
        shown = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise BeyondfitError(f"task.agent.head {name} returned {shown} for 2 rows of features; "
                             f"a Q head returns floats of shape (2, {n_actions}): one Q value "
                             "per action")
    return module


def describe_head(head: Any) -> Any:
    """``head`` as plain data for ``policy.json``: a built-in's name, or ``{"_target_": ...}``
    for one's own (which ``play`` rebuilds only with ``--allow-import``)."""
    return head if isinstance(head, str) else {"_target_": _name(head)}


def _name(factory: Any) -> str:
    func = getattr(factory, "func", factory)  # a (Hydra) partial keeps its target here
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
