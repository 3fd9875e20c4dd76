"""Batched matrix products in the form a CPU graph computes best: a pass over the graph dynamo
traced, before autograd, so that the backward follows the rewritten forward.

Every ``torch.baddbmm(bias, x, weight)`` of a CPU graph (an ensemble of linear layers in one
product: a SAC or TD3 critic's :class:`~beyondfit.rl.nets.agents.VectorizedLinear`) becomes:

- for one output column (a critic's head) or at most :data:`SMALL_FEATURES` input features (a
  critic's first layer on a small env): elementwise products and sums. Batched matmuls of those
  shapes take the BLAS library's slow paths (a 2x256x256 by 2x256x1 product ran at ~2 GFLOPS,
  150 us forward and 550 us with its backward, where the 256x256 layer beside it runs at
  ~100-160); written out, inductor fuses them and their backward into a loop or two;
- otherwise ``bmm`` and the bias added after it: inductor adds the bias in the loop that
  follows (the activation), where ``baddbmm`` first copies the broadcast bias into its output
  (a 2x256x256 write per layer) and then reads it back.

Measured on CPUs (paired rounds, one process) when a model wrote these forms itself under
compilation: a compiled SAC update took ~0.63x the eager engine's time on Pendulum instead of
~0.67x with the first, ~0.74x on HalfCheetah instead of ~0.75x with the second. The model now
stays ``baddbmm`` and compiler-agnostic; this pass gives the graph the same forms. An eager run
keeps ``baddbmm`` (its numbers bitwise what they were), and so does a GPU graph (unmeasured
there), a product under autocast (whose dtype the written-out form would change) and one with
``alpha`` or ``beta`` other than 1.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

#: Input widths up to which a product is written out, instead of a batched matmul.
SMALL_FEATURES = 8

#: The FX meta key under which dynamo keeps each node's value (a fake tensor): the shapes,
#: dtypes and device the pass decides on.
VALUE = "example_value"


def write_out_products(gm: fx.GraphModule) -> tuple[int, int]:
    """Rewrite each CPU ``baddbmm`` of ``gm``'s graph in place (see the module's docstring):
    ``(rewritten, unreadable)``, the second the products left as they were because their
    nodes carry no :data:`VALUE` (a torch that renamed it: the caller says so)."""
    graph, rewritten, unreadable = gm.graph, 0, 0
    for node in list(graph.nodes):
        if not _is_baddbmm(node):
            continue
        values = [getattr(arg, "meta", {}).get(VALUE) for arg in (*node.args[:3], node)]
        if not all(isinstance(v, torch.Tensor) for v in values):
            unreadable += 1
            continue
        bias, x, weight, out = values
        if (x.device.type != "cpu" or x.dim() != 3 or weight.dim() != 3
                or len({bias.dtype, x.dtype, weight.dtype, out.dtype}) != 1):
            continue  # a GPU graph; autocast (the output's dtype differs); not a plain product
        with graph.inserting_before(node):
            new = _written_out(_Emitter(graph, node), *node.args[:3], weight.shape)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        graph.lint()
        gm.recompile()
    return rewritten, unreadable


def _is_baddbmm(node: fx.Node) -> bool:
    function = node.op == "call_function" and node.target in (torch.baddbmm,
                                                              torch.Tensor.baddbmm)
    method = node.op == "call_method" and node.target == "baddbmm"
    if not (function or method) or len(node.args) != 3 or set(node.kwargs) - {"alpha", "beta"}:
        return False
    return all(node.kwargs.get(k, 1) == 1 for k in ("alpha", "beta"))


def _written_out(emit: _Emitter, bias: fx.Node, x: fx.Node, weight: fx.Node,
                 shape: torch.Size) -> fx.Node:  # fmt: skip
    """``bias + x @ weight`` (``weight``: members x in x out) in the form for its shape."""
    if shape[-1] == 1:
        product = emit(operator.mul, x, emit(torch.transpose, weight, 1, 2))
        return emit(operator.add, emit(torch.sum, product, -1, keepdim=True), bias)
    if shape[1] > SMALL_FEATURES:
        return emit(operator.add, emit(torch.bmm, x, weight), bias)
    out = bias
    for k in range(shape[1]):
        term = emit(operator.mul, emit(torch.narrow, x, -1, k, 1),
                    emit(torch.narrow, weight, 1, k, 1))
        out = emit(operator.add, out, term)
    return out


class _Emitter:
    """New nodes in ``graph`` with their values (computed on the fake tensors dynamo gave the
    replaced node's inputs), where the replaced node came from in the user's code."""

    def __init__(self, graph: fx.Graph, replaced: fx.Node) -> None:
        self.graph = graph
        self.where = {k: replaced.meta[k] for k in ("stack_trace", "nn_module_stack")
                      if k in replaced.meta}

    def __call__(self, target: Any, *args: Any, **kwargs: Any) -> fx.Node:
        node = self.graph.call_function(target, args, kwargs)
        values = fx.node.map_arg(args, lambda n: n.meta[VALUE])
        node.meta[VALUE] = target(*values, **kwargs)
        node.meta.update(self.where)
        return node
