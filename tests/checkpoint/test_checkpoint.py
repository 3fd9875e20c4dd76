"""Checkpoint files: safe loading (malicious, truncated, foreign), the Checkpointer's files
(periodic, final, best, pruning, atomic writes) and the resume-path rules."""

from __future__ import annotations

import errno
import logging
import os
import pickle
import re
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn

from beyondfit import BeyondfitError, Callback, Checkpointer, Engine, TensorBatches, resume
from beyondfit.checkpoint import config_changes, step_checkpoints
from beyondfit.checkpoint.resume import resume_candidates, resume_run_dir
from beyondfit.core.state.serialization import CorruptCheckpointError, safe_load

import kit


class MakesFile:
    """A pickle payload: unpickling it calls ``open(target, "w")``, creating a file."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self) -> tuple:
        return (open, (self.target, "w"))


def engine_and_data(hidden: int = 16, callbacks: tuple[Callback, ...] = ()
                    ) -> tuple[Engine, TensorBatches]:
    engine = kit.make_engine(lambda: kit.mlp(4, hidden), log_every=1, callbacks=callbacks)
    return engine, kit.sum_batches()


def val_of(engine: Engine) -> list:
    x = torch.linspace(-1, 1, 16).reshape(4, 4)
    return [(x, x.sum(1, keepdim=True))]


# ---------------------------------------------------------------- malicious files
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("fmt", ["torch", "raw-pickle"])
def test_malicious_checkpoint_is_refused_and_creates_nothing(tmp_path: Path, fmt: str) -> None:
    target = tmp_path / "pwned"
    run_dir = tmp_path / "run"
    path = run_dir / "checkpoints" / "step-00000005.pt"
    path.parent.mkdir(parents=True)
    payload = {"model": MakesFile(target)}
    if fmt == "torch":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))

    # The payload is live: an unsafe load would run it.
    if fmt == "torch":
        torch.load(path, weights_only=False)
    else:
        pickle.loads(path.read_bytes())
    assert target.exists()
    target.unlink()

    if fmt == "raw-pickle":
        # Not a torch archive at all: not a checkpoint, and never unpickled.
        with pytest.raises(CorruptCheckpointError, match="or not a checkpoint"):
            safe_load(path)
        assert not target.exists()
        return
    with pytest.raises(BeyondfitError, match="refused") as info:
        safe_load(path)
    assert str(path) in str(info.value)
    assert "io.open" in str(info.value) and "\x1b" not in str(info.value)
    assert not isinstance(info.value, CorruptCheckpointError)  # never skipped as "corrupt"
    engine, _ = engine_and_data()
    with pytest.raises(BeyondfitError, match="refused"):
        engine.load(path)
    with pytest.raises(BeyondfitError, match="refused"):
        resume(engine, run_dir)  # a run directory does not fall back past an unsafe file
    assert not target.exists()


# ---------------------------------------------------------------- truncated files
def write_run(run_dir: Path, steps: int = 10, every: int = 5) -> Engine:
    ckpt = Checkpointer(run_dir / "checkpoints", every=every, keep=5, monitor=None)
    engine, data = engine_and_data(callbacks=(ckpt,))
    engine.fit(data, max_steps=steps, epochs=10)
    return engine


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_checkpoint_is_a_clear_error_naming_the_file(tmp_path: Path) -> None:
    write_run(tmp_path)
    path = tmp_path / "checkpoints" / "step-00000010.pt"
    truncate(path)
    with pytest.raises(CorruptCheckpointError, match="truncated or corrupt") as info:
        safe_load(path)
    assert str(path) in str(info.value)
    engine, _ = engine_and_data()
    with pytest.raises(CorruptCheckpointError):
        resume(engine, path)  # a file named explicitly: no fallback
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CorruptCheckpointError, match=r"empty\.pt"):
        safe_load(empty)


def test_run_dir_falls_back_to_the_previous_checkpoint_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_run(tmp_path)
    truncate(tmp_path / "checkpoints" / "step-00000010.pt")
    engine, _ = engine_and_data()
    with caplog.at_level(logging.WARNING, logger="beyondfit"):
        path, _ = resume(engine, tmp_path)
    assert path.name == "step-00000005.pt"
    assert engine.global_step == 5
    assert "step-00000010.pt" in caplog.text and "falling back to step-00000005.pt" in caplog.text


def test_run_dir_with_only_corrupt_checkpoints_is_an_error(tmp_path: Path) -> None:
    write_run(tmp_path)
    for path in step_checkpoints(tmp_path / "checkpoints"):
        truncate(path)
    engine, _ = engine_and_data()
    with pytest.raises(BeyondfitError, match=r"every checkpoint .* is truncated or corrupt"):
        resume(engine, tmp_path)


# ---------------------------------------------------------------- foreign checkpoints
def test_checkpoint_of_another_model_shape_lists_mismatched_keys(tmp_path: Path) -> None:
    write_run(tmp_path)
    other, _ = engine_and_data(hidden=8)
    with pytest.raises(BeyondfitError) as info:
        resume(other, tmp_path)
    message = str(info.value)
    assert "0.weight (16, 4) vs model (8, 4)" in message
    assert "different task or model shape" in message


def test_checkpoint_of_another_task_lists_missing_and_unexpected_keys(tmp_path: Path) -> None:
    write_run(tmp_path)
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict(encoder=nn.Linear(4, 2), decoder=nn.Linear(2, 4)))
    opt = torch.optim.SGD(model.parameters(), 0.1)
    engine = Engine(model, lambda m, b: m(b).pow(2).mean(), opt, device="cpu")
    with pytest.raises(BeyondfitError) as info:
        resume(engine, tmp_path)
    message = str(info.value)
    assert "missing encoder.weight" in message and "unexpected 0.weight" in message


# ---------------------------------------------------------------- the Checkpointer
def test_periodic_final_and_pruned_files(tmp_path: Path) -> None:
    write_run(tmp_path, steps=23, every=5)  # 5 batches per epoch
    names = [p.name for p in step_checkpoints(tmp_path / "checkpoints")]
    # every 5 steps and the final one (23), newest 5 kept
    assert names == [f"step-{s:08d}.pt" for s in (23, 20, 15, 10, 5)]
    ckpt = Checkpointer(tmp_path / "c2", every=5, keep=2, monitor=None)
    engine, data = engine_and_data(callbacks=(ckpt,))
    engine.fit(data, max_steps=23, epochs=10)
    assert [p.name for p in step_checkpoints(tmp_path / "c2")] == [
        "step-00000023.pt", "step-00000020.pt"
    ]
    assert ckpt.last_path == tmp_path / "c2" / "step-00000023.pt"
    final = safe_load(ckpt.last_path)
    assert final["counters"]["global_step"] == 23
    for a, b in zip(final["model"].values(), engine.model.state_dict().values()):
        assert torch.equal(a, b)


def test_every_none_saves_only_at_the_end(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, every=None, monitor=None)
    engine, data = engine_and_data(callbacks=(ckpt,))
    engine.fit(data, epochs=2)
    assert [p.name for p in step_checkpoints(tmp_path)] == ["step-00000010.pt"]


class Record(Callback):
    """Remembers the model's weights after each evaluation."""

    def __init__(self) -> None:
        self.values: list[tuple[float, dict[str, torch.Tensor]]] = []

    def on_eval_end(self, engine: Engine, logs: dict) -> None:
        state = {k: v.clone() for k, v in engine.model.state_dict().items()}
        self.values.append((logs["val_loss"], state))


@pytest.mark.parametrize("mode", ["min", "max"])
def test_best_checkpoint_holds_the_best_monitored_state(tmp_path: Path, mode: str) -> None:
    record = Record()
    ckpt = Checkpointer(tmp_path, every=3, keep=1, monitor="val_loss", mode=mode)
    engine, data = engine_and_data(callbacks=(record, ckpt))
    engine.fit(data, epochs=6, val_data=val_of(engine), eval_every=2)
    pick = min if mode == "min" else max
    best_value, best_state = pick(record.values, key=lambda r: r[0])
    saved = safe_load(tmp_path / "best.pt")
    for key, value in best_state.items():
        assert torch.equal(saved["model"][key], value)
    assert saved["callbacks"]["Checkpointer"]["best"] == best_value
    assert ckpt.best == best_value


def test_checkpoints_store_the_extra_data(tmp_path: Path) -> None:
    config = {"task": {"hidden": [16]}, "seed": 0, "optimizer": {"lr": 0.01}}
    ckpt = Checkpointer(tmp_path, every=None, monitor=None, extra={"config": config})
    engine, data = engine_and_data(callbacks=(ckpt,))
    engine.fit(data, epochs=1)
    assert safe_load(ckpt.last_path)["config"] == config  # type: ignore[arg-type]


def test_a_failed_write_leaves_the_previous_checkpoint_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = Checkpointer(tmp_path, every=None, monitor=None)
    engine, data = engine_and_data(callbacks=(ckpt,))
    engine.fit(data, epochs=1)
    path = tmp_path / "step-00000005.pt"
    before = path.read_bytes()

    def dies_half_way(obj: object, f: object) -> None:
        f.write(before[:100])  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr("beyondfit.core.state.serialization.torch.save", dies_half_way)
    with pytest.raises(OSError):
        ckpt.save(engine)  # the same step: would replace the file
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000005.pt"]  # no temp file


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_write_torch_reports_as_a_runtime_error_is_the_os_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """A full disk (or a file-size limit) under torch's zip writer surfaces as a RuntimeError
    ("unexpected pos") raised while handling the write's OSError, which names no file: issue
    29's full disk was two lines and no path. atomic_save raises the OSError, naming the file."""
    from beyondfit.core.state import serialization

    ckpt = Checkpointer(tmp_path, every=None, monitor=None)
    engine, data = engine_and_data(callbacks=(ckpt,))
    engine.fit(data, epochs=1)
    written = [0]

    def write(self: object, chunk: bytes) -> int:
        written[0] += len(chunk)
        if written[0] > 2000:  # part of the way: as a disk that fills while writing
            raise OSError(code, os.strerror(code))
        return self.file.write(chunk)  # type: ignore[attr-defined]

    monkeypatch.setattr(serialization._HashingWriter, "write", write)
    with pytest.raises(OSError) as info:
        ckpt.save(engine)
    assert info.value.errno == code and info.value.filename == str(tmp_path / "step-00000005.pt")
    assert isinstance(info.value.__cause__, RuntimeError)  # what torch raised
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000005.pt"]  # no temp file
    assert safe_load(tmp_path / "step-00000005.pt")["counters"]["global_step"] == 5


def test_stale_temp_files_are_removed_and_newer_files_set_aside(tmp_path: Path) -> None:
    write_run(tmp_path, steps=10, every=5)
    folder = tmp_path / "checkpoints"
    (folder / ".step-00000015.pt.abc.tmp").write_bytes(b"half a checkpoint")
    ckpt = Checkpointer(folder, every=5, monitor=None)
    engine, data = engine_and_data(callbacks=(ckpt,))
    resume(engine, folder / "step-00000005.pt")  # continue from the earlier one
    engine.fit(data, max_steps=7, epochs=10)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["step-00000005.pt", "step-00000007.pt", "superseded-step-00000010.pt"]


@pytest.mark.parametrize(
    "kwargs, key",
    [({"every": 0}, "every=0"), ({"keep": 0}, "keep=0"),
     ({"mode": "avg"}, "mode='avg'"), ({"every": 2.5}, "every=2.5")],
)
def test_bad_checkpointer_settings_are_named(tmp_path: Path, kwargs: dict, key: str) -> None:
    with pytest.raises(BeyondfitError, match=re.escape(key)):
        Checkpointer(tmp_path, **kwargs)


def test_unknown_checkpoint_config_key_is_named(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from beyondfit.cli.run import build_checkpointer

    cfg = OmegaConf.create({"checkpoint": {"every": 5, "keep_best": True}})
    with pytest.raises(BeyondfitError, match=r"unknown checkpoint option\(s\) \['keep_best'\]"):
        build_checkpointer(cfg, tmp_path)


# ---------------------------------------------------------------- resume paths
def test_resume_paths(tmp_path: Path) -> None:
    write_run(tmp_path / "run")
    run_dir = (tmp_path / "run").resolve()
    file = run_dir / "checkpoints" / "step-00000005.pt"
    assert resume_run_dir(run_dir) == run_dir
    assert resume_run_dir(run_dir / "checkpoints") == run_dir
    assert resume_run_dir(file) == run_dir
    loose = tmp_path / "loose.pt"
    loose.write_bytes(file.read_bytes())
    assert resume_run_dir(loose) is None
    assert resume_candidates(run_dir)[0][0].name == "step-00000010.pt"
    assert resume_candidates(loose) == ([loose], True)
    with pytest.raises(BeyondfitError, match="does not exist"):
        resume_candidates(tmp_path / "nope")
    (tmp_path / "fresh").mkdir()
    with pytest.raises(BeyondfitError, match=r"no step-.* checkpoint in"):
        resume_candidates(tmp_path / "fresh")


def test_config_changes_lists_dotted_keys() -> None:
    saved = {"seed": 0, "train": {"epochs": 5, "stop": None}, "resume": None}
    current = {"seed": 0, "train": {"epochs": 8, "stop": None}, "resume": "x", "new": 1}
    assert config_changes(saved, current, ignore=("resume",)) == [
        "new: '<absent>' -> 1", "train.epochs: 5 -> 8"
    ]
