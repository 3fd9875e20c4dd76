"""task.aux under ``compile=True``: each built-in term and an own CURL-style one traced into the
step's one graph with the algorithm's closure and its momentum copies, 0 parts left eager
(dynamo traces for real; each graph runs as its own Python code instead of inductor's
kernels, as tests/core/compile's ``traced`` fixture does, to keep it fast)."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from beyondfit import Engine, Update
from beyondfit.core.compile import graphs
from beyondfit.rl.algos.algorithm import engine_updates
from beyondfit.rl.algos.auxiliary import resolve
from beyondfit.rl.algos.offpolicy import dqn_loss
from beyondfit.rl.algos.onpolicy import ppo_loss
from beyondfit.rl.collect.onpolicy import RolloutTransitions
from beyondfit.rl.nets.agents import QAgent
from beyondfit.rl.nets.policies import ActorCritic
from beyondfit.rl.replay.buffer import ReplayBatch

from kit import doc_section

BOARD = gym.spaces.Box(0, 1, (10, 10, 4), np.bool_)
ACTIONS = gym.spaces.Discrete(3)
PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "self-supervision.md"


@pytest.fixture
def traced_graphs(monkeypatch):
    """Trace for real, run each graph's Python code instead of inductor's kernels."""
    monkeypatch.setattr(graphs, "inductor", lambda gm, example_inputs, patches: gm.forward)


def _curl(tmp_path: Path, monkeypatch):
    code = re.findall(r"^```python\n(.*?)^```", doc_section("## Your own term"), re.S | re.M)
    (tmp_path / "mymod_compile.py").write_text(code[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    import mymod_compile
    return mymod_compile.curl()


def _replay(n: int = 8, batches: int = 4) -> list[ReplayBatch]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(batches):
        frames = lambda: torch.rand((n, 10, 10, 4), generator=g) < 0.5  # noqa: E731
        out.append(ReplayBatch(frames(), torch.randint(3, (n,), generator=g),
                               torch.randn(n, generator=g), frames(),
                               (torch.rand(n, generator=g) < 0.3).float(), torch.zeros(n)))
    return out


def _rollouts(n: int = 8, batches: int = 4) -> list[RolloutTransitions]:
    g = torch.Generator().manual_seed(2)
    out = []
    for _ in range(batches):
        frames = lambda: torch.rand((n, 10, 10, 4), generator=g) < 0.5  # noqa: E731
        out.append(RolloutTransitions(frames(), torch.randint(3, (n,), generator=g),
                                      -torch.rand(n, generator=g), torch.randn(n, generator=g),
                                      torch.randn(n, generator=g), torch.randn(n, generator=g),
                                      frames(), torch.zeros(n), torch.zeros(n)))
    return out


TERMS = [["shift"], ["reconstruction"], ["self_prediction"], ["curl"],
         ["shift", "reconstruction", "self_prediction"]]


def _aux(names, tmp_path, monkeypatch):
    return [_curl(tmp_path, monkeypatch) if n == "curl" else n for n in names]


@pytest.mark.parametrize("names", TERMS, ids="+".join)
def test_dqn_with_each_term_compiles_whole(traced_graphs, names, tmp_path, monkeypatch) -> None:
    torch.manual_seed(0)
    agent = QAgent(BOARD, ACTIONS, hidden=())
    updates, _ = engine_updates(agent, dqn_loss(gamma=0.9, target_every=2), None,
                                resolve(_aux(names, tmp_path, monkeypatch), None, BOARD,
                                        ACTIONS))
    engine = Engine(agent, updates, lambda p: torch.optim.Adam(p, 1e-3), device="cpu",
                    compile=True, log_every=1)
    history = engine.fit(_replay(), verbose=False)
    report = engine.compile_report
    assert report.eager == {}, report.eager
    assert report.graphs >= 1 and report.recompiles == 0
    assert all(np.isfinite(v) for v in history[-1].values() if isinstance(v, float))
    for copy in ("q_target", "spr_encoder_target", "curl_encoder_target"):
        if hasattr(agent, copy):  # followed every step, the first (eager) one included
            assert getattr(agent, copy).calls == 4, copy


@pytest.mark.parametrize("names", TERMS, ids="+".join)
def test_ppo_with_each_term_compiles_whole(traced_graphs, names, tmp_path, monkeypatch) -> None:
    torch.manual_seed(0)
    policy = ActorCritic(BOARD, ACTIONS, hidden=(), activation="relu", encoder="minatar")
    auxiliary = resolve(_aux(names, tmp_path, monkeypatch), None, BOARD, ACTIONS)
    _, hooks, _ = auxiliary.attach(policy)
    engine = Engine(policy, [Update("", auxiliary.wrap(ppo_loss()), after_step=hooks)],
                    lambda p: torch.optim.Adam(p, 1e-3), device="cpu", compile=True,
                    log_every=1)
    history = engine.fit(_rollouts(), verbose=False)
    report = engine.compile_report
    assert report.eager == {}, report.eager
    assert report.recompiles == 0
    assert all(np.isfinite(v) for v in history[-1].values() if isinstance(v, float))
