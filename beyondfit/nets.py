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


class PiecewiseLinear(nn.Module):
    """Each input, followed by a piecewise-linear code of it over bins of its training quantiles.

    Bin ``t`` of a column with edges ``b_0 < ... < b_T`` reads ``clamp((x - b_t) / (b_{t+1} -
    b_t), 0, 1)``, so a linear layer after it is any piecewise-linear function of the column: a
    threshold, a step or a bump costs one weight instead of the many ReLU units an MLP needs
    to carve one out of a raw number (Gorishniy et al., 2022, "On Embeddings for Numerical
    Features in Tabular Deep Learning"). Columns with two distinct values or fewer (one-hot
    text, flags) pass through without a code. The edges are buffers: fixed, saved with the
    weights.

    Args:
        x_train: the training inputs the quantiles come from, ``(rows, columns)``.
        bins: at most this many bins per column (fewer where quantiles coincide).
    """

    def __init__(self, x_train: torch.Tensor, bins: int = 16) -> None:
        super().__init__()
        levels = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
        lower: list[torch.Tensor] = []
        width: list[torch.Tensor] = []
        column: list[torch.Tensor] = []
        for j in range(x_train.shape[1]):
            values = x_train[:, j].double()
            if len(values.unique()) <= 2:
                continue
            edges = torch.quantile(values, levels).unique()
            lower.append(edges[:-1])
            width.append(edges.diff())
            column.append(torch.full((len(edges) - 1,), j))
        self.register_buffer("lower", torch.cat(lower).float() if lower else torch.zeros(0))
        self.register_buffer("width", torch.cat(width).float() if width else torch.ones(0))
        self.register_buffer("column", torch.cat(column) if column else torch.zeros(0, dtype=int))
        self.n_out = x_train.shape[1] + len(self.lower)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The inputs, then every column's bin code."""
        code = ((x[:, self.column] - self.lower) / self.width).clamp(0.0, 1.0)
        return torch.cat([x, code], dim=1)


class WideAndDeep(nn.Module):
    """A linear model plus an MLP: ``linear(x) + mlp(x)``, the MLP's last layer starting at zero.

    Training starts from a plain linear model and the MLP learns only what a linear model
    cannot, so on small tabular data it does not fall below least squares the way a bare
    MLP can (Cheng et al., 2016, "Wide & Deep Learning"). An ``encoder`` (e.g.
    :class:`PiecewiseLinear`, whose ``n_out`` gives the MLP's input width) goes before the
    MLP only: the linear path stays a linear model of the inputs.
    """

    def __init__(self, n_in: int, hidden: Sequence[int], n_out: int, dropout: float = 0.0,
                 encoder: nn.Module | None = None) -> None:
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.encoder = encoder if encoder is not None else nn.Identity()
        n_deep = int(getattr(encoder, "n_out", n_in))
        self.deep = mlp([n_deep, *hidden, n_out], dropout=dropout)
        last = self.deep[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Sum of the linear and the MLP paths."""
        return self.linear(x) + self.deep(self.encoder(x))


class MemberLinear(nn.Module):
    """``members`` independent linear layers applied at once, one batched matrix product.

    ``(members, rows, n_in) -> (members, rows, n_out)``; each member's weights start as
    ``nn.Linear``'s would (uniform within ``1/sqrt(n_in)``).
    """

    def __init__(self, members: int, n_in: int, n_out: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(n_in)
        self.weight = nn.Parameter(torch.empty(members, n_in, n_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, n_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Member ``i``'s layer on ``x[i]``."""
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleClassifier(nn.Module):
    """``members`` wide-and-deep classifiers with their own weights, probabilities averaged.

    A deep ensemble (Lakshminarayanan et al., 2017; for tables, Gorishniy et al., 2024,
    "TabM"): every member is a :class:`WideAndDeep` (or a bare MLP when ``wide`` is false)
    trained on the same batches from its own initial weights, all members computed by one
    batched matrix product per layer. In training mode the output is each member's logits,
    ``(rows, members, classes)``, so the loss trains each member on its own; in evaluation
    mode it is the log of the members' mean class probability, ``(rows, classes)``: its
    ``argmax`` is the ensemble's class and its cross-entropy the ensemble's loss. Averaging
    members that start apart smooths what one small network fits to noise, the gap to
    gradient boosting on small noisy tables with uninformative columns
    (bench/results/tabular-issue47.md).
    """

    def __init__(self, n_in: int, hidden: Sequence[int], n_out: int, members: int,
                 dropout: float = 0.0, wide: bool = True,
                 encoder: nn.Module | None = None) -> None:  # fmt: skip
        super().__init__()
        self.members = int(members)
        self.encoder = encoder if encoder is not None else nn.Identity()
        sizes = [int(getattr(encoder, "n_out", n_in)), *hidden, n_out]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            layers.append(MemberLinear(self.members, a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
                if dropout > 0:
                    layers.append(nn.Dropout(dropout))
        self.deep = MLP(*layers)
        self.linear = MemberLinear(self.members, n_in, n_out) if wide else None
        if wide:  # as WideAndDeep: each member starts as its linear model
            last = layers[-1]
            assert isinstance(last, MemberLinear)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training: every member's logits ``(rows, members, classes)``; evaluation: the log
        of the mean probability ``(rows, classes)``."""
        out = self.deep(self.encoder(x).expand(self.members, -1, -1))
        if self.linear is not None:
            out = out + self.linear(x.expand(self.members, -1, -1))
        logits = out.transpose(0, 1)
        if self.training:
            return logits
        return logits.log_softmax(-1).logsumexp(1) - math.log(self.members)
