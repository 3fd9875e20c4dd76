"""The research loop's checks, set by the ``debug`` config group (``conf/debug/*.yaml``).

- ``+debug=fast``: does the experiment run end to end? Two optimizer steps, an evaluation, a
  checkpoint after the first step, and a resume from it (a fresh task and engine, as a new
  process would build them) for the second; trackers and plots off; an RL task's greedy
  evaluations and confirming evaluation play ``debug.episodes`` (1) episode each.
- ``+debug=overfit``: train and evaluate on the same first ``debug.overfit_batches`` training
  batches for many epochs: a new loss that cannot drive its value to ~0 there has a bug.
- ``+debug=anomaly``: name the operation that first makes a NaN
  (:func:`beyondfit.core.anomaly.detect_anomaly`).
- ``+debug=profile``: a torch.profiler trace of a few steps and a table of where a step's time
  goes (:class:`beyondfit.observers.profiler.StepProfiler`).

Each works for any task (built-in or the user's own; supervised, self-supervised or RL): it
changes what the engine is given, never the task, except for how many greedy episodes an RL
task's evaluations play (``debug.episodes``: a 2-step check has no use for a 100-episode
verdict).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from beyondfit import Task
from beyondfit.core.callbacks import Callback
from beyondfit.core.early_stopping import EarlyStopping
from beyondfit.core.errors import BeyondfitError

log = logging.getLogger("beyondfit")

# train(cfg, first_part): the command line's run; the first part trains one step, no report.
Train = Callable[[DictConfig, bool], list[dict[str, float]]]


def settings(cfg: DictConfig) -> dict[str, Any]:
    """The ``debug`` section with its defaults (a config composed without it: all off)."""
    section = cfg.get("debug") or {}
    return {
        "resume_check": bool(section.get("resume_check", False)),
        "overfit_batches": section.get("overfit_batches"),
        "anomaly": bool(section.get("anomaly", False)),
        "profile": section.get("profile"),
        "episodes": section.get("episodes"),
    }


# The task settings debug.episodes caps: those of every RL task built on conf/base/rl.yaml.
EPISODE_COUNTS = ("eval_episodes", "confirm_episodes")


def cap_episodes(task: DictConfig, episodes: int | None) -> None:
    """``debug.episodes``: at most ``episodes`` greedy episodes per evaluation and in the
    confirming one (0, no confirming evaluation, stays 0), for a task config that has these
    counts; any other task is left as it is."""
    if episodes is None:
        return
    for key in EPISODE_COUNTS:
        value = task.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > episodes:
            task[key] = episodes


def with_resume_check(cfg: DictConfig, run_dir: Path, train: Train) -> list[dict[str, float]]:
    """``debug.resume_check``: train one step (the run ends with a checkpoint; the task's
    report is left to the second part), then resume the run from that checkpoint with a fresh
    task and engine and train to ``train.max_steps`` (two steps at least). Returns the resumed
    run's history."""
    first = train(cfg, True)
    if not first:
        raise BeyondfitError("debug.resume_check: the first part logged no epoch row")
    resumed = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    resumed.resume = str(run_dir)
    history = train(resumed, False)
    steps = [row.get("step", 0.0) for row in history]
    if not steps or max(steps) < 2:
        raise BeyondfitError(
            f"debug.resume_check: the resumed run ended at step {max(steps, default=0):g}, not "
            "past the checkpoint's step 1; set train.max_steps to 2 or more"
        )
    log.info("debug: resumed from the step-1 checkpoint and trained to step %d", max(steps))
    return history


def overfit(task: Task, batches: int) -> None:
    """``debug.overfit_batches``: train on the first ``batches`` training batches only, again
    and again; evaluate on the first ``batches`` validation batches (an evaluator callable,
    such as RL's greedy episodes, is left out: it would cost more than the check). The task's
    early stopping is off (and so is a refit): the validation loss is expected to rise while
    the training loss falls to ~0, which is the check."""
    fixed = list(itertools.islice(iter(task.train_data), batches))
    if not fixed:
        raise BeyondfitError("debug.overfit_batches: the task's training data has no batches")
    # (A rollout collector's envs stay open: the task's finish closes them, as always.)
    task.train_data = fixed
    if task.val_data is not None and not callable(task.val_data):
        task.val_data = list(itertools.islice(iter(task.val_data), batches))
    else:
        task.val_data = None
    task.eval_every = None
    task.callbacks = [c for c in task.callbacks if not isinstance(c, EarlyStopping)]
    task.refit_data = None  # nothing to refit: the check is the fixed batches themselves
    log.info("debug: overfitting %d fixed training batch(es)", len(fixed))


def callbacks(options: dict[str, Any], run_dir: Path) -> list[Callback]:
    """The callbacks the checks add: the step profiler, last (it times the others)."""
    if not options["profile"]:
        return []
    from beyondfit.observers.profiler import StepProfiler

    return [StepProfiler(run_dir / "profile", steps=int(options["profile"]), stop=True)]


@contextlib.contextmanager
def checks(options: dict[str, Any]) -> Iterator[None]:
    """Around training: anomaly detection when asked for (costs nothing otherwise)."""
    if not options["anomaly"]:
        yield
        return
    from beyondfit.core.anomaly import detect_anomaly

    with detect_anomaly():
        yield
