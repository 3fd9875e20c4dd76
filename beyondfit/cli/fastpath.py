"""Start-up shortcuts of the command line that change nothing it does, only when it is done.

Hydra composes a run's config twice: once (``Hydra.get_mode``) only to read ``hydra.mode``
(a config may ask for a multirun itself), then again for the job. When the command line has
no ``-m``/``--multirun``, no ``hydra.mode=`` override, and no config file within reach says
``MULTIRUN``, the answer is known without composing: a single run, which is what Hydra does
when ``get_mode`` finds no mode. That saves a tenth of a second or more per launch
(``bench/startup.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from beyondfit.cli.configs import CONF_DIR

_MULTIRUN_FLAGS = ("-m", "--multirun")


def mode_is_known(args: Sequence[str], config_dirs: Sequence[Path]) -> bool:
    """True when ``args`` (the command line after the program) is certainly a single run."""
    for arg in args:
        if arg in _MULTIRUN_FLAGS or arg.lstrip("+~").startswith(("hydra.mode", "hydra/")):
            return False
    for folder in (CONF_DIR, *config_dirs):
        paths = _yaml_files(Path(folder))
        if paths is None:
            return False
        for path in paths:
            try:
                if "MULTIRUN" in path.read_text(errors="replace"):
                    return False
            except OSError:
                return False
    return True


def _yaml_files(folder: Path, depth: int = 3, limit: int = 500) -> list[Path] | None:
    """The yaml files up to ``depth`` folders down; None past ``limit`` (a config dir that
    is a whole project: not worth reading to save a composition)."""
    found: list[Path] = []
    level = [folder]
    for _ in range(depth + 1):
        below: list[Path] = []
        for current in level:
            try:
                entries = list(current.iterdir())
            except OSError:
                continue
            found += [e for e in entries if e.suffix in (".yaml", ".yml") and e.is_file()]
            below += [e for e in entries if e.is_dir() and not e.name.startswith(".")]
        if len(found) > limit:
            return None
        level = below
    return found


@contextlib.contextmanager
def compose_once(args: Sequence[str], config_dirs: Sequence[Path]) -> Iterator[None]:
    """Within this block, Hydra skips its mode-probing composition when the mode is known."""
    try:
        from hydra._internal.hydra import Hydra
    except ImportError:  # another Hydra layout: compose twice, as Hydra does
        yield
        return
    original = getattr(Hydra, "get_mode", None)
    if original is None or not mode_is_known(args, config_dirs):
        yield
        return

    def get_mode(self: Hydra, config_name: Any, overrides: Any) -> None:
        return None  # Hydra then runs the job once (RunMode.RUN), as with no mode set

    Hydra.get_mode = get_mode  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = original  # type: ignore[method-assign]
