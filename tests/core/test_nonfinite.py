"""NaN/inf injected into the loss at a chosen step: ``raise`` stops naming the step and the
term and leaves the last good checkpoint untouched; ``skip`` applies no update for that
micro-batch (the run equals one without it) and stops after ``max_skips`` in a row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit import BeyondfitError, Checkpointer, Engine, MetricsFile

from kit import make_engine, mlp

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def make_batches(
    n: int = 12, poison: tuple[int, ...] = (), value: float = float("nan")
) -> list[Batch]:
    """``n`` batches; those indexed in ``poison`` make the closure's ``aux`` term ``value``."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        x = torch.randn(8, 3, generator=g)
        out.append((x, x.sum(1, keepdim=True), torch.tensor(value if i in poison else 0.0)))
    return out


def loss_fn(model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
    x, y, bad = batch
    aux = bad + model(x).abs().mean() * 0.01
    return {"loss": F.mse_loss(model(x), y) + aux, "aux": aux, "mse": F.mse_loss(model(x), y)}


def aux_engine(on_nonfinite: str, callbacks: list = (), max_skips: int = 10) -> Engine:  # type: ignore[assignment]
    return make_engine(lambda: mlp(3, 8, act=nn.Tanh), loss_fn, on_nonfinite=on_nonfinite,
                       max_skips=max_skips, log_every=1, callbacks=callbacks)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_raise_names_the_step_and_term_and_keeps_the_last_good_checkpoint(
    tmp_path: Path, value: float
) -> None:
    engine = aux_engine("raise", [Checkpointer(tmp_path, every=2, keep=2, monitor=None)])
    good: dict[str, bytes] = {}

    def snapshot(model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        if not bool(batch[2].isfinite()):  # the files as they are before the bad step
            good.update({p.name: p.read_bytes() for p in tmp_path.iterdir()})
        return loss_fn(model, batch)

    engine.loss_fn = snapshot
    with pytest.raises(BeyondfitError) as info:
        engine.fit(make_batches(poison=(6,), value=value), epochs=1)  # batch 7 = step 7
    message = str(info.value)
    assert "non-finite loss, aux at optimizer step 7 (epoch 1, batch 7)" in message
    assert "set on_nonfinite='skip'" in message  # the Python argument; on the command line:
    from beyondfit.cli.schema import in_config_words

    assert "set engine.on_nonfinite='skip'" in in_config_words(info.value)
    assert engine.global_step == 6
    # Nothing was written after the bad step; the last good files are byte-identical.
    assert sorted(good) == ["step-00000004.pt", "step-00000006.pt"]
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == good


def test_skip_leaves_parameters_unchanged_and_continues(tmp_path: Path) -> None:
    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    skipping = aux_engine("skip", [metrics])
    before: dict[str, torch.Tensor] = {}
    seen: list[bool] = []

    def watch(model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        # Called for each micro-batch: the one after the poisoned batch must see the
        # parameters exactly as the poisoned one did.
        state = {k: v.clone() for k, v in model.state_dict().items()}
        if bool(batch[2].isnan()):
            before.update(state)
        elif before and not seen:
            seen.append(all(torch.equal(state[k], v) for k, v in before.items()))
        return loss_fn(model, batch)

    skipping.loss_fn = watch
    history = skipping.fit(make_batches(poison=(4,)), epochs=1)
    assert seen == [True]
    assert skipping.global_step == 11  # 12 batches, one skipped
    assert skipping.skipped_steps == 1
    assert history[0]["skipped_steps"] == 1  # a count per epoch, not a mean
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("skipped_steps") for r in rows if r["kind"] == "train")

    # Skipping a batch is exactly training without it: same updates, same optimizer state.
    clean = aux_engine("skip")
    clean.fit([b for i, b in enumerate(make_batches()) if i != 4], epochs=1)
    for a, b in zip(skipping.model.state_dict().values(), clean.model.state_dict().values()):
        assert torch.equal(a, b)


def test_skip_stops_after_max_skips_in_a_row() -> None:
    engine = aux_engine("skip", max_skips=3)
    with pytest.raises(BeyondfitError, match=r"in 3 consecutive micro-batches.*diverging"):
        engine.fit(make_batches(poison=(2, 3, 4)), epochs=1)
    assert engine.global_step == 2

    engine = aux_engine("skip", max_skips=3)
    engine.fit(make_batches(poison=(2, 3, 5, 6)), epochs=1)  # never 3 in a row
    assert (engine.global_step, engine.skipped_steps) == (8, 4)
