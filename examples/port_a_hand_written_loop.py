"""The minimal hand-written training loop, ported to beyondfit.

The loop this replaces, as it is usually written by hand::

    model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(100):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        print(epoch, loss.item())

With beyondfit the loss is a closure and the engine does the rest: zero_grad, backward,
clipping, the optimizer step, train/eval mode, the per-epoch mean of the loss.

Run: ``python examples/port_a_hand_written_loop.py [--epochs 100] [--seed 0]``
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import torch
from torch import nn

from beyondfit import Callback, Engine


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """A custom mean squared error: any differentiable expression works."""
    x, y = batch
    return ((model(x) - y) ** 2).mean()


class PrintLoss(Callback):
    """Print the epoch's loss, as the hand-written loop did."""

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """One line per epoch."""
        print(f"epoch {int(logs['epoch']):3d}  loss {logs['loss']:.4f}")


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    """Train the 5-10-1 MLP on synthetic in-memory tensors; returns the history."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small models: one thread is fastest, and steady on busy cores

    torch.manual_seed(args.seed)
    # In-memory data: y is a nonlinear function of 5 features, plus a little noise.
    x = torch.randn(256, 5)
    y = (x[:, :1] * 2.0 - x[:, 1:2].abs() + 0.5 * x[:, 2:3] * x[:, 3:4]) + 0.1 * torch.randn(256, 1)

    model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 1))
    engine = Engine(
        model,
        loss_fn,
        torch.optim.Adam(model.parameters(), lr=0.01),
        clip_value=0.5,  # clip_grad_value_: every gradient element into [-0.5, 0.5]
        device="cpu",
        callbacks=[PrintLoss()],
    )
    # One batch per epoch (the whole tensor), exactly like the loop above.
    return engine.fit([(x, y)], epochs=args.epochs, verbose=False)  # PrintLoss prints instead


if __name__ == "__main__":
    main()
