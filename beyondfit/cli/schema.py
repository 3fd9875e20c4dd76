"""The config's schema: the type and allowed range of every engine, train, checkpoint,
objective and progress option, and of the top-level ``seed``, ``device``, ``threads``,
``resume`` and ``plots``.

Hydra checks the types while it composes (``train.epochs=abc``, ``engine.clip_nrom=1`` never
reach Python); :func:`check_config` then checks the ranges and choices, all before anything
is built. The dataclasses carry no defaults of their own: ``conf/config.yaml`` holds the
values and their documentation, this module what they may be. The task, optimizer, scheduler
and logger sections stay free-form (their builders check them).
"""

# OmegaConf 2.3 reads Optional[X], not X | None, in structured configs.
# ruff: noqa: UP045

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig

from beyondfit.core.errors import BeyondfitError
from beyondfit.core.options import OPTIONS, OptionError, Rule, check_learning_rate

#: The name ``conf/config.yaml``'s defaults list gives the schema.
SCHEMA_NAME = "beyondfit_schema"

#: The most intra-op threads a run may ask for (far more than any machine's cores).
MAX_THREADS = 1024

# Seeds go to NumPy's legacy generator (0 .. 2**32 - 1) and to Gymnasium (non-negative).
_SEED_MAX = 2**32 - 1


def _option(option: str) -> dict[str, Any]:
    # A key the library checks too: its rule is the library's (beyondfit.core.options).
    return {"rule": OPTIONS[option], "option": option}


def _number(**bounds: Any) -> dict[str, Any]:
    # A key only the command line reads: its rule lives here.
    return {"rule": Rule(**bounds)}


def _choice(*allowed: Any) -> dict[str, Any]:
    return {"rule": Rule(choices=allowed)}


# The fields have no defaults (MISSING): conf/config.yaml sets every value and says what it
# means; a field's metadata holds its rule, the library's own (``_option``) where a library
# class takes the value, else the command line's (``_number``, ``_choice``).


@dataclass
class EngineConfig:
    """``engine.*``: the step engine's options (:class:`beyondfit.core.engine.Engine`)."""

    precision: str = MISSING  # checked by the engine: 32 | bf16 | 16 (and spellings)
    clip_norm: Optional[float] = field(default=MISSING, metadata=_option("Update.clip_norm"))
    clip_value: Optional[float] = field(default=MISSING, metadata=_option("Update.clip_value"))
    accumulate: int = field(default=MISSING, metadata=_option("Engine.accumulate"))
    compile: Any = field(default=MISSING, metadata=_option("Engine.compile"))
    on_nonfinite: str = field(default=MISSING, metadata=_option("Engine.on_nonfinite"))
    max_skips: int = field(default=MISSING, metadata=_option("Engine.max_skips"))
    log_every: int = field(default=MISSING, metadata=_option("Engine.log_every"))
    track_grad_norm: bool = MISSING
    strategy: str = field(default=MISSING, metadata=_option("Engine.strategy"))


@dataclass
class TrainConfig:
    """``train.*``: how long to train, when to evaluate, when to stop early."""

    epochs: int = field(default=MISSING, metadata=_option("fit.epochs"))
    max_steps: Optional[int] = field(default=MISSING, metadata=_option("fit.max_steps"))
    eval_every: Optional[int] = field(default=MISSING, metadata=_option("fit.eval_every"))
    stop: Optional[str] = MISSING  # parsed by StopRule


@dataclass
class CheckpointConfig:
    """``checkpoint.*``: when checkpoints are written and which is kept as best."""

    every: Optional[int] = field(default=MISSING, metadata=_option("Checkpointer.every"))
    keep: int = field(default=MISSING, metadata=_option("Checkpointer.keep"))
    monitor: Optional[str] = MISSING
    mode: str = field(default=MISSING, metadata=_option("Monitor.mode"))


@dataclass
class ObjectiveConfig:
    """``objective.*``: what a run returns to an optimizing sweeper (``+search=NAME``)."""

    metric: Optional[str] = MISSING
    mode: str = field(default=MISSING, metadata=_option("Monitor.mode"))


@dataclass
class ProgressConfig:
    """``progress.*``: the console's bar or epoch lines."""

    bar: Any = field(default=MISSING, metadata=_option("progress_callback.bar"))
    refresh: float = field(default=MISSING, metadata=_option("progress_callback.refresh"))
    every: Optional[int] = field(default=MISSING, metadata=_option("progress_callback.every"))
    interval: Optional[float] = field(default=MISSING,
                                      metadata=_option("progress_callback.interval"))
    metrics: Optional[list[str]] = MISSING


@dataclass
class DebugConfig:
    """``debug.*``: the research loop's checks (the ``debug`` group sets them:
    ``+debug=fast|overfit|anomaly|profile``; :mod:`beyondfit.cli.debug`)."""

    resume_check: bool = MISSING
    overfit_batches: Optional[int] = field(default=MISSING,
                                           metadata=_number(integer=True, at_least=1,
                                                            allow_none=True))
    anomaly: bool = MISSING
    profile: Optional[int] = field(default=MISSING,
                                   metadata=_number(integer=True, at_least=1, allow_none=True))
    episodes: Optional[int] = field(default=MISSING,
                                    metadata=_number(integer=True, at_least=1, allow_none=True))


@dataclass
class BeyondfitConfig:
    """The whole config: the checked sections plus the free-form groups."""

    seed: int = field(default=MISSING,
                      metadata=_number(integer=True, at_least=0, at_most=_SEED_MAX))
    device: str = MISSING  # checked by resolve_device: auto, cpu, cuda, cuda:N, mps
    # Far more threads than any machine has cores crash inside torch (no message).
    threads: Optional[int] = field(default=MISSING, metadata=_number(
        integer=True, at_least=1, at_most=MAX_THREADS, allow_none=True, example="threads=4"))
    resume: Optional[str] = MISSING
    resume_extend: bool = MISSING
    plots: Any = field(default=MISSING, metadata=_choice("auto", True, False))
    engine: EngineConfig = field(default_factory=EngineConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    # Free-form: each is checked by what builds it.
    task: Any = None
    optimizer: Any = None
    scheduler: Any = None
    logger: Any = None


def register() -> None:
    """Put the schema into Hydra's ConfigStore (``conf/config.yaml`` lists it first)."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=BeyondfitConfig)


register()


# ---------------------------------------------------------------------- ranges and choices
def check_config(cfg: DictConfig) -> None:
    """Check the ranges and choices of every schema'd value; raise one clear error.

    Types were checked while composing; this catches ``seed=99999999999999999999``,
    ``threads=-2``, ``engine.accumulate=0``, ``train.eval_every=0`` and the like, before
    anything is built. The optimizer's learning rate is checked here too (finite, in
    ``(0, 1e3]``: see :func:`check_learning_rate`).
    """
    _check_section(BeyondfitConfig, cfg, "")
    optimizer = cfg.get("optimizer")
    if isinstance(optimizer, DictConfig):
        _check_optimizer_keys(optimizer)
    if isinstance(optimizer, DictConfig) and "lr" in optimizer:
        check_learning_rate(optimizer.get("lr"))


def _check_optimizer_keys(optimizer: DictConfig) -> None:
    """An option the optimizer's class does not take, added with ``+`` (``+optimizer.
    lerning_rate=1e-3``): the closest it does take, before anything is built. A target that
    cannot be read, or takes ``**kwargs``, is left to the builder."""
    import inspect

    from hydra.utils import get_class

    try:
        parameters = inspect.signature(get_class(str(optimizer.get("_target_")))).parameters
    except Exception:  # the builder says what is wrong with the target
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    accepted = [name for name in parameters if name != "params"]
    for name in map(str, optimizer):
        if name.startswith("_") or name == "fused" or name in accepted:
            continue  # fused: a speed hint the builder drops where there is no kernel
        lowered = name.lower().replace("-", "_")
        if "lr" in accepted and (lowered in _LEARNING_RATE or difflib.get_close_matches(
                lowered, _LEARNING_RATE, cutoff=0.8)):
            close = ["lr"]
        else:
            close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
        hint = f"did you mean optimizer.{close[0]}? " if close else ""
        raise BeyondfitError(f"unknown key 'optimizer.{name}'; {hint}the optimizer "
                             f"({optimizer.get('_target_')}) takes: {', '.join(accepted)}")


def _check_section(schema: type, section: DictConfig, prefix: str) -> None:
    known = {spec.name for spec in fields(schema)}
    for name in section:  # keys added with +KEY=VALUE bypass Hydra's own check
        if name not in known:
            raise BeyondfitError(_unknown_key(prefix.rstrip("."), str(name)))
    for spec in fields(schema):
        key = f"{prefix}{spec.name}"
        value = section.get(spec.name)
        sub = _SECTIONS.get(key)
        if sub is not None:
            if isinstance(value, DictConfig):
                _check_section(sub, value, f"{key}.")
            continue
        rule = spec.metadata.get("rule")
        if rule is not None:
            rule.check(key, value)


def _optional(spec: Any) -> bool:
    return "Optional" in str(spec.type)


# ---------------------------------------------------------------------- library words to keys
def config_keys() -> dict[str, str]:
    """``{OPTIONS key: config key}`` for every schema key the library checks too; an option
    two keys share (``Monitor.mode``) maps to ``""``: its message cannot say which."""
    keys: dict[str, str] = {}

    def walk(schema: type, prefix: str) -> None:
        for spec in fields(schema):
            key = f"{prefix}{spec.name}"
            if key in _SECTIONS:
                walk(_SECTIONS[key], f"{key}.")
            elif "option" in spec.metadata:
                option = spec.metadata["option"]
                keys[option] = "" if option in keys else key

    walk(BeyondfitConfig, "")
    return keys


def in_config_words(exc: BeyondfitError) -> str:
    """The message of an error the library raised, with its Python argument names replaced
    by the config keys a command-line user typed: the one place that translates.

    An :class:`~beyondfit.core.options.OptionError` names its option; other messages name an
    argument in suggestions (``set on_nonfinite='skip'``), each replaced where exactly one key
    holds it.
    """
    message = str(exc)
    keys = config_keys()
    if isinstance(exc, OptionError) and keys.get(exc.option) and message.startswith(
            f"{exc.name}="):
        message = keys[exc.option] + message[len(exc.name):]
    for option, key in keys.items():
        name = option.rpartition(".")[2]
        if key and name not in _AMBIGUOUS:
            message = re.sub(rf"(?<![\w.]){re.escape(name)}=", f"{key}=", message)
    return message


#: Argument names too common to replace inside a sentence.
_AMBIGUOUS = {"every", "mode", "keep", "bar", "epochs", "refresh"}


# ---------------------------------------------------------------------- Hydra's errors, one line
_SECTIONS = {
    "": BeyondfitConfig, "engine": EngineConfig, "train": TrainConfig,
    "checkpoint": CheckpointConfig, "objective": ObjectiveConfig, "progress": ProgressConfig,
    "debug": DebugConfig,
}  # fmt: skip
_FREE_FORM = ("task", "optimizer", "scheduler", "logger")
_KIND = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "text"}


def config_error_line(exc: BaseException) -> str | None:
    """One line for an error Hydra or OmegaConf raised while composing, or ``None``.

    Hydra prints these as several lines (a message, OmegaConf's ``full_key``/``object_type``
    block, a hint about HYDRA_FULL_ERROR); this names the key and what it takes.
    """
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    chain = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 5:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    parse = next((e for e in chain if isinstance(e, OverrideParseException)), None)
    if parse is not None:
        return _parse_error_line(parse)
    omega = next((e for e in chain if isinstance(e, OmegaConfBaseException)), None)
    hydra_exc = next((e for e in chain if isinstance(e, HydraException)), None)
    if omega is None and hydra_exc is None:
        return None
    override = _override_of(str(hydra_exc or ""))
    added = _needs_plus(str(hydra_exc or ""))
    if added:
        return added
    if omega is not None:
        line = _omegaconf_line(omega, override)
        if line:
            return line
    text = str(hydra_exc or omega).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _override_of(text: str) -> str:
    match = re.search(r"(?:Error merging override|Could not override '?)\s*'?([^'\n]+)", text)
    return match.group(1).strip() if match else ""


def _parse_error_line(exc: Any) -> str:
    # Hydra's grammar reads <, >, =, quotes, brackets and commas itself.
    override = str(getattr(exc, "override", "") or "").strip()
    reason = str(getattr(exc, "message", "") or exc).strip().splitlines()[0]
    reason = reason.split(": ", 1)[0] if reason.startswith("LexerNoViableAlt") else reason
    what = f"the override {override!r}" if override else "an override"
    return (
        f"cannot parse {what} ({reason}); quote a value with special characters for Hydra "
        "and the whole override for the shell, e.g. 'train.stop=\"val_loss<=0.3\"'"
    )


def _omegaconf_line(exc: Any, override: str) -> str | None:
    from omegaconf.errors import ConfigTypeError, ValidationError

    key = getattr(exc, "full_key", None) or ""
    message = str(getattr(exc, "msg", None) or exc).strip().splitlines()[0]
    missing = re.search(r"Key '([^']+)' (?:is )?not in", message)
    if missing:  # ConfigKeyError or ConfigAttributeError, by how the key was reached
        name = missing.group(1)
        section = key.rpartition(".")[0] if key.endswith(name) else key
        return _unknown_key(section, name, _root(exc))
    section_name = override.partition("=")[0].lstrip("+~")
    if section_name in _SECTIONS and section_name and (
        isinstance(exc, ConfigTypeError) or "is not a subclass of" in message
    ):
        return (f"{override!r}: {section_name} is a section, not a value; set its keys, "
                f"e.g. {section_name}.{fields(_SECTIONS[section_name])[0].name}=VALUE")
    if isinstance(exc, ValidationError):
        value = getattr(exc, "value", None)
        what = _expected(key)
        if "is not Optional" in message or value is None:
            return f"{key}=null is not allowed; it must be {what}"
        return f"{key}={value!r}; it must be {what}"
    return None


def _needs_plus(text: str) -> str | None:
    """``task=cartpole`` where ``+task=cartpole`` was meant: Hydra can only override a group
    the defaults list already picks, and ``config.yaml`` picks no task (nor experiment, search
    or debug preset); and the other way round, ``+GROUP=X`` for a group it picks already (the
    RL tasks' ``experiment/tuned@_global_``)."""
    twice = re.search(r"Multiple values for (\S+?)\. To override a value use 'override "
                      r"\S+: ([^']+)'", text)
    if twice is not None:  # +GROUP=X where the defaults list has GROUP already
        group, value = twice.groups()
        return (f"'+{group}={value}': the defaults list picks {group} already; override it "
                f"without the +: {group}={value}")
    exists = re.search(r"Could not append to config\. An item is already at '([^']+)'", text)
    if exists is not None:  # +KEY=VALUE for a key the config has
        key = exists.group(1)
        return f"'+{key}=...': {key} is set already; override it without the +: {key}=VALUE"
    match = re.search(r"Could not override '([^']+)'\. No match in the defaults list", text)
    if match is None:
        return None
    group = match.group(1)
    plus = re.search(r"use (\+\S+)", text)
    typed = plus.group(1) if plus else f"+{group}=NAME"
    return (f"{typed[1:]!r}: write {typed} (with the +); nothing picks a {group} by default, "
            "so one is added, not overridden")


def _root(exc: Any) -> Any:
    """The whole composed config an OmegaConf error was raised in (``None`` if unknown)."""
    node = getattr(exc, "parent_node", None)
    try:
        return node._get_root() if node is not None else None
    except Exception:  # only a hint is lost
        return None


def _unknown_key(section: str, name: str, root: Any = None) -> str:
    """The line for an unknown key: the closest existing keys (``difflib`` over the schema's
    fields, or over the composed config's keys in the free-form sections); a learning rate
    anywhere but where it lives points there."""
    schema = _SECTIONS.get(section)
    full = f"{section}.{name}" if section else name
    if schema is None:
        return _unknown_free_key(section, name, root)
    known = [f.name for f in fields(schema)]
    if section == "":
        known = [n for n in known if n not in _FREE_FORM]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {section + '.' if section else ''}{close[0]}? " if close else ""
    where = f"{section} options" if section else "top-level keys"
    return f"unknown key {full!r}; {hint}{where}: {', '.join(sorted(known))}"


#: What a learning rate is called where it does not live (difflib finds the misspellings).
_LEARNING_RATE = ("lr", "learning_rate", "learningrate", "lrate", "learn_rate", "step_size")


def _unknown_free_key(section: str, name: str, root: Any) -> str:
    """An unknown key in a free-form section (``task``, ``optimizer``, ...): its closest keys
    in the composed config ``root``; a new key with ``+`` only when none is close."""
    full = f"{section}.{name}" if section else name
    keys = _config_keys(root)
    lowered = name.lower().replace("-", "_")
    if lowered in _LEARNING_RATE or difflib.get_close_matches(lowered, _LEARNING_RATE, cutoff=0.8):
        return f"unknown key {full!r}; {_learning_rate_hint(section, keys, root)}"
    close = _closest(section, name, keys)
    if close:
        return (f"unknown key {full!r}; did you mean {' or '.join(close)}? (a new option of "
                f"your own instead: +{full}=VALUE)")
    return f"unknown key {full!r}; add a new key with +{full}=VALUE"


def _learning_rate_hint(section: str, keys: list[str], root: Any) -> str:
    """Where the learning rate lives: ``optimizer.lr``, or for one update of several (the
    off-policy algorithms) ``task.optimizers.NAME.lr``."""
    if section.startswith("task.optimizers.") and section.count(".") == 2:
        return f"did you mean {section}.lr? (this update's own learning rate)"
    now = _value(root, "optimizer.lr")
    said = f" (now {now})" if now is not None else ""
    if section == "optimizer":
        hint = f"did you mean optimizer.lr?{said}"
    else:
        hint = f"the learning rate lives in the optimizer group: optimizer.lr=VALUE{said}"
    task = root.get("task") if root is not None else None
    if task is not None and ("optimizers" in task or str(
            task.get("_target_", "")).endswith("offpolicy.build")):
        named = [k.split(".")[2] for k in keys if k.count(".") == 2
                 and k.startswith("task.optimizers.")]
        example = named[0] if named else "NAME"
        hint += (f"; one update's own, of several: task.optimizers.{example}.lr=VALUE "
                 "(NAME as in the update's logged NAME/loss)")
    return hint


def _closest(section: str, name: str, keys: list[str]) -> list[str]:
    """Up to two existing keys close to ``section.name``: a misspelt name in the same section,
    else the same (or a close) name in another section."""
    siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == section]
    prefix = f"{section}." if section else ""
    near = [prefix + m for m in difflib.get_close_matches(name, siblings, n=2, cutoff=0.7)]
    if near:
        return near
    by_name: dict[str, list[str]] = {}
    for key in keys:
        by_name.setdefault(key.rpartition(".")[2], []).append(key)
    for match in difflib.get_close_matches(name, list(by_name), n=2, cutoff=0.85):
        near += by_name[match]
    return near[:2]


def _config_keys(root: Any, prefix: str = "") -> list[str]:
    """Every dotted key of the composed config (sections too), Hydra's own left out; no
    interpolation is resolved."""
    if not isinstance(root, DictConfig):
        return []
    found = []
    for name in root.keys():
        key = f"{prefix}{name}"
        if key == "hydra":
            continue
        found.append(key)
        found += _config_keys(root._get_node(name), f"{key}.")
    return found


def _value(root: Any, key: str) -> Any:
    """``root``'s value at ``key`` as the user would read it, ``None`` if it has none."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(root, key, throw_on_missing=False)
    except Exception:  # an interpolation that cannot resolve: no value shown
        return None


def _expected(key: str) -> str:
    section, _, name = key.rpartition(".")
    schema = _SECTIONS.get(section)
    spec = next((f for f in fields(schema) if f.name == name), None) if schema else None
    if spec is None:
        return "a value of the right type"
    base = re.sub(r"Optional\[(.*)\]", r"\1", str(spec.type))
    if base.startswith("list"):
        return "a list such as [loss,val_loss]" + (" or null" if _optional(spec) else "")
    kind = _KIND.get(base, base)
    rule = spec.metadata.get("rule") or Rule()
    if rule.at_least == 1 and kind == "a whole number":
        kind = "a positive whole number"
    elif rule.above == 0:
        kind = f"a positive {kind.removeprefix('a ')}"
    if rule.choices:
        kind = "one of " + ", ".join(str(c).lower() for c in rule.choices)
    return kind + (" or null" if _optional(spec) else "")
