"""BYOL on the 8x8 digits: a momentum encoder as engine state, then a linear probe.

Self-supervised without negatives (Grill et al., 2020): an online network (encoder, projector,
predictor) learns to predict, from one corrupted view of an image, what a *target* network
makes of another view. The target is not trained: it is a slow copy of the online encoder and
projector (:class:`beyondfit.SlowCopy`, an exponential moving average with decay 0.99),
averaged right after every optimizer step by the ``after_step`` hook of the engine's one
:class:`~beyondfit.Update`. Being a submodule of the model, it moves to the device with it, is
read by the loss closure as ``model.target(x)``, and is saved and restored by checkpoints.
The same mechanism gives SAC and TD3 their target critics (``algo=sac``).

The views and the probe are those of ``examples/contrastive.py``: after pre-training, a linear
classifier on the frozen encoder's features measures how much digit identity they carry.

Run: ``python examples/byol.py [--epochs 30] [--dim 16] [--decay 0.99]`` (probe: 86%)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from beyondfit import Engine, TensorBatches, Update
from beyondfit.core.target import SlowCopy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contrastive import linear_probe, seeded_digits, two_views  # the sibling example


class BYOL(nn.Module):
    """Online encoder + projector (``backbone``) and predictor; ``target``: their slow copy."""

    def __init__(self, dim: int = 16, decay: float = 0.99) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, dim))
        self.backbone = nn.Sequential(self.encoder, nn.ReLU(), nn.Linear(dim, 64))
        self.predictor = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
        self.target = SlowCopy(self.backbone, rate=1 - decay)


def byol_loss(model: BYOL, batch: torch.Tensor, noise: float) -> dict[str, torch.Tensor]:
    """``2 - 2 cos(prediction of view 1, target of view 2)``, both ways round."""
    view1, view2 = two_views(batch, noise)  # no labels anywhere
    with torch.no_grad():
        target1, target2 = model.target(view1), model.target(view2)
    pred1, pred2 = model.predictor(model.backbone(view1)), model.predictor(model.backbone(view2))
    similarity = (F.cosine_similarity(pred1, target2).mean()
                  + F.cosine_similarity(pred2, target1).mean()) / 2  # fmt: skip
    return {"loss": 2 - 2 * similarity, "similarity": similarity.detach()}


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Pre-train without labels, probe with labels; returns the probe accuracy and how far
    the target lags the online encoder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--dim", type=int, default=16, help="feature dimension")
    parser.add_argument("--decay", type=float, default=0.99, help="the target's EMA decay")
    parser.add_argument("--noise", type=float, default=0.2)
    parser.add_argument("--probe-epochs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small models: one thread is fastest, and steady on busy cores

    x, y, train_idx, val_idx = seeded_digits(args.seed)
    model = BYOL(args.dim, args.decay)
    online = [p for n, p in model.named_parameters() if not n.startswith("target.")]
    engine = Engine(model, [Update("", lambda m, b: byol_loss(m, b, args.noise),
                                   torch.optim.Adam(online, 1e-3),
                                   after_step=[model.target.update])], device="cpu")
    data = TensorBatches(x[train_idx], batch_size=128, seed=args.seed, drop_last=True)
    history = engine.fit(data, epochs=args.epochs)
    lag = max((a - b).abs().max().item() for a, b in zip(
        model.target.module.parameters(), model.backbone.parameters(), strict=True))
    print(f"BYOL pre-training: loss {history[-1]['loss']:.3f}, view similarity "
          f"{history[-1]['similarity']:.3f} after {args.epochs} epochs "
          f"({model.target.calls} target updates)")

    model.eval()
    with torch.inference_mode():
        f_train, f_val = model.encoder(x[train_idx]), model.encoder(x[val_idx])
    accuracy = linear_probe((f_train, y[train_idx]), (f_val, y[val_idx]), args.probe_epochs,
                            args.seed)
    print(f"linear probe, validation accuracy on {len(val_idx)} digits: BYOL encoder "
          f"({args.dim}-d) {accuracy:.1%}")
    return {"accuracy": accuracy, "target_lag": lag, "target_updates": model.target.calls,
            "steps": engine.global_step}


if __name__ == "__main__":
    main()
