"""Inductor's vector-ISA load check remembered between processes
(``beyondfit.core.compile.vector_isa``): a library that loaded once on this machine is not
loaded again in a child process; anything new, rebuilt, failed or unreadable is checked as
inductor checks it; a torch without the check is said on the ``compiled:`` line."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._inductor.cpu_vec_isa import VecISA

from beyondfit import Engine, TensorBatches
from beyondfit.core.compile import probe, vector_isa
from beyondfit.core.compile.probe import FEATURES

from kit import sum_data


@pytest.fixture
def children(monkeypatch, tmp_path):
    """Inductor's check as a counted stand-in (what each call would have loaded in a child),
    wrapped by :func:`remember_loads`, with the record in ``tmp_path``."""
    calls: list[str] = []
    verdicts: dict[str, bool] = {}

    def child(isa, output_path: str) -> bool:
        calls.append(output_path)
        return verdicts.get(output_path, True)

    monkeypatch.setattr(VecISA, "_probe_load", child)  # the real one is put back after
    monkeypatch.setattr(vector_isa, "record_path", lambda: tmp_path / "cache" / "record.json")
    vector_isa.remember_loads()
    vector_isa.remember_loads()  # once per process: not wrapped twice
    library = tmp_path / "isa.so"
    library.write_bytes(b"library")
    return calls, verdicts, str(library)


def _check(path: str) -> bool:
    return VecISA._probe_load(object(), path)


def test_a_library_that_loaded_once_is_not_loaded_again(children) -> None:
    calls, _, library = children
    assert _check(library) and _check(library) and _check(library)
    assert calls == [library]
    assert vector_isa.record_path().exists()


def test_a_rebuilt_library_is_checked_again(children) -> None:
    calls, _, library = children
    _check(library)
    Path(library).write_bytes(b"rebuilt library")
    stat = os.stat(library)
    os.utime(library, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    _check(library)
    assert calls == [library, library]


def test_a_failed_load_is_never_remembered(children) -> None:
    calls, verdicts, library = children
    verdicts[library] = False  # e.g. a child that timed out on a busy machine
    assert not _check(library) and not _check(library)
    assert calls == [library, library]
    verdicts[library] = True
    assert _check(library) and _check(library)
    assert len(calls) == 3


def test_an_unreadable_record_means_the_check_runs(children) -> None:
    calls, _, library = children
    record = vector_isa.record_path()
    record.parent.mkdir(parents=True)
    for text in ("{not json", '{"a": 1}', "[1, 2]"):
        record.write_text(text)
        assert _check(library)
    assert calls == [library] * 3
    assert _check(library) and len(calls) == 3  # the last check repaired the record


def test_a_missing_library_is_checked_and_not_remembered(children) -> None:
    calls, _, _ = children
    assert _check("/nonexistent/isa.so") and _check("/nonexistent/isa.so")
    assert len(calls) == 2 and not vector_isa.record_path().exists()


def _loss(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def test_a_torch_without_the_check_says_so_and_leaves_inductor_alone(
        traced, fresh_probe, monkeypatch, tmp_path, caplog) -> None:  # fmt: skip
    spec = importlib.util.find_spec("torch._inductor.cpu_vec_isa")
    source = Path(spec.origin).read_text(encoding="utf-8")
    (tmp_path / "cpu_vec_isa.py").write_text(source.replace("_probe_load", "_renamed"))
    module = types.ModuleType("torch._inductor.cpu_vec_isa")
    module.__spec__ = importlib.util.spec_from_file_location("torch._inductor.cpu_vec_isa",
                                                             tmp_path / "cpu_vec_isa.py")
    with monkeypatch.context() as only_while_probing:
        only_while_probing.setitem(sys.modules, "torch._inductor.cpu_vec_isa", module)
        probe.findings()
    before = VecISA.__dict__["_probe_load"]
    vector_isa.remember_loads()
    assert VecISA.__dict__["_probe_load"] is before
    model = nn.Linear(8, 1)
    engine = Engine(model, _loss, torch.optim.Adam(model.parameters()), device="cpu",
                    compile=True)
    x, y = sum_data(64)
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        engine.fit(TensorBatches(x, y, batch_size=32), epochs=1, verbose=False)
    serves = FEATURES["vector_isa_check"].serves
    reason = ("this torch: torch._inductor.cpu_vec_isa.VecISA has no _probe_load(self, "
              "output_path)")
    assert engine.compile_report.without == {serves: reason}
    assert any(f"without {serves} ({reason})" in r.getMessage() for r in caplog.records)
