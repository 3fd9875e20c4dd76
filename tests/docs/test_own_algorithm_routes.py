"""docs/how-to/own-algorithm.md's later commands, as typed (plus a tiny budget) from an empty
directory: an update's own settings under a name no config file lists
(``task.optimizers.critic2.lr=...``, which failed as an unknown key), and the shortest route to
a tuned preset for a loss of one's own, ``algo=dqn task.loss._target_=mymod.cql_dqn`` (issue 47).
``mymod.py`` is the page's python blocks, ``conf/algo/two_ensembles.yaml`` its yaml block."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from beyondfit.core.state.serialization import safe_load

from kit import cli, doc_section, rows

HEADING = "# Off-policy: DQN and your own algorithm"
CRITIC2 = ("python -m beyondfit --config-dir conf +task=pendulum algo=two_ensembles "
           "task.optimizers.critic2.lr=0.0003")
CQL = ("python -m beyondfit +task=cartpole algo=dqn task.loss._target_=mymod.cql_dqn "
       "+task.loss.alpha=0.5")
TINY = {"task.total_env_steps": "400", "task.replay.learning_starts": "100",
        "task.eval_episodes": "1", "task.eval_every_env_steps": "1000", "task.hidden": "[16]",
        "task.confirm_episodes": "1", "progress.bar": "false", "plots": "false",
        "logger": "[]", "device": "cpu"}


def page_blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", doc_section(HEADING), flags=re.S | re.M)


@pytest.fixture
def launch_dir(tmp_path: Path) -> Path:
    (tmp_path / "mymod.py").write_text("\n\n".join(page_blocks("python")))
    (tmp_path / "conf" / "algo").mkdir(parents=True)
    (tmp_path / "conf" / "algo" / "two_ensembles.yaml").write_text(page_blocks("yaml")[0])
    return tmp_path


def typed(line: str, run_dir: Path) -> list[str]:
    """The page's line, found there as written, with the tiny budget added."""
    assert any(line in " ".join(block.split()) for block in page_blocks("bash")), line
    words = shlex.split(line)
    assert words[:3] == ["python", "-m", "beyondfit"]
    return [*words[3:], *(f"{k}={v}" for k, v in TINY.items()), f"hydra.run.dir={run_dir}"]


@pytest.mark.e2e
@pytest.mark.runs(CRITIC2)
def test_an_updates_own_learning_rate_under_a_new_name_works_as_typed(launch_dir: Path) -> None:
    done = cli(*typed(CRITIC2, launch_dir / "run"), cwd=launch_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    (checkpoint,) = (launch_dir / "run" / "checkpoints").glob("step-*.pt")
    updates = safe_load(checkpoint)["updates"]
    rates = {name: [g["lr"] for g in state["optimizer"]["param_groups"]]
             for name, state in updates.items()}
    assert rates == {"critic": [0.001], "critic2": [0.0003], "actor": [0.001], "alpha": [0.001]}


@pytest.mark.e2e
@pytest.mark.runs(CQL)
def test_a_loss_swapped_into_algo_dqn_keeps_the_tuned_preset(launch_dir: Path) -> None:
    done = cli(*typed(CQL, launch_dir / "run"), cwd=launch_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == ("tuned settings: experiment/tuned/cartpole_dqn.yaml "
                                           "(cartpole, algo=dqn)")
    assert "mymod.cql_dqn takes no option(s) huber; left out" in done.stderr
    config = yaml.safe_load((launch_dir / "run" / ".hydra" / "config.yaml").read_text())
    assert config["optimizer"]["lr"] == 0.0023  # the CartPole DQN preset's
    loss = config["task"]["loss"]
    assert {k: loss[k] for k in ("_target_", "alpha", "double", "target_every")} == {
        "_target_": "mymod.cql_dqn", "alpha": 0.5, "double": True, "target_every": 32}
    logged = set().union(*(row for row in rows(launch_dir / "run") if row["kind"] == "train"))
    assert {"q/loss", "q/td", "q/cql"} <= logged


def test_the_pages_dqn_loss_reads_the_n_step_discount(launch_dir: Path) -> None:
    """``task.replay.n_step=3`` hands gamma^m in ``batch.discount``: the page's own loss must
    read it (a full gamma is the one-step target, gamma^3 another)."""
    import importlib.util

    import gymnasium as gym
    import torch

    from beyondfit.core.target import SlowCopy
    from beyondfit.rl.nets.agents import QAgent
    from beyondfit.rl.replay.buffer import ReplayBatch

    # loaded under a name of its own: other tests import their own "mymod"
    spec = importlib.util.spec_from_file_location("own_algorithm_page", launch_dir / "mymod.py")
    mymod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mymod)
    torch.manual_seed(0)
    agent = QAgent(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), hidden=(8,))
    agent.q_target = SlowCopy(agent.q, rate=1.0)
    (update,) = mymod.cql_dqn(gamma=0.9, alpha=0.5)
    g = torch.Generator().manual_seed(1)
    fields = (torch.randn(8, 3, generator=g), torch.randint(2, (8,), generator=g),
              torch.randn(8, generator=g), torch.randn(8, 3, generator=g), torch.zeros(8),
              torch.zeros(8))  # fmt: skip
    td = {name: update.loss(agent, ReplayBatch(*fields, discount))["td"] for name, discount in
          (("one", None), ("gamma", torch.full((8,), 0.9)), ("three", torch.full((8,), 0.729)))}
    assert torch.equal(td["one"], td["gamma"]) and not torch.equal(td["one"], td["three"])


def test_task_optimizers_names_on_the_command_line_need_no_plus() -> None:
    from beyondfit.cli.app import open_update_names

    assert open_update_names(["+task=pendulum", "task.optimizers.critic2.lr=0.001",
                              "+task.optimizers.actor.lr=1e-4", "++task.optimizers.q.lr=1",
                              "task.optimizers={critic:{lr:0.002}}", "optimizer.lr=0.1"]) == [
        "+task=pendulum", "++task.optimizers.critic2.lr=0.001", "++task.optimizers.actor.lr=1e-4",
        "++task.optimizers.q.lr=1", "task.optimizers={critic:{lr:0.002}}", "optimizer.lr=0.1"]
