"""Several optimizers in one engine: each with its own loss, parameters, ratio, scheduler and
clipping, no gradient leaking between them, named logs, exact resume, precision, non-finite
handling; and the clear messages for what cannot work."""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from beyondfit import BeyondfitError, Engine, Update

from kit import gan_d_loss

D_IN, Z = 2, 3


class Pair(nn.Module):
    """A generator and a discriminator: the generator's loss runs through the discriminator."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.g = nn.Sequential(nn.Linear(Z, 16), nn.ReLU(), nn.Linear(16, D_IN))
        self.d = nn.Sequential(nn.Linear(D_IN, 16), nn.ReLU(), nn.Linear(16, 1))


def batches(n: int = 12, size: int = 16, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, D_IN, generator=g) + 2.0, torch.randn(size, Z, generator=g))
            for _ in range(n)]


def g_loss(model: Pair, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    _, z = batch
    logit = model.d(model.g(z))
    return F.binary_cross_entropy_with_logits(logit, torch.ones_like(logit))


def gan_engine(every_g: int = 1, seed: int = 0, **options) -> Engine:
    model = Pair(seed)
    return Engine(model, [
        Update("d", gan_d_loss, torch.optim.Adam(model.d.parameters(), 1e-3)),
        Update("g", g_loss, torch.optim.Adam(model.g.parameters(), 1e-3), every=every_g),
    ], device="cpu", log_every=1, **options)


def plain_loop(data, every_g: int = 1, seed: int = 0) -> Pair:
    """The standard alternating algorithm, by hand: D's step, then G's through the new D."""
    model = Pair(seed)
    opt_d = torch.optim.Adam(model.d.parameters(), 1e-3)
    opt_g = torch.optim.Adam(model.g.parameters(), 1e-3)
    for i, batch in enumerate(data):
        opt_d.zero_grad()
        gan_d_loss(model, batch)["loss"].backward()
        opt_d.step()
        if (i + 1) % every_g == 0:
            opt_g.zero_grad()
            g_loss(model, batch).backward()
            opt_g.step()
    return model


def assert_same(a: nn.Module, b: nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


@pytest.mark.parametrize("every_g", [1, 3])
def test_equals_the_standard_alternating_loop_bitwise(every_g: int) -> None:
    data = batches()
    engine = gan_engine(every_g)
    engine.fit(data, epochs=1, verbose=False)
    assert_same(engine.model, plain_loop(data, every_g))
    assert engine.global_step == len(data)  # a step counts once, whatever optimizers stepped
    d, g = engine.updates
    assert (d.steps, g.steps) == (12, 12 // every_g)


def test_the_generator_backward_leaves_no_gradient_in_the_discriminator() -> None:
    engine = gan_engine()
    seen = {}

    def probe(model, batch):
        seen["d_grads"] = [p.grad for p in model.d.parameters()]
        return gan_d_loss(model, batch)

    engine.updates[0].loss_fn = probe
    engine.fit(batches(n=3), epochs=1, verbose=False)
    assert seen["d_grads"] and all(g is None for g in seen["d_grads"])


def test_every_term_is_logged_by_name_with_each_learning_rate() -> None:
    history = gan_engine(track_grad_norm=False).fit(batches(), epochs=2, verbose=False)
    row = history[-1]
    for key in ("d/loss", "d/real", "g/loss", "d/lr", "g/lr"):
        assert key in row and math.isfinite(row[key]), key
    assert "loss" not in row


def test_each_optimizer_has_its_own_clipping_and_scheduler() -> None:
    model = Pair()
    opt_d = torch.optim.SGD(model.d.parameters(), 0.1)
    opt_g = torch.optim.SGD(model.g.parameters(), 0.1)
    engine = Engine(model, [
        Update("d", gan_d_loss, opt_d, clip_norm=1e-3),
        Update("g", g_loss, opt_g, scheduler=torch.optim.lr_scheduler.StepLR(opt_g, 2, 0.5)),
    ], device="cpu")
    before = [p.detach().clone() for p in model.d.parameters()]
    history = engine.fit(batches(n=4), epochs=1, verbose=False)
    moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.d.parameters(), before)])
    assert moved.norm() <= 4 * 0.1 * 1e-3 * (1 + 1e-4)  # 4 clipped SGD steps at most
    assert history[-1]["d/grad_norm"] > 1e-3 and "g/grad_norm" not in history[-1]
    assert history[-1]["d/lr"] == 0.1 and history[-1]["g/lr"] == pytest.approx(0.025)


def test_resume_between_steps_is_bitwise_equal(tmp_path) -> None:
    data = batches(n=10)
    straight = gan_engine(every_g=2)
    straight.fit(data, epochs=2, verbose=False)

    first = gan_engine(every_g=2)
    first.fit(data[:10], epochs=1, verbose=False)
    first.save(tmp_path / "half.pt")
    second = gan_engine(every_g=2, seed=5)  # other weights: the checkpoint must overwrite them
    second.load(tmp_path / "half.pt")
    second.fit(data, epochs=2, verbose=False)
    assert_same(second.model, straight.model)
    assert [u.steps for u in second.updates] == [u.steps for u in straight.updates] == [20, 10]


def test_checkpoint_of_other_optimizers_is_a_clear_error(tmp_path) -> None:
    engine = gan_engine()
    engine.fit(batches(n=2), epochs=1, verbose=False)
    engine.save(tmp_path / "gan.pt")
    model = Pair()
    single = Engine(model, gan_d_loss, torch.optim.Adam(model.parameters()), device="cpu")
    with pytest.raises(BeyondfitError, match=r"holds optimizers \['d', 'g'\] but this engine"):
        single.load(tmp_path / "gan.pt")


@pytest.mark.parametrize("precision", ["bf16", "16"])
def test_mixed_precision_trains_every_optimizer(precision: str) -> None:
    engine = gan_engine(precision=precision)
    history = engine.fit(batches(), epochs=1, verbose=False)
    assert all(u.steps > 0 for u in engine.updates)
    assert math.isfinite(history[-1]["d/loss"]) and math.isfinite(history[-1]["g/loss"])


def test_accumulation_steps_each_optimizer_once_per_window() -> None:
    engine = gan_engine(accumulate=3)
    engine.fit(batches(n=12), epochs=1, verbose=False)
    assert engine.global_step == 4 and [u.steps for u in engine.updates] == [4, 4]


def test_a_nonfinite_generator_loss_skips_that_optimizer_only(caplog) -> None:
    engine = gan_engine(on_nonfinite="skip")

    def sometimes_nan(model, batch):
        loss = g_loss(model, batch)
        return loss * float("nan") if engine.global_step == 2 else loss

    engine.updates[1].loss_fn = sometimes_nan
    with caplog.at_level(logging.WARNING):
        engine.fit(batches(n=6), epochs=1, verbose=False)
    assert [u.steps for u in engine.updates] == [6, 5]
    assert engine.skipped_steps == 1 and "non-finite g/loss" in caplog.text


def test_nonfinite_gradients_from_a_finite_loss_are_never_applied() -> None:
    model = nn.Linear(2, 1)
    before = [p.detach().clone() for p in model.parameters()]

    def sqrt_at_zero(m, batch):  # finite loss (0), infinite gradient (d sqrt(x)/dx at 0)
        return torch.sqrt((m(batch) * 0.0).pow(2).sum())

    engine = Engine(model, sqrt_at_zero, torch.optim.SGD(model.parameters(), 0.1), device="cpu")
    with pytest.raises(BeyondfitError, match="non-finite gradients at optimizer step 1"):
        engine.fit([torch.ones(4, 2)], verbose=False)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_two_engines_sharing_a_module_behave_as_the_standard_algorithm(caplog) -> None:
    # The trap of issue 13: G's engine backpropagates through D and leaves gradients there.
    data = batches(n=6)
    model = Pair()
    engine_d = Engine(model, gan_d_loss, torch.optim.Adam(model.d.parameters(), 1e-3), device="cpu")
    engine_g = Engine(model, g_loss, torch.optim.Adam(model.g.parameters(), 1e-3), device="cpu")
    with caplog.at_level(logging.WARNING):
        for batch in data:
            engine_d.train_step(batch)
            engine_g.train_step(batch)
    assert "held gradients from outside this engine" in caplog.text
    assert_same(model, plain_loop(data))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda m: [Update("a", gan_d_loss, torch.optim.SGD(m.parameters(), 0.1)),
                    Update("b", g_loss, torch.optim.SGD(m.g.parameters(), 0.1))],
         "in both optimizers 'a' and 'b'"),
        (lambda m: [Update("a", gan_d_loss, torch.optim.SGD(m.d.parameters(), 0.1)),
                    Update("a", g_loss, torch.optim.SGD(m.g.parameters(), 0.1))],
         "must be distinct"),
        (lambda m: [Update("a", gan_d_loss, lambda params: torch.optim.SGD(params, 0.1)),
                    Update("b", g_loss, torch.optim.SGD(m.g.parameters(), 0.1))],
         "give it the parameters"),
        (lambda m: [Update("d", gan_d_loss, torch.optim.SGD(m.d.parameters(), 0.1)),
                    Update("g", g_loss, torch.optim.SGD(m.g.parameters(), 0.1),
                           scheduler=torch.optim.lr_scheduler.StepLR(
                               torch.optim.SGD(m.d.parameters(), 0.1), 2))],
         r"Update 'g': its scheduler \(StepLR\) steps another optimizer"),
        (lambda m: [Update("d", gan_d_loss, torch.optim.SGD(m.d.parameters(), 0.1),
                           scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(
                               torch.optim.SGD(m.g.parameters(), 0.1), 2))],
         r"Update 'd': its scheduler \(StepLR\) steps another optimizer"),
    ],
)
def test_mistakes_are_clear_errors(make, message: str) -> None:
    model = Pair()
    with pytest.raises(BeyondfitError, match=message):
        Engine(model, make(model), device="cpu")


def test_a_scheduler_of_another_optimizer_is_refused_in_one_line() -> None:
    from beyondfit.core.schedules import cosine

    model = Pair()
    other = torch.optim.SGD(model.g.parameters(), 0.1)  # the scheduler steps this one
    for scheduler in (torch.optim.lr_scheduler.StepLR(other, 2),
                      torch.optim.lr_scheduler.ReduceLROnPlateau(other)):
        with pytest.raises(BeyondfitError, match=r"^scheduler= \(\w+\) steps another optimizer "
                           r"than the engine's; build it over that optimizer") as info:
            Engine(model, gan_d_loss, torch.optim.SGD(model.parameters(), 0.1),
                   scheduler=scheduler, device="cpu")
        assert "\n" not in str(info.value)
    # A factory told the run's length (built by fit) is held to the same rule.
    engine = Engine(model, gan_d_loss, torch.optim.SGD(model.parameters(), 0.1), device="cpu",
                    scheduler=lambda opt, total_steps: cosine(other, total_steps=total_steps))
    with pytest.raises(BeyondfitError, match="steps another optimizer"):
        engine.fit(batches(n=2), epochs=1, verbose=False)


def test_engine_level_options_are_the_updates_defaults_and_single_names_explain() -> None:
    model = Pair()
    own = torch.optim.SGD(model.d.parameters(), 0.1)
    updates = [Update("d", gan_d_loss, own, clip_norm=5.0),
               Update("g", g_loss, params=model.g, optimizer_options={"lr": 0.5})]
    engine = Engine(model, updates, lambda params, lr=0.1: torch.optim.SGD(params, lr),
                    clip_norm=1.0, clip_value=2.0, device="cpu")
    d, g = engine.updates
    assert d.optimizer is own and d.clip_norm == 5.0 and d.clip_value == 2.0
    assert isinstance(g.optimizer, torch.optim.SGD) and g.lr() == 0.5
    assert g.clip_norm == 1.0 and g.track_grad_norm
    assert {id(p) for p in g.params} == {id(p) for p in model.g.parameters()}
    engine.fit(batches(n=2), epochs=1, verbose=False)
    assert engine.global_step == 2
    with pytest.raises(AttributeError, match=r"several optimizers \('d', 'g'\)"):
        _ = engine.optimizer


def test_a_built_optimizer_is_not_shared_and_an_update_without_one_says_so() -> None:
    model = Pair()
    with pytest.raises(BeyondfitError, match=r"give each Update its own optimizer, or the Engine "
                                             r"a callable.*SGD"):
        Engine(model, [Update("d", gan_d_loss, params=model.d),
                       Update("g", g_loss, params=model.g)],
               torch.optim.SGD(model.parameters(), 0.1), device="cpu")
    with pytest.raises(BeyondfitError, match="Update 'g' has no optimizer: give it one"):
        Engine(model, [Update("d", gan_d_loss, torch.optim.SGD(model.d.parameters(), 0.1)),
                       Update("g", g_loss, params=model.g)], device="cpu")
    with pytest.raises(BeyondfitError, match="optimizer_options need an optimizer factory"):
        Engine(model, [Update("d", gan_d_loss, torch.optim.SGD(model.d.parameters(), 0.1),
                              optimizer_options={"lr": 1.0})], device="cpu")


def test_an_update_over_a_factory_and_a_module_builds_its_optimizer() -> None:
    model = Pair()
    engine = Engine(model, [
        Update("d", gan_d_loss, lambda params: torch.optim.SGD(params, 0.1), params=model.d),
        Update("g", g_loss, lambda params: torch.optim.SGD(params, 0.1), params=model.g),
    ], device="cpu")
    assert {id(p) for p in engine.updates[0].params} == {id(p) for p in model.d.parameters()}
    engine.fit(batches(n=2), epochs=1, verbose=False)
    assert engine.global_step == 2
