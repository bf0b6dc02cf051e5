"""Tests for the shm package: segments, sweeping, rings and a real two-process race."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import stat
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import reaped_pid

from shm import (
    NotOwnerError,
    Ring,
    RingSpec,
    Segment,
    SegmentExistsError,
    SegmentNotFoundError,
    owned_segments,
    parse_segment_name,
    pid_alive,
    pid_max,
    segment_name,
    sweep,
)

SHM_DIR = "/dev/shm"
RUN_ID = "r1"
CHILD_TIMEOUT = 30.0

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="needs /dev/shm")]


def _leftovers(prefix: str) -> list[str]:
    return sorted(e for e in os.listdir(SHM_DIR) if e.startswith(prefix + "_"))


@pytest.fixture
def prefix() -> Iterator[str]:
    """A unique name prefix; fails the test if any segment with it is left behind."""
    p = "zrltest" + uuid.uuid4().hex[:10]
    yield p
    left = _leftovers(p)
    for name in left:
        os.unlink(os.path.join(SHM_DIR, name))
    assert left == [], f"segments left in {SHM_DIR}: {left}"


def _name(prefix: str, label: str, pid: int | None = None) -> str:
    return segment_name(prefix, RUN_ID, os.getpid() if pid is None else pid, label)


def _join(*procs: mp.process.BaseProcess) -> None:
    for p in procs:
        p.join(CHILD_TIMEOUT)
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(5)


# ------------------------------------------------------------------ child processes
# Module-level so the spawn context can import them.


def _child_attach_and_exit(name: str, spec: RingSpec) -> None:
    ring = Ring.attach(name, spec)
    ring.write(x=np.full(3, 7.0, np.float32))
    ring.close()


def _child_create_and_die(prefix: str, q: mp.Queue) -> None:
    name = segment_name(prefix, RUN_ID, os.getpid(), "orphan")
    seg = Segment.create(name, 4096)
    seg.buf[0] = 1
    q.put(name)
    # exit without close/unlink: the segment is orphaned


def _writer_main(name: str, spec: RingSpec, stop: mp.Event, q: mp.Queue, max_s: float) -> None:
    ring = Ring.attach(name, spec)
    deadline = time.monotonic() + max_s
    written = 0
    while True:
        for _ in range(256):
            n = ring.begin_write()
            s = ring.slot(n)
            frame = s["frame"]
            frame.fill(n % 251)
            frame.reshape(-1)[:8].view(np.int64)[0] = n
            s["n"][...] = n
            ring.end_write(n)
        written += 256
        if stop.is_set() or time.monotonic() > deadline:
            break
    ring.close()
    q.put(("writer", written))


def _reader_main(name: str, spec: RingSpec, min_reads: int, seed: int, q: mp.Queue, max_s: float) -> None:
    ring = Ring.attach(name, spec)
    cap = ring.capacity
    rng = np.random.default_rng(seed)
    deadline = time.monotonic() + max_s
    while ring.head < 2 * cap and time.monotonic() < deadline:
        time.sleep(0.001)
    max_batch = 16
    buf_frame = np.empty((max_batch, *spec.fields["frame"][0]), np.uint8)
    buf_n = np.empty(max_batch, np.int64)
    reads = ok_reads = overwrites = mismatches = 0
    while reads < min_reads and time.monotonic() < deadline:
        b = int(rng.integers(1, max_batch + 1))
        frames = ring.head - 1 - rng.integers(0, 2 * cap, size=b)
        out = {"frame": buf_frame[:b], "n": buf_n[:b]}
        ok = ring.read(frames, out)
        reads += b
        overwrites += int(b - ok.sum())
        idx = np.flatnonzero(ok)
        if idx.size:
            f = frames[idx]
            flat = out["frame"][idx].reshape(idx.size, -1)
            stamp_in_frame = flat[:, :8].copy().view(np.int64)[:, 0]
            body_ok = (flat[:, 8:] == (f % 251).astype(np.uint8)[:, None]).all(axis=1)
            good = (out["n"][idx] == f) & (stamp_in_frame == f) & body_ok
            ok_reads += int(good.sum())
            mismatches += int(idx.size - good.sum())
    ring.close()
    q.put(("reader", {"reads": reads, "ok": ok_reads, "overwrites": overwrites, "mismatches": mismatches}))


# ------------------------------------------------------------------ names


def test_segment_name_roundtrip() -> None:
    name = segment_name("zrl", "1732190000a1", 4242, "ring3")
    assert name == "zrl_1732190000a1_4242_ring3"
    parsed = parse_segment_name(name)
    assert parsed == ("zrl", "1732190000a1", 4242, "ring3")
    assert parse_segment_name("zrl_r.1_7_a_b").label == "a_b"


@pytest.mark.parametrize(
    "args",
    [
        ("z_rl", "r", 1, "x"),
        ("zrl", "r_1", 1, "x"),
        ("zrl", "r/1", 1, "x"),
        ("zrl", "r", 0, "x"),
        ("zrl", "r", True, "x"),
        ("zrl", "r", 1, ""),
        ("zrl", "r", 1, "a/b"),
        ("zrl", "r" * 200, 1, "x"),
    ],
)
def test_segment_name_rejects(args: tuple) -> None:
    with pytest.raises(ValueError):
        segment_name(*args)


@pytest.mark.parametrize("bad", ["zrl", "zrl_r_x_l", "zrl_r_0_l", "zrl_r_-3_l", "zrl_r_3_"])
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_segment_name(bad)


# ------------------------------------------------------------------ segments


def test_segment_create_attach_unlink(prefix: str) -> None:
    name = _name(prefix, "seg")
    old = os.umask(0o777)  # the mode must not depend on the umask
    try:
        seg = Segment.create(name, 1000)
    finally:
        os.umask(old)
    try:
        st = os.stat(os.path.join(SHM_DIR, name))
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert seg.owner and seg.nbytes == 1000 and seg.name == name
        with pytest.raises(SegmentExistsError, match=name):
            Segment.create(name, 1000)
        seg.buf[:4] = b"abcd"
        with Segment.attach(name) as other:
            assert not other.owner
            assert other.nbytes == 1000
            assert bytes(other.buf[:4]) == b"abcd"
            other.buf[4] = ord("e")
            with pytest.raises(NotOwnerError):
                other.unlink()
        assert other.closed
        assert bytes(seg.buf[:5]) == b"abcde"
        assert owned_segments(prefix, os.getpid()) == [name]
    finally:
        seg.close()
        seg.close()  # idempotent
        seg.unlink()
    seg.unlink()  # idempotent once gone
    assert not os.path.exists(os.path.join(SHM_DIR, name))


def test_segment_attach_missing(prefix: str) -> None:
    name = _name(prefix, "missing")
    with pytest.raises(SegmentNotFoundError, match=name):
        Segment.attach(name)
    with pytest.raises(FileNotFoundError):
        Segment.attach(name)


def test_segment_bad_args() -> None:
    with pytest.raises(ValueError):
        Segment.create("a/b", 10)
    with pytest.raises(ValueError):
        Segment.create("x" * 201, 10)
    with pytest.raises(ValueError):
        Segment.create("zrltestok", 0)


def test_segment_close_with_live_views(prefix: str) -> None:
    seg = Segment.create(_name(prefix, "views"), 4096)
    try:
        view = np.frombuffer(seg.buf, np.uint8)
        view[0] = 9
        seg.close()  # must not raise although `view` still exports the buffer
        assert seg.closed
        assert view[0] == 9
        with pytest.raises(ValueError):
            _ = seg.buf
        del view
    finally:
        seg.unlink()


def test_attacher_process_exit_keeps_segment(prefix: str) -> None:
    """An attacher exiting must not unlink (the 3.11 resource-tracker bug)."""
    spec = RingSpec(4, {"x": ((3,), "float32")})
    name = _name(prefix, "keep")
    ring = Ring.create(name, spec)
    try:
        ctx = mp.get_context("spawn")
        p = ctx.Process(target=_child_attach_and_exit, args=(name, spec))
        p.start()
        _join(p)
        assert p.exitcode == 0
        time.sleep(0.1)
        assert os.path.exists(os.path.join(SHM_DIR, name))
        with Ring.attach(name, spec) as again:
            assert again.head == 1
            out = {"x": np.zeros((1, 3), np.float32)}
            assert again.read(np.array([0]), out).all()
            assert (out["x"] == 7.0).all()
    finally:
        ring.close()
        ring.unlink()


def test_sweep_dead_owner(prefix: str) -> None:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child_create_and_die, args=(prefix, q))
    p.start()
    try:
        dead = q.get(timeout=CHILD_TIMEOUT)
    finally:
        _join(p)
    assert p.exitcode == 0
    assert parse_segment_name(dead).owner_pid == p.pid
    assert os.path.exists(os.path.join(SHM_DIR, dead))
    live = Segment.create(_name(prefix, "live"), 4096)
    try:
        assert sweep(prefix) == [dead]
        assert not os.path.exists(os.path.join(SHM_DIR, dead))
        assert os.path.exists(os.path.join(SHM_DIR, live.name))
        assert sweep(prefix) == []
    finally:
        live.close()
        live.unlink()


def test_sweep_logic_in_tmp_dir(tmp_path) -> None:
    dead = segment_name("zrltest", "r", reaped_pid(), "a")
    mine = segment_name("zrltest", "r", os.getpid(), "b")
    other_prefix = segment_name("zrltestx", "r", reaped_pid(), "c")
    junk = ["zrltest_r_0_d", "zrltest_garbage", "zrltest_r_notapid_e"]
    for n in [dead, mine, other_prefix, *junk]:
        (tmp_path / n).write_bytes(b"")
    assert owned_segments("zrltest", os.getpid(), shm_dir=str(tmp_path)) == [mine]
    assert sweep("zrltest", shm_dir=str(tmp_path)) == [dead]
    assert sorted(os.listdir(tmp_path)) == sorted([mine, other_prefix, *junk])
    with pytest.raises(ValueError):
        sweep("", shm_dir=str(tmp_path))


def test_the_sweep_leaves_what_it_cannot_judge_and_says_why(tmp_path) -> None:
    # any local user can make these in /dev/shm: a pid no process can have (os.kill overflows on 2**31), a
    # directory, a symlink; none may stop a launch, and none is removed
    dead = reaped_pid()
    huge = segment_name("zrltest", "r", 2**31, "a")
    beyond = segment_name("zrltest", "r", pid_max() + 1, "b")
    folder = segment_name("zrltest", "r", dead, "c")
    link = segment_name("zrltest", "r", dead, "d")
    (tmp_path / huge).write_bytes(b"")
    (tmp_path / beyond).write_bytes(b"")
    (tmp_path / folder).mkdir()
    (tmp_path / "elsewhere").write_bytes(b"kept")
    (tmp_path / link).symlink_to(tmp_path / "elsewhere")
    skipped: list[str] = []
    assert sweep("zrltest", shm_dir=str(tmp_path), skipped=skipped) == []
    assert sorted(os.listdir(tmp_path)) == sorted([huge, beyond, folder, link, "elsewhere"])
    assert (tmp_path / "elsewhere").read_bytes() == b"kept"
    why = {note.split(": ", 1)[0].rsplit("/", 1)[1]: note.split(": ", 1)[1] for note in skipped}
    assert why == {
        huge: f"pid {2**31} is beyond this system's pid_max ({pid_max()})",
        beyond: f"pid {pid_max() + 1} is beyond this system's pid_max ({pid_max()})",
        folder: "not a regular file",
        link: "not a regular file",
    }
    assert pid_alive(2**31) and pid_alive(0)  # never judged dead, never an OverflowError


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's file needs root")
def test_the_sweep_leaves_another_users_segment(tmp_path) -> None:
    theirs = tmp_path / segment_name("zrltest", "r", reaped_pid(), "a")
    theirs.write_bytes(b"")
    os.chown(theirs, 65534, 65534)
    skipped: list[str] = []
    assert sweep("zrltest", shm_dir=str(tmp_path), skipped=skipped) == []
    assert theirs.exists() and skipped == [f"{theirs}: owned by uid 65534, not this user"]


# ------------------------------------------------------------------ ring


SPEC = RingSpec(4, {"frame": ((2, 3), "uint8"), "step": ((), "int64"), "vec": ((5,), "float32")})


def _frame(n: int) -> dict[str, np.ndarray]:
    return {
        "frame": np.full((2, 3), n % 256, np.uint8),
        "step": np.int64(1000 + n),
        "vec": np.arange(5, dtype=np.float32) + n,
    }


def test_ring_spec_layout() -> None:
    assert SPEC.nbytes % 64 == 0
    assert all(off % 64 == 0 for off in SPEC.offsets.values())
    assert SPEC.offsets["_stamps"] == 64
    assert SPEC == RingSpec(4, {"frame": ([2, 3], "uint8"), "step": ((), "int64"), "vec": ((5,), "float32")})
    assert hash(SPEC) == hash(RingSpec(4, dict(SPEC.fields)))
    for bad in [
        lambda: RingSpec(0, {"a": ((1,), "uint8")}),
        lambda: RingSpec(2, {}),
        lambda: RingSpec(2, {"a": ((0,), "uint8")}),
        lambda: RingSpec(2, {"a": ((1,), "object")}),
        lambda: RingSpec(2, {"a": ((1,), "nonsense")}),
        lambda: RingSpec(2, {"not-ident": ((1,), "uint8")}),
    ]:
        with pytest.raises(ValueError):
            bad()


def test_ring_roundtrip(prefix: str) -> None:
    name = _name(prefix, "ring")
    ring = Ring.create(name, SPEC)
    try:
        assert ring.segment.owner and ring.head == 0
        assert (ring.stamps == -1).all()
        assert not ring.valid(np.arange(-1, 5)).any()
        for n in range(3):
            assert ring.write(**_frame(n)) == n
        assert ring.head == 3
        reader = Ring.attach(name, SPEC)
        try:
            assert not reader.segment.owner and reader.head == 3
            frames = np.array([2, 0, 1, 2, 3, -1], np.int64)
            out = {"frame": np.zeros((6, 2, 3), np.uint8), "step": np.zeros(6, np.int64)}
            ok = reader.read(frames, out)  # "vec" not requested, not copied
            assert ok.tolist() == [True, True, True, True, False, False]
            for i, f in enumerate(frames[:4]):
                np.testing.assert_array_equal(out["frame"][i], _frame(int(f))["frame"])
                assert out["step"][i] == 1000 + f
            assert reader.valid([0, 1, 2, 3]).tolist() == [True, True, True, False]
            with pytest.raises(ValueError):
                reader.read(frames, {"step": np.zeros(5, np.int64)})
            with pytest.raises(ValueError):
                reader.read(frames, {"step": np.zeros(6, np.int32)})
            with pytest.raises(KeyError):
                reader.read(frames, {"nope": np.zeros(6, np.int64)})
            with pytest.raises(NotOwnerError):
                reader.unlink()
        finally:
            reader.close()
        with pytest.raises(KeyError):
            ring.write(frame=np.zeros((2, 3), np.uint8))
        assert ring.head == 3
    finally:
        ring.close()
        ring.close()
        ring.unlink()


def test_ring_attach_mismatch(prefix: str) -> None:
    name = _name(prefix, "mm")
    ring = Ring.create(name, SPEC)
    plain = Segment.create(_name(prefix, "plain"), 4096)
    try:
        fields = dict(SPEC.fields)
        variants = [
            RingSpec(5, fields),
            RingSpec(4, {**fields, "frame": ((3, 2), "uint8")}),
            RingSpec(4, {**fields, "step": ((), "int32")}),
            RingSpec(4, {"frame2": fields["frame"], "step": fields["step"], "vec": fields["vec"]}),
            RingSpec(4, {"step": fields["step"], "frame": fields["frame"], "vec": fields["vec"]}),
            RingSpec(4, {"frame": fields["frame"], "step": fields["step"]}),
        ]
        for spec in variants:
            with pytest.raises(ValueError, match="mismatch"):
                Ring.attach(name, spec)
        with pytest.raises(ValueError, match="magic"):
            Ring.attach(plain.name, SPEC)
        with pytest.raises(FileNotFoundError):
            Ring.attach(_name(prefix, "absent"), SPEC)
        assert os.path.exists(os.path.join(SHM_DIR, name))  # failed attach never unlinks
    finally:
        plain.close()
        plain.unlink()
        ring.close()
        ring.unlink()


def test_ring_wraparound(prefix: str) -> None:
    ring = Ring.create(_name(prefix, "wrap"), SPEC)
    try:
        for n in range(10):
            ring.write(**_frame(n))
        assert ring.head == 10
        assert ring.valid(np.arange(-2, 12)).tolist() == [False] * 8 + [True] * 4 + [False] * 2
        frames = np.array([5, 9, 6, 1, 10], np.int64)
        out = {"vec": np.zeros((5, 5), np.float32)}
        ok = ring.read(frames, out)
        assert ok.tolist() == [False, True, True, False, False]
        np.testing.assert_array_equal(out["vec"][1], _frame(9)["vec"])
        # begin_write invalidates the slot before any data is written
        n = ring.begin_write()
        assert n == 10
        assert not ring.valid([6, 10]).any()
        views = ring.slot(n)
        for key, value in _frame(n).items():
            views[key][...] = value
        assert not ring.valid([10]).any()
        with pytest.raises(ValueError):
            ring.end_write(n + 1)
        ring.end_write(n)
        assert ring.valid([6, 7, 10]).tolist() == [False, True, True]
        assert ring.slot(10)["step"] == 1010
        del views
    finally:
        ring.close()
        ring.unlink()


def test_ring_close_with_outstanding_views(prefix: str) -> None:
    ring = Ring.create(_name(prefix, "cv"), SPEC)
    try:
        held = ring.fields["frame"]
        ring.close()
        assert held.shape == (4, 2, 3)
        with pytest.raises(ValueError):
            _ = ring.head
        del held
    finally:
        ring.unlink()


def test_ring_concurrent_writer_reader(prefix: str) -> None:
    """A real writer racing a real reader: no torn frame is ever reported ok."""
    spec = RingSpec(8, {"frame": ((84, 84), "uint8"), "n": ((), "int64")})
    name = _name(prefix, "race")
    min_reads = 100_000
    ring = Ring.create(name, spec)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    stop = ctx.Event()
    writer = ctx.Process(target=_writer_main, args=(name, spec, stop, q, 50.0), daemon=True)
    reader = ctx.Process(
        target=_reader_main,
        args=(name, spec, min_reads, int.from_bytes(os.urandom(4), "little"), q, 40.0),
        daemon=True,
    )
    results: dict = {}
    try:
        writer.start()
        reader.start()
        deadline = time.monotonic() + 55.0
        while "reader" not in results:
            try:
                kind, value = q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            results[kind] = value
        stop.set()
        while "writer" not in results and time.monotonic() < deadline + 5:
            try:
                kind, value = q.get(timeout=1.0)
            except queue.Empty:
                if not writer.is_alive():
                    break
                continue
            results[kind] = value
    finally:
        stop.set()
        _join(writer, reader)
        ring.close()
        ring.unlink()
    assert "reader" in results, f"reader did not report (exitcode {reader.exitcode})"
    stats = results["reader"]
    print(f"\nrace stats: {stats}, writer frames: {results.get('writer')}")
    assert stats["reads"] >= min_reads
    assert stats["mismatches"] == 0
    assert stats["overwrites"] > 0
    assert stats["ok"] > 0
    assert writer.exitcode == 0 and reader.exitcode == 0


def test_read_column_copies_one_row_of_each_slot(prefix):
    spec = RingSpec(capacity=4, fields={"frame": ((3, 2, 2), "uint8"), "step": ((3,), "int32")})
    name = segment_name(prefix, "col", os.getpid(), "ring")
    ring = Ring.create(name, spec)
    try:
        for n in range(6):
            ring.write(
                frame=np.arange(3, dtype=np.uint8)[:, None, None] + 10 * n + np.zeros((3, 2, 2), np.uint8),
                step=np.arange(3, dtype=np.int32) + 100 * n,
            )
        frames = np.array([2, 3, 5, 5, 1], np.int64)
        cols = np.array([0, 2, 1, 0, 1], np.int64)
        out = {"frame": np.zeros((5, 2, 2), np.uint8), "step": np.zeros(5, np.int32)}
        ok = ring.read(frames, out, column=cols)
        assert ok.tolist() == [True, True, True, True, False]  # frame 1 was overwritten by frame 5
        assert out["step"][:4].tolist() == [200, 302, 501, 500]
        assert (out["frame"][2] == 51).all() and (out["frame"][1] == 32).all()
        with pytest.raises(ValueError):
            ring.read(frames, out, column=np.array([0, 3, 0, 0, 0]))
    finally:
        ring.close()
        ring.unlink()


def test_the_reaper_removes_its_runs_segments_and_folders_and_nothing_else(tmp_path, monkeypatch):
    from shm import reaper

    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    monkeypatch.setattr(reaper, "SHM_DIR", str(shm_dir))
    names = [
        "zrl_run1_123_ring0",
        "zrl_run1_123_ring_1",
        "zrl_run1_124_ring0",
        "zrl_run2_123_ring0",
        "zrl.ns_run1_123_r",
    ]
    for name in names:
        (shm_dir / name).write_bytes(b"x")
    mine, other = tmp_path / "zrl-123-run1", tmp_path / "zrl-123-run2"
    mine.mkdir()
    other.mkdir()
    removed = reaper.remove(123, "zrl", "run1", [str(mine), str(tmp_path / "gone")])
    assert sorted(removed[0]) == ["zrl_run1_123_ring0", "zrl_run1_123_ring_1"] and removed[1] == [str(mine)]
    assert sorted(p.name for p in shm_dir.iterdir()) == [
        "zrl.ns_run1_123_r",
        "zrl_run1_124_ring0",
        "zrl_run2_123_ring0",
    ]
    assert not mine.exists() and other.exists()
