"""Write ``docs/reference/config.md``, the config reference, from the schema and the shipped yaml.

    python docs/gen_config_reference.py           # (re)write the page
    python docs/gen_config_reference.py --check   # exit 1 if the committed page is stale

The page is generated so that it cannot drift: every key of the schema
(:class:`beyondfit.cli.schema.BeyondfitConfig`) with its type, its rule (``field.metadata["rule"]``,
in the words the error messages use) and its default and one-line documentation from
``conf/config.yaml`` (the inline ``# comment`` after the key, and a comment block right above
it); then every shipped preset of every config group (``conf/GROUP/NAME.yaml``) with how to pick
it and each key it sets. ``tests/docs/test_config_reference.py`` fails when the committed page
differs from a fresh generation.

A schema key ``conf/config.yaml`` does not set, a key there the schema does not know, or a
config group the page does not describe stops the generator with one line naming it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import io
import re
import sys
import tokenize
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's beyondfit, whatever else is installed
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from omegaconf import MISSING, OmegaConf  # noqa: E402

from beyondfit.cli import schema  # noqa: E402
from beyondfit.core.errors import BeyondfitError  # noqa: E402
from beyondfit.core.options import LR_MAX, Rule, describe_range  # noqa: E402

#: The conf directory the page describes (shipped in the wheel as ``beyondfit/conf``).
CONF = ROOT / "conf"
#: The generated page.
PAGE = ROOT / "docs" / "reference" / "config.md"
#: The command that regenerates it.
COMMAND = "python docs/gen_config_reference.py"


class ConfigReferenceError(BeyondfitError):
    """The schema and ``conf/`` disagree, or ``conf/`` holds what the page cannot describe."""


# ---------------------------------------------------------------------- the groups
@dataclass(frozen=True)
class Group:
    """A config group (``conf/GROUP/``): how a user picks one of its presets, in words."""

    name: str
    how: str  # one line on picking a preset, in Markdown


#: Every config group under ``conf/``, in the page's order. A new directory there stops the
#: generator until it is described here.
GROUPS: tuple[Group, ...] = (
    Group("task", "The task: `+task=NAME`, required (the defaults list has no task, which is "
                  "what makes `+task=` work). Each file is `# @package _global_`: besides "
                  "`task.*` it sets the tuned defaults of other sections."),
    Group("algo", "An RL task's algorithm: `algo=NAME` after an RL `+task=` (each RL task's "
                  "defaults list picks `ppo`). The values tuned for a task and algorithm are in "
                  "`experiment/tuned/TASK_ALGO.yaml`, applied by the task."),
    Group("optimizer", "`optimizer=NAME`, then any key: `optimizer.lr=0.01`. Free-form: the "
                       "keys go to the optimizer's class. `optimizer.lr` is checked before "
                       f"anything is built: {describe_range(False, 0, None, LR_MAX)}."),
    Group("scheduler", "`scheduler=NAME`. Free-form: the keys go to the schedule's factory "
                       "(the runner supplies the total steps)."),
    Group("logger", "A list: `+logger=NAME` adds one to the default set, `logger=[csv,NAME]` "
                    "picks the set, `'logger=[]'` none (`metrics.jsonl` is always written). "
                    "Free-form: each entry's keys go to its `_target_`."),
    Group("debug", "`+debug=NAME` with any task: the research loop's checks "
                   "(the `debug.*` keys above)."),
    Group("search", "`+search=NAME` on a multirun (`-m`) with a task: an Optuna search. Needs "
                    "`pip install \"beyondfit[search]\"`."),
    Group("experiment", "`+experiment=NAME` instead of `+task=`: its defaults list picks the "
                        "task; `-m` runs its sweep."),
    Group("experiment/tuned", "Not picked by hand: an RL task applies `TASK_ALGO.yaml` for its "
                              "`algo=` (an optional default), when the file exists."),
    Group("base", "Not picked by hand: a task's defaults list includes it."),
)

_GROUP_NAMES = {group.name for group in GROUPS}
_DEFAULT_CHOICES = ("optimizer", "scheduler", "logger")  # the groups config.yaml's defaults pick


# ---------------------------------------------------------------------- reading yaml with comments
@dataclass
class Entry:
    """One ``key:`` line of a yaml file: its dotted path and its documentation."""

    path: tuple[str, ...]
    comment: str
    leaf: bool = True  # a value (a scalar, a flow list or mapping, null); else a mapping


@dataclass
class YamlFile:
    """A config file: its header comment, package, defaults list and keys in file order."""

    path: Path
    header: list[str]  # the comment lines above the first key (``# @package`` left out)
    package: str | None  # ``# @package``'s value
    data: dict[str, Any]  # as OmegaConf reads it, interpolations unresolved
    defaults: list[tuple[str, str]] = field(default_factory=list)  # (entry, its comment)
    entries: list[Entry] = field(default_factory=list)

    def value(self, path: Sequence[str]) -> Any:
        """The value at ``path``; :class:`KeyError` if the file does not set it."""
        node: Any = self.data
        for key in path:
            if not isinstance(node, dict) or key not in node:
                raise KeyError(".".join(path))
            node = node[key]
        return node


_KEY = re.compile(r"""^(?P<indent> *)(?P<key>"[^"]*"|'[^']*'|[^\s#'"-][^#]*?)"""
                  r"""\s*:(?:\s+(?P<rest>.*))?$""")
_ITEM = re.compile(r"^(?P<indent> *)- (?P<rest>.*)$")


def _brackets(text: str) -> int:
    """Brackets and braces a line opens minus those it closes (a flow value over lines)."""
    code = text.split(" #", 1)[0]
    return sum(code.count(c) for c in "[{") - sum(code.count(c) for c in "]}")


def _split_comment(text: str) -> tuple[str, str, int]:
    """``(value, comment, the comment's column)`` of the text after a key: the comment starts
    at a ``#`` after a space, outside quotes (column -1: no comment)."""
    quote = ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i + 1:].strip(), i
    return text.rstrip(), "", -1


def read_yaml(path: Path) -> YamlFile:
    """Read a config file's values (OmegaConf) and, line by line, its keys and comments.

    A key's documentation is its inline comment (continued on the next comment-only lines in
    the same column) after a comment block right above it; the file's opening comment is the
    file's own. Block sequences are read only as the defaults list.
    """
    lines = path.read_text().splitlines()
    container = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    if not isinstance(container, dict):
        raise ConfigReferenceError(f"{_rel(path)} is not a mapping of keys")
    header: list[str] = []
    package = None
    start = 0
    while start < len(lines) and lines[start].lstrip().startswith("#"):
        text = lines[start].lstrip()[1:]
        match = re.match(r"\s*@package\s+(\S+)", text)
        if match:
            package = match.group(1)
        else:
            header.append(text[1:] if text.startswith(" ") else text)
        start += 1
    out = YamlFile(path, header, package, container)

    stack: list[tuple[int, str]] = []  # (indent, key) of the open mappings
    above: list[str] = []  # comment lines right above the next key
    last: Entry | None = None  # the last key, while its inline comment may continue
    last_column = -1
    block_indent = -1  # inside a block scalar (| or >) of a key at this indent
    flow_open = 0  # brackets a flow value left open, continued on the lines below
    for number, line in enumerate(lines[start:], start + 1):
        indent = len(line) - len(line.lstrip(" "))
        if flow_open > 0:
            flow_open += _brackets(line)
            continue
        if block_indent >= 0:
            if not line.strip() or indent > block_indent:
                continue
            block_indent = -1
        stripped = line.strip()
        if not stripped:
            above, last = [], None
            continue
        if stripped.startswith("#"):
            if last is not None and line.index("#") == last_column:
                last.comment += " " + stripped[1:].strip()
            else:
                above.append(stripped[1:].strip())
                last = None
            continue
        item = _ITEM.match(line)
        while stack and stack[-1][0] >= indent + (item is not None):  # "- " may align with
            stack.pop()                                                  # its key
        if item:
            if [key for _, key in stack] != ["defaults"]:
                raise ConfigReferenceError(
                    f"{_rel(path)}:{number}: a block list outside the defaults list; write it "
                    "in flow style ([a, b]) so the reference can document it")
            choice, comment, _ = _split_comment(item.group("rest"))
            out.defaults.append((choice, _join(above, comment)))
            above, last = [], None
            continue
        match = _KEY.match(line)
        if match is None:
            raise ConfigReferenceError(f"{_rel(path)}:{number}: cannot read {stripped!r}")
        key = match.group("key").strip("\"'")
        value, comment, column = _split_comment(match.group("rest") or "")
        entry = Entry((*[k for _, k in stack], key), _join(above, comment), leaf=bool(value))
        if value.startswith(("|", ">")):
            block_indent = indent
        elif value.startswith(("[", "{")):
            flow_open = _brackets(value)
        if entry.path != ("defaults",):
            out.entries.append(entry)
        stack.append((indent, key))
        above = []
        last = entry if comment else None
        last_column = match.start("rest") + column if comment else -1
    for entry in out.entries:  # a key with nothing below it is null
        if not entry.leaf and not any(other.path[:-1] == entry.path for other in out.entries):
            entry.leaf = True
    return out


def _join(above: list[str], inline: str) -> str:
    return " ".join([*above, inline] if inline else above).strip()


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------- Markdown
def md_text(text: str) -> str:
    """Prose for a table cell or a paragraph: Markdown's special characters escaped outside
    code spans (a code span holding ``|`` becomes escaped text: no table reads it in one)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans
        parts = [text.replace("`", "'")]
    out = []
    for i, part in enumerate(parts):
        if i % 2 and "|" not in part:
            out.append(f"`{part}`")
            continue
        part = part.replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*")
        part = re.sub(r"(?<!\w)_+|_+(?!\w)", lambda m: "\\_" * len(m.group()),
                      part)  # not inside words (val_loss)
        part = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", part)
        part = re.sub(r"\[(?=[^\]]*\]\s?[(\[])", r"\\[", part)  # never a link
        out.append(part)
    return "".join(out)


def md_value(value: Any) -> str:
    """A yaml value as a table cell: its flow-style yaml in a code span."""
    if isinstance(value, str) and "\n" in value:
        return f"*text of {value.count(chr(10)) + 1} lines*"
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False,
                          allow_unicode=True).strip()
    text = text.removesuffix("\n...").strip()
    if "|" in text:
        return md_text(text)
    return f"``{text}``" if "`" in text else f"`{text}`"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table (cells already Markdown)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return lines


def prose(lines: Sequence[str]) -> list[str]:
    """A comment block as Markdown: its lines joined into paragraphs, indented lines (the
    commands in a file's header) as a code block."""
    out: list[str] = []
    words: list[str] = []
    code: list[str] = []

    def flush_words() -> None:
        if words:
            out.extend([md_text(" ".join(words)), ""])
            words.clear()

    def flush_code() -> None:
        if code:
            # Quoted from the preset's own comment: text, not a command the docs tests run.
            out.extend(["```text", *code, "```", ""])
            code.clear()

    for line in lines:
        if line.startswith("  ") and line.strip():
            flush_words()
            code.append(line.strip())
        elif line.strip():
            flush_code()
            words.append(line.strip())
        else:
            flush_words()
            flush_code()
    flush_words()
    flush_code()
    return out


# ---------------------------------------------------------------------- the schema
@dataclass
class SchemaKey:
    """A leaf of the schema: its dotted key, type, rule and what the schema's source says."""

    key: str
    type: str
    accepts: str
    option: str  # the library option sharing the rule (``Engine.accumulate``), or ""


def type_words(hint: Any) -> str:
    """A field's type as the page shows it: ``int``, ``float or null``, ``list[str] or null``,
    ``any``."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union:
        rest = [a for a in args if a is not type(None)]
        words = " or ".join(type_words(a) for a in rest)
        return words + " or null" if len(rest) < len(args) else words
    if hint is Any:
        return "any"
    if typing.get_origin(hint) is list:
        return f"list[{type_words(args[0])}]"
    return hint.__name__


def rule_words(rule: Rule, nullable: bool = True) -> str:
    """A rule in words, as its error message says it: ``a positive whole number, or `null```,
    ``one of `min`, `max```. ``nullable``: whether the key's type takes null at all (Hydra
    refuses null for ``int`` before a rule that allows ``None`` is asked)."""
    if rule.choices:
        text = "one of " + ", ".join(f"`{_choice(c)}`" for c in rule.choices)
    else:
        text = describe_range(rule.integer, rule.above, rule.at_least, rule.at_most)
    return text + (", or `null`" if rule.allow_none and nullable else "")


def _choice(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


_KIND_WORDS = {"bool": "`true` or `false`", "str": "text", "int": "a whole number",
               "float": "a number", "any": "any value"}


def _type_rule(hint: Any) -> str:
    # What a field without a rule accepts: what its type says.
    words = type_words(hint)
    base = words.removesuffix(" or null")
    text = _KIND_WORDS.get(base, "a list of text" if base == "list[str]" else base)
    return text + (", or `null`" if words.endswith(" or null") else "")


@functools.cache
def _source(module: str) -> tuple[dict[int, str], ast.Module]:
    # A module's comments by line, and its syntax tree.
    source = Path(typing.cast(str, sys.modules[module].__file__)).read_text()
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    return comments, ast.parse(source)


def _source_comments(cls: type) -> dict[str, str]:
    # The comment on a field's line in the schema's source (``# parsed by StopRule``).
    comments, tree = _source(cls.__module__)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return {stmt.target.id: comments[stmt.lineno] for stmt in node.body
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and stmt.lineno in comments}
    return {}


def sections(config: type = schema.BeyondfitConfig, prefix: str = ""
             ) -> Iterator[tuple[str, type, list[SchemaKey], list[str]]]:
    """``(section key, dataclass, its leaf keys, its free-form keys)`` for the schema's root and
    each nested section, in the schema's order; the root's key is ``""``."""
    hints = typing.get_type_hints(config)
    notes = _source_comments(config)
    keys: list[SchemaKey] = []
    free: list[str] = []
    nested: list[tuple[str, type]] = []
    for spec in dataclasses.fields(config):
        key, hint = f"{prefix}{spec.name}", hints[spec.name]
        if dataclasses.is_dataclass(hint):
            nested.append((key, typing.cast(type, hint)))
        elif spec.default is not MISSING:  # no value of its own: a config group fills it
            free.append(key)
        else:
            rule = spec.metadata.get("rule")
            if rule is not None:
                accepts = rule_words(rule, type_words(hint).endswith(" or null"))
            elif spec.name in notes:
                accepts = md_text(notes[spec.name][0].upper() + notes[spec.name][1:])
            else:
                accepts = _type_rule(hint)
            keys.append(SchemaKey(key, type_words(hint), accepts,
                                  spec.metadata.get("option", "")))
    yield prefix.rstrip("."), config, keys, free
    for key, sub in nested:
        yield from sections(sub, f"{key}.")


def schema_leaves(config: type = schema.BeyondfitConfig) -> list[str]:
    """Every leaf key of the schema, dotted (``engine.clip_norm``), the free-form ones left out."""
    return [k.key for _, _, keys, _ in sections(config) for k in keys]


# ---------------------------------------------------------------------- the page
def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", ")")) else ".")


def _summary(cls: type, comment: str) -> str:
    # A section's paragraph: its dataclass's docstring (reST made Markdown), then what
    # config.yaml's comment on the section adds.
    doc = " ".join((cls.__doc__ or "").split())
    doc = re.sub(r"^``[^`]+``:\s*", "", doc)  # "``engine.*``: " is the heading's
    doc = re.sub(r":\w+:`~?([^`]+)`", r"``\1``", doc).replace("``", "`")
    clauses = [c for c in comment.split("; ") if c and c.lower() not in doc.lower()]
    extra = " " + md_text(_sentence("; ".join(clauses))) if clauses else ""
    return md_text(_sentence(doc)) + extra


def _checked_keys(main: YamlFile, config: type) -> list[str]:
    by_path = {entry.path: entry for entry in main.entries}
    known = set(schema_leaves(config))
    sections_seen = {key for key, _, _, _ in sections(config) if key}
    free_keys = {key for _, _, _, free in sections(config) for key in free}
    for entry in main.entries:  # what config.yaml sets and the schema does not know
        dotted = ".".join(entry.path)
        if entry.path[0] in ("hydra", *free_keys) or dotted in sections_seen:
            continue
        if entry.leaf and dotted not in known:
            raise ConfigReferenceError(
                f"{_rel(main.path)} sets {dotted}, which the schema does not know; add it to "
                "beyondfit/cli/schema.py with its type and rule, or remove it")
    out = ["## Checked keys", "",
           "The keys the schema (`beyondfit/cli/schema.py`) knows: Hydra checks each value's "
           "type while it composes and `check_config` its rule before anything is built, so a "
           "typo or a value out of range is one clear error. The defaults and their meaning "
           "are `conf/config.yaml`'s; tasks and other presets change some of them (below).", ""]
    for key, cls, keys, free in sections(config):
        out += [f"### `{key}`" if key else "### Top level", ""]
        comment = by_path[(key,)].comment if key and (key,) in by_path else ""
        out += [_summary(cls, comment), ""]
        rows = []
        for leaf in keys:
            path = tuple(leaf.key.split("."))
            try:
                default = main.value(path)
            except KeyError:
                raise ConfigReferenceError(
                    f"schema key {leaf.key} (beyondfit/cli/schema.py) has no value in "
                    f"{_rel(main.path)}; set it there with a one-line # comment") from None
            entry = by_path.get(path)
            accepts = leaf.accepts + (f" (as `{leaf.option}`)" if leaf.option else "")
            rows.append([f"`{leaf.key}`", leaf.type, md_value(default), accepts,
                         md_text(entry.comment if entry else "")])
        out += [*table(["Key", "Type", "Default", "Accepts", "Meaning"], rows), ""]
        if free:
            names = ", ".join(f"[`{k}`](#{k})" for k in free)
            out += [f"Free-form sections, each filled by its config group (see below): {names}.",
                    ""]
    return out


def _defaults_section(main: YamlFile) -> list[str]:
    rows = [["`task`", "none", "`+task=NAME`", "required: no task in the defaults list"]]
    for entry, comment in main.defaults:
        name, _, choice = entry.partition(":")
        if name.strip() not in _DEFAULT_CHOICES:
            continue
        group = name.strip()
        pick = "`+logger=NAME`, `logger=[csv,NAME]`" if group == "logger" else f"`{group}=NAME`"
        rows.append([f"`{group}`", f"`{choice.strip()}`", pick, md_text(comment)])
    return ["## Defaults list", "",
            "`conf/config.yaml` composes the schema, then its own values (`_self_` first, so a "
            "task file can set its tuned defaults), then one preset of each group below; "
            "command-line overrides win over all of them.", "",
            *table(["Group", "Default", "Pick another", "Note"], rows), ""]


def _hydra_section(main: YamlFile) -> list[str]:
    rows = [[f"`{'.'.join(entry.path)}`", md_value(main.value(entry.path)),
             md_text(entry.comment)]
            for entry in main.entries if entry.path[0] == "hydra" and entry.leaf]
    return ["## Hydra settings", "",
            "What `conf/config.yaml` sets in Hydra's own config (any can be overridden, e.g. "
            "`hydra.run.dir=runs/mine`):", "",
            *table(["Key", "Value", "Meaning"], rows), ""]


def _full_key(group: str, data_file: YamlFile, path: tuple[str, ...]) -> str:
    if data_file.package == "_global_":
        return ".".join(path)
    return ".".join((*group.split("/"), *path))  # the group's own package


def _needs_extra(conf: Path, task: str) -> bool:
    # A task whose file says it needs an optional extra (MuJoCo, Box2D).
    return "Needs " in (conf / "task" / f"{task}.yaml").read_text()


def _tuned_tasks(conf: Path, algo: str) -> list[str]:
    # The tasks with a tuned file for ``algo`` (experiment/tuned/TASK_ALGO.yaml).
    return sorted(task for task, _, name in
                  (p.stem.rpartition("_") for p in (conf / "experiment" / "tuned").glob("*.yaml"))
                  if name == algo and (conf / "task" / f"{task}.yaml").is_file())


def selection(group: str, name: str, conf: Path = CONF, logger: Sequence[str] = ("csv",)
              ) -> list[str]:
    """The arguments after ``python -m beyondfit`` that pick preset ``name`` of ``group``, e.g.
    ``["+task=pendulum", "algo=sac"]``; ``+task=NAME`` stands for any task; ``[]`` for a
    preset that is not picked by hand. ``logger``: the default loggers."""
    if group == "task":
        return [f"+task={name}"]
    if group == "algo":
        tuned = sorted(_tuned_tasks(conf, name), key=lambda t: (_needs_extra(conf, t), t))
        return [f"+task={tuned[0] if tuned else 'cartpole'}", f"algo={name}"]
    if group == "experiment/tuned":
        task, _, algo = name.rpartition("_")
        if (conf / "task" / f"{task}.yaml").is_file() and (conf / "algo" / f"{algo}.yaml"
                                                           ).is_file():
            return [f"+task={task}", f"algo={algo}"]
        return []
    if group == "base":
        return []
    if group == "search":
        header = (conf / group / f"{name}.yaml").read_text()
        task = re.search(rf"\+task=(\S+)[^\n]*\+search={re.escape(name)}\b", header)
        return ["-m", f"+task={task.group(1) if task else 'NAME'}", f"+search={name}"]
    if group == "experiment":
        return [f"+experiment={name}"]
    if group == "logger":
        return ["+task=NAME", f"'logger=[{name}]'" if name in logger else f"+logger={name}"]
    if group == "debug":
        return ["+task=NAME", f"+debug={name}"]
    return ["+task=NAME", f"{group}={name}"]


def _references(files: dict[str, dict[str, YamlFile]]
                ) -> dict[tuple[str, str], list[tuple[str, str, bool]]]:
    # {(group, name): [(group, name, picked)]}: the presets whose defaults list names a preset,
    # by picking it as a group's option (``/algo: ppo``) or by including it (``/base/rl``).
    found: dict[tuple[str, str], list[tuple[str, str, bool]]] = {}
    for group, presets in files.items():
        for name, data in presets.items():
            for entry, _ in data.defaults:
                text = re.sub(r"^(optional|override)\s+", "", entry.strip())
                if "$" in text or text == "_self_":
                    continue
                target, picked, choice = text.partition(":")
                target = target.strip().split("@")[0]
                path = target[1:] if target.startswith("/") else f"{group}/{target}"
                if picked:
                    key = (path, choice.strip())
                else:
                    where, _, last = path.rpartition("/")
                    key = (where, last)
                found.setdefault(key, []).append((group, name, bool(picked)))
    return found


def _facts(group: str, name: str, conf: Path, main: YamlFile,
           references: dict[tuple[str, str], list[tuple[str, str, bool]]]) -> str:
    # The line under a preset's heading: its file, how to pick it, what picks or includes it.
    default_loggers = [d.partition(":")[2].strip().strip("[]") for d, _ in main.defaults
                       if d.partition(":")[0].strip() == "logger"]
    loggers = [n.strip() for n in ",".join(default_loggers).split(",") if n.strip()]
    facts = [f"File: `conf/{group}/{name}.yaml`"]
    picked = selection(group, name, conf, loggers)
    if picked:
        verb = "applied by" if group == "experiment/tuned" else "pick"
        facts.append(f"{verb}: `python -m beyondfit {' '.join(picked)}`")
    defaults = {d.partition(":")[0].strip(): d.partition(":")[2].strip() for d, _ in main.defaults}
    if group in _DEFAULT_CHOICES and name in defaults.get(group, "").strip("[]").split(","):
        facts.append("`conf/config.yaml`'s default")
    if group == "algo" and _tuned_tasks(conf, name):
        facts.append("tuned for " + ", ".join(f"`{t}`" for t in _tuned_tasks(conf, name)))
    refs = references.get((group, name), [])
    by_task = [f"`+task={n}`" for g, n, pick in refs if pick and g == "task"]
    by_other = [f"`{g}/{n}`" for g, n, pick in refs if pick and g != "task"]
    included = [f"`{g}/{n}`" for g, n, pick in refs if not pick]
    if by_task:
        facts.append("the default of " + ", ".join(by_task))
    if by_other:
        facts.append("picked by " + ", ".join(by_other))
    if included:
        facts.append("included by " + ", ".join(included))
    return "; ".join(facts) + "."


def _presets_section(conf: Path, main: YamlFile) -> list[str]:
    on_disk = sorted(str(p.parent.relative_to(conf)) for p in conf.rglob("*.yaml")
                     if p.parent != conf)
    unknown = sorted(set(on_disk) - _GROUP_NAMES)
    if unknown:
        raise ConfigReferenceError(
            f"conf/{unknown[0]}/ is a config group the reference does not describe; add it to "
            "GROUPS in docs/gen_config_reference.py")
    files = {group.name: {p.stem: read_yaml(p)
                          for p in sorted((conf / group.name).glob("*.yaml"))}
             for group in GROUPS}
    references = _references(files)
    out = ["## Presets", "",
           "Every shipped file of every config group (`conf/GROUP/NAME.yaml`, in the wheel as "
           "`beyondfit/conf/`), how to pick it and every key it sets (`+task=NAME`: any task). "
           "A file of your own in `--config-dir DIR` (`DIR/GROUP/NAME.yaml`) is picked the "
           "same way.", ""]
    for group in GROUPS:
        out += [f"### {group.name}", "", group.how, ""]
        for name, data in files[group.name].items():
            out += [f"#### {group.name}/{name}", "",
                    _facts(group.name, name, conf, main, references), "", *prose(data.header)]
            if data.defaults:
                out += ["Defaults list:", ""]
                out += [f"- `{entry}`" + (f": {md_text(comment)}" if comment else "")
                        for entry, comment in data.defaults]
                out.append("")
            rows = []
            for entry in data.entries:
                if not entry.leaf and not entry.comment:
                    continue
                value = md_value(data.value(entry.path)) if entry.leaf else "(section)"
                rows.append([f"`{_full_key(group.name, data, entry.path)}`", value,
                             md_text(entry.comment)])
            out += [*table(["Key", "Value", "Meaning"], rows), ""] if rows else [
                "Sets no keys of its own.", ""]
    return out


def generate(conf: Path | None = None, config: type = schema.BeyondfitConfig) -> str:
    """The page's Markdown, from ``conf`` (default :data:`CONF`) and the schema ``config``:
    the same inputs give the same text."""
    conf = CONF if conf is None else conf
    main = read_yaml(conf / "config.yaml")
    lines = [
        "# Config reference", "",
        f"<!-- Generated by `{COMMAND}` from beyondfit/cli/schema.py and conf/: edit those, "
        "then run it again (a test fails while this page is stale). -->", "",
        "Every key of beyondfit's command line: `python -m beyondfit +task=NAME "
        "[GROUP=NAME ...] [KEY=VALUE ...]`. Override a key with `KEY=VALUE`, add one a file "
        "does not set with `+KEY=VALUE`, and see the whole composed config with `--cfg job`:",
        "", "```bash", "python -m beyondfit +task=cartpole --cfg job", "```", "",
        *_defaults_section(main),
        *_checked_keys(main, config),
        *_hydra_section(main),
        *_presets_section(conf, main),
    ]
    while lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the page, or with ``--check`` exit 1 if the committed one is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the committed page differs from a fresh generation")
    args = parser.parse_args(argv)
    try:
        text = generate()
    except ConfigReferenceError as exc:
        print(f"gen_config_reference: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{_rel(PAGE)} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {_rel(PAGE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
