"""What the compiled step asks of inductor per graph (beyondfit.core.compile.inductor_options): the
settings per device, the scalars-once pass on a traced graph, and, compiled for real, that a
CPU graph computes what the eager code computes."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from beyondfit.core.compile import graphs, inductor_options
from beyondfit.core.compile.inductor_options import REALIZE, mark_scalars_once
from beyondfit.core.compile.traced_optimizer import raw_step


def test_cpu_graphs_draw_random_numbers_with_torchs_kernels_and_skip_size_checks() -> None:
    """On a CPU, inductor's generated code draws each random value with a Philox generator
    built per element (SAC's action noise: ~270 us a step against ~10 us), and its size checks
    repeat dynamo's guards: graphs whose inputs are on the CPU leave random numbers to torch's
    kernels, have no checks and compute each scalar once; graphs on a GPU keep inductor's
    defaults (unmeasured there)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # a CUDA tensor's stand-in, on a machine without one
        on_cuda = torch.empty(2, device="cuda")
    assert inductor_options.patches([on_cuda, 3], cuda_graphs=False) == {}
    cpu = inductor_options.patches([torch.ones(2), 3], cuda_graphs=False)
    assert cpu["fallback_random"] and cpu["size_asserts"] is False
    assert cpu["post_grad_custom_post_pass"].uuid() == "beyondfit.scalars_once.1"


def test_a_setting_this_torch_lacks_is_not_asked_for(monkeypatch, fresh_probe) -> None:
    """an older torch (2.3) has no ``alignment_asserts``: asking for it
    would fail every compile, and the steps would run eagerly. (That the compiled: line says
    so: tests/core/compile/test_probe.py.)"""
    from torch._inductor import config

    monkeypatch.delattr(config, "alignment_asserts")
    cpu = inductor_options.patches([torch.ones(2)], cuda_graphs=False)
    assert cpu["fallback_random"] and "alignment_asserts" not in cpu


def test_a_post_grad_pass_of_ones_own_is_kept() -> None:
    from torch._inductor import config

    def theirs(graph: torch.fx.Graph) -> None:
        pass

    with config.patch(post_grad_custom_post_pass=theirs):
        assert "post_grad_custom_post_pass" not in inductor_options.patches(
            [torch.ones(2)], cuda_graphs=False)


def _adam_like(x: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    correction = 1 - 0.9 ** step          # scalars read only by scalars
    size = 0.001 / correction             # the scalar a vector reads
    return x - size * x.sign() + step     # step: an input, a buffer already


def test_the_scalars_a_vector_reads_are_marked_to_be_computed_once() -> None:
    graph = make_fx(_adam_like, tracing_mode="fake")(torch.ones(64), torch.tensor(3.0)).graph
    mark_scalars_once(graph)
    marked = [n for n in graph.nodes if n.meta.get(REALIZE)]
    assert len(marked) == 1
    assert marked[0].meta["val"].dim() == 0
    assert all(user.meta["val"].dim() == 1 for user in marked[0].users)
    # what computes it stays inlined into it; the input needs no mark
    assert not any(n.meta.get(REALIZE) for n in graph.nodes if n.op == "placeholder")


# ---------------------------------------------------------------------- inductor, for real
@pytest.mark.e2e  # inductor asks the C++ compiler its version: a process (one tiny graph, ~3 s)
def test_a_compiled_graph_on_a_cpu_draws_the_eager_random_numbers() -> None:
    """Torch's own kernel draws a compiled closure's random numbers on a CPU, from the same
    generator in the same order: a compiled run samples what the eager run samples."""
    def noisy(x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn(x.shape)

    fn = graphs.CountedCompile(noisy, graphs.CompileReport(), cuda_graphs=False,
                               fullgraph=True)
    torch.manual_seed(3)
    compiled = [fn(torch.zeros(6)) for _ in range(2)]
    torch.manual_seed(3)
    assert all(torch.equal(c, noisy(torch.zeros(6))) for c in compiled)


@pytest.mark.e2e  # as above: one small graph through inductor and the C++ compiler
def test_a_graph_with_its_scalars_computed_once_computes_what_eager_code_does() -> None:
    """Adam's step as torch traces it, its bias corrections stored once: the same update."""
    step = raw_step(torch.optim.Adam([torch.zeros(1, requires_grad=True)]))

    def adam_steps(opt: torch.optim.Optimizer) -> None:
        with torch.no_grad():
            step(opt)  # the step as the compiled engine traces it

    torch.manual_seed(0)
    weights = [torch.randn(40, 3), torch.randn(3)]
    results = []
    for compiled in (False, True):
        params = [w.clone().requires_grad_() for w in weights]
        opt = torch.optim.Adam(params, lr=torch.tensor(0.01, dtype=torch.float64))
        run = graphs.CountedCompile(adam_steps, graphs.CompileReport(), cuda_graphs=False,
                                    fullgraph=True) if compiled else adam_steps
        for i in range(5):
            for p in params:
                p.grad = torch.full_like(p, 0.1 * (i + 1))
            run(opt)
        results.append([p.detach() for p in params])
    for eager, compiled in zip(*results, strict=True):
        torch.testing.assert_close(compiled, eager)
