"""Replay checkpoints (run.checkpoint_replay), the frames' part, in real shared-memory rings: the frames a replay's
units read round-trip through files into new rings, written incrementally (a chunk whose frames were all written is
written once), with frames overwritten before the save left out rather than saved torn; a snapshot of another ring
layout is refused; a run folder from elsewhere is data. The replays' own state is tests/test_replay_checkpoint.py."""

from __future__ import annotations

import json
import os
import tracemalloc
import uuid

import numpy as np
import pytest
import zstandard

from shm import Ring, RingSpec, segment_name
from zrl.replay.snapshot import SnapshotMismatch
from zrl.replay_checkpoint import (
    CHUNK_SLOTS,
    KEEP,
    ManifestError,
    ReplayWriter,
    load_state,
    newest,
    restore_frames,
)

pytestmark = pytest.mark.integration

# -- frames, in real shared-memory rings ------------------------------------------------------------------------

SPEC = RingSpec(3000, {"frame": ((2, 6, 6), "uint8"), "episode_step": ((2,), "int32")})


@pytest.fixture
def rings():
    """Two rings of SPEC and a way to make more; every one is closed and unlinked afterwards."""
    made = []

    def make(spec: RingSpec = SPEC) -> Ring:
        name = segment_name("zrltest" + uuid.uuid4().hex[:8], "rc", os.getpid(), f"ring{len(made)}")
        made.append(Ring.create(name, spec))
        return made[-1]

    yield make
    for ring in made:
        ring.close()
        ring.unlink()


def _write(ring: Ring, n: int) -> None:
    for _ in range(n):
        k = ring.head
        ring.write(frame=np.full((2, 6, 6), k % 251, np.uint8), episode_step=np.array([k, -k], np.int32))


def test_frames_round_trip_into_new_rings_written_incrementally(tmp_path, rings):
    old = [rings(), rings()]
    _write(old[0], 2500)
    _write(old[1], 700)
    writer = ReplayWriter(tmp_path, old, "5e000001")
    writer.save(10, {"x": np.arange(3)}, np.array([900, 0]))
    first = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "frames").iterdir()}
    assert len(first) == 3 + 1  # ring 0: chunks 0 (from frame 900) to 2; ring 1: chunk 0
    _write(old[0], 2000)  # 4500 written: frames below 1500 overwritten
    writer.save(20, {"x": np.arange(4)}, np.array([1600, 0]))
    second = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "frames").iterdir()}
    whole = f"ring0-5e000001-{1:09d}-{2 * CHUNK_SLOTS:012d}.zst"
    assert second[whole] == first[whole]  # a chunk whose frames were all written is not written again
    path, manifest = newest(tmp_path)
    assert manifest["learner_step"] == 20 and [r["head"] for r in manifest["rings"]] == [4500, 700]
    assert np.array_equal(load_state(path)["x"], np.arange(4))

    new = [rings(), rings()]
    restored = restore_frames(path, new, SPEC)
    assert [r.head for r in new] == [4500, 700]
    assert restored == (4500 - CHUNK_SLOTS) + 700
    numbers = np.arange(1600, 4500)
    out = {"frame": np.empty((len(numbers), 2, 6, 6), np.uint8), "episode_step": np.empty((len(numbers), 2), np.int32)}
    assert new[0].read(numbers, out).all()
    assert (out["frame"][:, 0, 0, 0] == numbers % 251).all() and (out["episode_step"][:, 1] == -numbers).all()
    assert not new[0].valid(np.array([1400])).any()  # overwritten before it could be saved: missing, not torn
    _write(new[0], 1)  # a worker goes on where the ring was
    assert new[0].head == 4501


def test_only_the_newest_snapshots_and_the_files_they_need_are_kept(tmp_path, rings):
    ring = rings()
    writer = ReplayWriter(tmp_path, [ring], "5e000001")
    for step in range(4):
        _write(ring, 1500)
        writer.save(step, {"x": np.arange(step + 1)}, np.array([ring.head - 1000]))
    manifests = sorted(tmp_path.glob("replay-*.json"))
    assert len(manifests) == KEEP and len(list(tmp_path.glob("state-*"))) == KEEP
    needed = {c for m in manifests for c in json.loads(m.read_text())["rings"][0]["chunks"]}
    assert {p.name for p in (tmp_path / "frames").iterdir()} == needed
    assert writer.bytes == sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())


def test_a_snapshot_of_another_ring_layout_or_a_damaged_one_is_refused(tmp_path, rings):
    ring = rings()
    _write(ring, 100)
    path = ReplayWriter(tmp_path, [ring], "5e000001").save(1, {"x": np.arange(2)}, np.array([0]))
    other = RingSpec(3000, {"frame": ((4, 6, 6), "uint8"), "episode_step": ((4,), "int32")})
    with pytest.raises(SnapshotMismatch, match="ring layout"):
        restore_frames(path, [rings(other)], other)
    (chunk,) = (tmp_path / "frames").iterdir()
    chunk.write_bytes(chunk.read_bytes()[:-7])
    with pytest.raises(SnapshotMismatch, match="cannot be read"):
        restore_frames(path, [rings()], SPEC)
    (tmp_path / json.loads(path.read_text())["state"]).write_bytes(b"not zstd")
    with pytest.raises(SnapshotMismatch, match="cannot be read"):
        load_state(path)


def test_frames_of_other_rings_under_the_same_numbers_are_never_taken_for_these(tmp_path, rings):
    """A resumed run's rings write other frames under numbers an earlier launch saved (its files may outlive a
    save cut short): files are named by the rings that wrote them, so a snapshot of the new rings never reuses
    the old ones, and restores the new frames."""
    old = rings()
    _write(old, 1500)
    ReplayWriter(tmp_path, [old], "0000000a").save(1, {"x": np.arange(1)}, np.array([0]))
    new = rings()
    for _ in range(1500):  # the same numbers, other frames
        new.write(frame=np.full((2, 6, 6), 7, np.uint8), episode_step=np.zeros(2, np.int32))
    path = ReplayWriter(tmp_path, [new], "0000000b").save(2, {"x": np.arange(1)}, np.array([0]))
    again = rings()
    restore_frames(path, [again], SPEC)
    out = {"frame": np.empty((1500, 2, 6, 6), np.uint8), "episode_step": np.empty((1500, 2), np.int32)}
    assert again.read(np.arange(1500), out).all() and (out["frame"] == 7).all()


# -- a run folder from elsewhere: the manifest and its files are data ---------------------------------------------


def _bomb(size: int) -> bytes:
    """zstd bytes that declare and hold ``size`` zero bytes, made without holding them."""
    packer = zstandard.ZstdCompressor(level=1).compressobj(size=size)
    block = bytes(1 << 20)
    return b"".join(packer.compress(block) for _ in range(size >> 20)) + packer.flush()


def _peak_bytes(call) -> int:
    """The most memory Python and numpy held at once while ``call()`` ran (it must raise SnapshotMismatch)."""
    tracemalloc.start()
    try:
        with pytest.raises(SnapshotMismatch):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_decompression_bomb_is_refused_within_its_bound(tmp_path, rings):
    """A chunk or a state file that would inflate to 256 MiB is refused after its bound (the chunk's frames, the
    state's limit): the bomb is never decompressed whole."""
    ring = rings()
    _write(ring, 100)
    path = ReplayWriter(tmp_path, [ring], "5e000001").save(1, {"x": np.arange(2)}, np.array([0]))
    manifest = json.loads(path.read_text())
    bomb = _bomb(256 << 20)
    (tmp_path / "frames" / manifest["rings"][0]["chunks"][0]).write_bytes(bomb)
    fresh = rings()
    assert _peak_bytes(lambda: restore_frames(path, [fresh], SPEC)) < 16 << 20
    (tmp_path / manifest["state"]).write_bytes(bomb)
    assert _peak_bytes(lambda: load_state(path, limit=1 << 20)) < 16 << 20


def _poisons(folder, manifest: dict) -> dict:
    """Manifests a run folder from elsewhere may hold, by what is wrong with them."""
    chunk = manifest["rings"][0]["chunks"][0]
    outside = folder.parent / "outside.zst"
    outside.write_bytes((folder / "frames" / chunk).read_bytes())
    (folder / "frames" / "link.zst").symlink_to(outside)
    linked = chunk.replace("000000000-", "000000007-").replace("000000000100", "000000007200")
    (folder / "frames" / linked).symlink_to(outside)
    state_link = "state-000000000000001.npz.zst"
    (folder / state_link).symlink_to(folder / manifest["state"])

    def ring(**changes):
        return {**manifest, "rings": [{**manifest["rings"][0], **changes}]}

    return {
        "a chunk name of the wrong type": ring(chunks=[5]),
        "a state on a device": {**manifest, "state": "/dev/zero"},
        "a state up the tree": {**manifest, "state": "../../outside.npz.zst"},
        "a chunk up the tree": ring(chunks=["../../outside.zst"]),
        "a chunk of another ring": ring(chunks=[chunk.replace("ring0-", "ring1-")]),
        "a chunk name the writer never makes": ring(chunks=["link.zst"]),
        "a chunk through a symlink": ring(chunks=[linked], head=7200),
        "a state through a symlink": {**manifest, "state": state_link},
        "a head that is text": ring(head="100"),
        "rings that are not a list": {**manifest, "rings": {"0": 1}},
        "a list, not an object": [manifest],
    }


def test_a_manifest_the_writer_did_not_write_is_a_one_line_error_naming_it(tmp_path, rings):
    """Each way a manifest can be wrong raises ManifestError before a frame is put back or a file outside the
    snapshot's folder is read, in one line that names the manifest; newest() still finds it (the launcher then
    refuses to start with it, rather than refill over a folder that is not what it should be)."""
    folder = tmp_path / "replay"
    ring = rings()
    _write(ring, 100)
    path = ReplayWriter(folder, [ring], "5e000001").save(1, {"x": np.arange(2)}, np.array([0]))
    for what, poison in _poisons(folder, json.loads(path.read_text())).items():
        path.write_text(json.dumps(poison))
        if isinstance(poison, dict):
            assert newest(folder)[0] == path, what
        fresh = rings()
        with pytest.raises(ManifestError) as refused:
            restore_frames(path, [fresh], SPEC)
        text = str(refused.value)
        assert text.startswith(f"{path}: ") and "\n" not in text, (what, text)
        assert fresh.head == 0, what  # nothing was put back
        with pytest.raises(ManifestError):
            load_state(path)


def test_stray_files_in_the_folder_are_passed_over(tmp_path, rings):
    """Names the writer does not make (a copied manifest, a folder, a FIFO that would block a read) neither stop
    newest() nor a new writer, and its snapshots go on after the real newest one."""
    ring = rings()
    _write(ring, 100)
    path = ReplayWriter(tmp_path, [ring], "5e000001").save(1, {"x": np.arange(2)}, np.array([0]))
    (tmp_path / "replay-x.json").write_text(path.read_text())
    (tmp_path / "replay-zzzzzzzzzzzzzzz.json").mkdir()
    os.mkfifo(tmp_path / "replay-999999999999999.json")
    writer = ReplayWriter(tmp_path, [ring], "5e000001")
    assert newest(tmp_path)[0] == path
    _write(ring, 10)
    again = writer.save(2, {"x": np.arange(3)}, np.array([0]))
    assert again.name > path.name and newest(tmp_path)[0] == again
    assert np.array_equal(load_state(again)["x"], np.arange(3))
