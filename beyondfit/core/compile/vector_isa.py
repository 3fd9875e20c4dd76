"""Inductor's check of this CPU's vector instruction sets, remembered between processes.

Before the first CPU graph of a process, inductor checks each vector instruction set the CPU
lists (AVX2, AVX-512 and its VNNI and BF16 parts, ...): it builds a small library for each
(kept in its cache directory) and loads that library in a child Python process, to be sure it
loads. The children cost 0.15-0.35 s each, 1-2 s a process on the AMD EPYC these benchmarks
run on (six of them): the largest fixed part of a warm compiled run's start
(``bench/compile.py --parts e2e``).

Whether one library file loads on one machine does not change between processes, so
:func:`remember_loads` keeps each successful load in inductor's cache directory, keyed by the
library's path, size and modification time, the machine's name and the Python that loaded it;
a later process reads the verdict instead of starting a child. A library that is new or was
rebuilt, another machine or Python, a record that cannot be read: the child runs, as inductor
would run it. A failed load is never remembered (a child that timed out on a busy machine
would otherwise turn vector code off for good).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

from beyondfit.core.compile.probe import missing

#: The record's file name, in inductor's cache directory.
RECORD = "beyondfit-vector-isa-loads.json"


def remember_loads() -> None:
    """Have inductor's vector-ISA load check read and keep its verdicts on disk (once per
    process; nothing where this torch has no such check: probe ``vector_isa_check``)."""
    if missing("vector_isa_check"):
        return
    from torch._inductor.cpu_vec_isa import VecISA

    check = VecISA.__dict__.get("_probe_load")
    if check is None or getattr(check, "remembers", False):
        return

    def _probe_load(isa: Any, output_path: str) -> bool:
        key = _key(output_path)
        if key is not None and key in _read():
            return True
        loaded = check(isa, output_path)
        if loaded and key is not None:
            _keep(key)
        return loaded

    _probe_load.remembers = True  # type: ignore[attr-defined]
    _probe_load.__doc__ = check.__doc__
    VecISA._probe_load = _probe_load  # type: ignore[method-assign]


def record_path() -> Path:
    """Where the verdicts are kept: inductor's cache directory (``TORCHINDUCTOR_CACHE_DIR``)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / RECORD


def _key(library: str) -> str | None:
    try:
        stat = os.stat(library)
    except OSError:
        return None
    return "|".join([os.path.realpath(library), str(stat.st_size), str(stat.st_mtime_ns),
                     platform.node(), sys.executable])


def _read() -> set[str]:
    try:
        loaded = json.loads(record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {k for k in loaded if isinstance(k, str)} if isinstance(loaded, list) else set()


def _keep(key: str) -> None:
    """Add ``key`` to the record: written whole to a temporary file, then renamed over the
    record (two processes at once: one of the keys may be lost, and checked again later)."""
    path = record_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=RECORD, suffix=".tmp")
    except OSError:
        return  # a read-only cache: the check runs as inductor's own, next time too
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(sorted(_read() | {key}), out)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
