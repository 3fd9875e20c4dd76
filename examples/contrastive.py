"""SimCLR-style contrastive learning on the 8x8 digits, then a linear probe.

Self-supervised: each image is corrupted twice (a random one-pixel shift, random pixel
drop-out, Gaussian noise) and the encoder learns to map the two views of an image close
together and away from the other images of the batch (the NT-Xent loss of Chen et al.,
2020). No label is used. Afterwards the encoder is frozen and a linear classifier on its
features (the "linear probe", trained through the same engine) measures how much digit
identity the features carry, beside a probe on PCA features of the same dimension.

Run: ``python examples/contrastive.py [--epochs 100] [--dim 16] [--probe-epochs 100]``
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F

from beyondfit import Engine, TensorBatches
from beyondfit.data import split
from beyondfit.data.bundled import digits


def two_views(x: torch.Tensor, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent random corruptions of each flat 8x8 image."""
    return augment(x, noise), augment(x, noise)


def augment(x: torch.Tensor, noise: float, drop: float = 0.15) -> torch.Tensor:
    """Shift the batch by up to one pixel, drop pixels, add Gaussian noise."""
    n = len(x)
    padded = F.pad(x.reshape(n, 1, 8, 8), (1, 1, 1, 1))
    dy, dx = torch.randint(0, 3, (2,)).tolist()
    shifted = padded[:, :, dy : dy + 8, dx : dx + 8].reshape(n, 64)
    kept = shifted * (torch.rand_like(shifted) > drop)
    return kept + noise * torch.randn_like(kept)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """Normalised-temperature cross-entropy: each view must pick its twin among 2n - 1 others."""
    n = len(z1)
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    similarity = z @ z.T / temperature
    similarity.fill_diagonal_(float("-inf"))  # a view is not its own positive
    twin = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
    return F.cross_entropy(similarity, twin)


def seeded_digits(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seed torch; the digits (flat pixels, labels) and a seeded 80/20 split of their rows."""
    torch.manual_seed(seed)
    pixels, labels = digits()
    x, y = torch.from_numpy(pixels), torch.from_numpy(labels)
    train_idx, val_idx = split(len(x), 0.2, seed)
    return x, y, train_idx, val_idx


class SimCLR(nn.Module):
    """An MLP encoder (the features kept) and a small projection head (used only by the loss)."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, dim)
        )
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(dim, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Projections (what NT-Xent compares)."""
        return self.head(self.encoder(x))


def linear_probe(
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor],
    epochs: int,
    seed: int,
) -> float:
    """Validation accuracy of a linear classifier on fixed features, trained through Engine."""
    (f_train, y_train), (f_val, y_val) = train, val
    mean, std = f_train.mean(0), f_train.std(0) + 1e-6  # standardise: one lr for any features
    f_train, f_val = (f_train - mean) / std, (f_val - mean) / std

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict:
        features, labels = batch
        logits = model(features)
        hit = (logits.argmax(1) == labels).float().mean()
        return {"loss": F.cross_entropy(logits, labels), "acc": hit}

    torch.manual_seed(seed)
    probe = nn.Linear(f_train.shape[1], 10)
    engine = Engine(probe, loss_fn, torch.optim.Adam(probe.parameters(), 1e-2), device="cpu")
    engine.fit(TensorBatches(f_train, y_train, batch_size=64, seed=seed), epochs=epochs)
    return engine.evaluate([(f_val, y_val)])["val_acc"]  # one batch: the exact accuracy


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Pre-train without labels, probe with labels; returns both probe accuracies."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--dim", type=int, default=16, help="feature (and PCA) dimension")
    parser.add_argument("--temperature", type=float, default=0.2)
    parser.add_argument("--noise", type=float, default=0.2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--probe-epochs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small models: one thread is fastest, and steady on busy cores

    x, y, train_idx, val_idx = seeded_digits(args.seed)

    def loss_fn(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        view1, view2 = two_views(batch, args.noise)  # no labels anywhere
        return nt_xent(model(view1), model(view2), args.temperature)

    model = SimCLR(args.dim)
    engine = Engine(model, loss_fn, torch.optim.Adam(model.parameters(), 1e-3), device="cpu")
    # drop_last: NT-Xent's difficulty depends on the batch size; keep every batch full.
    data = TensorBatches(x[train_idx], batch_size=args.batch_size, seed=args.seed, drop_last=True)
    history = engine.fit(data, epochs=args.epochs, val_data=[x[val_idx]])
    print(f"contrastive pre-training: loss {history[-1]['loss']:.3f}, "
          f"val_loss {history[-1]['val_loss']:.3f} after {args.epochs} epochs")

    # Frozen encoder: features computed once, without gradients, in eval mode.
    model.eval()
    with torch.inference_mode():
        f_train, f_val = model.encoder(x[train_idx]), model.encoder(x[val_idx])
    contrastive = linear_probe((f_train, y[train_idx]), (f_val, y[val_idx]),
                               args.probe_epochs, args.seed)

    # Baseline: PCA (fit on the training images) with as many components.
    x_train = x[train_idx]
    centre = x_train.mean(0)
    components = torch.linalg.svd(x_train - centre, full_matrices=False).Vh[: args.dim]
    pca = linear_probe(((x_train - centre) @ components.T, y[train_idx]),
                       ((x[val_idx] - centre) @ components.T, y[val_idx]),
                       args.probe_epochs, args.seed)
    print(f"linear probe, validation accuracy on {len(val_idx)} digits: "
          f"contrastive encoder ({args.dim}-d) {contrastive:.1%} | PCA-{args.dim} {pca:.1%}")
    return {"contrastive": contrastive, "pca": pca}


if __name__ == "__main__":
    main()
