"""WGAN-GP on the ring of 8 Gaussians: 5 critic steps per generator step, a double backward.

Wasserstein GAN with gradient penalty (Gulrajani et al., 2017): the critic scores real points
high and generated ones low, and is kept 1-Lipschitz by penalising ``(|grad_x D(x)| - 1)^2``
at random points between real and generated ones. That penalty is a gradient, so the
critic's backward differentiates through a gradient (``create_graph=True``): a double
backward, which the engine runs like any other loss, in float32 or under bf16 autocast.

Two :class:`~beyondfit.Update` objects of one engine: the critic steps on every batch, the
generator (``every=5``) on every fifth, through the critic that just stepped. An engine step
is a critic step, so ``--steps`` generator iterations are ``5 x steps`` engine steps. The
data, the networks and the score are those of ``examples/gan.py``. The critic's loss needs
gradients, so it is never run under ``engine.evaluate``'s inference mode; the score is
computed on samples instead.

Adam at 5e-4 rather than the paper's 1e-4, which after 1,000 generator steps has covered no
mode yet. Measured at 1,000 generator steps: float32 covers all 8 modes on seeds 0, 1 and 2
(54.9%, 59.1%, 63.4% of samples within 0.25 of a mode); bf16 on seeds 0 and 2 (71.3%, 64.8%),
while seed 1 collapses (0/8): the game is not stable on every seed at this rate.

Run: ``python examples/wgan_gp.py [--steps 1000] [--precision 32|bf16] [--seed 0]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from beyondfit import Engine, Update

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the ring and networks of gan.py
from gan import GAN, RingOfGaussians, format_score, score

CRITIC_STEPS = 5  # critic steps per generator step
PENALTY = 10.0  # lambda, the gradient penalty's weight
LR, BETAS = 5e-4, (0.5, 0.9)  # the paper's betas; 5x its rate, for 1,000 generator steps


def critic_loss(model: GAN, real: torch.Tensor) -> dict[str, torch.Tensor]:
    """``D(fake) - D(real) + lambda * (|grad D(mix)| - 1)^2`` with a random mix of the two."""
    fake = model.sample(len(real)).detach()
    mix = torch.rand(len(real), 1, device=real.device)
    between = (mix * real + (1 - mix) * fake).float().requires_grad_(True)
    # create_graph: the penalty is differentiated again, in the critic's backward. In float32
    # even under bf16 autocast: computed in bf16, seed 0 collapsed to 2 of the 8 modes.
    with torch.autocast(real.device.type, enabled=False):
        (grad,) = torch.autograd.grad(model.judge(between).sum(), between, create_graph=True)
    slope = grad.float().norm(dim=1)
    penalty = (slope - 1).pow(2).mean()
    distance = model.judge(real).mean() - model.judge(fake).mean()
    # distance: the critic's estimate of the Wasserstein distance (falls as G improves).
    return {"loss": -distance + PENALTY * penalty, "distance": distance.detach(),
            "penalty": penalty.detach(), "slope": slope.mean().detach()}  # fmt: skip


def generator_loss(model: GAN, real: torch.Tensor) -> torch.Tensor:
    """Raise the critic's score of generated points."""
    return -model.judge(model.sample(len(real))).mean()


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train for ``--steps`` generator steps; print and return the score and the last logs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="generator steps")
    parser.add_argument("--precision", choices=["32", "bf16"], default="32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small models: one thread is fastest, and steady on busy cores

    torch.manual_seed(args.seed)
    model = GAN(pack=1)  # the critic scores single points: the penalty is per point
    print(f"before training: {format_score(score(model))}")
    engine = Engine(model, [
        Update("critic", critic_loss,
               torch.optim.Adam(model.discriminator.parameters(), LR, betas=BETAS)),
        Update("generator", generator_loss,
               torch.optim.Adam(model.generator.parameters(), LR, betas=BETAS),
               every=CRITIC_STEPS),
    ], device="cpu", precision=args.precision, log_every=CRITIC_STEPS * 100)  # fmt: skip
    data = RingOfGaussians(seed=args.seed)
    history = engine.fit(data, max_steps=CRITIC_STEPS * args.steps, verbose=False)
    last = history[-1]
    result = {**score(model), **{k: v for k, v in last.items() if "/" in k}}
    print(f"after {engine.updates[1].steps} generator steps ({engine.global_step} critic "
          f"steps, precision {args.precision}): {format_score(result)}")
    print(f"critic: Wasserstein estimate {last['critic/distance']:.3f}, gradient norm at the "
          f"penalty points {last['critic/slope']:.3f} (target 1)")  # fmt: skip
    return result


if __name__ == "__main__":
    main()
