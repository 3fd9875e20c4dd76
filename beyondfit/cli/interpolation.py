"""A config's interpolations resolved up front, so that one that cannot resolve (``${oc.env:X}``
unset, ``${a}`` pointing at itself, a resolver that raises) is one line naming its key and what
was written, before the run reads it somewhere deep inside."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from beyondfit.core.errors import BeyondfitError


def _leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of ``node`` as (dotted key, raw node), interpolations left as written."""
    if isinstance(node, DictConfig):
        keys: Any = node.keys()
    elif isinstance(node, ListConfig):
        keys = range(len(node))
    else:
        return
    for key in keys:
        child = node._get_node(key)
        name = f"{prefix}[{key}]" if isinstance(key, int) else (
            f"{prefix}.{key}" if prefix else str(key))
        if isinstance(child, DictConfig | ListConfig) and not child._is_interpolation():
            yield from _leaves(child, name)
        else:
            yield name, child


def check_interpolations(cfg: DictConfig) -> None:
    """Resolve every interpolation of ``cfg``; a :class:`BeyondfitError` naming the first one
    that fails. Values that resolve but have the wrong type are left to the schema's checks."""
    for key, node in _leaves(cfg):
        if node is None or not node._is_interpolation():
            continue
        try:
            node._dereference_node()
        except InterpolationResolutionError as exc:
            reason = " ".join(str(exc).split("full_key:")[0].split()).removeprefix(
                "KeyError raised while resolving interpolation: ")
            raise BeyondfitError(
                f"{key}={node._value()}: the interpolation cannot be resolved ({reason[:160]}); "
                "give a plain value, or an interpolation that resolves"
            ) from None
        except OmegaConfBaseException:
            continue  # resolves, but to a value the schema refuses: its own line says so

