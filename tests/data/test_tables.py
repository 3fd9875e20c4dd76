"""Reading users' tables: every file that cannot be used is one line naming the file and the
reason (exit 2 on the command line, nothing written that breaks a later run), and the tables
that can be used are: text columns one-hot encoded, missing cells imputed with a note."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from beyondfit import BeyondfitError
from beyondfit.cli.run import CONF_DIR, run
from beyondfit.data import load_table
from beyondfit.data.encoding import fit_encoding
from beyondfit.data.tables import read_table
from beyondfit.tasks import classification, regression

from kit import cli, one_line_exit_2


def numeric_csv(path: Path, n: int = 40, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = x @ [1.0, -1.0, 0.5] + 0.1 * rng.normal(size=n)
    lines = ["a,b,c,y"] + [",".join(f"{v:.5f}" for v in (*row, t)) for row, t in zip(x, y)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.e2e
# ------------------------------------------------------------ files that cannot be read
def test_not_utf8_csv_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("ville,y\nMontréal,1\nQuébec,2\n".encode("latin-1"))
    stderr = one_line_exit_2(
        cli("+task=regression", f"task.data.path={path}", "task.data.target=y",
            f"hydra.run.dir={tmp_path / 'run'}"),
        str(path), "not UTF-8", "0xe9",
    )
    assert "Montr" not in stderr  # the reason, not the content


@pytest.mark.e2e
def test_binary_garbage_named_csv_is_short_and_clear(tmp_path: Path) -> None:
    path = tmp_path / "garbage.csv"
    path.write_bytes(np.random.default_rng(0).bytes(1 << 20))  # 1 MiB
    one_line_exit_2(
        cli("+task=regression", f"task.data.path={path}", "task.data.target=y",
            f"hydra.run.dir={tmp_path / 'run'}"),
        str(path), "binary data, not CSV text",
    )


def test_unreadable_file_names_file_and_reason(tmp_path: Path, monkeypatch) -> None:
    path = numeric_csv(tmp_path / "secret.csv")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(BeyondfitError, match=r"secret\.csv' cannot be read \(Permission denied\)"):
        read_table(path, "y")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_on_the_command_line(tmp_path: Path) -> None:
    path = numeric_csv(tmp_path / "secret.csv")
    path.chmod(0)
    try:
        one_line_exit_2(
            cli("+task=regression", f"task.data.path={path}", "task.data.target=y",
                f"hydra.run.dir={tmp_path / 'run'}"),
            str(path), "Permission denied",
        )
    finally:
        path.chmod(0o644)


def test_directory_instead_of_a_file(tmp_path: Path) -> None:
    (tmp_path / "data.csv").mkdir()
    with pytest.raises(BeyondfitError, match="is a directory, not a file"):
        read_table(tmp_path / "data.csv", "y")


def test_bom_is_dropped_from_the_first_column_name(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffy,a,b\n1,2,3\n2,3,5\n3,1,1\n".encode())
    table = read_table(path, "y")
    assert table.target.name == "y" and [c.name for c in table.features] == ["a", "b"]
    x, y, names = load_table(path, "y")
    assert names == ["a", "b"] and y[:, 0].tolist() == [1.0, 2.0, 3.0] and x.shape == (3, 2)


def test_garbage_and_complex_npz_are_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"PK\x03\x04" + np.random.default_rng(1).bytes(5000))
    with pytest.raises(BeyondfitError, match=r"garbage\.npz' is not a readable \.npz"):
        read_table(garbage)
    np.savez(tmp_path / "complex.npz", x=np.ones((4, 2)) * (1 + 2j), y=np.arange(4.0))
    with pytest.raises(BeyondfitError, match="complex numbers; give real values"):
        read_table(tmp_path / "complex.npz")
    np.savez(tmp_path / "complex_y.npz", x=np.ones((4, 2)), y=np.arange(4.0) * 1j)
    with pytest.raises(BeyondfitError, match="array y holds complex"):
        read_table(tmp_path / "complex_y.npz")
    np.savez(tmp_path / "objects.npz", x=np.array([{}, {}], dtype=object), y=np.ones(2))
    with pytest.raises(BeyondfitError, match=r"not a readable \.npz"):
        read_table(tmp_path / "objects.npz")


@pytest.mark.e2e
def test_complex_npz_on_the_command_line(tmp_path: Path) -> None:
    np.savez(tmp_path / "complex.npz", x=np.ones((40, 2)) * (1 + 2j), y=np.arange(40.0))
    one_line_exit_2(
        cli("+task=regression", f"task.data.path={tmp_path / 'complex.npz'}",
            f"hydra.run.dir={tmp_path / 'run'}"),
        "complex.npz", "complex numbers",
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a,y\n1,2\n2,inf\n3,4\n", r"line 3 column 'y' holds 'inf', an infinity"),
        ("a,y\n1,2\n2,3\n1.2.3,4\n5,6\n", r"line 4 column 'a' holds '1\.2\.3', not a number"),
        ("a,a,y\n1,2,3\n", r"column name\(s\) \['a'\] more than once"),
        ('a,y\n"1,2\n', "has 1 fields"),
    ],
)
def test_bad_cells_name_the_line_and_column(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(BeyondfitError, match=message):
        read_table(path, "y")


@pytest.mark.e2e
# ------------------------------------------------------------ tables the tasks refuse
def test_constant_target_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "flat.csv"
    path.write_text("a,y\n" + "".join(f"{i},7\n" for i in range(30)))
    one_line_exit_2(
        cli("+task=regression", f"task.data.path={path}", "task.data.target=y",
            f"hydra.run.dir={tmp_path / 'run'}"),
        "flat.csv", "same value (7) in every row",
    )
    with pytest.raises(BeyondfitError, match="has one class"):
        classification.build(data={"path": str(path), "target": "y"})


def test_more_columns_than_rows_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "wide.npz", x=rng.normal(size=(20, 30)), y=rng.normal(size=20))
    with pytest.raises(BeyondfitError, match=r"wide\.npz' is 20 rows x 31 columns: 30 feature "
                       r"columns for 20 rows; a model needs more rows than columns"):
        regression.build(data={"path": str(tmp_path / "wide.npz")})
    np.savez(tmp_path / "wide.npz", x=rng.normal(size=(20, 18)), y=rng.normal(size=20))
    with pytest.raises(BeyondfitError, match="gives 18 input columns but only 16 training rows"):
        regression.build(data={"path": str(tmp_path / "wide.npz")})
    # An identifier column one-hot encoded is the usual way to get there: it is named.
    path = tmp_path / "ids.csv"
    path.write_text("id,a,y\n" + "".join(f"p{i},{i % 3},{i * 0.5}\n" for i in range(30)))
    with pytest.raises(BeyondfitError, match="24 of them from text column 'id'"):
        regression.build(data={"path": str(path), "target": "y"})


def wide_csv(path: Path, columns: int, rows: int, cell: str = "1") -> Path:
    """A header ``x0,...,y`` and ``rows`` rows of ``cell`` in every column."""
    header = ",".join([*(f"x{j}" for j in range(columns - 1)), "y"])
    path.write_text(header + "\n" + (",".join([cell] * columns) + "\n") * rows)
    return path


def test_a_table_wider_than_long_is_refused_before_a_cell_is_parsed(tmp_path: Path) -> None:
    # Every cell a word in a numeric column would be its own error: the shape comes first.
    path = wide_csv(tmp_path / "wide.csv", 5_000, 50, cell="oops")
    for build in (regression.build, classification.build):
        with pytest.raises(BeyondfitError) as info:
            build(data={"path": str(path), "target": "y"})
        message = str(info.value)
        assert f"{str(path)!r} is 50 rows x 5000 columns: 4999 feature columns for 50 rows" \
            in message
        assert "add rows or drop columns" in message and "\n" not in message
    with pytest.raises(BeyondfitError, match=r"columns: x0, x1, .*, x29, \.\.\. \(5000 in all\)"):
        read_table(path)  # no target named: the columns it could be, and how many
    # The reader alone reads it (load_table's callers may want any shape).
    assert len(read_table(wide_csv(path, 5_000, 50), "y").features) == 4_999


def test_duplicate_names_among_100000_columns_are_found_at_once(tmp_path: Path) -> None:
    # header.count() per column was quadratic: minutes at 100,000 columns.
    path = tmp_path / "dup.csv"
    path.write_text(",".join([*(f"x{j}" for j in range(100_000)), "x7", "y"]) + "\n"
                    + ",".join(["1"] * 100_002) + "\n")
    with pytest.raises(BeyondfitError, match=r"the column name\(s\) \['x7'\] more than once"):
        read_table(path, "y")


@pytest.mark.e2e
def test_the_issues_100000_column_50_row_csv_is_one_line(tmp_path: Path) -> None:
    # It printed nothing for 5 minutes; now the shape is refused before any expensive step.
    wide_csv(tmp_path / "wide.csv", 100_001, 50)
    done = cli("+task=regression", "task.data.path=wide.csv", "task.data.target=y",
               "hydra.run.dir=run", cwd=tmp_path, timeout=120)
    one_line_exit_2(done, "wide.csv' is 50 rows x 100001 columns: 100000 feature columns for "
                    "50 rows", "add rows or drop columns")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_text_and_missing_targets_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,y\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(20)))
    refused = r"holds text \('a' at line 2\).*\+task=classification"
    with pytest.raises(BeyondfitError, match=refused):
        regression.build(data={"path": str(path), "target": "y"})
    path.write_text("a,y\n" + "".join(f"{i},{'' if i == 5 else i}\n" for i in range(20)))
    with pytest.raises(BeyondfitError, match=r"no target value \('y'\) at line 7"):
        regression.build(data={"path": str(path), "target": "y"})


@pytest.mark.e2e
def test_a_failed_run_leaves_nothing_that_breaks_the_next(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\xff\xfe" + "y,a\n1,2\n".encode("utf-16-le"))
    run_dir = tmp_path / "run"
    one_line_exit_2(cli("+task=regression", f"task.data.path={bad}", "task.data.target=y",
                        f"hydra.run.dir={run_dir}"), "bad.csv")
    assert not (run_dir / "metrics.jsonl").exists() and not (run_dir / "checkpoints").exists()
    good = numeric_csv(tmp_path / "good.csv")
    result = cli("+task=regression", f"task.data.path={good}", "task.data.target=y",
                 "train.epochs=2", "plots=false", f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows if r["kind"] == "epoch"] == [1, 2]


# ------------------------------------------------------------ real tables that work
def test_text_columns_are_one_hot_encoded_with_training_categories(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("city,size,y\nParis,1,3\nLyon,2,4\nParis,3,5\nNice,,6\n")
    table = read_table(path, "y")
    encoding, notes = fit_encoding(table, np.array([0, 1, 2]), missing="impute")
    assert encoding.names() == ["city=Lyon", "city=Paris", "size"]
    x = encoding.transform(table.features)
    # Nice was not in the training rows: all zeros; its missing size: the training median 2.
    assert x.tolist() == [[0, 1, 1], [1, 0, 2], [0, 1, 3], [0, 0, 2]]
    assert notes == ["t.csv: filled 1 missing value(s): size 1 (training median 2); "
                     "task.data.missing=refuse makes them an error"]
    assert json.loads(json.dumps(encoding.to_dict()))["columns"][0]["categories"] == [
        "Lyon", "Paris"]


def test_missing_values_refused_name_column_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b,y\n1,2,3\n4,NA,5\n6,,7\n")
    table = read_table(path, "y")
    with pytest.raises(BeyondfitError, match=r"missing value in column 'b' at line 3 \(2 in all\)"):
        fit_encoding(table, np.array([0, 1, 2]), missing="refuse")
    with pytest.raises(BeyondfitError, match="missing value in column 'b' at line 3"):
        load_table(path, "y")
    with pytest.raises(BeyondfitError, match=r"task\.data\.missing='drop'; use one of impute"):
        fit_encoding(table, np.array([0]), missing="drop")


def test_regression_on_a_real_table_imputes_and_saves_its_encoding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Text features, gaps, a BOM: the run trains, logs the note, saves the categories."""
    rng = np.random.default_rng(0)
    rows = ["\ufeffcolour,size,price"]
    for i in range(200):
        colour = ["red", "green", "blue"][i % 3]
        size = "" if i % 17 == 0 else f"{rng.uniform(1, 5):.3f}"
        price = {"red": 1.0, "green": 2.0, "blue": 3.0}[colour] + (float(size) if size else 3)
        rows.append(f"{colour},{size},{price:.4f}")
    path = tmp_path / "shop.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose(config_name="config", overrides=["+task=regression",
                      f"task.data.path={path}", "task.data.target=price",
                      "train.epochs=30", "plots=false"])
    with caplog.at_level(logging.WARNING, logger="beyondfit"):
        history = run(cfg, tmp_path / "run")
    assert "shop.csv: filled 12 missing value(s): size 12" in caplog.text
    assert max(r["val_r2"] for r in history) > 0.9
    saved = json.loads((tmp_path / "run" / "preprocessing.json").read_text())
    assert saved["inputs"] == ["colour=blue", "colour=green", "colour=red", "size"]
    assert saved["target"] == "price" and len(saved["mean"]) == 4
