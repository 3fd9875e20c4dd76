"""Instantiating the user's ``_target_`` functions: one clear line for every way it can fail.

A task config names a builder (``task._target_: mymod.build``) and may nest more factories
(``task.loss._target_: mymod.my_loss``, ``task.wrappers``). Hydra instantiates them, but its
errors are several lines long and talk about Hydra. Here each target is first located
(the module imported, the name looked up) so that an unknown module, a module that fails to
import or a missing name is one :class:`BeyondfitError` naming the config key; then each node is
fitted to its target's signature; then Hydra calls them, and an exception raised inside the
user's code comes back as one line naming the key, the target and where in the user's file.

Fitting to the signature is what makes a swap on the command line work:
``+task=regression task._target_=mymod.build`` or ``task.loss._target_=mymod.my_loss`` keeps
the options of the replaced config that the new target takes, and leaves out (with one warning
line naming them) those it does not take. Anywhere else an option the target does not take is a
mistake (a typo, ``+task.nosuch=1``): one error line naming the options it does take. A target
with ``**kwargs`` gets every option.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import traceback
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from beyondfit.core.errors import BeyondfitError

log = logging.getLogger("beyondfit")

#: The modules of ``beyondfit.rl`` before it was grouped by concept, and where each went: a
#: config of one's own that names an old path is told the new one.
MOVED_RL_MODULES = {
    "actions": "envs.actions",
    "envs": "envs.vector",
    "suites": "envs.suites",
    "envpool_atari": "envs.envpool_atari",
    "env_collector": "collect.env_collector",
    "collector": "collect.onpolicy",
    "offpolicy": "collect.offpolicy",
    "returns": "collect.returns",
    "normalization": "collect.normalization",
    "update_ratio": "collect.update_ratio",
    "replay": "replay.buffer",
    "encoders": "nets.encoders",
    "agents": "nets.agents",
    "policies": "nets.policies",
    "losses": "algos.onpolicy",
    "offpolicy_losses": "algos.offpolicy",
    "algorithm": "algos.algorithm",
    "auxiliary": "algos.auxiliary",
    "kl_stop": "algos.kl_stop",
    "schedules": "algos.schedules",
    "evaluate": "evaluation.evaluator",
    "confirm": "evaluation.confirm",
    "play": "evaluation.play",
    "policy_file": "evaluation.policy_file",
}

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
    obj = _import(parts[0], path, key)
    if obj is None:
        raise BeyondfitError(
            f"{key}._target_={path!r}: no module named {parts[0]!r}; put {parts[0]}.py in the "
            "directory you launch from (it is on the import path) or add its directory to "
            "PYTHONPATH"
        )
    for i in range(1, len(parts)):
        owner, attr = ".".join(parts[:i]), parts[i]
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
            continue
        sub = _import(f"{owner}.{attr}", path, key) if inspect.ismodule(obj) else None
        if sub is None:
            moved = MOVED_RL_MODULES.get(attr) if owner == "beyondfit.rl" else None
            hint = "" if moved is None else (
                f"; beyondfit.rl.{attr} moved to beyondfit.rl.{moved}: write "
                f"{key}._target_={path.replace(f'rl.{attr}', f'rl.{moved}', 1)}")
            raise BeyondfitError(
                f"{key}._target_={path!r}: {owner} has no attribute {attr!r}{hint}")
        obj = sub
    if not callable(obj):
        raise BeyondfitError(f"{key}._target_={path!r} is a {type(obj).__name__}, not callable")
    return obj


def _import(name: str, path: str, key: str) -> Any:
    """The module ``name``, ``None`` if there is none; an error if importing it fails."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            return None  # no such module
        # The module exists but imports one that does not.
        raise BeyondfitError(
            f"{key}._target_={path!r}: importing {name} failed: {e}{_where(e)}"
        ) from None
    except Exception as e:  # the user's module raised while being imported
        raise BeyondfitError(
            f"{key}._target_={path!r}: importing {name} raised {type(e).__name__}: {e}"
            f"{_where(e)}"
        ) from None


def _where(exc: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of the exception outside installed libraries
    (torch, hydra, ...): usually the user's own line."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    own = [f for f in frames if "site-packages" not in f.filename and "<frozen" not in f.filename]
    if not own:  # e.g. a call with wrong arguments fails at the (library's) call site
        return ""
    return f" (at {Path(own[-1].filename).name}:{own[-1].lineno})"


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


def swapped_targets(overrides: Iterable[str]) -> set[str]:
    """The config keys whose ``_target_`` a command-line override replaced:
    ``["task._target_=mymod.build", "+task.loss._target_=m.f"]`` -> ``{"task", "task.loss"}``."""
    swapped = set()
    for override in overrides:
        key = override.partition("=")[0].lstrip("+~")
        if key.endswith("._target_"):
            swapped.add(key[: -len("._target_")])
    return swapped


def fit_to_targets(section: DictConfig, key: str, swapped: Collection[str] = ()) -> list[str]:
    """Locate every ``_target_`` in ``section`` and check its options against its signature.

    Options a target does not take are an error, except in the nodes named in ``swapped``
    (their ``_target_`` was replaced on the command line; ``"*"``: all), where they are left out;
    returns the warning line for each such node, e.g. ``task: mymod.build takes no option(s)
    dropout, hidden; left out``. Edits ``section`` in place (pass a copy).
    """
    left_out = []
    for node, where in list(_nodes(section, key)):
        target = locate(node._target_, where)
        accepted = accepted_options(target)
        if accepted is None:
            continue
        extra = sorted(str(k) for k in node if k not in _HYDRA_KEYS and k not in accepted)
        if not extra:
            continue
        if where not in swapped and "*" not in swapped:
            raise BeyondfitError(
                f"{where}: {node._target_} takes no option(s) {', '.join(extra)}; its options: "
                f"{', '.join(sorted(accepted)) or 'none'}"
            )
        left_out.append(f"{where}: {node._target_} takes no option(s) {', '.join(extra)}; "
                        "left out")
        for name in extra:
            del node[name]
    return left_out


def instantiate_section(section: DictConfig, key: str, swapped: Collection[str] = ()) -> Any:
    """Instantiate ``section`` (and the targets nested in it) with one-line errors.

    ``swapped``: the keys whose ``_target_`` the command line replaced (see
    :func:`fit_to_targets`).

    Errors the user's code raises as :class:`BeyondfitError` pass through unchanged; any other
    exception becomes ``KEY (TARGET) raised TYPE: MESSAGE (at FILE:LINE)``.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    # A resolved copy: the run's config keeps every option (checkpoints store it).
    section = OmegaConf.create(OmegaConf.to_container(section, resolve=True))
    left_out = fit_to_targets(section, key, swapped)
    # Hydra names a failing node by its key below the section, list items run together
    # (wrappers0); the walk knows it as task.wrappers[0], and the target as the user spelled it.
    named = {
        mine[len(key) + 1:].replace("[", "").replace("]", ""): (mine, str(node._target_))
        for node, mine in _nodes(section, key)
    }
    try:
        built = instantiate(section, _convert_="all")
    except InstantiationException as exc:
        cause = exc.__cause__
        if cause is not None:  # a target ran and failed: what was left out may be why
            for line in left_out:
                log.warning("%s", line)
        if isinstance(cause, BeyondfitError):
            raise cause from None
        text = str(exc)
        full_key = re.search(r"full_key: (\S*)", text)
        where, name = named.get(full_key.group(1) if full_key else "", (key, "its _target_"))
        if cause is None:
            # Hydra wraps its own message (a blocklisted target's reason) over several lines,
            # then names the key: one line of the message, without the key it adds.
            said = " ".join(text.split("full_key:")[0].split())
            raise BeyondfitError(f"cannot build {where} ({name}): {said}") from None
        from beyondfit.cli.bounds import out_of_memory_line

        if out_of_memory_line(cause) is not None:
            raise BeyondfitError(f"building {where} ({name}) ran {out_of_memory_line(cause)}"
                                 ) from None
        message = " ".join(str(cause).split()) or "(no message)"
        hint = ""
        if where != key and isinstance(cause, TypeError) and "required positional" in message:
            hint = ("; a function to be called later (an env wrapper, a loss closure itself) "
                    "needs _partial_: true")
        raise BeyondfitError(
            f"{where} ({name}) raised {type(cause).__name__}: {message}{_where(cause)}{hint}"
        ) from None
    # Said once the targets are built: a blocklisted one is refused in its line alone.
    for line in left_out:
        log.warning("%s", line)
    return built
