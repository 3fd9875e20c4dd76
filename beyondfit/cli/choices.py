"""What the command line is given, checked before Hydra starts (and makes a run directory):
the config groups picked (an unknown or empty task, optimizer, ...), the config directories
added, an empty run directory. Each mistake is one line on stderr and exit status 2."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from beyondfit.cli.configs import CONF_DIR, available, no_task_message

# Flags with which Hydra prints something instead of running a job.
INFO_FLAGS = (
    "--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc",
)  # fmt: skip


def fail(message: str) -> None:
    """Print one line and exit with status 2."""
    print(f"beyondfit: error: {message}", file=sys.stderr)
    sys.exit(2)


_OPTUNA_SWEEPER = "hydra_plugins.hydra_optuna_sweeper"


#: The config groups the command line picks from.
_GROUPS = ("task", "optimizer", "scheduler", "experiment", "logger", "search", "algo",
           "debug")
_GROUP_HOW = {
    "optimizer": "optimizer=NAME",
    "algo": "algo=NAME",
    "scheduler": "scheduler=NAME",
    "logger": "logger=[NAME,...] or +logger=NAME",
}


def user_config_dirs(args: list[str]) -> list[Path]:
    """The config directories the user adds: ``--config-dir DIR`` (``-cd``) and the
    ``file://`` entries of ``hydra.searchpath=[...]``; exits with one line if one is missing."""
    found: list[tuple[str, str]] = []
    for i, arg in enumerate(args):
        flag, sep, value = arg.partition("=")
        if flag in ("--config-dir", "-cd"):
            if not sep:
                value = args[i + 1] if i + 1 < len(args) else ""
            found.append((f"--config-dir {value}", value))
        elif flag.lstrip("+") == "hydra.searchpath":
            for entry in value.strip().strip("[]").split(","):
                entry = entry.strip().strip("'\"")
                if entry.startswith("file://"):
                    found.append((f"hydra.searchpath entry {entry}", entry[len("file://"):]))
    dirs = []
    for where, value in found:
        path = Path(value).expanduser().absolute()
        if not value or not path.is_dir():
            fail(f"{where}: no such directory ({path}); give the directory that holds "
                 "task/NAME.yaml, e.g. --config-dir conf")
        dirs.append(path)
    return dirs


def check_choices(args: list[str]) -> None:
    """Catch an unknown or missing task/optimizer/algo before Hydra starts (and makes a run dir).

    The options are the shipped configs' and those of the user's config directories.
    """
    if any(a in INFO_FLAGS or a.startswith("--cfg=") for a in args):
        return
    dirs = user_config_dirs(args)
    picked_task = False
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            continue
        group = key.lstrip("+~")
        empty = not value.strip().strip("'\"")
        if empty and group in ("hydra.run.dir", "hydra.sweep.dir"):
            fail(f"{group} is empty: a run would write into the directory you launched in; give "
                 f"it a directory, e.g. {group}=runs/a")
        if empty and not key.startswith("~") and group in _GROUPS:
            how = _GROUP_HOW.get(group, f"+{group}=NAME")
            fail(f"{arg!r} names no {group}; pick one with {how} (available: "
                 f"{', '.join(available(group, dirs))})")
        if group in ("task", "experiment", "search"):  # a search preset picks its task
            picked_task = True
        if group not in _GROUPS:
            continue
        options = available(group, dirs)
        # A multirun sweep lists several; the logger group takes lists: logger=[csv,tensorboard].
        for choice in value.split(","):
            choice = choice.strip().strip("[]").strip()
            if choice and choice not in options:
                how = _GROUP_HOW.get(group, f"+{group}=NAME")
                if group == "logger":  # the loggers are built in, not configs of one's own
                    mine = ""
                elif dirs:
                    where = " and ".join(str(d / group) for d in dirs)
                    mine = f"; looked for {choice}.yaml in {where} and beyondfit's own"
                else:
                    mine = f"; your own: DIR/{group}/{choice}.yaml with --config-dir DIR"
                fail(
                    f"unknown {group} {choice!r}; available: {', '.join(options)} "
                    f"(pick with {how}{mine})"
                )
        if group == "search" and importlib.util.find_spec(_OPTUNA_SWEEPER) is None:
            fail(
                "+search=NAME runs an Optuna search through hydra-optuna-sweeper, which is not "
                'installed; pip install "beyondfit[search]"'
            )
    if not picked_task:
        fail(no_task_message(dirs))


#: The RL tasks' defaults-list entry for the settings tuned per task and algorithm
#: (``optional /experiment/tuned@_global_: ${task}_${algo}``).
TUNED = "experiment/tuned@_global_"
#: The algorithms whose tuned presets fit an off-policy loss of one's own.
_OFF_POLICY = ("dqn", "sac", "td3")


def tuned_line(choices: Mapping[str, Any], config_dirs: Sequence[Path] = ()) -> str | None:
    """What a run says first about its tuned settings, from Hydra's config choices: the preset
    that applied (``experiment/tuned/TASK_ALGO.yaml``), or that none exists for this task and
    algorithm (the run then trains on the generic defaults) and how to borrow one. ``None``
    for a task without the tuned entry in its defaults list (the supervised ones)."""
    if TUNED not in choices:
        return None
    task, algo, picked = choices.get("task"), choices.get("algo"), choices.get(TUNED)
    if picked is None:
        return (f"no tuned settings ({TUNED}=null): generic defaults for {task} with "
                f"algo={algo}")
    dirs = [CONF_DIR, *config_dirs]
    found = [d for d in dirs if (Path(d) / "experiment" / "tuned" / f"{picked}.yaml").is_file()]
    if found:
        where = "" if found[-1] == CONF_DIR else f" in {found[-1]}"
        return f"tuned settings: experiment/tuned/{picked}.yaml{where} ({task}, algo={algo})"
    presets = [p for p in available("experiment/tuned", config_dirs) if p.startswith(f"{task}_")]
    line = (f"no tuned settings for {task} with algo={algo} (no experiment/tuned/{picked}.yaml):"
            " the generic defaults apply")
    if not presets:
        return line
    off_policy = any("offpolicy" in _text(Path(d) / "algo" / f"{algo}.yaml") for d in dirs)
    fitting = [p for p in presets if p.rpartition("_")[2] in _OFF_POLICY] if off_policy else []
    example = (fitting or [p for p in presets if p.endswith("_ppo")] or presets)[0]
    others = ", ".join(p.rpartition("_")[2] for p in presets)
    return (f"{line}; borrow a preset with {TUNED}={example} ({task} has {others}; its keys "
            f"must fit your algorithm), or keep a tuned algorithm and swap its loss: "
            f"algo={example.rpartition('_')[2]} task.loss._target_=mymod.my_loss")


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
