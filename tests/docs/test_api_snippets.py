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


def test_the_shared_settings_snippet_builds_one_optimizer_per_update() -> None:
    from beyondfit import Engine, Update

    code = readme_block("Settings the optimizers share", "python")
    agent = nn.Module()
    agent.critic, agent.actor = nn.Linear(3, 1), nn.Linear(3, 1)

    def critic_loss(model, batch):
        return model.critic(batch).pow(2).mean()

    def actor_loss(model, batch):
        return -model.critic(torch.tanh(model.actor(batch)).expand(-1, 3)).mean()

    scope = {"torch": torch, "agent": agent, "Engine": Engine, "Update": Update,
             "critic_loss": critic_loss, "actor_loss": actor_loss}
    exec(compile(code, "python-api.md", "exec"), scope)
    critic, actor = scope["engine"].updates
    assert isinstance(critic.optimizer, torch.optim.Adam) and critic.lr() == 1e-3
    assert actor.lr() == 3e-4 and critic.clip_norm == actor.clip_norm == 10.0
    scope["engine"].fit([torch.randn(8, 3) for _ in range(3)], epochs=1, verbose=False)
    assert critic.steps == actor.steps == 3
