"""Target networks as engine state: a slow copy of a module that follows it by Polyak averaging.

A :class:`SlowCopy` is a frozen copy of a module (its *source*) that moves a fraction ``rate``
of the way towards the source's current weights every ``every`` calls of :meth:`SlowCopy.update`:
``target <- (1 - rate) * target + rate * source``. It is what SAC's and TD3's target critics,
BYOL's momentum encoder, a mean teacher and an EMA of the weights for evaluation all are.

Make it a submodule of the model the engine trains and it is engine state with nothing more to
do: it moves to the engine's device with the model, the loss closure reads it as
``model.NAME(x)`` (under DDP or ``torch.compile`` too), and checkpoints save and restore it with
the weights, its call counter included, so ``resume=`` continues exactly. Hook its update onto
the optimizer it follows, which runs it right after that optimizer's step (and not when the step
was skipped)::

    model.target = SlowCopy(model.critic, rate=0.005)
    Update("critic", critic_loss, Adam(model.critic.parameters()),
           after_step=[model.target.update])

Under DDP every rank's source holds the same weights after each step (gradients are
all-reduced), so every rank's copy stays the same without any communication.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number


class SlowCopy(nn.Module):
    """A frozen copy of ``source`` that follows it: ``copy <- (1 - rate) copy + rate source``.

    Args:
        source: the module to follow; it is deep-copied now (the copy starts equal to it) and
            is *not* registered as a submodule of this one, so its weights are saved once.
        rate: the Polyak/EMA coefficient ``tau`` in ``(0, 1]``; ``1.0`` copies outright
            (DQN's periodic hard update, with ``every``). An EMA decay ``d`` is ``rate=1 - d``.
        every: average on one call of :meth:`update` in ``every`` (TD3's delayed targets:
            ``every=2``); the count is saved with the weights.
        copy_buffers: copy the source's buffers (BatchNorm statistics, normalizers) outright
            on each averaging step, as SB3 does; ``False`` leaves the copy's own.

    Calling the copy calls the copied module. Its parameters have ``requires_grad=False``: no
    optimizer built from the trainable parameters touches them.
    """

    def __init__(self, source: nn.Module, rate: float = 0.005, every: int = 1,
                 copy_buffers: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.rate = float(check_number("SlowCopy rate", rate, above=0, at_most=1.0,
                                       example="rate=0.005"))
        self.every = int(check_number("SlowCopy every", every, integer=True, at_least=1))
        self.copy_buffers = bool(copy_buffers)
        self.module = copy.deepcopy(source).requires_grad_(False)
        self._source = (source,)  # a tuple: not a submodule (its weights are the model's)
        self.calls = 0  # update() calls so far; saved through get_extra_state
        self._pairs: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    @property
    def source(self) -> nn.Module:
        """The module this copy follows."""
        return self._source[0]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The copied module's output."""
        return self.module(*args, **kwargs)

    def _tensors(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        # Cached: the lists are rebuilt only when a parameter was replaced (model.to() keeps
        # the Parameter objects, so the cache survives device moves).
        targets = [p for p in self.module.parameters()]
        sources = [p for p in self.source.parameters()]
        cached = self._pairs
        if (cached is None or len(cached[0]) != len(targets)
                or any(a is not b for a, b in zip(cached[0], targets, strict=True))
                or any(a is not b for a, b in zip(cached[1], sources, strict=True))):
            if len(targets) != len(sources):
                raise BeyondfitError(
                    f"SlowCopy: the source module now has {len(sources)} parameters, its copy "
                    f"{len(targets)}; build the copy after the source's final structure"
                )
            self._pairs = cached = (targets, sources)
        return cached

    def advance(self) -> float:
        """Count one call; the blend it makes: ``rate`` on every ``every``-th, else ``0.0``."""
        self.calls += 1
        return 0.0 if self.calls % self.every else self.rate

    @torch.no_grad()
    def update(self, *_: Any) -> None:
        """One call: on every ``every``-th, average the copy towards the source.

        Takes (and ignores) any arguments, so it can be an ``Update``'s ``after_step`` hook
        (``hook(update)``) or a callback's step hook as it is. One fused ``lerp`` over all
        parameters, on their device; no host sync.
        """
        if not self.advance():
            return
        targets, sources = self._tensors()
        if self.rate == 1.0:
            torch._foreach_copy_(targets, sources)
        else:
            torch._foreach_lerp_(targets, sources, self.rate)
        if self.copy_buffers:
            for mine, theirs in zip(self.module.buffers(), self.source.buffers(), strict=False):
                mine.copy_(theirs)

    def follow(self, weight: torch.Tensor) -> None:
        """:meth:`update`'s averaging with the blend as a 0-d tensor (``0``: no change), for
        the compiled step (:mod:`beyondfit.core.compile.compiled`): the counting stays outside the
        graph (:meth:`advance`), so the graph never depends on the count."""
        targets, sources = self._pairs if self._pairs is not None else self._tensors()
        for target, source in zip(targets, sources, strict=True):
            target.lerp_(source, weight)
        if self.copy_buffers:
            for mine, theirs in zip(self.module.buffers(), self.source.buffers(), strict=False):
                mine.copy_(torch.where(weight > 0, theirs, mine))

    def get_extra_state(self) -> dict[str, int]:
        """The call counter, saved in the model's ``state_dict`` beside the copy's weights."""
        return {"calls": self.calls}

    def set_extra_state(self, state: Any) -> None:
        """Restore :meth:`get_extra_state`."""
        self.calls = int(state["calls"]) if isinstance(state, dict) and "calls" in state else 0

    def extra_repr(self) -> str:
        return f"rate={self.rate:g}, every={self.every}"
