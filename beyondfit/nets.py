"""Small building blocks the built-in tasks share: one MLP helper and a wide-and-deep model."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

from beyondfit.core.errors import BeyondfitError

#: ``activation`` names -> modules.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU, "silu": nn.SiLU, "elu": nn.ELU,
}  # fmt: skip
#: ``init`` choices: torch's default, or CleanRL's ``layer_init`` for policies.
INITS = ("default", "orthogonal")


class MLP(nn.Sequential):
    """``nn.Sequential`` whose forward calls each layer's ``forward`` directly.

    For layers this small, ``nn.Module.__call__`` (hook checks, dispatch) costs as much as the
    kernels: skipping it for the inner layers takes about 40% off a forward, which an RL
    collector pays at every env step and every update. The price: hooks registered on the
    inner layers do not run (hooks on the MLP itself do). Parameter names are those of
    ``nn.Sequential`` (``0.weight``...), so saved weights load either way.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layers in order."""
        for layer in self._modules.values():
            x = layer.forward(x)  # type: ignore[union-attr]
        return x


def mlp(
    sizes: Sequence[int],
    activation: str | type[nn.Module] = "relu",
    *,
    dropout: float = 0.0,
    out_activation: nn.Module | None = None,
    init: str = "default",
    out_gain: float = 1.0,
) -> MLP:
    """A multilayer perceptron ``sizes[0] -> ... -> sizes[-1]``.

    Args:
        sizes: layer widths, input first.
        activation: after every hidden layer: a name in :data:`ACTIVATIONS` or a module class.
        dropout: after every hidden activation, when positive.
        out_activation: after the last layer (e.g. ``nn.Sigmoid()``).
        init: ``"default"`` (torch's), or ``"orthogonal"``: orthogonal weights with gain
            sqrt(2) for hidden layers and ``out_gain`` for the last, zero biases (CleanRL's
            ``layer_init``; a small ``out_gain`` such as 0.01 starts a policy near uniform).
        out_gain: the last layer's gain under ``init="orthogonal"``.
    """
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise BeyondfitError(
                f"activation={activation!r} is unknown; choose one of {', '.join(ACTIVATIONS)}"
            )
        activation = ACTIVATIONS[activation]
    if init not in INITS:
        raise BeyondfitError(f"init={init!r} is unknown; choose one of {', '.join(INITS)}")
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        last = i == len(sizes) - 2
        linear = nn.Linear(n_in, n_out)
        if init == "orthogonal":
            nn.init.orthogonal_(linear.weight, out_gain if last else math.sqrt(2))
            nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(activation())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    if out_activation is not None:
        layers.append(out_activation)
    return MLP(*layers)


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
