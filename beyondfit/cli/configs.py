"""Where the shipped configs are and which options a config group offers (no torch: the
command line answers ``--help`` and a misspelt choice from these before it loads torch)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
CONF_DIR = PACKAGE_DIR / "conf"  # where the wheel ships it
if not CONF_DIR.is_dir():  # a source checkout keeps conf/ at the top level
    CONF_DIR = PACKAGE_DIR.parent / "conf"


def available(group: str, config_dirs: Sequence[Path] = ()) -> list[str]:
    """The options of a config group (``task``, ``optimizer``, ...): the shipped configs' and
    those in the user's ``config_dirs`` (``--config-dir``, ``hydra.searchpath``)."""
    dirs = [CONF_DIR, *config_dirs]
    return sorted({p.stem for d in dirs for p in (Path(d) / group).glob("*.yaml")})


def no_task_message(config_dirs: Sequence[Path] = ()) -> str:
    """What to say when no task was picked."""
    tasks = ", ".join(available("task", config_dirs))
    return (
        f"no task given; pick one with +task=NAME (available: {tasks}), "
        "e.g. python -m beyondfit +task=cartpole; your own: python -m beyondfit.new NAME"
    )
