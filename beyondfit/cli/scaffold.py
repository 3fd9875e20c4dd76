"""``python -m beyondfit.new NAME [--kind supervised|rl]``: a runnable task of one's own.

Writes three files into the current directory, from the templates in
``beyondfit/cli/templates/``:

- ``conf/task/NAME.yaml``: the task config (``_target_: NAME.build`` and its options);
- ``NAME.py``: the builder (model, data, loss closure; ``--kind rl``: a policy-gradient loss);
- ``tests/test_NAME.py``: a unit test and a command-line run of the task.

Right after it, ``python -m beyondfit --config-dir conf +task=NAME`` trains and
``python -m pytest tests/test_NAME.py`` passes. Existing files are never overwritten.
"""

from __future__ import annotations

import argparse
import importlib.util
import keyword
import re
import sys
from pathlib import Path
from string import Template

from beyondfit.core.errors import BeyondfitError

TEMPLATES = Path(__file__).resolve().parent / "templates"

#: ``--kind`` -> what it writes.
KINDS = {
    "supervised": "a model, synthetic data and a loss closure (classification of two spirals)",
    "rl": "a policy-gradient loss of your own on a Gymnasium env (REINFORCE, no critic)",
}


def targets(name: str, root: Path) -> dict[str, Path]:
    """Template file -> where it goes for task ``name`` under ``root``."""
    return {
        "yaml": root / "conf" / "task" / f"{name}.yaml",
        "py": root / f"{name}.py",
        "test": root / "tests" / f"test_{name}.py",
    }


#: The longest task name: it names three files (``tests/test_NAME.py`` the longest), which
#: most file systems cap at 255 bytes, and a command line a user types.
MAX_NAME = 100
#: Words Hydra's override grammar reads as values, whatever their case: ``+task=null`` is no
#: task and ``+task=true`` a boolean, never the file ``conf/task/true.yaml``.
HYDRA_WORDS = ("true", "false", "null", "nan", "inf")


def check_name(name: str, root: Path) -> None:
    """Raise :class:`BeyondfitError` unless ``name`` can be a module and a task name here, one
    that ``+task=NAME`` selects: ASCII letters, digits and ``_`` (Hydra's grammar reads no
    other letter in a bare value), not starting with a digit, at most :data:`MAX_NAME`
    characters, no Python keyword and no word Hydra reads as a value."""
    from beyondfit.cli.configs import available

    shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name)} characters)"
    if len(name) > MAX_NAME:
        raise BeyondfitError(
            f"task name {shown} is longer than {MAX_NAME} characters: it names its files "
            "(tests/test_NAME.py) and is typed in +task=NAME; choose a shorter one, e.g. my_task"
        )
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or keyword.iskeyword(name):
        raise BeyondfitError(
            f"task name {shown} must be a Python identifier of ASCII letters, digits and _ "
            "(not starting with a digit): it is also the name of its module, and +task=NAME "
            "reads no other character; e.g. my_task"
        )
    if name.lower() in HYDRA_WORDS:
        raise BeyondfitError(
            f"task name {name!r} is a word Hydra reads as a value (+task={name} would not pick "
            f"conf/task/{name}.yaml); choose another name, e.g. my_{name}"
        )
    if name in available("task"):
        raise BeyondfitError(
            f"task name {name!r} is a built-in task's; choose another name, e.g. my_{name}"
        )
    # A module of that name elsewhere on the path (torch, json...) would be shadowed by NAME.py,
    # or would shadow it: either way `_target_: NAME.build` would be ambiguous.
    here = str(root.resolve())
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if p not in ("", ".", here)]
    try:
        taken = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        taken = False
    finally:
        sys.path[:] = saved
    if taken:
        raise BeyondfitError(
            f"a module named {name!r} already exists (import {name} finds it); choose another "
            f"task name, e.g. my_{name}"
        )


def scaffold(name: str, kind: str = "supervised", root: str | Path = ".") -> list[Path]:
    """Write the task ``name`` of ``kind`` into ``root``; return the files written.

    Raises :class:`BeyondfitError` (and writes nothing) for a bad name, an unknown kind, or if
    any of the files exists already.
    """
    root = Path(root)
    if kind not in KINDS:
        raise BeyondfitError(f"unknown --kind {kind!r}; choose one of {', '.join(KINDS)}")
    check_name(name, root)
    files = targets(name, root)
    existing = [str(path) for path in files.values() if path.exists()]
    if existing:
        raise BeyondfitError(
            f"refusing to overwrite {', '.join(existing)}; choose another name or move "
            "the files away"
        )
    for path in files.values():
        _check_folders(path.parent, root)
    prefix = "rl" if kind == "rl" else "supervised"
    sources = {"yaml": f"{prefix}.yaml.tmpl", "py": f"{prefix}.py.tmpl",
               "test": f"{prefix}_test.py.tmpl"}
    written: list[Path] = []
    try:
        for part, path in files.items():
            text = Template((TEMPLATES / sources[part]).read_text()).substitute(name=name)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("x") as out:  # "x": never replace a file, even one made meanwhile
                written.append(path)
                out.write(text)
    except OSError as exc:  # a read-only directory, a full disk, a file made meanwhile
        for path in written:
            path.unlink(missing_ok=True)
        where = exc.filename or root
        raise BeyondfitError(f"cannot write {where}: {exc.strerror or exc}; nothing was "
                             "written; run it in a directory you can write to") from None
    return list(files.values())


def _check_folders(folder: Path, root: Path) -> None:
    """Refuse, before anything is written, a folder of the files (``conf``, ``conf/task``,
    ``tests``) that exists as something other than a directory."""
    path = root
    for part in folder.relative_to(root).parts:
        path = path / part
        if path.exists() and not path.is_dir():
            raise BeyondfitError(
                f"{path} is a file, not a directory: the task's files go into {path}/; move "
                "the file away or run python -m beyondfit.new in another directory"
            )


def main(argv: list[str] | None = None, prog: str = "python -m beyondfit.new") -> None:
    """Command-line entry: write the files, say what to run next; errors exit with 2."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a runnable task of your own into the current directory: "
        "conf/task/NAME.yaml, NAME.py and tests/test_NAME.py.",
    )
    parser.add_argument("name", help="the task's name, also its module's (e.g. my_task)")
    parser.add_argument(
        "--kind", choices=list(KINDS), default="supervised",
        help="; ".join(f"{k}: {v}" for k, v in KINDS.items()),
    )
    args = parser.parse_args(argv)
    try:
        written = scaffold(args.name, args.kind)
    except BeyondfitError as exc:
        print(f"beyondfit: error: {exc}", file=sys.stderr)
        sys.exit(2)
    for path in written:
        print(f"wrote {path}")
    print(f"train it:  python -m beyondfit --config-dir conf +task={args.name}")
    print(f"test it:   python -m pytest tests/test_{args.name}.py")
