"""The documentation site builds as CONTRIBUTING.md and docs/install.md say, with warnings as
errors: a broken link, a missing page, a stale anchor or a docstring the API reference cannot
read fails it. And a newcomer's path is reachable from the front page."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit import ROOT

pytestmark = pytest.mark.e2e

BUILD = 'pip install -e ".[docs]" && mkdocs build --strict'


@pytest.mark.runs(BUILD)
def test_the_site_builds_strict_offline(tmp_path: Path) -> None:
    """The command after ``&&`` as typed (the suite has the package installed), into a
    temporary site directory."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    mkdocs = shutil.which("mkdocs") or ""
    args = [mkdocs] if mkdocs else [sys.executable, "-m", "mkdocs"]
    args += [*BUILD.split("&& ", 1)[1].split()[1:], "--site-dir", str(tmp_path / "site")]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)
                               + ":/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "reference" / "python-api" / "index.html").read_text()
    assert "fit" in api and "Update" in api  # the docstrings were rendered
    # The docstrings' Sphinx roles are links (docs/sphinx_roles.py), never raw text; a role
    # whose target the site does not render is its code text.
    raw = re.findall(r":(?:py:)?(?:class|meth|func|mod|data|attr|exc|obj|const):\S{0,60}", api)
    assert raw == []
    assert ('href="#beyondfit.core.update.Update"' in api  # ~beyondfit.core.update.Update
            and 'href="#beyondfit.core.engine.Engine.load"' in api  # :meth:`load`, inherited
            and 'href="#beyondfit.data.batches.TensorBatches"' in api)  # ~beyondfit.TensorBatches
    cli = (tmp_path / "site" / "reference" / "command-line" / "index.html").read_text()
    assert "usage: python -m beyondfit.compare" in cli  # the hook ran each --help


def _nav_pages() -> set[str]:
    text = (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    return set(re.findall(r"([\w/.-]+\.md)\s*$", text, flags=re.M))


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert _nav_pages() == pages


def test_a_newcomers_path_is_one_click_from_the_front_page() -> None:
    """Install, first run, own loss, own env, off-policy, sweep, compare: each linked from the
    front page itself (one click; two at most once inside the page)."""
    front = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w/.-]+\.md)(?:#[\w-]+)?\)", front))
    for page in ("install.md", "tutorials/first-supervised-run.md", "tutorials/first-rl-run.md",
                 "how-to/own-loss.md", "how-to/own-task.md", "how-to/own-env.md",
                 "how-to/off-policy.md", "how-to/own-algorithm.md", "how-to/sweeps.md"):
        assert page in linked, page
        assert (ROOT / "docs" / page).is_file()
    assert "how-to/sweeps.md#sweeps-and-comparing-runs" in front  # compare


def test_readme_is_short_and_links_into_the_site() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\(((?:docs/)?[\w/.-]+\.md)(?:#[\w-]+)?\)", readme):
        assert (ROOT / target).is_file(), target
