"""Attacking checkpoint files: every single-bit flip, truncation and random file is detected
(a run directory falls back to the previous good file, a named file is refused), never loaded
silently, never an IndexError or KeyError. Seeded: BEYONDFIT_TEST_SEED replays a failure."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import time
from pathlib import Path

import pytest
import torch

from beyondfit import BeyondfitError, Checkpointer, Engine, TensorBatches, resume
from beyondfit.checkpoint import step_checkpoints
from beyondfit.core.state.serialization import TRAILER_SIZE, CorruptCheckpointError, safe_load

import kit

SEED = int(os.environ.get("BEYONDFIT_TEST_SEED", time.time_ns() % 2**31))
FLIPS = 200


def engine_and_data(callbacks: tuple = ()) -> tuple[Engine, TensorBatches]:
    return kit.make_engine(lambda: kit.mlp(4, 8), callbacks=callbacks), kit.sum_batches()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with two checkpoints: step 5 (the fallback) and step 10 (the one attacked)."""
    run_dir = tmp_path_factory.mktemp("fuzz")
    ckpt = Checkpointer(run_dir / "checkpoints", every=5, keep=5, monitor=None)
    engine, data = engine_and_data((ckpt,))
    engine.fit(data, max_steps=10, epochs=10)
    return run_dir


def flip_positions(size: int, rng: random.Random) -> list[int]:
    """FLIPS distinct bit positions: the trailer's every byte at least once, the rest anywhere."""
    trailer = [(size - TRAILER_SIZE + i) * 8 + rng.randrange(8) for i in range(TRAILER_SIZE)]
    rest = rng.sample(range((size - TRAILER_SIZE) * 8), FLIPS - len(trailer))
    return sorted(set(trailer) | set(rest))[:FLIPS]


def test_every_single_bit_flip_is_detected_and_resume_falls_back(
    run_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(f"{SEED}-flips")
    newest = run_dir / "checkpoints" / "step-00000010.pt"
    good = newest.read_bytes()
    fallback = safe_load(run_dir / "checkpoints" / "step-00000005.pt")
    attacked = tmp_path / "run"
    (attacked / "checkpoints").mkdir(parents=True)
    (attacked / "checkpoints" / "step-00000005.pt").write_bytes(
        (run_dir / "checkpoints" / "step-00000005.pt").read_bytes()
    )
    target = attacked / "checkpoints" / "step-00000010.pt"
    positions = flip_positions(len(good), rng)
    assert len(positions) == FLIPS
    detected = 0
    for bit in positions:
        data = bytearray(good)
        data[bit // 8] ^= 1 << (bit % 8)
        target.write_bytes(bytes(data))
        context = f"seed {SEED}, bit {bit} of {len(good) * 8}"
        with pytest.raises(CorruptCheckpointError, match=r"step-00000010\.pt"):
            safe_load(target)
        engine, _ = engine_and_data()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="beyondfit"):
            path, _ = resume(engine, attacked)
        assert path.name == "step-00000005.pt", context
        assert "step-00000010.pt" in caplog.text, context  # the warning names the bad file
        for key, value in fallback["model"].items():
            assert torch.equal(engine.model.state_dict()[key], value), context
        detected += 1
    assert detected == FLIPS


def test_truncations_and_random_files_are_refused_never_a_crash(
    run_dir: Path, tmp_path: Path
) -> None:
    rng = random.Random(f"{SEED}-random")
    good = (run_dir / "checkpoints" / "step-00000010.pt").read_bytes()
    path = tmp_path / "step-00000010.pt"
    candidates = [good[:cut] for cut in sorted(rng.sample(range(len(good)), 40))]
    sizes = [0, 1, 21, 22, TRAILER_SIZE, 512, 4096, len(good)]
    candidates += [rng.randbytes(rng.choice(sizes)) for _ in range(30)]
    # Random bytes dressed as a torch archive (zip start and end records): the loader's own
    # layers are reached, and must still fail cleanly.
    end_record = b"PK\x05\x06" + bytes(18)
    candidates += [b"PK\x03\x04" + rng.randbytes(rng.randrange(64, 4096)) + end_record
                   for _ in range(30)]
    candidates += [good[: len(good) - TRAILER_SIZE]]  # the archive without its checksum line
    for index, data in enumerate(candidates):
        path.write_bytes(data)
        try:
            state = safe_load(path)
        except BeyondfitError as exc:
            assert str(path) in str(exc), exc
            assert "\n" not in str(exc)
            continue
        # Only the archive without its trailer loads: an unverifiable, older-format file.
        assert data == good[: len(good) - TRAILER_SIZE], f"seed {SEED}, case {index} loaded"
        assert state["counters"]["global_step"] == 10


def test_a_named_corrupt_file_is_an_error_and_a_dir_of_only_corrupt_files_too(
    run_dir: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "run" / "checkpoints"
    bad.mkdir(parents=True)
    for path in step_checkpoints(run_dir / "checkpoints"):
        data = bytearray(path.read_bytes())
        data[len(data) // 3] ^= 0x10
        (bad / path.name).write_bytes(bytes(data))
    engine, _ = engine_and_data()
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    with pytest.raises(CorruptCheckpointError, match="does not match its checksum"):
        resume(engine, bad / "step-00000010.pt")
    with pytest.raises(BeyondfitError, match=r"every checkpoint in .* is truncated or corrupt"):
        resume(engine, tmp_path / "run")
    for key, value in before.items():
        assert torch.equal(engine.model.state_dict()[key], value)  # nothing was loaded


def test_checkpoints_still_load_with_torch_load(run_dir: Path) -> None:
    """The checksum line follows the archive: other tools read the file as a torch file."""
    path = run_dir / "checkpoints" / "step-00000010.pt"
    state = torch.load(path, weights_only=True)
    assert state["counters"]["global_step"] == 10
    assert path.read_bytes()[-TRAILER_SIZE:].startswith(b"\nbeyondfit-checkpoint v1 sha256=")


@pytest.mark.e2e
def test_the_readme_command_checks_the_digest_by_hand(run_dir: Path) -> None:
    """README: `head -c -97 FILE | sha256sum` prints the digest the file's last line holds."""
    path = run_dir / "checkpoints" / "step-00000010.pt"
    done = subprocess.run(["bash", "-c", f"head -c -97 {path} | sha256sum"],
                          capture_output=True, text=True, check=True)
    assert TRAILER_SIZE == 97
    assert path.read_bytes()[-65:-1].decode() == done.stdout.split()[0]


def test_a_checkpoint_without_checksum_loads_with_a_warning(
    run_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Files of an older beyondfit (no checksum line): accepted, and the log says they could
    not be verified, so that runs from before the upgrade still resume."""
    old = tmp_path / "old.pt"
    torch.save(safe_load(run_dir / "checkpoints" / "step-00000010.pt"), old)
    with caplog.at_level(logging.WARNING, logger="beyondfit"):
        state = safe_load(old)
    assert state["counters"]["global_step"] == 10
    assert "has no checksum" in caplog.text and "old.pt" in caplog.text


def test_bit_flips_in_an_unverifiable_old_file_never_crash_the_loader(
    run_dir: Path, tmp_path: Path
) -> None:
    """Without a checksum a flip may go unseen (why new files carry one), but reading one
    is still either a clean error or a load: never an IndexError, KeyError or the like."""
    rng = random.Random(f"{SEED}-old")
    old = tmp_path / "old.pt"
    torch.save(safe_load(run_dir / "checkpoints" / "step-00000010.pt"), old)
    good = old.read_bytes()
    for bit in rng.sample(range(len(good) * 8), 100):
        data = bytearray(good)
        data[bit // 8] ^= 1 << (bit % 8)
        old.write_bytes(bytes(data))
        try:
            safe_load(old)
        except BeyondfitError:
            pass
