"""``python -m beyondfit.new NAME`` accepts only names its own ``+task=NAME`` selects, and a
name or a directory it cannot write is one line and exit 2, with nothing written (issue 47: a
300-character name and a ``./conf`` that is a file were tracebacks; ``tâche_ü`` was accepted,
and ``+task=tâche_ü`` then failed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit import cli, one_line_exit_2

# (the name as typed, what the one line must say)
REFUSED = [
    ("a" * 300, "longer than 100 characters"),
    ("tâche_ü", "ASCII letters, digits and _"),
    ("straße", "ASCII letters, digits and _"),
    ("true", "a word Hydra reads as a value"),
    ("Null", "a word Hydra reads as a value"),
    ("nan", "a word Hydra reads as a value"),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("name", "says"), REFUSED,
                         ids=[n if len(n) < 20 else f"{len(n)} chars" for n, _ in REFUSED])
def test_a_name_plus_task_cannot_select_is_one_line(tmp_path: Path, name: str, says: str) -> None:
    done = cli(name, module="beyondfit.new", cwd=tmp_path)
    one_line_exit_2(done, says)
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.e2e
@pytest.mark.parametrize("blocked", ["conf", "conf/task", "tests"])
def test_a_folder_that_is_a_file_is_one_line_and_nothing_is_written(
        tmp_path: Path, blocked: str) -> None:
    (tmp_path / blocked).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / blocked).write_text("not a folder\n")
    done = cli("my_task", module="beyondfit.new", cwd=tmp_path)
    one_line_exit_2(done, f"{blocked} is a file, not a directory")
    assert not (tmp_path / "my_task.py").exists()
    assert not list(tmp_path.rglob("*.yaml"))


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["_x", "Task2", "a" * 100])
def test_every_name_it_accepts_is_one_plus_task_selects(tmp_path: Path, name: str) -> None:
    done = cli(name, module="beyondfit.new", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = cli("--config-dir", "conf", f"+task={name}", "--cfg", "job", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"_target_: {name}.build" in shown.stdout
