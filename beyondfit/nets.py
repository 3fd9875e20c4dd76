"""Small building blocks the built-in tasks share."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn


def mlp(
    sizes: Sequence[int],
    activation: type[nn.Module] = nn.ReLU,
    dropout: float = 0.0,
    out_activation: nn.Module | None = None,
) -> nn.Sequential:
    """A multilayer perceptron ``sizes[0] -> ... -> sizes[-1]``.

    ``activation`` (and ``dropout`` when positive) follow every hidden layer;
    ``out_activation`` (e.g. ``nn.Sigmoid()``) follows the last one.
    """
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(activation())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    if out_activation is not None:
        layers.append(out_activation)
    return nn.Sequential(*layers)


class WideAndDeep(nn.Module):
    """A linear model plus an MLP: ``linear(x) + mlp(x)``, the MLP's last layer starting at zero.

    Training starts from a plain linear model and the MLP learns only what a linear model
    cannot, so on small tabular data it does not fall below least squares the way a bare
    MLP can (Cheng et al., 2016, "Wide & Deep Learning").
    """

    def __init__(self, n_in: int, hidden: Sequence[int], n_out: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.deep = mlp([n_in, *hidden, n_out], dropout=dropout)
        last = self.deep[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Sum of the linear and the MLP paths."""
        return self.linear(x) + self.deep(x)
