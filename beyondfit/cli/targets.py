"""Instantiating the user's ``_target_`` functions: one clear line for every way it can fail.

A task config names a builder (``task._target_: mymod.build``) and may nest more factories
(``task.loss._target_: mymod.my_loss``, ``task.wrappers``). Hydra instantiates them, but its
errors are several lines long and talk about Hydra. Here each target is first located
(the module imported, the name looked up) so that an unknown module, a module that fails to
import or a missing name is one :class:`BeyondfitError` naming the config key; then each node is
fitted to its target's signature; then Hydra calls them, and an exception raised inside the
user's code comes back as one line naming the key, the target and where in the user's file.

Fitting to the signature is what makes a swap work the way Hydra users expect from switching an
implementation: ``+task=regression task._target_=mymod.build`` or ``algo=a2c
task.loss._target_=mymod.my_loss`` keeps the options the new target takes, and leaves out (with
one warning line naming them) those it does not take. A target with ``**kwargs`` gets them all.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from beyondfit.core.errors import BeyondfitError

log = logging.getLogger("beyondfit")

#: Hydra's own keys in a node with ``_target_``: never options of the target.
_HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")


def locate(path: str, key: str) -> Any:
    """Import the object named by the dotted ``path`` (``module.sub.name``) given at ``key``.

    Raises :class:`BeyondfitError` naming ``key`` when no module of the path can be imported,
    when importing the user's module raises, or when the module lacks the name.
    """
    if not isinstance(path, str) or not path or path.startswith(".") or path.endswith("."):
        raise BeyondfitError(f"{key}._target_={path!r} is not a dotted name like mymodule.build")
    parts = path.split(".")
    module, found = None, 0
    for i in range(len(parts), 0, -1):  # the longest prefix that is a module
        name = ".".join(parts[:i])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is not None and name != e.name and not name.startswith(e.name + "."):
                # The module exists but imports something that does not.
                raise BeyondfitError(
                    f"{key}._target_={path!r}: importing {name} failed: {e}{_where(e)}"
                ) from None
            continue
        except Exception as e:  # the user's module raised while being imported
            raise BeyondfitError(
                f"{key}._target_={path!r}: importing {name} raised "
                f"{type(e).__name__}: {e}{_where(e)}"
            ) from None
        found = i
        break
    if module is None:
        raise BeyondfitError(
            f"{key}._target_={path!r}: no module named {parts[0]!r}; put {parts[0]}.py in the "
            "directory you launch from (it is on the import path) or add its directory to "
            "PYTHONPATH"
        )
    obj = module
    for i, attr in enumerate(parts[found:], start=found):
        if not hasattr(obj, attr):
            owner = ".".join(parts[:i])
            raise BeyondfitError(f"{key}._target_={path!r}: {owner} has no attribute {attr!r}")
        obj = getattr(obj, attr)
    if not callable(obj):
        raise BeyondfitError(f"{key}._target_={path!r} is a {type(obj).__name__}, not callable")
    return obj


def _where(exc: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of the exception outside installed libraries
    (torch, hydra, ...): usually the user's own line."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    own = [f for f in frames if "site-packages" not in f.filename and "<frozen" not in f.filename]
    last = (own or frames)[-1]
    return f" (at {Path(last.filename).name}:{last.lineno})"


def _nodes(node: Any, key: str) -> Iterator[tuple[DictConfig, str]]:
    """Every dict node with a ``_target_`` under ``node`` (itself included), with its key."""
    if isinstance(node, DictConfig):
        if "_target_" in node:
            yield node, key
        for name in node:
            yield from _nodes(node._get_node(name), f"{key}.{name}")
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            yield from _nodes(node._get_node(i), f"{key}[{i}]")


def accepted_options(target: Callable[..., Any]) -> set[str] | None:
    """The keyword options ``target`` takes; ``None`` when it takes any (``**kwargs``) or its
    signature cannot be read (a builtin)."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in parameters if p.kind in kinds}


def fit_to_targets(section: DictConfig, key: str) -> None:
    """Locate every ``_target_`` in ``section`` and drop the options its target does not take.

    Edits ``section`` in place (pass a copy); each dropped set is one warning line, e.g.
    ``task: mymod.build takes no option(s) dropout, hidden; left out``.
    """
    for node, where in list(_nodes(section, key)):
        target = locate(node._target_, where)
        accepted = accepted_options(target)
        if accepted is None:
            continue
        extra = sorted(str(k) for k in node if k not in _HYDRA_KEYS and k not in accepted)
        if extra:
            log.warning(
                "%s: %s takes no option(s) %s; left out",
                where, node._target_, ", ".join(extra),
            )
            for name in extra:
                del node[name]


def instantiate_section(section: DictConfig, key: str) -> Any:
    """Instantiate ``section`` (and the targets nested in it) with one-line errors.

    Errors the user's code raises as :class:`BeyondfitError` pass through unchanged; any other
    exception becomes ``KEY (TARGET) raised TYPE: MESSAGE (at FILE:LINE)``.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    # A resolved copy: the run's config keeps every option (checkpoints store it).
    section = OmegaConf.create(OmegaConf.to_container(section, resolve=True))
    fit_to_targets(section, key)
    hydra_keys = {k.replace("[", "").replace("]", ""): k for _, k in _nodes(section, key)}
    try:
        return instantiate(section, _convert_="all")
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, BeyondfitError):
            raise cause from None
        text = str(exc)
        full_key = re.search(r"full_key: (\S+)", text)
        # Hydra spells list items task.wrappers0; the walk above knows them as task.wrappers[0].
        where = hydra_keys.get(full_key.group(1), full_key.group(1)) if full_key else key
        target = re.search(r"target '([^']+)'", text)
        name = target.group(1) if target else "its _target_"
        if cause is None:
            raise BeyondfitError(f"cannot build {where} ({name}): {text.splitlines()[0]}") from None
        message = " ".join(str(cause).split()) or "(no message)"
        raise BeyondfitError(
            f"{where} ({name}) raised {type(cause).__name__}: {message}{_where(cause)}"
        ) from None
