"""Start-up shortcuts of the command line that change nothing it does, only when it is done.

Hydra composes a run's config twice: once (``Hydra.get_mode``) only to read ``hydra.mode``
(a config may ask for a multirun itself), then again for the job. When the command line has
no ``-m``/``--multirun``, no ``hydra.mode=`` override, and no config file within reach says
``MULTIRUN``, the answer is known without composing: a single run, which is what Hydra does
when ``get_mode`` finds no mode. That saves a tenth of a second or more per launch
(``bench/startup.py``).

``--help`` (and ``--hydra-help``) lists every config group's options. Hydra asks its config
loader once per group and kind (108 times for the shipped tree), and each question builds a
fresh repository of the search path, a deep copy of every source and of every structured
config registered, although nothing changes between the questions: two thirds of the help's
CPU time. :func:`groups_listed_once` builds that repository once for the whole help text;
the questions and the answers are Hydra's own, read from the files as they are on disk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from beyondfit.cli.configs import CONF_DIR

_MULTIRUN_FLAGS = ("-m", "--multirun")
#: The flags with which Hydra prints a help text that lists the config groups.
HELP_FLAGS = ("--help", "-h", "--hydra-help")


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


@contextlib.contextmanager
def groups_listed_once(args: Sequence[str]) -> Iterator[None]:
    """Within this block, a help text's listing of the config groups (``args`` asking for
    ``--help``, ``-h`` or ``--hydra-help``) reads one repository of the search path instead of
    building one per question.

    Only the loader's questions with no primary config and no overrides are answered so, which
    are exactly those of Hydra's help (``Hydra.list_all_config_groups`` and
    ``format_config_groups``); for them Hydra's repository is a copy of the loader's own,
    untouched while the help text is formatted. Any other question, or another Hydra layout,
    goes to Hydra as usual.
    """
    if not any(arg in HELP_FLAGS for arg in args):
        yield
        return
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.core.object_type import ObjectType
    except ImportError:  # another Hydra layout: one repository per question, as Hydra does
        yield
        return
    original = getattr(ConfigLoaderImpl, "get_group_options", None)
    builds = getattr(ConfigLoaderImpl, "_parse_overrides_and_create_caching_repo", None)
    if original is None or builds is None:
        yield
        return
    built: dict[int, tuple[Any, Any]] = {}  # one repository per loader

    def get_group_options(
        self: ConfigLoaderImpl,
        group_name: str,
        results_filter: ObjectType | None = ObjectType.CONFIG,
        config_name: str | None = None,
        overrides: list[str] | None = None,
    ) -> list[str]:
        if config_name is not None or overrides:
            return original(self, group_name, results_filter, config_name, overrides)
        if id(self) not in built:
            _, repo = builds(self, None, [])
            built[id(self)] = (self, repo)  # the loader kept alive: its id stays its own
        return built[id(self)][1].get_group_options(group_name, results_filter)

    ConfigLoaderImpl.get_group_options = get_group_options  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigLoaderImpl.get_group_options = original  # type: ignore[method-assign]
