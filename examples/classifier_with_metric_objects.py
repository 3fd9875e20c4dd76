"""Keras' "write your own training and evaluation loop from scratch", done with beyondfit.

The classic workflow: a classifier with dropout, RMSprop, sparse categorical
cross-entropy on integer labels, an accuracy *metric object* updated on every batch and
reset at every epoch, a mean-loss tracker, batch size 32, 3 epochs, and an evaluation
pass whose numbers are logged with a ``val_`` prefix. By hand that is two nested loops,
``train_step``/``test_step``, ``metric.update``/``result``/``reset`` calls and
``model.train()``/``model.eval()`` switches; here it is one closure. The engine:

- switches dropout on for training and off for evaluation (``model.train()``/``eval()``);
- tracks every scalar the closure returns as a per-epoch mean: that is the mean-loss
  tracker (Keras' ``loss_tracker = metrics.Mean()``), no object needed;
- computes and resets metric objects (here a torchmetrics accuracy) at each epoch and
  before each evaluation, keeping training and validation values apart even though the
  closure feeds the same object in both.

Run: ``python examples/classifier_with_metric_objects.py [--epochs 3] [--batch-size 32]``
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import torch
from torch import nn
from torch.nn import functional as F
from torchmetrics.classification import MulticlassAccuracy

from beyondfit import Callback, Engine, TensorBatches
from beyondfit.data import split
from beyondfit.data.bundled import digits


class PrintEpoch(Callback):
    """Print the epoch's training and validation logs, Keras-style."""

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """One line per epoch."""
        shown = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items() if k not in ("epoch", "step"))
        print(f"epoch {int(logs['epoch'])} - {shown}")


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train the classifier, then run the evaluation pass; returns its ``val_`` logs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small models: one thread is fastest, and steady on busy cores

    torch.manual_seed(args.seed)
    pixels, labels = digits()  # 8x8 images as 64 values in [0, 1], integer labels 0-9
    x, y = torch.from_numpy(pixels), torch.from_numpy(labels)
    train_idx, val_idx = split(len(x), 0.2, args.seed)

    model = nn.Sequential(
        nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(64, 10),
    )
    accuracy = MulticlassAccuracy(num_classes=10, average="micro")

    # train_step and test_step in one: the engine decides train or eval mode around it.
    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict:
        images, targets = batch
        logits = model(images)
        accuracy.update(logits.detach(), targets)  # the object accumulates over the epoch
        # Sparse categorical cross-entropy = cross_entropy on logits and integer labels.
        return {"loss": F.cross_entropy(logits, targets), "accuracy": accuracy}

    engine = Engine(
        model, loss_fn, torch.optim.RMSprop(model.parameters(), lr=1e-3), device="cpu",
        callbacks=[PrintEpoch()],
    )
    accuracy.to(engine.device)  # the metric's state lives where the logits are
    train = TensorBatches(x[train_idx], y[train_idx], batch_size=args.batch_size, seed=args.seed)
    val = TensorBatches(x[val_idx], y[val_idx], batch_size=args.batch_size, shuffle=False)
    engine.fit(train, epochs=args.epochs, val_data=val, verbose=False)  # PrintEpoch prints

    # The evaluation pass on its own: dropout off, no gradients, val_ names.
    logs = engine.evaluate(val)
    print("evaluation: " + " - ".join(f"{k}: {v:.4f}" for k, v in logs.items()))
    return logs


if __name__ == "__main__":
    main()
