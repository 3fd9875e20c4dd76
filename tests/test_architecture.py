"""The layout ARCHITECTURE.md describes, held: layers, light imports, small modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "beyondfit"
HEAVY = ("hydra", "omegaconf", "gymnasium", "matplotlib", "tensorboard", "torch.utils.tensorboard")
ABOVE_CORE = ("beyondfit.rl", "beyondfit.tasks", "beyondfit.cli", "beyondfit.observers",
              "beyondfit.distributed", "beyondfit.checkpoint", "beyondfit.data")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (deferred imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.e2e
def test_importing_the_core_pulls_in_no_heavy_library() -> None:
    probe = (
        "import sys, beyondfit.core; "
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('hydra', 'omegaconf', 'gymnasium', 'matplotlib', 'tensorboard'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_core_source_names_no_upper_layer() -> None:
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        bad = {m for m in imported_modules(path) if m.startswith(ABOVE_CORE)}
        bad |= {m for m in imported_modules(path) if m.split(".")[0] in HEAVY}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_only_the_strategy_and_distributed_call_torch_distributed() -> None:
    """Ranks and collectives go through the strategy (core/strategy.py, distributed/):
    nothing else imports ``torch.distributed`` or reaches it as ``torch.distributed.X``."""
    allowed = {PACKAGE / "core" / "strategy.py"} | set((PACKAGE / "distributed").glob("*.py"))
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in allowed:
            continue
        tree = ast.parse(path.read_text())
        used = {m for m in imported_modules(path) if m.startswith("torch.distributed")}
        used |= {"torch.distributed" for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                 and node.attr == "distributed" and isinstance(node.value, ast.Name)
                 and node.value.id == "torch"}
        assert not used, f"{path.relative_to(PACKAGE)} uses {sorted(used)}: go through the strategy"


def test_lower_layers_do_not_import_the_command_line() -> None:
    for folder in ("core", "distributed", "checkpoint", "observers", "data", "rl", "tasks"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            bad = {m for m in imported_modules(path) if m.startswith("beyondfit.cli")}
            assert not bad, f"{folder}/{path.name} imports {sorted(bad)}"


def runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules a file imports when it runs (deferred imports included, type
    checkers' ``if TYPE_CHECKING:`` imports not): ``from pkg import mod`` names ``pkg.mod``."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            names.update(submodules & modules or {node.module})
    return names & modules


def test_no_import_circles() -> None:
    """Each module's imports lead down, never back to itself: a circle makes import order
    matter and hides which layer owns what (the strategy is chosen above the strategies)."""
    files = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(
        ".__init__"): p for p in PACKAGE.rglob("*.py")}
    graph = {name: runtime_imports(path, set(files)) - {name} for name, path in files.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> list[str] | None:
        for nxt in sorted(graph[start]):
            if nxt == goal:
                return [start, goal]
            if nxt not in seen:
                seen.add(nxt)
                path = reaches(nxt, goal, seen)
                if path:
                    return [start, *path]
        return None

    for name in sorted(graph):
        circle = reaches(name, name, set())
        assert circle is None, " -> ".join(circle)


def test_the_top_level_holds_entry_points_only_and_folders_are_concepts() -> None:
    """A folder per concept, never a file split by size: no line cap (a long module that reads
    straight is fine), but each module and each folder says in its docstring the one concept
    it holds, a sub-folder groups several modules (a folder of one module is a file), and
    the package is at most three levels deep (``beyondfit/core/compile/graphs.py``)."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 6, top
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE)
        assert len(where.parts) <= 3, f"{where} is nested deeper than a concept's sub-folder"
        assert ast.get_docstring(ast.parse(path.read_text())), f"{where} has no docstring"
    for folder in PACKAGE.rglob("__init__.py"):
        modules = [p for p in folder.parent.glob("*.py") if p.name != "__init__.py"]
        modules += [p for p in folder.parent.iterdir() if (p / "__init__.py").exists()]
        if folder.parent != PACKAGE:
            assert len(modules) >= 2, f"{folder.parent.relative_to(PACKAGE)}/ holds one module"


def test_architecture_md_names_every_folder_and_only_paths_that_exist() -> None:
    """ARCHITECTURE.md's map agrees with the tree: each package folder appears in it, and each
    ``beyondfit``-relative path it names (``core/compile/graphs.py``, ``rl/``) exists."""
    import re

    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent.relative_to(PACKAGE).as_posix()
        if folder != ".":
            assert f"`{folder}/" in text, f"ARCHITECTURE.md does not name {folder}/"
    for named in sorted(set(re.findall(r"`((?:[a-z_]+/)+(?:[a-z_]+\.py)?)`", text))):
        if named.split("/")[0] in {p.name for p in PACKAGE.iterdir() if p.is_dir()}:
            assert (PACKAGE / named).exists(), f"ARCHITECTURE.md names {named}, which is gone"


def test_the_public_api_is_small_and_each_name_has_one_home() -> None:
    """At most 12 top-level names, each re-exported once: by ``beyondfit`` from the module that
    defines it, and by no sub-package (``beyondfit.core`` does not offer ``Engine`` again)."""
    import importlib

    import beyondfit

    assert len(beyondfit.__all__) <= 12, beyondfit.__all__
    for name in beyondfit.__all__:
        value = getattr(beyondfit, name)
        home = importlib.import_module(beyondfit._EXPORTS[name])
        assert getattr(home, name) is value and home.__name__.split(".")[-1] != "__init__"
        assert value.__module__ == home.__name__, (name, value.__module__)
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        package = importlib.import_module(f"beyondfit.{init.parent.name}")
        again = sorted(set(getattr(package, "__all__", ())) & set(beyondfit.__all__))
        assert not again, f"beyondfit.{init.parent.name} re-exports {again}"
