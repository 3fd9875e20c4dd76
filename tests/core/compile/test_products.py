"""Batched products written out for a CPU graph (``beyondfit.core.compile.products``): a critic
layer's ``baddbmm`` (the model stays plain, compiler-agnostic) becomes, in the graph dynamo
traced, elementwise products for one output column or few inputs and ``bmm`` + bias otherwise;
values and gradients stay the eager ones; what is not a plain CPU product is left alone."""

from __future__ import annotations

import pytest
import torch

from beyondfit.core.compile import graphs, products
from beyondfit.rl.nets.agents import VectorizedLinear


def _traced_graphs(monkeypatch):
    """Each graph's code as the backend got it, after the pass, run as Python."""
    seen = []

    def backend(gm, example_inputs, patches):
        seen.append(gm.code)
        return gm.forward

    monkeypatch.setattr(graphs, "inductor", backend)
    return seen


def _update(layer):
    def step(x):
        out = layer(x)
        grads = torch.autograd.grad(out.square().sum(), [layer.weight, layer.bias])
        return out.detach(), *grads

    return step


@pytest.mark.parametrize(("n_in", "n_out", "form"), [
    (3, 256, "written"), (256, 1, "written"), (8, 5, "written"), (9, 4, "bmm")])
def test_a_critic_layer_computes_the_eager_product_and_gradients(monkeypatch, n_in, n_out,
                                                                 form) -> None:
    seen = _traced_graphs(monkeypatch)
    layer = VectorizedLinear(n_in, n_out, members=2)
    x = torch.randn(7, n_in)
    eager = _update(layer)(x)
    assert torch.equal(eager[0], torch.baddbmm(layer.bias, x.expand(2, 7, n_in), layer.weight))
    compiled = graphs.CountedCompile(_update(layer), graphs.CompileReport(), cuda_graphs=False,
                                     fullgraph=True, autograd=True)
    for mine, theirs in zip(compiled(x), eager, strict=True):
        torch.testing.assert_close(mine, theirs)
    (code,) = seen
    assert "baddbmm" not in code
    assert ("torch.bmm" in code) == (form == "bmm")
    eager_members = layer(x, members=1)
    torch.testing.assert_close(graphs.CountedCompile(
        lambda x: layer(x, members=1), graphs.CompileReport(), cuda_graphs=False,
        fullgraph=True)(x), eager_members)


def _graph_of(fn, *args):
    """The graph dynamo hands a backend, before the pass."""
    got = []

    def backend(gm, example_inputs):
        got.append(gm)
        return gm.forward

    torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return got[0]


def test_what_is_not_a_plain_cpu_product_is_left_alone() -> None:
    bias, x, w = torch.randn(2, 1, 4), torch.randn(2, 5, 3), torch.randn(2, 3, 4)
    scaled = _graph_of(lambda b, x, w: torch.baddbmm(b, x, w, beta=0.5), bias, x, w)
    assert products.write_out_products(scaled) == (0, 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = _graph_of(lambda b, x, w: torch.baddbmm(b, x, w).float(), bias, x, w)
    assert products.write_out_products(under_autocast) == (0, 0)  # its dtype would change
    plain = _graph_of(lambda b, x, w: b.baddbmm(x, w), bias, x, w)  # the method form too
    assert products.write_out_products(plain) == (1, 0)
    out = plain(bias, x, w)
    out = out[0] if isinstance(out, (tuple, list)) else out
    assert torch.equal(out, bias + x[..., 0:1] * w[:, 0:1] + x[..., 1:2] * w[:, 1:2]
                       + x[..., 2:3] * w[:, 2:3])  # the written-out sum, in its order


def test_nodes_without_their_values_are_left_and_said(monkeypatch, caplog) -> None:
    # A torch whose dynamo kept each node's value under another key: no product is rewritten,
    # and the compiled: line says what the graphs compile without.
    monkeypatch.setattr(products, "VALUE", "renamed_value")
    monkeypatch.setattr(graphs, "VALUE", "renamed_value")
    seen = _traced_graphs(monkeypatch)
    layer = VectorizedLinear(3, 4, members=2)
    report = graphs.CompileReport()
    graphs.CountedCompile(_update(layer), report, cuda_graphs=False, fullgraph=True,
                          autograd=True)(torch.randn(5, 3))
    assert "baddbmm" in seen[0]
    assert report.without == {"batched products written out for a CPU graph":
                              "this torch: dynamo's nodes carry no 'renamed_value'"}
    assert "; without batched products written out for a CPU graph" in report.line()
