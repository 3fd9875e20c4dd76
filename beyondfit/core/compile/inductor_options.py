"""What the compiled step asks of inductor for each graph it builds, and why (each measured).

:func:`patches` is the config one graph compiles under (:class:`~beyondfit.core.compile.graphs.
CountedCompile` passes it to inductor). On a CPU it changes how the generated code runs, never
what it computes: the numbers stay those of the traced closure and optimizer, rounded as
inductor rounds them.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from beyondfit.core.compile.probe import REALIZE, missing

# REALIZE: the FX meta key that has inductor store a node's value in a buffer of its own
# instead of inlining its computation into every loop that reads it (read by inductor's graph
# lowering; the probe checks that it still is: a torch without it would ignore the key).


def patches(example_inputs: Any, cuda_graphs: bool) -> dict[str, Any]:
    """Inductor's config for one graph: CUDA graphs if asked (``compile="max"``); and for a
    graph on the CPU, where each was measured:

    - random numbers drawn by torch's kernels (``fallback_random``), not by inductor's code,
      which builds a Philox generator per element: SAC's action noise (256x6 values) took
      ~270 us a step there against ~10 us, and the compiled SAC update on HalfCheetah went
      from ~0.81x to ~0.77x the eager one. Torch's kernel also draws the eager step's numbers
      from the same generator: a compiled CPU run samples what an eager run samples;
    - no size and alignment checks in the generated code: dynamo's guards already check each
      input's sizes and strides before the graph runs, and the checks were ~100 a step in
      SAC's critic graph, ~1% of a compiled update (torch leaves the alignment checks out of
      its own production builds);
    - each scalar computed once (:func:`mark_scalars_once`), unless the user set a post-grad
      pass of their own.

    A GPU graph keeps inductor's defaults: none of this was measured there.
    """
    out: dict[str, Any] = {"triton.cudagraphs": True} if cuda_graphs else {}
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs):
        return out
    from torch._inductor import config

    # Only what this torch knows (an older one lacks alignment_asserts): an unknown key would
    # fail the compile, and the step would run eagerly. What it lacks is said on the
    # compiled: line (the probe's findings, beyondfit.core.compile.compiled.compile_steps).
    wanted = {"fallback_random": True, "size_asserts": False, "alignment_asserts": False}
    out.update({key: value for key, value in wanted.items()
                if not missing(key) and hasattr(config, key)})
    scalars = _scalars_once()
    if scalars is not None and getattr(config, "post_grad_custom_post_pass", None) is None:
        out["post_grad_custom_post_pass"] = scalars
    return out


def mark_scalars_once(graph: torch.fx.Graph) -> None:
    """Mark every computed 0-d tensor that a larger tensor's computation reads (:data:`REALIZE`).

    Inductor inlines a scalar's computation into each loop that reads it, and a CPU loop then
    recomputes it for every 16 values: Adam's bias corrections (``beta ** step``, its square
    root, ``lr / ...``) are such scalars, and the compiler cannot hoist ``pow`` out of the loop
    (inductor compiles with ``-fmath-errno``). Stored once instead, SAC's critic update (144k
    values) took 219 us in Adam where it took 283, and the compiled SAC update 0.72x the eager
    one on HalfCheetah instead of 0.74x, 0.66x on Pendulum instead of 0.68x (paired rounds,
    one process). A scalar read only by other scalars stays inlined: computed once anyway.
    """
    for node in graph.nodes:
        value = node.meta.get("val")
        if node.op != "call_function" or not isinstance(value, torch.Tensor) or value.dim():
            continue
        if any(isinstance(user.meta.get("val"), torch.Tensor) and user.meta["val"].dim() > 0
               for user in node.users):
            node.meta[REALIZE] = True


def _scalars_once() -> Any:
    """:func:`mark_scalars_once` as the post-grad pass inductor takes (its cache keys on the
    pass's ``uuid``), or ``None`` where this torch has no custom passes or would ignore the
    key (probes ``graph_pass``, ``realize_key``)."""
    if missing("graph_pass") or missing("realize_key"):
        return None
    return _scalars_pass()


@functools.cache
def _scalars_pass() -> Any:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class ScalarsOnce(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            mark_scalars_once(graph)

        def uuid(self) -> str:
            return "beyondfit.scalars_once.1"

    return ScalarsOnce()
