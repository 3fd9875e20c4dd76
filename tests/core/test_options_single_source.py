"""Each option is validated in exactly one place: its rule is written once, in
``beyondfit.core.options.OPTIONS`` (a library class's option) or in the schema (a key only the
command line reads); the builders check nothing again. A Python-API error names the Python
argument, the command line's the config key."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from beyondfit import BeyondfitError, Checkpointer, Engine
from beyondfit.cli import schema
from beyondfit.core.options import OPTIONS, Rule

PACKAGE = Path(__file__).resolve().parents[2] / "beyondfit"
BUILDERS = [PACKAGE / "cli" / "builders.py", PACKAGE / "cli" / "run.py"]


def schema_fields() -> list[tuple[str, object]]:
    """``(config key, dataclass field)`` for every key of the schema, sections walked."""
    found = []

    def walk(cls: type, prefix: str) -> None:
        for spec in fields(cls):
            key = f"{prefix}{spec.name}"
            if key in schema._SECTIONS:
                walk(schema._SECTIONS[key], f"{key}.")
            else:
                found.append((key, spec))

    walk(schema.BeyondfitConfig, "")
    return found


def sources() -> dict[Path, str]:
    return {path: path.read_text() for path in PACKAGE.rglob("*.py")}


def test_a_schema_key_the_library_takes_too_carries_the_library_rule_itself() -> None:
    for key, spec in schema_fields():
        option = spec.metadata.get("option")  # type: ignore[attr-defined]
        if option is not None:
            assert spec.metadata["rule"] is OPTIONS[option], key  # type: ignore[attr-defined]
        rule = spec.metadata.get("rule")  # type: ignore[attr-defined]
        assert rule is None or isinstance(rule, Rule), key
    used = {spec.metadata.get("option") for _, spec in schema_fields()}  # type: ignore[attr-defined]
    assert set(OPTIONS) <= used  # every rule of the table serves a config key


def test_each_rule_of_the_table_is_applied_by_exactly_one_owner() -> None:
    texts = sources()
    for option in OPTIONS:
        callers = [
            path for path, text in texts.items()
            if path.name != "options.py" and f'check_option("{option}"' in text
        ]  # fmt: skip
        assert len(callers) == 1, (option, callers)


def test_no_check_in_the_package_restates_a_rule_of_the_table() -> None:
    arguments = {option.rpartition(".")[2] for option in OPTIONS}
    for path, text in sources().items():
        for call in re.finditer(r'check_number\(\s*f?"([^"]+)"', text):
            name = call.group(1).rpartition(".")[2]
            assert name not in arguments, (path, call.group(0))
        # The old hand-written spellings of these checks.
        for name in arguments:
            assert f'f"{name}={{' not in text or path.name == "options.py", (path, name)


def test_the_builders_check_no_schema_key_again() -> None:
    # The free-form sections (task, optimizer, logger, ...) are their builders' to check.
    keys = [key for key, _ in schema_fields() if key not in schema._FREE_FORM] + ["optimizer.lr"]
    for path in BUILDERS:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("check_number", "check_option"), path
        raised = [n for r in ast.walk(tree) if isinstance(r, ast.Raise) for n in ast.walk(r)]
        for node in raised:  # the messages of errors the builders raise
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for key in keys:  # an error message about a schema key: a second check
                    assert not re.search(rf"(?<![\w.]){re.escape(key)}=", node.value), (
                        path, key, node.value)


@pytest.mark.parametrize(
    "argument, value, key",
    [("clip_norm", 0.0, "engine.clip_norm"), ("accumulate", 0, "engine.accumulate"),
     ("on_nonfinite", "sometimes", "engine.on_nonfinite"),
     ("max_skips", True, "engine.max_skips"), ("log_every", 0, "engine.log_every")],
)
def test_python_errors_name_the_argument_and_the_command_line_the_key(
    argument: str, value: object, key: str
) -> None:
    model = torch.nn.Linear(2, 1)
    with pytest.raises(BeyondfitError) as python_side:
        Engine(model, lambda m, b: m(b).sum(), torch.optim.SGD(model.parameters(), 0.1),
               **{argument: value})
    assert str(python_side.value).startswith(f"{argument}={value!r};")
    spec = dict(schema_fields())[key]
    with pytest.raises(BeyondfitError) as cli_side:  # what check_config does with the key
        spec.metadata["rule"].check(key, value)  # type: ignore[attr-defined]
    # The same rule, so the same requirement, in the config's words.
    assert str(cli_side.value) == f"{key}{str(python_side.value)[len(argument):]}"


def test_an_error_the_library_raises_later_reaches_the_command_line_in_its_words(
        tmp_path: Path) -> None:  # fmt: skip
    with pytest.raises(BeyondfitError) as info:
        Checkpointer(tmp_path, every=0)
    assert str(info.value).startswith("every=0;")
    assert schema.in_config_words(info.value).startswith("checkpoint.every=0;")
    # Words in a sentence: an argument only one key holds.
    said = BeyondfitError("non-finite loss; lower the learning rate or set on_nonfinite='skip'")
    assert schema.in_config_words(said).endswith("set engine.on_nonfinite='skip'")


def test_a_choice_is_returned_in_its_canonical_spelling(tmp_path: Path) -> None:
    # "MIN" passes the rule as the command line's schema reads it, so the library must then
    # compare "min", not "MIN" (which would otherwise act as "max").
    from beyondfit.core.monitor import Monitor
    from beyondfit.core.nonfinite import NonFiniteCheck
    from beyondfit.core.options import check_option

    assert check_option("Monitor.mode", "MIN") == "min"
    assert check_option("progress_callback.bar", "true") is True
    assert Monitor("val_loss", "MIN").worst == float("inf")
    assert Checkpointer(tmp_path, mode="MAX", monitor="val_acc").tracked.mode == "max"
    assert NonFiniteCheck(" Raise ", 3).mode == "raise"
