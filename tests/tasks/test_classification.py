"""The classification task: labels as numbers or text, torchmetrics accuracy and macro-F1, the
report beside logistic regression, the confusion matrix, and every table it refuses."""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from beyondfit import BeyondfitError
from beyondfit.cli.run import run
from beyondfit.data.tables import Column, Table
from beyondfit.nets import EnsembleClassifier, PiecewiseLinear
from beyondfit.tasks import classification
from beyondfit.tasks.classification import class_labels, confusion_matrix, stratified_split

from kit import cli, one_line_exit_2, readme_block, task_config

config = partial(task_config, "classification")  # this file's task, composed as the CLI does

pytest.importorskip("torchmetrics")


def animals_csv(path: Path, n: int = 240, seed: int = 0) -> Path:
    """Three animals told apart by two numbers and a text column (with a few gaps)."""
    rng = np.random.default_rng(seed)
    names = ["cat", "dog", "fox"]
    lines = ["weight,height,habitat,animal"]
    for i in range(n):
        k = i % 3
        weight = rng.normal(4 + 10 * k, 1.5)
        height = "" if i % 29 == 0 else f"{rng.normal(25 + 15 * (k % 2), 4):.2f}"
        habitat = ["house", "house", "forest"][k] if rng.random() < 0.9 else "field"
        lines.append(f"{weight:.2f},{height},{habitat},{names[k]}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_user_table_with_text_labels_trains_and_reports(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = animals_csv(tmp_path / "animals.csv")
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        history = run(config(f"task.data.path={path}", "task.data.target=animal",
                             "train.epochs=15", "plots=false"), run_dir)
    assert {"loss", "val_loss", "val_accuracy", "val_f1"} <= set(history[-1])
    assert max(r["val_accuracy"] for r in history) >= 0.9
    report = caplog.text
    assert "animals.csv: filled 9 missing value(s): height 9 (training median" in report
    line = next(x for x in report.splitlines() if "validation accuracy: model" in x)
    assert re.search(r"\| logistic regression [01]\.\d{4} \(same split, 48 rows\); macro-F1", line)
    assert "per-class validation recall: cat " in report and ", fox " in report
    with (run_dir / "confusion_matrix.csv").open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["true \\ predicted", "cat", "dog", "fox"]
    assert sum(int(v) for row in rows[1:] for v in row[1:]) == 48  # every validation row
    saved = json.loads((run_dir / "preprocessing.json").read_text())
    assert saved["classes"] == ["cat", "dog", "fox"] and saved["target"] == "animal"
    assert saved["inputs"] == ["weight", "height", "habitat=field", "habitat=forest",
                               "habitat=house"]
    if classification_png_possible():
        assert (run_dir / "confusion_matrix.png").stat().st_size > 1000


def classification_png_possible() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def test_npz_with_integer_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(150, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) * 5 + 2  # labels 2 and 7
    np.savez(tmp_path / "t.npz", x=x, y=y)
    history = run(config(f"task.data.path={tmp_path / 't.npz'}", "train.epochs=30",
                         "plots=false"), tmp_path / "run")
    assert history[-1]["val_accuracy"] > 0.8
    saved = json.loads((tmp_path / "run" / "preprocessing.json").read_text())
    assert saved["classes"] == ["2", "7"]


def table_of(labels: list, numeric: bool) -> Table:
    values = np.array(labels, dtype=np.float64 if numeric else object)
    n = len(labels)
    return Table(Path("t.csv"), [Column("a", np.arange(n, dtype=np.float64), True)],
                 Column("label", values, numeric), [f"line {i + 2}" for i in range(n)])


def test_class_labels_from_numbers_and_text() -> None:
    labels, names = class_labels(table_of([3.0, 1.0, 3.0, 1.0], numeric=True))
    assert labels.tolist() == [1, 0, 1, 0] and names == ["1", "3"]
    labels, names = class_labels(table_of(["b", "a", "b", "a"], numeric=False))
    assert labels.tolist() == [1, 0, 1, 0] and names == ["a", "b"]


@pytest.mark.parametrize(
    ("labels", "numeric", "message"),
    [
        ([1.0, 1.0, 1.0], True, r"has one class \('1'\) in all 3 rows"),
        (["a", "b", "a", "b", "c"], False, r"class 'c' only once \(at line 6"),
        ([1.0, 2.5, 1.0, 2.0], True, r"holds 2\.5 at line 3, not a whole number"),
        (["a", None, "a", "b", "b"], False, r"no target value \('label'\) at line 3"),
    ],
)
def test_refused_label_columns(labels: list, numeric: bool, message: str) -> None:
    with pytest.raises(BeyondfitError, match=message):
        class_labels(table_of(labels, numeric))


def test_stratified_split_keeps_every_class_in_both_parts() -> None:
    labels = np.array([0] * 50 + [1] * 10 + [2] * 2)
    train, val = stratified_split(labels, 0.2, seed=3)
    assert sorted(torch.cat([train, val]).tolist()) == list(range(62))
    assert np.bincount(labels[val.numpy()]).tolist() == [10, 2, 1]
    again = stratified_split(labels, 0.2, seed=3)
    assert torch.equal(train, again[0]) and torch.equal(val, again[1])


def test_confusion_matrix_counts() -> None:
    matrix = confusion_matrix(np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 2, 0]), 3)
    assert matrix.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 1]]


def test_missing_torchmetrics_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchmetrics", None)
    monkeypatch.setitem(sys.modules, "torchmetrics.classification", None)
    with pytest.raises(BeyondfitError, match=r'torchmetrics.*pip install "beyondfit\[metrics\]"'):
        classification.build()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("rows", "extra", "message"),
    [
        (["a,b,y"] + [f"{i},{i % 4},{'xy'[i % 2]}" for i in range(20)] + ["7,1,z"], [],
         "class 'z' only once (at line 22"),
        (["a,b,y"] + [f"{i},{'' if i == 6 else i % 4},{'xy'[i % 2]}" for i in range(20)],
         ["task.data.missing=refuse"], "missing value in column 'b' at line 8"),
        (["a,b,y"] + [f"{i},{i % 4},q" for i in range(20)], [], "has one class ('q')"),
        (["name,b,y"] + [f"n{i},{i % 4},{'xy'[i % 2]}" for i in range(20)], [],
         "but only 16 training rows"),
    ],
    ids=["class-once", "missing-refused", "one-class", "more-columns-than-rows"],
)
def test_bad_tables_on_the_command_line(
    tmp_path: Path, rows: list[str], extra: list[str], message: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    run_dir = tmp_path / "run"
    result = cli("+task=classification", f"task.data.path={path}", "task.data.target=y",
                 *extra, f"hydra.run.dir={run_dir}")
    one_line_exit_2(result, message, str(path))
    # Nothing a later run in this directory would trip over.
    assert not (run_dir / "metrics.jsonl").exists() and not (run_dir / "checkpoints").exists()


@pytest.mark.e2e
def test_training_imports_no_sklearn_and_the_report_does(tmp_path: Path) -> None:
    """scikit-learn (the logistic baseline) loads only after training, in the report.

    torchmetrics is this task's requirement; it imports matplotlib itself when installed.
    """
    probe = textwrap.dedent(
        f"""
        import json, sys
        from beyondfit.core.engine import Engine
        seen = {{}}
        original = Engine.train_step
        def step(self, batch):
            seen.setdefault("first_step", [m for m in ("sklearn", "gymnasium", "tensorboard")
                                           if m in sys.modules])
            return original(self, batch)
        Engine.train_step = step
        sys.argv = ["beyondfit", "+task=classification", "train.epochs=1",
                    "hydra.run.dir={tmp_path}"]
        from beyondfit.cli.app import main
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, exc.code
        seen["end"] = "sklearn" in sys.modules
        print(json.dumps(seen))
        """
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"first_step": [], "end": True}
    assert "| logistic regression 0.9" in (tmp_path / "beyondfit.log").read_text()


def test_defaults_learn_a_nonlinear_table_beyond_logistic_regression(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Labels from the exclusive-or of two thresholds, flipped by a text column: no linear
    model's, so logistic regression stays near chance where the defaults must not."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 3))
    side = rng.choice(["left", "right"], size=500)
    label = (x[:, 0] > 0.3) ^ (x[:, 1] > -0.2) ^ (side == "right")
    lines = ["a,b,c,side,label"] + [f"{r[0]:.4f},{r[1]:.4f},{r[2]:.4f},{s},{'yes' if k else 'no'}"
                                    for r, s, k in zip(x, side, label)]
    path = tmp_path / "xor.csv"
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        run(config(f"task.data.path={path}", "task.data.target=label", "plots=false"),
            tmp_path / "run")
    line = next(x for x in caplog.text.splitlines() if "validation accuracy: model" in x)
    model, logistic = (float(v) for v in re.findall(r"(?:model|regression) ([01]\.\d{4})", line))
    assert logistic < 0.7 and model >= 0.9, line


def test_piecewise_linear_code_bins_numbers_and_passes_flags_through() -> None:
    x = torch.stack([torch.arange(100.0), (torch.arange(100) % 2).float()], dim=1)
    code = PiecewiseLinear(x, bins=4)
    assert code.n_out == 2 + 4  # the inputs, then 4 bins of column 0; the 0/1 column has none
    out = code(torch.tensor([[-5.0, 1.0], [30.0, 0.0], [500.0, 1.0]]))
    assert torch.equal(out[:, :2], torch.tensor([[-5.0, 1.0], [30.0, 0.0], [500.0, 1.0]]))
    assert torch.equal(out[0, 2:], torch.zeros(4)) and torch.equal(out[2, 2:], torch.ones(4))
    assert out[1, 2] == 1 and 0 < out[1, 3] < 1 and torch.equal(out[1, 4:], torch.zeros(2))


def test_ensemble_members_are_independent_networks_averaged_in_evaluation() -> None:
    torch.manual_seed(0)
    model = EnsembleClassifier(5, [16, 16], 3, members=4, dropout=0.1)
    x = torch.randn(7, 5)
    logits = model(x)
    assert logits.shape == (7, 4, 3)  # training: each member's logits
    # each member is trained by its own loss only: member 2's loss moves member 2's weights
    logits[:, 2].sum().backward()
    for layer in (model.linear, model.deep[-1]):  # (the earlier layers: 0, as the last is)
        grads = layer.weight.grad.flatten(1).abs().sum(1)
        assert grads[2] > 0 and torch.equal(grads[[0, 1, 3]], torch.zeros(3))
    model.eval()
    with torch.no_grad():
        members = model.train(False).deep(model.encoder(x).expand(4, -1, -1))
        members = (members + model.linear(x.expand(4, -1, -1))).transpose(0, 1)
        expected = members.softmax(-1).mean(1).log()
        assert torch.allclose(model(x), expected, atol=1e-6)  # the mean probability, as logs
        assert torch.allclose(model(x).exp().sum(1), torch.ones(7))


def test_ensemble_members_start_as_wide_and_deep_does() -> None:
    torch.manual_seed(0)
    model = EnsembleClassifier(10, [32], 2, members=3)
    assert torch.equal(model.deep[-1].weight, torch.zeros(3, 32, 2))  # deep path starts at 0
    bound = 1 / 10**0.5  # nn.Linear's, per member, on the linear path and the first layer
    for weight in (model.linear.weight, model.deep[0].weight):
        assert weight.abs().max() <= bound and weight.std() > bound / 3
        assert not torch.equal(weight[0], weight[1])  # members start apart
    assert model.deep[0].weight.shape == (3, 10, 32)


def test_a_user_table_trains_an_ensemble(tmp_path: Path) -> None:
    path = animals_csv(tmp_path / "animals.csv")
    history = run(config(f"task.data.path={path}", "task.data.target=animal", "task.members=3",
                         "train.epochs=10", "plots=false"), tmp_path / "run")
    assert max(r["val_accuracy"] for r in history) >= 0.9
    task = classification.build(data={"path": str(path), "target": "animal"}, members=3)
    assert isinstance(task.model, EnsembleClassifier) and task.model.members == 3


@pytest.mark.e2e
@pytest.mark.parametrize("override, key", [("task.bins=0", "task.bins"),
                                           ("task.members=0", "task.members"),
                                           ("task.label_smoothing=1.5", "task.label_smoothing")])
def test_bad_bins_or_smoothing_is_one_line(override: str, key: str, tmp_path: Path) -> None:
    result = cli("+task=classification", override, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2 and key in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.e2e
@pytest.mark.slow
def test_default_digits_run_reaches_its_accuracy(tmp_path: Path) -> None:
    result = cli("+task=classification", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "validation accuracy" in x)
    assert float(line.split("model ")[1].split()[0]) >= 0.975
    assert (tmp_path / "confusion_matrix.csv").is_file()


# ------------------------------------------------------------ the README, as typed

def readme_supervised_commands() -> list[str]:
    """The first supervised run's ``+task=regression`` and ``+task=classification`` lines,
    comments included (a shell drops them, as when a user pastes the line)."""
    block = readme_block("A first supervised run", "bash")
    return [line.strip() for line in block.splitlines()
            if "+task=regression" in line or "+task=classification" in line]


def test_readme_lists_the_classification_commands() -> None:
    commands = [c.split("  #", 1)[0].strip() for c in readme_supervised_commands()]
    assert "python -m beyondfit +task=classification" in commands
    assert any("task.data.path=animals.csv task.data.target=species" in c for c in commands)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("command", readme_supervised_commands())
def test_readme_supervised_command_runs_as_typed(command: str, tmp_path: Path) -> None:
    """Each command in a shell, as typed, in a directory holding the files it names."""
    numbers = [["a", "b", "price"]] + [[str(i % 7), str(i % 5), str(2 * (i % 7) - (i % 5))]
                                       for i in range(200)]
    (tmp_path / "my.csv").write_text("\n".join(",".join(r) for r in numbers) + "\n")
    animals_csv(tmp_path / "animals.csv")
    text = (tmp_path / "animals.csv").read_text().replace(",animal\n", ",species\n", 1)
    (tmp_path / "animals.csv").write_text(text)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                            timeout=600, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "validation" in result.stdout
