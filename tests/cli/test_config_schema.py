"""The config schema: every wrong key, type, range or choice is one line naming the key and
what it takes, exit status 2, no traceback (through the real command line)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import nn

from beyondfit import BeyondfitError, Engine
from beyondfit.cli.run import CONF_DIR
from beyondfit.cli.schema import check_config, config_error_line

from kit import cli_batch, docs_text, one_line_exit_2

BASE = ["+task=regression", "train.epochs=1", "plots=false", "progress.bar=false"]

# (override, what the one line must say). Each one reached Python unchecked before.
CASES = [
    ("engine.clip_nrom=1", "unknown key 'engine.clip_nrom'; did you mean engine.clip_norm?"),
    ("+engine.clip_nrom=1", "unknown key 'engine.clip_nrom'; did you mean engine.clip_norm?"),
    ("train.epochs=abc", "train.epochs='abc'; it must be a positive whole number"),
    ("train.epochs=null", "train.epochs=null is not allowed; it must be a positive whole"),
    ("train.epochs=2.5", "train.epochs=2.5; it must be a positive whole number"),
    ("seed=abc", "seed='abc'; it must be a whole number"),
    ("seed=99999999999999999999", "seed=99999999999999999999; it must be a whole number >= 0 "
                                  "and <= 4294967295"),
    ("seed=-1", "seed=-1"),
    ("threads=-2", "threads=-2; it must be a whole number >= 1 and <= 1024"),
    ("threads=0", "threads=0"),
    ("engine.accumulate=0", "engine.accumulate=0; it must be a positive whole number"),
    ("engine.log_every=0", "engine.log_every=0"),
    ("engine.max_skips=-1", "engine.max_skips=-1"),
    ("optimizer.lr=1e300", "optimizer.lr=1e+300; it must be a number > 0 and <= 1000"),
    ("optimizer.lr=nan", "optimizer.lr=nan"),
    ("optimizer.lr=abc", "optimizer.lr='abc'"),
    ("engine.clip_value=1e300", "engine.clip_value=1e+300; it must be a finite number within "
                                "float32's range"),
    ("engine.clip_norm=inf", "engine.clip_norm=inf"),
    ("engine.clip_norm=0", "engine.clip_norm=0"),
    ("engine.compile=maybe", "engine.compile='maybe'; use false, true or max"),
    ("engine.on_nonfinite=warn", "engine.on_nonfinite='warn'; use raise, skip or ignore"),
    ("engine.strategy=fsdp", "engine.strategy='fsdp'; use auto, none or ddp"),
    ("engine.precision=8", "precision='8'; use 32, bf16 or 16"),
    ("train.eval_every=0", "train.eval_every=0; it must be a positive whole number"),
    ("train.max_steps=0", "train.max_steps=0"),
    ("checkpoint.every=0", "checkpoint.every=0"),
    ("checkpoint.keep=0", "checkpoint.keep=0"),
    ("checkpoint.mode=avg", "checkpoint.mode='avg'; use min or max"),
    ("progress.bar=maybe", "progress.bar='maybe'; use auto, true or false"),
    ("progress.refresh=0", "progress.refresh=0"),
    ("progress.metrics=loss", "progress.metrics='loss'; it must be a list"),
    ("plots=sometimes", "plots='sometimes'; use auto, true or false"),
    # The debug section is checked like the others (it once was not: 0 trained on no batch).
    ("debug.overfit_batches=0", "debug.overfit_batches=0; it must be a positive whole number"),
    ("debug.profile=0", "debug.profile=0"),
    ("debug.episodes=0", "debug.episodes=0; it must be a positive whole number"),
    ("device=gpu", "device='gpu'"),
    ("foo=1", "unknown key 'foo'; top-level keys:"),
    ("+foo=1", "unknown key 'foo'; top-level keys:"),
    ("+train.foo=1", "unknown key 'train.foo'; train options: epochs, eval_every"),
    ("engine=3", "engine is a section, not a value"),
    ("scheduler=linear", "unknown scheduler 'linear'; available: cosine, none"),
    # What a shell leaves of train.stop="val_loss<=0.3": Hydra cannot parse it.
    ("train.stop=val_loss<=0.3", "cannot parse the override 'train.stop=val_loss<=0.3'"),
    ("train.stop=\"val_loss=0.3\"", "stop rule 'val_loss=0.3' is not of the form"),
    # A rule on a metric the run never logs fails at the first evaluation, not never.
    ("train.stop=\"val_lss<=0.3\"", "names 'val_lss', which this run does not log (logged: "
                                    "val_loss, val_r2)"),
    ("train.stop=\"los<=0.3\"", "names 'los', which this run does not log"),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every case through the real ``main()``, in one child process."""
    tmp = tmp_path_factory.mktemp("schema")
    cases = [[*BASE, override, f"hydra.run.dir={tmp / str(i)}"]
             for i, (override, _) in enumerate(CASES)]
    return dict(zip([c[0] for c in CASES], cli_batch(cases, tmp)))


@pytest.mark.e2e
@pytest.mark.parametrize(("override", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_config_value_is_one_line_and_exit_2(
    results: dict[str, dict], override: str, expected: str
) -> None:
    one_line_exit_2(results[override], expected)


def test_stop_rule_messages_suggest_the_form_that_works_in_a_shell() -> None:
    from beyondfit.core.callbacks import StopRule

    with pytest.raises(BeyondfitError) as info:
        StopRule("val_loss=0.3")
    assert "'train.stop=\"val_loss<=0.1\"'" in str(info.value)


@pytest.mark.e2e
def test_the_readme_form_works_in_a_shell_as_typed(tmp_path: Path) -> None:
    """The README's stop rule, typed into bash exactly as written there: Hydra parses it, the
    run keeps it, and the same form with a reachable bound stops the run."""
    typed = re.search(r"`('train\.stop=\"[^`]+\"')`", docs_text())
    assert typed, "the documentation no longer shows the quoted stop rule"
    form = typed.group(1)
    assert form == "'train.stop=\"val_loss<=0.3\"'"
    python = f"{sys.executable} -m beyondfit +task=regression plots=false progress.bar=false"
    command = (f"{python} train.epochs=2 {form} hydra.run.dir={tmp_path}/a && "
               f"{python} train.epochs=50 {form.replace('0.3', '100')} hydra.run.dir={tmp_path}/b")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "stop: val_loss<=0.3" in (tmp_path / "a" / ".hydra" / "config.yaml").read_text()
    assert "stopped early: val_loss<=100" in done.stdout


def test_python_api_refuses_values_beyond_float32() -> None:
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), 0.1)
    with pytest.raises(BeyondfitError, match=r"clip_value=1e\+300; it must be a finite number"):
        Engine(model, lambda m, b: m(b).sum(), optimizer, clip_value=1e300)
    with pytest.raises(BeyondfitError, match=r"clip_norm=1e\+39"):
        Engine(model, lambda m, b: m(b).sum(), optimizer, clip_norm=1e39)


def test_typos_in_composed_configs_give_one_line_without_the_cli() -> None:
    """Notebooks compose with Hydra's API: the same one-line reading of its errors."""
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        with pytest.raises(Exception) as info:
            compose("config", overrides=["+task=regression", "train.epohcs=3"])
        cfg = compose("config", overrides=["+task=regression", "engine.accumulate=0"])
    assert config_error_line(info.value) == (
        "unknown key 'train.epohcs'; did you mean train.epochs? train options: epochs, "
        "eval_every, max_steps, stop"
    )
    with pytest.raises(BeyondfitError, match=r"engine\.accumulate=0"):
        check_config(cfg)


def test_every_shipped_task_and_preset_fits_the_schema() -> None:
    import importlib.util

    groups = ["task", "experiment"]
    if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None:
        groups.append("search")  # its presets pick Optuna's sweeper
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        for group in groups:
            for path in sorted((CONF_DIR / group).glob("*.yaml")):
                check_config(compose("config", overrides=[f"+{group}={path.stem}"]))
