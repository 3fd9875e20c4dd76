"""The Python API guide's code, run as a reader pastes it (with the model and data it assumes
defined first), so a renamed argument or a changed behaviour fails here, not in a user's
notebook."""

from __future__ import annotations

import torch
from torch import nn

from kit import readme_block


def test_the_slowcopy_snippet_runs_and_its_copy_follows() -> None:
    code = readme_block("Target networks and EMA copies: `SlowCopy`", "python")
    torch.manual_seed(0)
    model = nn.Module()
    model.net = nn.Linear(3, 1)
    scope: dict[str, object] = {"torch": torch, "model": model}
    exec(compile(code, "python-api.md", "exec"), scope)
    engine = scope["engine"]
    before = model.ema.module.weight.detach().clone()
    data = [(torch.randn(16, 3), torch.randn(16, 1)) for _ in range(4)]
    engine.fit(data, epochs=2, verbose=False)
    after = model.ema.module.weight.detach()
    assert not torch.equal(before, after)  # it moved ...
    assert (after - model.net.weight.detach()).abs().max() > 0  # ... slowly, behind the source
    assert not model.ema.module.weight.requires_grad
