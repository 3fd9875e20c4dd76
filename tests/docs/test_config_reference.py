"""The config reference (docs/reference/config.md) is generated and current: it lists every key
the schema knows with its type and default, and every shipped preset with a command that
picks it; the generator stops with one line when the schema and conf/config.yaml disagree."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import re
import shlex
import shutil
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from omegaconf import MISSING, OmegaConf

from beyondfit.cli.schema import BeyondfitConfig

from kit import ROOT

CONF = ROOT / "conf"


def _generator() -> ModuleType:
    path = ROOT / "docs" / "gen_config_reference.py"
    spec = importlib.util.spec_from_file_location("gen_config_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gen = _generator()
PAGE_TEXT = gen.PAGE.read_text() if gen.PAGE.is_file() else ""


@functools.cache
def fresh() -> str:
    """The page as the generator writes it now."""
    return gen.generate()


def rows(text: str = PAGE_TEXT) -> dict[str, list[str]]:
    """The page's table rows by their first cell's key (``engine.clip_norm``), cells unescaped;
    a key listed twice (by two presets) keeps its first row."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\| `([^`]+)` \|", line)
        if match:
            cells = [c.strip().replace("\\|", "|")
                     for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            found.setdefault(match.group(1), cells)
    return found


def schema_fields(config: type = BeyondfitConfig, prefix: str = ""
                  ) -> list[tuple[str, Any, dataclasses.Field]]:
    """Every field of the schema that is no section, with its dotted key and type hint."""
    out = []
    hints = typing.get_type_hints(config)
    for spec in dataclasses.fields(config):
        hint = hints[spec.name]
        if dataclasses.is_dataclass(hint):
            out += schema_fields(typing.cast(type, hint), f"{prefix}{spec.name}.")
        else:
            out.append((f"{prefix}{spec.name}", hint, spec))
    return out


def presets() -> list[Path]:
    """Every shipped preset file (``conf/GROUP/NAME.yaml``, nested groups too)."""
    return sorted(p for p in CONF.rglob("*.yaml") if p.parent != CONF)


def preset_section(group: str, name: str) -> str:
    """The page's text under ``#### GROUP/NAME``, up to the next heading."""
    heading = f"\n#### {group}/{name}\n"
    assert heading in PAGE_TEXT, f"the page has no section for conf/{group}/{name}.yaml"
    return PAGE_TEXT.split(heading, 1)[1].split("\n#", 1)[0]


def test_the_committed_page_is_a_fresh_generation() -> None:
    assert PAGE_TEXT == fresh(), (
        f"docs/reference/config.md is stale: run {gen.COMMAND} and commit the page")


def test_the_check_option_says_stale_in_one_line(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "config.md"
    monkeypatch.setattr(gen, "PAGE", page)
    page.write_text(fresh())
    assert gen.main(["--check"]) == 0
    page.write_text(fresh().replace("| `engine.clip_norm` |", "| `engine.clip` |"))
    assert gen.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"run {gen.COMMAND}" in err, err


def test_every_schema_key_is_listed_with_its_type_and_default() -> None:
    table = rows()
    defaults = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml"), resolve=False)
    assert isinstance(defaults, dict)
    checked = 0
    for key, hint, spec in schema_fields():
        if spec.default is not MISSING:  # free-form: a config group fills it
            assert (CONF / key).is_dir() and f"\n### {key}\n" in PAGE_TEXT, key
            continue
        assert key in table, f"schema key {key} is not in the page's tables"
        _, kind, default, accepts, _ = table[key]
        optional = type(None) in typing.get_args(hint)
        base = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
        name = "any" if base is Any else getattr(base, "__name__", str(base))
        assert kind.startswith(name) and kind.endswith(" or null") == optional, (key, kind)
        value: Any = defaults
        for part in key.split("."):
            value = value[part]
        assert yaml.safe_load(default.strip("`")) == value, (key, default, value)
        rule = spec.metadata.get("rule")
        if rule is not None:
            for choice in rule.choices:
                assert f"`{str(choice).lower()}`" in accepts, (key, accepts)
            for bound in (rule.at_most,) if rule.at_most is not None else ():
                assert str(int(bound)) in accepts, (key, accepts)
        assert accepts, key
        checked += 1
    assert checked >= 30  # the walk found the sections


def test_every_shipped_preset_is_listed_with_every_key_it_sets() -> None:
    for path in presets():
        group = str(path.parent.relative_to(CONF))
        section = preset_section(group, path.stem)
        assert f"File: `conf/{group}/{path.stem}.yaml`" in section
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
        assert isinstance(data, dict)
        data.pop("defaults", None)
        listed = [m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", section, re.M)]
        glob = path.read_text().startswith("# @package _global_")
        prefix = () if glob else tuple(group.split("/"))
        for leaf in (x for k, v in data.items() for x in _leaves(v, (*prefix, str(k)))):
            assert any(leaf == k or leaf.startswith(k + ".") for k in listed), (
                f"conf/{group}/{path.stem}.yaml sets {leaf}, which its section does not list")


def _leaves(node: Any, path: tuple[str, ...]) -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, str(k)))]
    return [".".join(path)]


def picks() -> dict[str, tuple[str, list[str]]]:
    """``{group: (preset, arguments)}``: the first preset of each group the page says how to
    pick (or which task and algorithm apply it), with the command's arguments as a shell splits
    them, ``-m`` left out and ``+task=NAME`` made ``+task=regression``."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in presets():
        group = str(path.parent.relative_to(CONF))
        match = re.search(r"(?:pick|applied by): `python -m beyondfit ([^`]+)`",
                          preset_section(group, path.stem))
        if match is None:  # included by other presets, never picked by hand
            assert group in ("base", "experiment/tuned"), (
                f"conf/{group}/{path.stem}.yaml: the page gives no command that picks it")
        elif group not in found:
            found[group] = (path.stem, [a.replace("+task=NAME", "+task=regression")
                                        for a in shlex.split(match.group(1)) if a != "-m"])
    return found


@pytest.mark.parametrize("group", [g.name for g in gen.GROUPS if g.name != "base"])
def test_the_documented_pick_composes_to_its_preset(group: str) -> None:
    # One preset per group: a group's commands differ only in the names (Hydra's compose API,
    # as the command line composes; nothing is built).
    from hydra import compose, initialize_config_dir

    name, args = picks()[group]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=args, return_hydra_config=True)
    choices = cfg.hydra.runtime.choices
    if group == "logger":
        assert name in cfg.logger, args
    elif group == "experiment/tuned":
        assert choices["experiment/tuned@_global_"] == name, args
    else:
        assert choices[group] == name, args


def _copy_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    return conf


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _add(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


BREAKAGES = {
    "a schema key config.yaml does not set": (
        lambda conf: _edit(conf / "config.yaml", "  max_skips: 10", "  # max_skips: 10"),
        "schema key engine.max_skips (beyondfit/cli/schema.py) has no value in"),
    "a key config.yaml sets that the schema does not know": (
        lambda conf: _edit(conf / "config.yaml", "  keep: 3", "  keep: 3\n  kept: 2"),
        "sets checkpoint.kept, which the schema does not know"),
    "a config group the page does not describe": (
        lambda conf: _add(conf / "callbacks" / "x.yaml", "a: 1\n"),
        "conf/callbacks/ is a config group the reference does not describe"),
    "a block list outside a defaults list": (
        lambda conf: _edit(conf / "logger" / "wandb.yaml", "  tags: []", "  tags:\n    - a"),
        "a block list outside the defaults list"),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_generator_fails_in_one_line(breakage: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    mutate, needle = BREAKAGES[breakage]
    conf = _copy_conf(tmp_path)
    mutate(conf)
    with pytest.raises(gen.ConfigReferenceError) as caught:
        gen.generate(conf)
    assert needle in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
    monkeypatch.setattr(gen, "CONF", conf)
    monkeypatch.setattr(gen, "PAGE", tmp_path / "config.md")
    assert gen.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "config.md").exists()
