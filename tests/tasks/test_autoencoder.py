"""The self-supervised autoencoder task: training, the PCA baseline, the PNG, user files, errors."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from beyondfit import BeyondfitError, Engine
from beyondfit.cli.run import run
from beyondfit.tasks.autoencoder import build, load_images, pca_reconstruction, save_grid

from kit import cli, one_line_exit_2, task_config

config = partial(task_config, "autoencoder")  # this file's task, composed as the CLI does


def figures(stdout: str) -> tuple[float, float]:
    """The autoencoder's and PCA's validation MSE from the run's report line."""
    line = next(x for x in stdout.splitlines() if "validation MSE per pixel" in x)
    model = float(line.split("autoencoder ")[1].split()[0])
    pca = float(line.split("PCA-8 ")[1].split()[0])
    return model, pca


@pytest.mark.e2e
# ---------------------------------------------------------------- end to end
def test_short_cli_run_beats_pca_prints_both_and_writes_the_png(tmp_path: Path) -> None:
    # 20 of the default 100 epochs already beat PCA-8 (the full run: see the slow test).
    result = cli("+task=autoencoder", "train.epochs=20", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    model, pca = figures(result.stdout)
    assert 0.02 < pca < 0.03  # PCA-8 on this split: ~0.024
    assert model <= pca
    png = tmp_path / "reconstructions.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(png) in result.stdout


@pytest.mark.e2e
@pytest.mark.slow
def test_default_cli_run_meets_the_acceptance(tmp_path: Path) -> None:
    result = cli("+task=autoencoder", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    model, pca = figures(result.stdout)
    assert model <= pca
    assert model < 0.015  # measured ~0.0103
    assert (tmp_path / "reconstructions.png").is_file()


def test_val_loss_is_the_per_pixel_mse_of_the_whole_validation_split(tmp_path: Path) -> None:
    task = build(seed=0, batch_size=128)
    engine = Engine(task.model, task.loss_fn, torch.optim.Adam(task.model.parameters(), 3e-3),
                    device="cpu")
    history = engine.fit(task.train_data, epochs=2, val_data=task.val_data)
    assert isinstance(task.val_data, list)
    clean = torch.cat([b[0] for b in task.val_data])
    assert len(clean) == 359 and clean.shape[1] == 64  # 20% of 1797 digits, 8x8 pixels
    with torch.no_grad():
        task.model.eval()
        expected = float(((task.model(clean) - clean) ** 2).mean())
    assert history[-1]["val_loss"] == pytest.approx(expected, rel=1e-5)
    assert task.finish is not None
    lines = task.finish(engine, tmp_path)
    assert any("PCA-8" in line for line in lines)
    assert (tmp_path / "reconstructions.png").is_file()


@pytest.mark.e2e
def test_denoising_logs_the_denoising_error(tmp_path: Path) -> None:
    history = run(config("task.noise=0.3", "train.epochs=5"), tmp_path)
    assert {"loss", "val_loss", "val_denoise_mse"} <= set(history[-1])
    # Reconstructing clean inputs is easier than denoising corrupted ones.
    assert history[-1]["val_denoise_mse"] > history[-1]["val_loss"]
    assert (tmp_path / "reconstructions.png").is_file()


@pytest.mark.e2e
def test_conv_arch_trains(tmp_path: Path) -> None:
    history = run(config("task.arch=conv", "task.channels=4", "train.epochs=2"), tmp_path)
    assert history[-1]["val_loss"] < history[0]["val_loss"]
    assert (tmp_path / "reconstructions.png").is_file()


@pytest.mark.e2e
def test_user_images_and_vectors(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    # Images 0-255 as (n, 1, h, w) with a non-square, odd size: scaled to [0, 1], conv works.
    images = rng.integers(0, 256, size=(60, 1, 5, 7)).astype(np.uint8)
    np.save(tmp_path / "images.npy", images)
    history = run(config(f"task.data.path={tmp_path / 'images.npy'}", "task.arch=conv",
                         "task.latent_dim=3", "train.epochs=2"), tmp_path / "a")
    assert len(history) == 2 and history[-1]["val_loss"] < 0.2
    # Flat vectors in an .npz: the single array is used, whatever its name.
    np.savez(tmp_path / "rows.npz", features=rng.normal(size=(50, 10)).astype(np.float32))
    history = run(config(f"task.data.path={tmp_path / 'rows.npz'}", "task.latent_dim=2",
                         "train.epochs=2"), tmp_path / "b")
    assert len(history) == 2
    assert (tmp_path / "b" / "reconstructions.png").is_file()


@pytest.mark.e2e
def test_runs_are_reproducible(tmp_path: Path) -> None:
    first = run(config("train.epochs=1", "task.noise=0.1"), tmp_path / "a")
    second = run(config("train.epochs=1", "task.noise=0.1"), tmp_path / "b")
    assert first[-1]["val_loss"] == second[-1]["val_loss"]


# ---------------------------------------------------------------- pieces
def test_pca_reconstruction_is_exact_on_low_rank_data_and_improves_with_k() -> None:
    g = torch.Generator().manual_seed(0)
    basis = torch.randn(3, 20, generator=g)
    rows = torch.randn(200, 3, generator=g) @ basis + 5.0  # rank 3 plus an offset
    mse, recon = pca_reconstruction(rows[:150], rows[150:], 3)
    assert mse < 1e-9 and recon.shape == (50, 20)
    noisy = rows + 0.5 * torch.randn(rows.shape, generator=g)
    errors = [pca_reconstruction(noisy[:150], noisy[150:], k)[0] for k in (1, 2, 3, 10)]
    assert errors == sorted(errors, reverse=True)


def test_png_needs_matplotlib_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import now fails
    with caplog.at_level("WARNING", logger="beyondfit"):
        line = save_grid(tmp_path / "r.png", [("input", torch.rand(4, 64))], (8, 8))
    assert line is None  # no report line: one warning instead, on stderr
    (record,) = caplog.records
    assert record.getMessage() == ('r.png skipped: matplotlib is not installed; pip install '
                                   '"beyondfit[plots]" (or pip install matplotlib)')
    assert not (tmp_path / "r.png").exists()


# ---------------------------------------------------------------- bad input
def write(path: Path, array: np.ndarray) -> Path:
    """Save ``array`` as .npy at ``path``."""
    np.save(path, array)
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.npy", "does not exist; check task.data.path"),
        (lambda d: (d / "x.csv").write_text("a\n1\n") and d / "x.csv", "suffix '.csv'"),
        (lambda d: write(d / "v.npy", np.zeros(10)), r"shape \(10,\); use \(n, features\)"),
        (lambda d: write(d / "v.npy", np.zeros((2, 3, 4, 5, 6))), r"shape \(2, 3, 4, 5, 6\)"),
        (lambda d: write(d / "v.npy", np.zeros((0, 16))), r"is empty \(shape \(0, 16\)\)"),
        (lambda d: write(d / "v.npy", np.array([[0.0, np.nan], [1, 2], [3, np.inf]])),
         r"NaN or inf in 2 row\(s\) \(first: row 0\)"),
        (lambda d: write(d / "v.npy", np.array([["a", "b"], ["c", "d"]])), "needs numbers"),
        (lambda d: np.savez(d / "v.npz", a=np.zeros((4, 4)), b=np.zeros((4, 4))) or d / "v.npz",
         r"holds arrays \['a', 'b'\] but no 'x'"),
        (lambda d: (d / "v.npy").write_bytes(b"not numpy") and d / "v.npy",
         "not a readable .npy"),
    ],
    ids=["missing", "suffix", "1-d", "5-d", "empty", "nan", "text", "npz-keys", "corrupt"],
)
def test_bad_data_files_are_clear_errors(tmp_path: Path, make, message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(BeyondfitError, match=message):
        load_images(Path(path))
    with pytest.raises(BeyondfitError, match=message):
        build(data={"path": str(path)})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"arch": "resnet"}, "task.arch='resnet'; use one of mlp, conv"),
        ({"noise": -0.1}, "task.noise=-0.1"),
        ({"latent_dim": 0}, "task.latent_dim=0; it must be a positive whole number"),
        ({"latent_dim": 64}, "task.latent_dim=64 is not below the 64 values per row"),
        ({"hidden": [32, 0]}, r"task.hidden\[1\]=0"),
        ({"data": {"scale": "zscore"}}, "task.data.scale='zscore'; use minmax or none"),
        ({"val_fraction": 1.5}, "val_fraction=1.5"),
    ],
)
def test_bad_options_are_clear_errors(options: dict, message: str) -> None:
    with pytest.raises(BeyondfitError, match=message):
        build(**options)


def test_constant_data_and_too_few_rows(tmp_path: Path) -> None:
    with pytest.raises(BeyondfitError, match=r"every training value equals 3\.0"):
        build(data={"path": str(write(tmp_path / "c.npy", np.full((10, 16), 3.0)))})
    with pytest.raises(BeyondfitError, match="exceeds the 3 training rows"):
        build(latent_dim=5, data={"path": str(write(tmp_path / "s.npy", np.eye(4, 16)))})


@pytest.mark.e2e
def test_cli_bad_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = cli("+task=autoencoder", "task.data.path=/no/such/images.npy",
                 f"hydra.run.dir={tmp_path}")
    one_line_exit_2(result, "does not exist; check task.data.path")
