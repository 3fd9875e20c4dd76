"""A variational autoencoder on the 8x8 digits: the closure returns reconstruction + KL.

No labels: the loss is the negative evidence lower bound, split into its two terms so both
are logged (and ``val_``-prefixed in evaluation) next to their sum. The engine neither
knows nor cares that the model samples inside its forward pass.

Run: ``python examples/vae.py [--epochs 60] [--latent 4] [--seed 0]``
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import torch
from torch import nn
from torch.nn import functional as F

from beyondfit import Callback, Engine, TensorBatches
from beyondfit.data import split
from beyondfit.data.bundled import digits


class VAE(nn.Module):
    """Encoder to a diagonal Gaussian over ``latent`` dims, decoder to Bernoulli pixel means."""

    def __init__(self, n_pixels: int = 64, hidden: int = 128, latent: int = 4) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_pixels, hidden), nn.ReLU())
        self.mean = nn.Linear(hidden, latent)
        self.log_var = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, n_pixels)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pixel logits, and the mean and log-variance of q(z | x)."""
        h = self.encoder(x)
        mean, log_var = self.mean(h), self.log_var(h)
        # Reparameterisation: the sample is a differentiable function of mean and log_var.
        # In evaluation use the mean, so validation numbers do not depend on the draw.
        z = mean + torch.randn_like(mean) * (0.5 * log_var).exp() if self.training else mean
        return self.decoder(z), mean, log_var


def loss_fn(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Negative ELBO per image = reconstruction (Bernoulli NLL) + KL(q(z|x) || N(0, I))."""
    logits, mean, log_var = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / len(x)
    kl = -0.5 * (1 + log_var - mean.pow(2) - log_var.exp()).sum() / len(x)
    return {"loss": recon + kl, "recon": recon, "kl": kl}


class PrintEpoch(Callback):
    """Print both terms of the loss for training and validation."""

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """One line per epoch."""
        print(
            f"epoch {int(logs['epoch']):3d}  recon {logs['recon']:6.2f}  kl {logs['kl']:5.2f}  "
            f"| val_recon {logs['val_recon']:6.2f}  val_kl {logs['val_kl']:5.2f}"
        )


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    """Train the VAE on digits; returns the history."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--latent", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small models: one thread is fastest, and steady on busy cores

    torch.manual_seed(args.seed)
    x = torch.from_numpy(digits()[0])  # 1797 images, 64 pixels in [0, 1]
    train_idx, val_idx = split(len(x), 0.2, args.seed)
    model = VAE(latent=args.latent)
    engine = Engine(
        model, loss_fn, torch.optim.Adam(model.parameters(), 2e-3), device="cpu",
        callbacks=[PrintEpoch()],
    )
    history = engine.fit(
        TensorBatches(x[train_idx], batch_size=64, seed=args.seed),
        epochs=args.epochs,
        val_data=[x[val_idx]],
        verbose=False,  # PrintEpoch prints the epoch lines
    )
    # Generation: decode draws from the prior; the mean pixel intensity should look like data.
    model.eval()
    with torch.inference_mode():
        samples = torch.sigmoid(model.decoder(torch.randn(16, args.latent)))
    print(
        f"16 samples from the prior: mean intensity {samples.mean():.3f} "
        f"(data: {x.mean():.3f})"
    )
    return history


if __name__ == "__main__":
    main()
