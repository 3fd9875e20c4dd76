"""The several-optimizer examples: a GAN, WGAN-GP and SAC, each through one engine.

Fast tests run each script's code path on short budgets (and the GAN's parity with a plain
two-optimizer loop, bitwise); the acceptance runs, full length on 3 seeds, are marked slow.
"""

from __future__ import annotations

import importlib.util
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

# Examples and bench scripts run end to end, as their users run them.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2)


def load(name: str, folder: str = "examples"):
    """Import ``FOLDER/NAME.py`` (scripts, not a package) under a name that child processes
    (the bench's workers) can find in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", ROOT / folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_command(command: str) -> str:
    """Run a README command exactly as typed (``python`` is this interpreter), from the repo
    root; return its stdout."""
    argv = shlex.split(command)
    assert argv[0] == "python"
    result = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True,
                            text=True, timeout=3600)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


# ------------------------------------------------------------------------------------ GAN
@pytest.fixture(scope="module")
def gan():
    return load("gan")


def plain_gan_loop(gan, seed: int, iterations: int):
    """The standard alternating algorithm written by hand with two optimizers: the
    discriminator on real and detached generated points, then the generator through the
    updated discriminator (each optimizer zeroes its gradients before its own backward)."""
    model, opt_d, opt_g, data = gan.build(seed)
    for i, real in enumerate(data):
        if i == iterations:
            break
        fake = model.generator(torch.randn(len(real), model.latent)).detach()
        # PacGAN2: the discriminator sees the points in pairs.
        real_logit = model.discriminator(real.reshape(-1, 4))
        fake_logit = model.discriminator(fake.reshape(-1, 4))
        d_loss = F.binary_cross_entropy_with_logits(
            real_logit, torch.ones_like(real_logit)
        ) + F.binary_cross_entropy_with_logits(fake_logit, torch.zeros_like(fake_logit))
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        fake = model.generator(torch.randn(len(real), model.latent))
        fake_logit = model.discriminator(fake.reshape(-1, 4))
        g_loss = F.binary_cross_entropy_with_logits(fake_logit, torch.ones_like(fake_logit))
        opt_g.zero_grad()
        g_loss.backward()  # also fills the discriminator's .grad, zeroed before its next step
        opt_g.step()
    return model, opt_d, opt_g


def test_gan_first_50_iterations_equal_a_plain_two_optimizer_loop(gan) -> None:
    model, opt_d, opt_g, data = gan.build(seed=3)
    engine = gan.make_engine(model, opt_d, opt_g)
    engine.fit(data, max_steps=50, verbose=False)
    rng_after_engine = torch.random.get_rng_state()
    assert engine.global_step == 50 and [u.steps for u in engine.updates] == [50, 50]
    plain, plain_d, plain_g = plain_gan_loop(gan, seed=3, iterations=50)
    ours, theirs = model.state_dict(), plain.state_dict()
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name
    for mine, reference in ((opt_d, plain_d), (opt_g, plain_g)):  # Adam's moments too
        for a, b in zip(mine.state.values(), reference.state.values(), strict=True):
            assert all(torch.equal(a[k], b[k]) for k in ("exp_avg", "exp_avg_sq"))
    # The next iteration's noise would be the same too: the engine drew no extra numbers.
    assert torch.equal(rng_after_engine, torch.random.get_rng_state())


def test_gan_logs_each_optimizer_by_name_and_learns(gan, capsys) -> None:
    result = gan.main(["--steps", "1000"])  # ~20 s of CPU; 300 are too few to show learning
    out = capsys.readouterr().out
    assert "before training: 0/8 modes covered, 0.0% of samples" in out
    assert re.search(r"discriminator loss [\d.]+ \(D\(real\) [\d.]+, D\(fake\) [\d.]+\), "
                     r"generator loss [\d.]+", out)  # fmt: skip
    assert "after 1000 iterations" in out
    assert set(result) == {"high_quality", "modes_covered", "smallest_mode"}
    assert result["high_quality"] > 0.2  # from 0.0 at the start


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_gan_covers_all_8_modes_with_85_percent_good_samples(seed: int) -> None:
    out = run_command(f"python examples/gan.py --seed {seed}")
    found = re.search(r"after 3000 iterations: (\d)/8 modes covered, ([\d.]+)% of samples", out)
    assert found, out
    assert int(found[1]) == 8
    assert float(found[2]) >= 85.0


# -------------------------------------------------------------------------------- WGAN-GP
@pytest.mark.parametrize("precision", ["32", "bf16"])
def test_wgan_gp_double_backward_trains_under_the_engine(precision: str, capsys) -> None:
    result = load("wgan_gp").main(["--steps", "40", "--precision", precision])
    out = capsys.readouterr().out
    assert f"after 40 generator steps (200 critic steps, precision {precision})" in out
    for name in ("critic/loss", "critic/distance", "critic/penalty", "critic/slope",
                 "generator/loss"):  # fmt: skip
        assert math.isfinite(result[name]), name
    # The penalty's gradient reached the critic: |grad D| rose from ~0.05 at init towards 1.
    assert 0.5 < result["critic/slope"] < 1.5


@pytest.mark.slow
@pytest.mark.parametrize("command", ["python examples/wgan_gp.py",
                                     "python examples/wgan_gp.py --precision bf16"])
def test_wgan_gp_covers_the_modes(command: str) -> None:
    out = run_command(command)
    found = re.search(r"after 1000 generator steps \(5000 critic steps, precision \w+\): "
                      r"(\d)/8 modes covered, ([\d.]+)% of samples", out)  # fmt: skip
    assert found, out
    assert int(found[1]) == 8 and float(found[2]) >= 50.0
    slope = float(re.search(r"gradient norm at the penalty points ([\d.]+)", out)[1])
    assert abs(slope - 1) < 0.2  # the 1-Lipschitz constraint holds where it is penalised


# ------------------------------------------------------------------------------------ SAC
@pytest.fixture(scope="module")
def sac():
    return load("sac_pendulum")


def test_sac_three_optimizers_train_on_a_replay_buffer(sac) -> None:
    result = sac.train(seed=0, env_steps=300, learning_starts=200, episodes=2, verbose=False)
    assert result["env_steps"] == 300 and result["updates"] == 100  # one update per env step
    assert -2000 < result["val_return"] < 0 and result["val_length"] == 200


def test_sac_logs_each_update_and_moves_the_target_critics(sac, recorder) -> None:
    engine, data = sac.build(env_steps=12, learning_starts=10, log_every=1)
    engine.add_callback(recorder)
    agent = engine.model
    target_before = [p.clone() for p in agent.critic_target.parameters()]
    engine.fit(data, epochs=1, verbose=False)
    data.close()
    assert engine.global_step == 2 and [u.steps for u in engine.updates] == [2, 2, 2]
    logged = set(recorder.logs[-1])
    assert {"critic/loss", "critic/q", "actor/loss", "actor/entropy", "alpha/loss",
            "alpha/value", "critic/lr", "actor/lr", "alpha/lr", "env_steps"} <= logged
    for before, after in zip(target_before, agent.critic_target.parameters(), strict=True):
        assert not torch.equal(before, after) and not after.requires_grad  # moved, frozen
    assert agent.critic_target.calls == 2  # once after each critic step
    # One averaging: target <- target + tau * (online - target), both critics at once.
    targets = [p.clone() for p in agent.critic_target.parameters()]
    agent.critic_target.update()
    for before, now, online in zip(targets, agent.critic_target.parameters(),
                                   agent.critic.parameters(), strict=True):  # fmt: skip
        torch.testing.assert_close(now, before + sac.TAU * (online - before))


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_sac_pendulum_greedy_return_above_minus_200(seed: int) -> None:
    out = run_command(f"python examples/sac_pendulum.py --seed {seed}")
    found = re.search(r"greedy return (-?[\d.]+) over 10 episodes after 20000 env steps", out)
    assert found, out
    assert float(found[1]) >= -200.0
