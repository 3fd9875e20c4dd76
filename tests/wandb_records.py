"""Read an offline W&B run back: the records of its ``run-ID.wandb`` file, as wandb wrote them.

wandb (>= 0.23) no longer ships a Python reader for its transaction log, and its public
``wandb.Api`` reads runs from a server only. The file is a LevelDB-format log (documented at
https://github.com/google/leveldb/blob/main/doc/log_format.md) behind a 7-byte W&B header; each
record is one ``wandb.proto.wandb_internal_pb2.Record``, parsed here with wandb's own protobuf
classes. A small reader, then, for the tests: nothing is sent anywhere.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEADER = struct.Struct("<4sHB")  # ident ":W&B", magic 0xBEE1, version 0
_RECORD = struct.Struct("<IHB")  # checksum, length, type
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_records(path: Path) -> list[Any]:
    """Every ``Record`` of a ``.wandb`` file, in order (checksums verified)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, version = _HEADER.unpack_from(data, 0)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), "not a W&B transaction log"
    offset, records, pending = _HEADER.size, [], b""
    while offset + _RECORD.size <= len(data):
        if _BLOCK - offset % _BLOCK < _RECORD.size:  # a block's zero-padded tail
            offset += _BLOCK - offset % _BLOCK
            continue
        checksum, length, kind = _RECORD.unpack_from(data, offset)
        if kind == 0 and length == 0:  # preallocated, unwritten space
            break
        payload = data[offset + _RECORD.size : offset + _RECORD.size + length]
        # The checksum is CRC-32 over the type byte then the payload.
        assert zlib.crc32(payload, zlib.crc32(bytes([kind]))) == checksum, "corrupt record"
        offset += _RECORD.size + length
        pending = payload if kind in (_FULL, _FIRST) else pending + payload
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


@dataclass
class OfflineRun:
    """What an offline run recorded: id, config, history rows, artifacts, summary, exit code."""

    run_id: str
    resumed: bool
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[tuple[str, str, list[str]]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None


def read_offline_run(run_dir: Path) -> OfflineRun:
    """Parse ``RUN_DIR/run-ID.wandb`` (a folder ``wandb/offline-run-...``)."""
    (log,) = run_dir.glob("run-*.wandb")
    run: OfflineRun | None = None
    for record in read_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = OfflineRun(record.run.run_id, bool(record.run.resumed))
            for item in record.run.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif run is None:
            continue
        elif kind == "config":
            for item in record.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "history":
            row = {
                (item.key or "/".join(item.nested_key)): json.loads(item.value_json)
                for item in record.history.item
            }
            run.history.append(row)
        elif kind == "summary":
            for item in record.summary.update:
                run.summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "artifact":
            paths = [entry.path for entry in record.artifact.manifest.contents]
            run.artifacts.append((record.artifact.name, record.artifact.type, paths))
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    assert run is not None, f"no run record in {log}"
    return run


def offline_runs(run_dir: Path) -> list[OfflineRun]:
    """The offline runs under ``RUN_DIR/wandb/``, oldest first."""
    return [read_offline_run(d) for d in sorted((run_dir / "wandb").glob("offline-run-*"))]
