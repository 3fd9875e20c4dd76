"""Metric objects (torchmetrics) returned by the closure: right values, reset per epoch and
before each evaluation, and never mixed between training and validation.

The "model" is a fixed lookup: each batch carries the predictions it should produce, and
the model only adds a zero-valued trainable parameter (so there is a loss to step on).
The accuracy of every epoch and every evaluation is therefore known exactly in advance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError, Engine

from kit import Recorder

torchmetrics = pytest.importorskip("torchmetrics")
from torchmetrics.classification import MulticlassAccuracy  # noqa: E402

N_CLASSES = 4


class Echo(nn.Module):
    """Returns the logits a batch brings; the parameter only makes a differentiable loss."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """The given logits, plus a zero that depends on the parameter."""
        return logits + 0.0 * self.w


def make_batch(n_right: int, n_wrong: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n_right`` rows predicted correctly and ``n_wrong`` incorrectly."""
    n = n_right + n_wrong
    target = torch.arange(n) % N_CLASSES
    predicted = target.clone()
    predicted[n_right:] = (target[n_right:] + 1) % N_CLASSES
    logits = nn.functional.one_hot(predicted, N_CLASSES).float()
    return logits, target


class Passes:
    """An iterable whose k-th pass yields ``passes[k]`` (a different epoch each time)."""

    def __init__(self, passes: list[list[Any]]) -> None:
        self.passes = passes
        self.k = 0

    def __len__(self) -> int:
        return len(self.passes[min(self.k, len(self.passes) - 1)])

    def __iter__(self) -> Iterator[Any]:
        batches = self.passes[min(self.k, len(self.passes) - 1)]
        self.k += 1
        yield from batches


def closure_with(train_acc: Any, val_acc: Any | None = None) -> Any:
    """A closure feeding ``train_acc`` in training and ``val_acc`` (default: the same) in eval."""
    val_acc = train_acc if val_acc is None else val_acc

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Mapping[str, Any]:
        logits, target = batch
        out = model(logits)
        metric = train_acc if model.training else val_acc
        metric.update(out.detach(), target)
        return {"loss": nn.functional.cross_entropy(out, target), "acc": metric}

    return loss_fn


def accuracy() -> MulticlassAccuracy:
    """Micro accuracy: the share of correct rows, whatever the batch sizes."""
    return MulticlassAccuracy(num_classes=N_CLASSES, average="micro")


def engine_for(loss_fn: Any, **kwargs: Any) -> Engine:
    """An engine that does not move the (zero) parameter: lr 0."""
    model = Echo()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    return Engine(model, loss_fn, optimizer, device="cpu", **kwargs)


def test_training_value_is_the_epoch_accuracy_and_resets_each_epoch() -> None:
    # Epoch 1: 8 of 8 right, then 2 of 8 right: 10/16 (the mean of the batch accuracies
    # would be the same here; unequal batches are checked below). Epoch 2: 0 of 12 right.
    # Without a reset epoch 2 would report 10/28.
    epoch1 = [make_batch(8, 0), make_batch(2, 6)]
    epoch2 = [make_batch(0, 6), make_batch(0, 6)]
    acc = accuracy()
    engine = engine_for(closure_with(acc))
    history = engine.fit(Passes([epoch1, epoch2]), epochs=2)
    assert history[0]["acc"] == pytest.approx(10 / 16)
    assert history[1]["acc"] == pytest.approx(0.0)


def test_evaluation_reports_only_validation_batches() -> None:
    # Training is all right, validation 1 of 4 right: any mixing would move val_acc off 0.25.
    acc = accuracy()
    engine = engine_for(closure_with(acc))
    history = engine.fit([make_batch(16, 0)] * 3, epochs=2, val_data=[make_batch(1, 3)] * 2)
    for row in history:
        assert row["acc"] == pytest.approx(1.0)
        assert row["val_acc"] == pytest.approx(0.25)


def test_evaluate_resets_before_each_evaluation() -> None:
    acc = accuracy()
    engine = engine_for(closure_with(acc))
    assert engine.evaluate([make_batch(4, 0)])["val_acc"] == pytest.approx(1.0)
    # A second evaluation on other data is not averaged with the first one.
    assert engine.evaluate([make_batch(0, 4)])["val_acc"] == pytest.approx(0.0)
    # Nor is what the user fed an object of an earlier evaluation in between.
    acc.update(*make_batch(0, 8))
    assert engine.evaluate([make_batch(3, 1)])["val_acc"] == pytest.approx(0.75)


def test_values_match_torchmetrics_on_random_predictions() -> None:
    torch.manual_seed(0)
    train = [(torch.randn(n, N_CLASSES), torch.randint(0, N_CLASSES, (n,))) for n in (7, 13, 5)]
    val = [(torch.randn(n, N_CLASSES), torch.randint(0, N_CLASSES, (n,))) for n in (11, 3)]
    engine = engine_for(closure_with(accuracy()))
    history = engine.fit(train, epochs=1, val_data=val)

    def reference(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
        logits = torch.cat([b[0] for b in batches])
        target = torch.cat([b[1] for b in batches])
        return float((logits.argmax(1) == target).float().mean())

    assert history[0]["acc"] == pytest.approx(reference(train))
    assert history[0]["val_acc"] == pytest.approx(reference(val))


@pytest.mark.parametrize("shared", [True, False], ids=["one-object", "two-objects"])
def test_mid_epoch_evaluation_does_not_cut_the_training_value(shared: bool) -> None:
    # Evaluating every 2 steps in a 4-step epoch (batches right, right, wrong, right): the
    # running training accuracy must cover every batch so far, whatever evaluation happened
    # in between, and the evaluations only the validation batch (all wrong).
    train_acc = accuracy()
    val_acc = None if shared else accuracy()
    recorder = Recorder()
    engine = engine_for(closure_with(train_acc, val_acc), callbacks=[recorder], log_every=1)
    train = [make_batch(4, 0), make_batch(4, 0), make_batch(0, 4), make_batch(4, 0)]
    history = engine.fit(train, epochs=1, val_data=[make_batch(0, 4)], eval_every=2)
    running = [row["acc"] for row in recorder.logs]
    assert running == pytest.approx([1.0, 1.0, 8 / 12, 12 / 16])
    assert history[0]["acc"] == pytest.approx(0.75)
    assert [e["val_acc"] for e in recorder.evals] == pytest.approx([0.0, 0.0])
    assert history[0]["val_acc"] == pytest.approx(0.0)


def test_training_only_object_is_not_reported_in_evaluation() -> None:
    acc = accuracy()

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Any:
        logits, target = batch
        out = model(logits)
        loss = nn.functional.cross_entropy(out, target)
        if not model.training:
            return loss
        acc.update(out.detach(), target)
        return {"loss": loss, "acc": acc}

    engine = engine_for(loss_fn)
    history = engine.fit([make_batch(2, 2)], epochs=1, val_data=[make_batch(4, 0)])
    assert history[0]["acc"] == pytest.approx(0.5)
    assert "val_acc" not in history[0]
    assert "val_loss" in history[0]


class Ratio:
    """A hand-written metric object (no torchmetrics, no ``update_count``): hits / total."""

    def __init__(self) -> None:
        self.hits = 0.0
        self.total = 0.0

    def update(self, hit: torch.Tensor) -> None:
        """Add a batch of 0/1 hits."""
        self.hits += float(hit.sum())
        self.total += hit.numel()

    def compute(self) -> float:
        """The share of hits (NaN when empty)."""
        return self.hits / self.total if self.total else float("nan")

    def reset(self) -> None:
        """Start over."""
        self.hits = self.total = 0.0


def test_duck_typed_object_follows_the_same_rules() -> None:
    ratio = Ratio()

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Any:
        logits, target = batch
        out = model(logits)
        ratio.update(out.argmax(1) == target)
        return {"loss": nn.functional.cross_entropy(out, target), "hit": ratio}

    engine = engine_for(loss_fn)
    history = engine.fit(
        Passes([[make_batch(3, 1)], [make_batch(1, 3)]]), epochs=2, val_data=[make_batch(0, 2)]
    )
    assert [row["hit"] for row in history] == pytest.approx([0.75, 0.25])
    assert [row["val_hit"] for row in history] == pytest.approx([0.0, 0.0])


def test_training_only_duck_typed_object_is_not_reported_in_evaluation() -> None:
    # Without update_count the engine cannot ask whether it was fed: it must know by itself.
    ratio = Ratio()

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Any:
        logits, target = batch
        out = model(logits)
        loss = nn.functional.cross_entropy(out, target)
        if not model.training:
            return loss
        ratio.update(out.argmax(1) == target)
        return {"loss": loss, "hit": ratio}

    engine = engine_for(loss_fn, log_every=1)
    history = engine.fit([make_batch(1, 1), make_batch(2, 0)], epochs=1,
                         val_data=[make_batch(0, 2)], eval_every=1)
    assert history[0]["hit"] == pytest.approx(0.75)
    assert "val_hit" not in history[0]


class LeakyMean(Ratio):
    """A metric object that keeps the autograd graph in its state (a user mistake)."""

    def update(self, value: torch.Tensor) -> None:
        """Accumulate without detaching."""
        self.hits = self.hits + value.sum()
        self.total += value.numel()


def test_metric_state_that_cannot_be_set_aside_is_a_clear_error() -> None:
    leaky = LeakyMean()

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> Any:
        logits, target = batch
        loss = nn.functional.cross_entropy(model(logits), target)
        if model.training:
            leaky.update(loss)
        return {"loss": loss, "leak": leaky}

    engine = engine_for(loss_fn)
    with pytest.raises(BeyondfitError, match=r"metric object 'leak'.*detach"):
        engine.fit([make_batch(1, 1)], epochs=1, val_data=[make_batch(1, 1)])
