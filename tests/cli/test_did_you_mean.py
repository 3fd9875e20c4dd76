"""An unknown key names the closest keys of the composed config, a learning rate put anywhere
but the optimizer group points there, and a task picked without its ``+`` says to add it
(issue 47: Hydra's "add a new key with +task.lerning_rate=VALUE", which then failed, and
"Could not override 'task'")."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from beyondfit.cli.configs import CONF_DIR
from beyondfit.cli.schema import config_error_line

from kit import cli, one_line_exit_2

# (the command line after `python -m beyondfit`, what its one line must say)
CASES = {
    "+task=regression optimizer.lerning_rate=1e-3": "did you mean optimizer.lr?",
    "+task=cartpole task.lerning_rate=1e-3": "the learning rate lives in the optimizer group: "
                                             "optimizer.lr=VALUE (now 0.005)",
    "+task=regression task.lr=0.01": "optimizer.lr=VALUE",
    "+task=pendulum algo=sac task.lr=0.001": "task.optimizers.NAME.lr=VALUE",
    "+task=cartpole algo=dqn task.learning_rate=0.001": "task.optimizers.NAME.lr=VALUE",
    "+task=cartpole task.gama=0.9": "did you mean task.gamma?",
    "+task=regression task.clip_norm=1": "did you mean engine.clip_norm?",
    "+task=cartpole optimizer.epochs=3": "did you mean train.epochs or task.collector.epochs?",
    "task=cartpole": "write +task=cartpole (with the +)",
    "+task=regression debug=fast": "write +debug=fast (with the +)",
}


@pytest.mark.e2e
@pytest.mark.parametrize("line", CASES)
def test_an_unknown_key_names_the_closest_ones(tmp_path: Path, line: str) -> None:
    done = cli(*line.split(), cwd=tmp_path)
    stderr = one_line_exit_2(done, CASES[line])
    assert "Could not override" not in stderr
    bad = line.split()[-1].partition("=")[0]
    if "lr" in bad or "rate" in bad:  # never the new key that would then fail in the builder
        assert f"+{bad}" not in stderr
    assert not (tmp_path / "outputs").exists()


# Keys added with + (so Hydra composes them): checked against the optimizer's own options
# before anything is built, and a + on a key that exists.
ADDED = {
    "+task=regression +optimizer.lerning_rate=1e-3": "unknown key 'optimizer.lerning_rate'; "
                                                      "did you mean optimizer.lr?",
    "+task=regression +optimizer.wieght_decay=0.1": "did you mean optimizer.weight_decay?",
    "+task=regression optimizer=sgd +optimizer.momentum=0.9": "override it without the +: "
                                                               "optimizer.momentum=VALUE",
}


@pytest.mark.e2e
@pytest.mark.parametrize("line", ADDED)
def test_a_key_added_with_a_plus_gets_the_same_hints(tmp_path: Path, line: str) -> None:
    done = cli(*line.split(), "plots=false", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    one_line_exit_2(done, ADDED[line])
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_composed_configs_get_the_same_hints_without_the_cli() -> None:
    """Notebooks compose with Hydra's API: the same reading of its errors."""
    lines = []
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        for overrides in (["+task=regression", "optimizer.lerning_rate=1e-3"],
                          ["task=regression"]):
            with pytest.raises(Exception) as info:
                compose("config", overrides=overrides)
            lines.append(config_error_line(info.value))
    assert lines[0].startswith("unknown key 'optimizer.lerning_rate'; did you mean optimizer.lr?")
    assert lines[1].startswith("'task=regression': write +task=regression (with the +)")
