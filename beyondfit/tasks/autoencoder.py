"""Self-supervised autoencoder: the input is its own target, no labels anywhere.

An MLP (or a small convolutional net) squeezes each image through ``latent_dim`` numbers
and rebuilds it; the loss is the per-pixel mean squared error between the rebuilt and the
clean image. With ``noise > 0`` the encoder sees a corrupted copy (Gaussian noise) and must
still rebuild the clean one: a denoising autoencoder. Data: scikit-learn's bundled 8x8
digits (pixels in [0, 1]) or the user's own ``.npy``/``.npz`` array of images or vectors.

At the end the run prints the validation MSE beside that of PCA with as many components
(the best *linear* autoencoder of that size, so the gap is what the nonlinearity bought),
and writes ``reconstructions.png``: validation inputs beside both reconstructions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from beyondfit import Task, TensorBatches
from beyondfit.core.engine import Engine
from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import check_number
from beyondfit.data import split
from beyondfit.data.bundled import digits
from beyondfit.nets import mlp
from beyondfit.observers.plots import skipped_without_matplotlib
from beyondfit.tasks.supervised import check_net_fits

ARCHS = ("mlp", "conv")
#: Validation rows per evaluation batch (bounds memory on large user files).
VAL_CHUNK = 2048


def build(
    seed: int = 0,
    arch: str = "mlp",
    latent_dim: int = 8,
    hidden: Sequence[int] | int = (256,),
    channels: int = 16,
    noise: float = 0.0,
    batch_size: int = 64,
    val_fraction: float = 0.2,
    n_images: int = 32,
    data: Mapping[str, Any] | None = None,
) -> Task:
    """Build the autoencoder task.

    Args:
        seed: seeds the split, the weights, the batch order and the noise.
        arch: ``"mlp"`` (fully connected) or ``"conv"`` (two conv layers each way).
        latent_dim: width of the bottleneck, and the number of PCA components compared.
        hidden: hidden widths of the MLP encoder (the decoder mirrors them).
        channels: channels of the first conv layer (``arch="conv"``; the second has twice).
        noise: standard deviation of the Gaussian noise added to training inputs
            (denoising); ``0`` trains a plain autoencoder.
        batch_size: training images per step.
        val_fraction: share of images held out for validation.
        n_images: validation images shown in ``reconstructions.png``.
        data: ``{"path": file.npy|file.npz, "scale": "minmax"|"none"}``; default: digits.
            An ``.npz`` holds an array ``x`` (or a single array); rows are images
            ``(n, h, w)``, ``(n, 1, h, w)`` or flat vectors ``(n, d)``.
    """
    data = dict(data or {})
    if arch not in ARCHS:
        raise BeyondfitError(f"task.arch={arch!r}; use one of {', '.join(ARCHS)}")
    check_number("task.noise", noise, at_least=0, example="task.noise=0.2")
    if isinstance(hidden, int):
        hidden = [hidden]
    for name, value in [("latent_dim", latent_dim), ("channels", channels), *(
        (f"hidden[{i}]", h) for i, h in enumerate(hidden)
    )]:
        check_number(f"task.{name}", value, integer=True, at_least=1)

    if data.get("path"):
        images = load_images(Path(str(data["path"])).expanduser())
        source = str(data["path"])
    else:
        images = digits()[0].reshape(-1, 8, 8)
        source = "digits"
    shape = images.shape[1:]
    x = torch.from_numpy(images.reshape(len(images), -1))
    n_features = x.shape[1]
    if latent_dim >= n_features:
        raise BeyondfitError(
            f"task.latent_dim={latent_dim} is not below the {n_features} values per row of "
            f"{source}: the bottleneck would not compress; pick a smaller latent_dim"
        )
    train_idx, val_idx = split(len(x), val_fraction, seed)
    if latent_dim > len(train_idx):
        raise BeyondfitError(
            f"task.latent_dim={latent_dim} exceeds the {len(train_idx)} training rows; "
            "PCA cannot have more components than rows: use a smaller latent_dim"
        )
    x = _scale(x, train_idx, str(data.get("scale") or "minmax"))
    x_train, x_val = x[train_idx], x[val_idx]

    torch.manual_seed(seed)  # the weights depend on the seed alone, not on what ran before
    if arch == "mlp":
        rows = min(batch_size, len(x_train)) if isinstance(batch_size, int) else 1
        check_net_fits([n_features, *hidden, latent_dim, *reversed(list(hidden)), n_features],
                       rows, hidden)
        model: nn.Module = MLPAutoencoder(n_features, list(hidden), latent_dim)
    else:
        model = ConvAutoencoder(shape, latent_dim, channels)

    # Fixed corruption of the validation images, so val_denoise_mse is comparable across epochs.
    val_noise = noise * torch.randn(x_val.shape, generator=torch.Generator().manual_seed(seed))

    def loss_fn(model: nn.Module, batch: Any) -> Any:
        if model.training:
            clean = batch
            corrupted = clean + noise * torch.randn_like(clean) if noise else clean
            return nn.functional.mse_loss(model(corrupted), clean)
        clean, corruption = batch
        # val_loss reconstructs clean inputs: the number PCA is compared with.
        logs = {"loss": nn.functional.mse_loss(model(clean), clean)}
        if noise:
            logs["denoise_mse"] = nn.functional.mse_loss(model(clean + corruption), clean)
        return logs

    chunks = max(1, math.ceil(len(x_val) / VAL_CHUNK))
    # Near-equal chunks, so the engine's mean of chunk means is the exact per-pixel mean.
    val_data = list(zip(torch.tensor_split(x_val, chunks), torch.tensor_split(val_noise, chunks)))

    def finish(engine: Engine, run_dir: Path) -> list[str]:
        pca_mse, pca_val = pca_reconstruction(x_train, x_val, latent_dim)
        mse = engine.last_val.get("val_loss", float("nan"))
        lines = [
            f"validation MSE per pixel: autoencoder {mse:.4f} | PCA-{latent_dim} {pca_mse:.4f} "
            f"(same split, {len(x_val)} images of {source})"
        ]
        if noise:
            lines.append(
                f"denoising (noise std {noise:g}): validation MSE "
                f"{engine.last_val.get('val_denoise_mse', float('nan')):.4f}"
            )
        k = min(int(n_images), len(x_val))
        with torch.inference_mode():
            engine.model.eval()
            shown = x_val[:k]
            recon = engine.model(shown.to(engine.device)).float().cpu()
        panels = [("input", shown), ("autoencoder", recon), (f"PCA-{latent_dim}", pca_val[:k])]
        if noise:
            noisy = shown + val_noise[:k]
            with torch.inference_mode():
                denoised = engine.model(noisy.to(engine.device)).float().cpu()
            panels += [("noisy input", noisy), ("denoised", denoised)]
        saved = save_grid(run_dir / "reconstructions.png", panels, shape)
        lines += [saved] if saved else []
        return lines

    return Task(
        model=model,
        loss_fn=loss_fn,
        train_data=TensorBatches(x_train, batch_size=batch_size, seed=seed),
        val_data=val_data,
        finish=finish,
    )


class MLPAutoencoder(nn.Module):
    """``n -> hidden -> latent -> reversed(hidden) -> n``; sigmoid output (pixels are in [0, 1])."""

    def __init__(self, n_features: int, hidden: list[int], latent_dim: int) -> None:
        super().__init__()
        self.encoder = mlp([n_features, *hidden, latent_dim])
        self.decoder = mlp([latent_dim, *reversed(hidden), n_features], out_activation=nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruct flat rows ``(batch, n_features)``."""
        return self.decoder(self.encoder(x))


class ConvAutoencoder(nn.Module):
    """Two 3x3 conv layers down (the second with stride 2), a linear bottleneck, and back up.

    Takes and returns flat rows, like :class:`MLPAutoencoder`, so the loss and the data are
    the same for both; the image shape is given once here.
    """

    def __init__(self, shape: tuple[int, ...], latent_dim: int, channels: int = 16) -> None:
        super().__init__()
        h, w = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[0])
        self.shape = (1, h, w)
        h2, w2 = (h + 1) // 2, (w + 1) // 2
        c1, c2 = channels, 2 * channels
        self.encoder = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(c1, c2, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(c2 * h2 * w2, latent_dim),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, c2 * h2 * w2),
            nn.ReLU(),
            nn.Unflatten(1, (c2, h2, w2)),
            nn.Upsample(size=(h, w), mode="nearest"),  # any image size, no checkerboard
            nn.Conv2d(c2, c1, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(c1, 1, 3, padding=1),
            nn.Sigmoid(),
            nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruct flat rows ``(batch, h * w)``."""
        return self.decoder(self.encoder(x.reshape(len(x), *self.shape)))


def pca_reconstruction(
    x_train: torch.Tensor, x_val: torch.Tensor, k: int
) -> tuple[float, torch.Tensor]:
    """Per-pixel validation MSE of PCA with ``k`` components fit on the training rows.

    PCA is the optimal *linear* autoencoder with a ``k``-wide bottleneck (Eckart-Young), so
    it is the baseline a nonlinear one must beat. Computed with an SVD in float64 (no
    scikit-learn import). Returns the MSE and the reconstructed validation rows.
    """
    a = x_train.double()
    mean = a.mean(0)
    _, _, vh = torch.linalg.svd(a - mean, full_matrices=False)
    components = vh[:k]
    recon = (x_val.double() - mean) @ components.T @ components + mean
    mse = float(((recon - x_val.double()) ** 2).mean())
    return mse, recon.float()


def save_grid(
    path: Path, panels: list[tuple[str, torch.Tensor]], shape: tuple[int, ...]
) -> str | None:
    """Save panels of images side by side as one PNG; returns the line to report (``None``
    without matplotlib: a warning says so).

    Each panel is a titled grid of the same images (inputs, reconstructions, ...), so row
    ``i``, column ``j`` of every panel shows the same validation image.
    """
    try:
        from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state
    except ImportError:
        skipped_without_matplotlib(path.name)
        return None
    h, w = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[0])
    n = len(panels[0][1])
    cols = max(1, min(n, 8))
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(2.6 * len(panels), 2.6 * rows / cols * h / w + 0.5), dpi=100)
    for i, (title, images) in enumerate(panels):
        # Light grey lines between tiles; blank cells stay white (0 under the reversed map).
        grid = np.zeros((rows * (h + 1) - 1, cols * (w + 1) - 1), dtype=np.float32)
        grid[h :: h + 1, :] = 0.25
        grid[:, w :: w + 1] = 0.25
        tiles = images.detach().float().clamp(0, 1).reshape(-1, h, w).numpy()
        for j, tile in enumerate(tiles):
            r, c = divmod(j, cols)
            grid[r * (h + 1) : r * (h + 1) + h, c * (w + 1) : c * (w + 1) + w] = tile
        ax = fig.add_subplot(1, len(panels), i + 1)
        ax.imshow(grid, cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(title)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    return f"reconstructions of {n} validation images: {path}"


def load_images(path: Path) -> np.ndarray:
    """Rows of a ``.npy`` array, or of array ``x`` (or the only array) of an ``.npz``, as float32.

    Accepted shapes: ``(n, d)``, ``(n, h, w)``, ``(n, 1, h, w)``. Every problem (missing
    file, wrong suffix, no usable array, bad shape, non-numbers, NaN/inf, no rows) is a
    :class:`BeyondfitError` naming the file and the fix.
    """
    if not path.is_file():
        raise BeyondfitError(f"data file {str(path)!r} does not exist; check task.data.path")
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".npz"):
        raise BeyondfitError(
            f"data file {str(path)!r} has suffix {suffix!r}; the autoencoder reads a .npy "
            "array or an .npz with an array x (np.save / np.savez(path, x=images))"
        )
    try:
        if suffix == ".npy":
            array = np.load(path, allow_pickle=False)
        else:
            with np.load(path, allow_pickle=False) as archive:
                names = archive.files
                if "x" in names:
                    array = archive["x"]
                elif len(names) == 1:
                    array = archive[names[0]]
                else:
                    raise BeyondfitError(
                        f"data file {str(path)!r} holds arrays {names} but no 'x'; save the "
                        "images with np.savez(path, x=images)"
                    )
    except BeyondfitError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise BeyondfitError(
            f"data file {str(path)!r} is not a readable {suffix} array ({exc})"
        ) from None
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise BeyondfitError(
            f"data file {str(path)!r} holds {array.dtype} values; the autoencoder needs numbers"
        )
    if array.ndim == 4 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim not in (2, 3):
        raise BeyondfitError(
            f"data file {str(path)!r} has shape {array.shape}; use (n, features), "
            "(n, height, width) or (n, 1, height, width)"
        )
    if array.shape[0] == 0 or array[0].size == 0:
        raise BeyondfitError(
            f"data file {str(path)!r} is empty (shape {array.shape}); it needs rows of values"
        )
    array = array.astype(np.float32)
    finite = np.isfinite(array.reshape(len(array), -1)).all(axis=1)
    if not finite.all():
        bad = np.nonzero(~finite)[0]
        raise BeyondfitError(
            f"data file {str(path)!r} has NaN or inf in {len(bad)} row(s) (first: row "
            f"{int(bad[0])}); clean or drop those rows"
        )
    return array


def _scale(x: torch.Tensor, train_idx: torch.Tensor, scale: str) -> torch.Tensor:
    """Map values to [0, 1] with the training rows' overall min and max (the output is a sigmoid).

    One range for the whole array, not one per pixel, so images keep their contrast and
    digits (already in [0, 1]) stay unchanged.
    """
    if scale == "none":
        return x
    if scale != "minmax":
        raise BeyondfitError(f"task.data.scale={scale!r}; use minmax or none")
    low, high = float(x[train_idx].min()), float(x[train_idx].max())
    if low >= 0.0 and high <= 1.0:
        return x
    if high <= low:
        raise BeyondfitError(
            f"every training value equals {low}; there is nothing to reconstruct"
        )
    return (x - low) / (high - low)
