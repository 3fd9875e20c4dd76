"""Griffe extension (mkdocs.yml, mkdocstrings' ``extensions``): the package's Sphinx roles
(``:class:`~beyondfit.core.update.Update```, ``:meth:`load```) become links in the API
reference instead of raw text.

The docstrings keep one style, reST roles in Google-style sections, which ``help()``, IDEs and
Sphinx read as they are; only the site translates them. Each role becomes an *optional*
cross-reference (``<autoref identifier=... optional>``, what mkdocstrings writes for a
signature's types): a link when its target is rendered on a page, else the same code text
without a link, never a broken one. A name is resolved as Python would see it from the
docstring's object (a method's class, then its module and what the module imports), then to
the canonical path of the object it names, so ``~beyondfit.TensorBatches`` links to
``beyondfit.data.batches.TensorBatches`` where it is rendered.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: ``:ROLE:`TARGET```, ``:ROLE:`~TARGET``` or ``:ROLE:`TITLE <TARGET>``` (``py:`` optional).
ROLE = re.compile(
    r":(?:py:)?(?P<role>class|meth|func|mod|data|attr|exc|obj|const):`(?P<body>[^`]+)`"
)
CALLABLE_ROLES = ("meth", "func")  # Sphinx writes their titles with "()"


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **_: Any) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = ROLE.sub(lambda m, o=obj: _link(m, o, loader),
                                               obj.docstring.value)


def _objects(obj: griffe.Object) -> Any:
    """``obj`` and every object defined in it (aliases are their targets' business)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


def _link(match: re.Match[str], obj: griffe.Object, loader: griffe.GriffeLoader) -> str:
    role, body = match["role"], match["body"]
    title, target = None, body
    explicit = re.fullmatch(r"(?P<title>[^<]+?)\s*<(?P<target>[^>]+)>", body, flags=re.S)
    if explicit:
        title, target = explicit["title"].strip(), explicit["target"]
    target = re.sub(r"\s+", "", target).lstrip("!")  # a path wrapped over two lines
    short = target.startswith("~")
    target = target.lstrip("~")
    if title is None:
        title = target.rsplit(".", 1)[-1] if short else target
        if role in CALLABLE_ROLES:
            title += "()"
    identifier = _resolve(target, obj, loader)
    return f'<autoref identifier="{identifier}" optional>`{title}`</autoref>'


def _resolve(target: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> str:
    """The canonical path of ``target`` as seen from ``obj``'s docstring (``target`` itself
    when it names nothing griffe knows: the reference then stays text)."""
    first, _, rest = target.partition(".")
    scopes = [obj]
    if not obj.is_class and obj.parent is not None:
        scopes.append(obj.parent)  # a method's docstring names its class's members
    path = target
    for scope in scopes:
        if scope.is_class and first in scope.all_members:  # inherited ones too (Engine.load)
            path = f"{scope.path}.{target}"
            break
        try:
            path = scope.resolve(first) + (f".{rest}" if rest else "")
            break
        except (griffe.NameResolutionError, griffe.AliasResolutionError, KeyError):
            continue
    try:
        found = loader.modules_collection.get_member(path)
        return found.final_target.path if found.is_alias else found.path
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return path
