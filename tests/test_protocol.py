"""Tests for zrl.protocol: round trips, strict decoding, hostile input."""

from __future__ import annotations

import struct
import time

import msgpack
import msgspec
import numpy as np
import pytest
from conftest import broker_stats_message, learner_stats_message, worker_stats_message

from zrl import protocol as P
from zrl.agents.apex_iqn.messages import PriorityUpdate, TransitionBatch, Transitions
from zrl.agents.vtrace.messages import Batch, Unroll
from zrl.protocol import (
    FORMAT_VERSION,
    MAX_MESSAGE_BYTES,
    Ack,
    BrokerStats,
    Credit,
    Episode,
    EvalRequest,
    EvalResult,
    EvaluatorStats,
    IndexRequest,
    IngestStats,
    Join,
    LearnerStats,
    Leave,
    Notice,
    ProtocolError,
    Refused,
    RemoteData,
    ReplayIndex,
    RoleError,
    SaveReplay,
    WeightsRequest,
    Welcome,
    WorkerStats,
    decode,
    decode_weights,
    encode_weights,
)

pytestmark = pytest.mark.unit

# ---------------------------------------------------------------------------
# factories
# ---------------------------------------------------------------------------


def make_unroll(rng, M=3, T=5, A=6, F=4, seq=0) -> Unroll:
    feats = rng.standard_normal((M, T, F)).astype(np.float32) if F else np.zeros((0, 0, 0), np.float32)
    return Unroll(
        worker_id=int(rng.integers(0, 64)),
        seq=seq,
        policy_version=int(rng.integers(0, 10_000)),
        first_frame=int(rng.integers(0, 2**40)),
        num_envs=M,
        length=T,
        env_frames=int(rng.integers(0, 2**40)),
        actions=rng.integers(0, A, size=(M, T), dtype=np.int32),
        rewards=rng.standard_normal((M, T)).astype(np.float32),
        discounts=(rng.random((M, T)) > 0.1).astype(np.float32) * 0.99,
        behaviour_logits=rng.standard_normal((M, T, A)).astype(np.float32),
        behaviour_values=rng.standard_normal((M, T)).astype(np.float32),
        features=feats,
    )


def make_batch(rng, B=4, T=5, A=6) -> Batch:
    return Batch(
        batch_id=int(rng.integers(0, 2**31)),
        length=T,
        env_frames=int(rng.integers(0, 2**40)),
        worker_ids=rng.integers(0, 64, size=B, dtype=np.int32),
        env_index=rng.integers(0, 8, size=B, dtype=np.int32),
        first_frame=rng.integers(0, 2**40, size=B, dtype=np.int64),
        policy_versions=rng.integers(0, 10_000, size=B, dtype=np.int64),
        actions=rng.integers(0, A, size=(B, T), dtype=np.int32),
        rewards=rng.standard_normal((B, T)).astype(np.float32),
        discounts=np.full((B, T), 0.99, np.float32),
        behaviour_logits=rng.standard_normal((B, T, A)).astype(np.float32),
        behaviour_values=rng.standard_normal((B, T)).astype(np.float32),
        replay_index=rng.integers(0, 2, size=B, dtype=np.int32),
    )


def make_episode(rng) -> Episode:
    return Episode(
        worker_id=3,
        pid=4321,
        env_index=1,
        raw_return=float(rng.normal() * 100),
        length_frames=4000,
        length_env_steps=1000,
        env_frames=123_456_789,
        wall_time=time.time(),
        score_5min=1.0,
        score_30min=2.0,
    )


def make_worker_stats(rng) -> WorkerStats:
    return worker_stats_message(time=time.time(), step_time_s=float(rng.random()), send_time_s=float(rng.random()))


def make_broker_stats(rng) -> BrokerStats:
    return broker_stats_message(time=time.time(), prepare_time_s=float(rng.random()))


def make_learner_stats(rng, path="/tmp/ckpt/step_100.npz") -> LearnerStats:
    f = lambda: float(rng.standard_normal())  # noqa: E731
    return learner_stats_message(
        time=time.time(),
        total_loss=f(),
        grad_norm=abs(f()),
        checkpoint_path=path,
        figures={"pg_loss": f(), "mean_rho": 0.97},
    )


def make_weights_request(rng) -> WeightsRequest:
    return WeightsRequest(worker_id=int(rng.integers(0, 100)))


def make_credit(rng) -> Credit:
    return Credit(batches=int(rng.integers(1, 8)))


def make_index_request(rng) -> IndexRequest:
    return IndexRequest(learner_step=int(rng.integers(0, 10**6)))


def make_save_replay(rng) -> SaveReplay:
    return SaveReplay(learner_step=int(rng.integers(0, 10**6)))


def make_replay_index(rng, N=6, G=3, K=5, F=8) -> ReplayIndex:
    return ReplayIndex(
        replay=rng.integers(0, 2, size=N, dtype=np.int32),
        worker_ids=rng.integers(0, 4, size=N, dtype=np.int32),
        env_index=rng.integers(0, 4, size=N, dtype=np.int32),
        first_frame=rng.integers(0, 2**40, size=N, dtype=np.int64),
        policy_versions=rng.integers(0, 100, size=N, dtype=np.int64),
        counts=rng.integers(0, 9, size=N, dtype=np.int64),
        sample_calls=np.array([0, 17], np.int64),
        feature_rows=np.arange(G, dtype=np.int32),
        features=rng.standard_normal((G, K, F)).astype(np.float32),
    )


def make_transitions(rng, n=5) -> Transitions:
    frames = rng.integers(0, 10**6, n)
    return Transitions(
        worker_id=int(rng.integers(0, 8)),
        seq=int(rng.integers(0, 10**6)),
        policy_version=3,
        env_frames=int(rng.integers(0, 10**9)),
        count=n,
        env_index=rng.integers(0, 4, n, dtype=np.int32),
        frame=frames,
        action=rng.integers(0, 6, n, dtype=np.int32),
        nstep_return=rng.standard_normal(n, dtype=np.float32),
        bootstrap_discount=np.full(n, 0.99**3, np.float32),
        next_frame=frames + 3,
        priority=rng.random(n, dtype=np.float32),
    )


def make_transition_batch(rng, b=4) -> TransitionBatch:
    frames = rng.integers(0, 10**6, b)
    return TransitionBatch(
        batch_id=int(rng.integers(0, 10**6)),
        env_frames=int(rng.integers(0, 10**9)),
        size=b,
        worker_ids=rng.integers(0, 8, b, dtype=np.int32),
        env_index=rng.integers(0, 4, b, dtype=np.int32),
        frame=frames,
        action=rng.integers(0, 6, b, dtype=np.int32),
        nstep_return=rng.standard_normal(b, dtype=np.float32),
        bootstrap_discount=np.full(b, 0.97, np.float32),
        next_frame=frames + 3,
        slots=rng.integers(0, 10**6, b),
        stamps=rng.integers(1, 10**9, b),
        weights=rng.random(b, dtype=np.float32),
        policy_version=rng.integers(0, 10**4, b),
    )


FACTORIES = {
    "Unroll": make_unroll,
    "Unroll-nofeat": lambda rng: make_unroll(rng, F=0),
    "Unroll-empty": lambda rng: make_unroll(rng, M=0, T=0, F=0),
    "Batch": make_batch,
    "Episode": make_episode,
    "WorkerStats": make_worker_stats,
    "BrokerStats": make_broker_stats,
    "LearnerStats": make_learner_stats,
    "LearnerStats-nopath": lambda rng: make_learner_stats(rng, path=""),
    "WeightsRequest": make_weights_request,
    "Credit": make_credit,
    "IndexRequest": make_index_request,
    "SaveReplay": make_save_replay,
    "ReplayIndex": make_replay_index,
    "ReplayIndex-nofeat": lambda rng: make_replay_index(rng, G=0, K=0, F=0),
    "Transitions": lambda rng: make_transitions(rng),
    "Transitions-empty": lambda rng: make_transitions(rng, n=0),
    "TransitionBatch": lambda rng: make_transition_batch(rng),
    "PriorityUpdate": lambda rng: PriorityUpdate(
        batch_id=int(rng.integers(0, 10**6)),
        size=3,
        slots=rng.integers(0, 10**6, 3),
        stamps=rng.integers(1, 10**9, 3),
        priorities=rng.random(3, dtype=np.float32),
    ),
    "RoleError": lambda rng: RoleError(
        role="zrl-worker-1",
        pid=int(rng.integers(1, 2**22)),
        traceback="Traceback (most recent call last):\n  ...\nRuntimeError: boom\n",
    ),
    "Join": lambda rng: Join(
        run="pong_1", host="b", pid=int(rng.integers(1, 2**22)), envs_per_worker=8, zrl_version="0"
    ),
    "Welcome": lambda rng: Welcome(
        run="pong_1",
        worker_id=2,
        generation=1,
        env_frames=int(rng.integers(0, 10**9)),
        env_frames_start=0,
        weights_port=5556,
        env_spec="frames 84x84 uint8, 6 actions, 4 frames per step",
        config="algo = 'vtrace'\n",
    ),
    "Refused": lambda rng: Refused(reason="another run", final=1),
    "Ack": lambda rng: Ack(live_workers=3),
    "Leave": lambda rng: Leave(reason="stopped"),
    "RemoteData": lambda rng: RemoteData(
        seq=4,
        first_frame=int(rng.integers(0, 10**6)),
        count=21,
        frames=rng.integers(0, 256, 300, dtype=np.uint8),
        message=rng.integers(0, 256, 50, dtype=np.uint8),
    ),
    "Notice": lambda rng: Notice(role="zrl-ingest", pid=7, text="remote worker b joined"),
    "IngestStats": lambda rng: IngestStats(
        pid=7,
        time=1.0,
        remote_workers=1,
        remote_joins=2,
        remote_frames=3,
        remote_bytes=4,
        remote_raw_bytes=5,
        remote_refused=6,
        remote_auth_refused=7,
        ingest_busy_s=0.5,
    ),
    "EvalRequest": lambda rng: EvalRequest(index=3, env_frames=int(rng.integers(0, 10**9))),
    "EvaluatorStats": lambda rng: EvaluatorStats(pid=7, time=1.0, evaluations=2, episodes=20, skipped=1),
    "EvalResult": lambda rng: EvalResult(
        pid=7,
        index=3,
        env_frames=int(rng.integers(0, 10**9)),
        weights_time=1_795_766_814.5,
        learner_step=900,
        policy_version=225,
        protocol="saber",
        episodes=10,
        mean=float(rng.standard_normal()),
        ci95_low=-1.0,
        ci95_high=1.0,
        median=0.0,
        min=-2.0,
        max=2.0,
        human_normalised=0.25,
        mean_max_q=4.25,
        frames_played=40_000,
        seconds=12.5,
        best=1,
    ),
}


def assert_msg_equal(a, b):
    assert type(a) is type(b)
    for f in msgspec.structs.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray), f.name
            assert x.dtype == y.dtype, f.name
            assert x.shape == y.shape, f.name
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert type(x) is type(y), f.name
            assert x == y, f.name


def wire(msg) -> dict:
    """The raw msgpack map of a message, for mutation."""
    return msgpack.unpackb(msg.encode(), raw=False)


def pack(d) -> bytes:
    return msgpack.packb(d, use_bin_type=True)


def expect_error(data, *fragments):
    with pytest.raises(ProtocolError) as ei:
        decode(data)
    text = str(ei.value)
    for frag in fragments:
        assert frag in text, (frag, text)
    return text


# ---------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------


def test_a_duplicate_tag_is_refused():
    """A tag names one type on the wire: an agent that declares a message with a core tag fails at import."""
    with pytest.raises(TypeError, match="duplicate message tag 'batch'"):

        class Again(P.Message, tag="batch"):
            n: int


def test_an_evaluation_figure_that_does_not_apply_travels_as_nan():
    """EvalResult's human_normalised (a game without reference scores) and mean_max_q (a policy agent)."""
    msg = FACTORIES["EvalResult"](np.random.default_rng(0))
    out = decode(msgspec.structs.replace(msg, human_normalised=float("nan"), mean_max_q=float("nan")).encode())
    assert np.isnan(out.human_normalised) and np.isnan(out.mean_max_q) and out.mean == msg.mean


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_round_trip(kind):
    rng = np.random.default_rng(sorted(FACTORIES).index(kind))
    for _ in range(5):
        msg = FACTORIES[kind](rng)
        data = msg.encode()
        assert isinstance(data, bytes)
        out = decode(data)
        assert_msg_equal(msg, out)
        # decoding is deterministic and re-encoding is byte-identical
        assert out.encode() == data
        # other buffer types are accepted too
        assert_msg_equal(msg, decode(memoryview(data)))
        assert_msg_equal(msg, decode(bytearray(data)))


def test_wire_form_is_plain_msgpack_map():
    rng = np.random.default_rng(0)
    w = wire(make_unroll(rng, M=2, T=3, A=4, F=5))
    assert w["v"] == FORMAT_VERSION and w["t"] == Unroll.TAG
    assert w["rewards"] == {
        "dtype": "<f4",
        "shape": [2, 3],
        "data": w["rewards"]["data"],
    }
    assert isinstance(w["rewards"]["data"], bytes)
    assert len(w["rewards"]["data"]) == 2 * 3 * 4
    assert w["actions"]["dtype"] == "<i4"
    assert w["features"]["shape"] == [2, 3, 5]


def test_unroll_empty_features_round_trip():
    rng = np.random.default_rng(1)
    msg = make_unroll(rng, M=4, T=20, A=18, F=0)
    out = decode(msg.encode())
    assert out.features.shape == (0, 0, 0)
    assert out.features.dtype == np.float32
    assert out.behaviour_logits.shape == (4, 20, 18)
    # F == 0 with matching M, T is also fine
    msg2 = msgspec.structs.replace(msg, features=np.zeros((4, 20, 0), np.float32))
    assert decode(msg2.encode()).features.shape == (4, 20, 0)


def test_decoded_arrays_are_zero_copy_views():
    rng = np.random.default_rng(2)
    out = decode(make_batch(rng).encode())
    for name in ("worker_ids", "first_frame", "actions", "behaviour_logits"):
        arr = getattr(out, name)
        assert not arr.flags.owndata, name
        assert arr.flags.c_contiguous, name


def test_non_contiguous_arrays_encode():
    rng = np.random.default_rng(3)
    msg = make_unroll(rng, M=3, T=4, A=5, F=2)
    big = rng.standard_normal((4, 3)).astype(np.float32)
    msg2 = msgspec.structs.replace(msg, rewards=big.T)  # Fortran-ordered view
    out = decode(msg2.encode())
    np.testing.assert_array_equal(out.rewards, big.T)


def test_scalar_coercion_on_construction():
    # numpy scalars and ints-for-floats are normalised to Python types
    e = Episode(
        worker_id=np.int64(1),
        pid=np.int64(77),
        env_index=np.int32(0),
        raw_return=5,
        length_frames=10,
        length_env_steps=3,
        env_frames=10,
        wall_time=np.float32(1.5),
        score_5min=np.float32(5),
        score_30min=5,
    )
    assert type(e.worker_id) is int and type(e.env_index) is int
    assert type(e.raw_return) is float and e.raw_return == 5.0
    assert type(e.wall_time) is float
    assert_msg_equal(e, decode(e.encode()))


def test_construction_is_validated():
    rng = np.random.default_rng(4)
    msg = make_unroll(rng, M=2, T=3, A=4, F=0)
    with pytest.raises(ProtocolError, match=r"Unroll\.rewards"):
        msgspec.structs.replace(msg, rewards=np.zeros((2, 3), np.float64))
    with pytest.raises(ProtocolError, match=r"Unroll\.rewards"):
        msgspec.structs.replace(msg, rewards=np.zeros((2, 4), np.float32))
    with pytest.raises(ProtocolError, match=r"Unroll\.actions"):
        msgspec.structs.replace(msg, actions=[[0, 0, 0], [0, 0, 0]])
    with pytest.raises(ProtocolError, match=r"Unroll\.worker_id"):
        msgspec.structs.replace(msg, worker_id=True)
    with pytest.raises(ProtocolError, match=r"Unroll\.num_envs"):
        msgspec.structs.replace(msg, num_envs=-1)
    with pytest.raises(ProtocolError, match=r"LearnerStats\.checkpoint_path"):
        msgspec.structs.replace(make_learner_stats(rng), checkpoint_path=None)
    with pytest.raises(ProtocolError, match=r"Batch\.env_index"):
        msgspec.structs.replace(make_batch(rng, B=4), env_index=np.zeros(5, np.int32))
    with pytest.raises(ProtocolError, match=r"WeightsRequest\.worker_id"):
        WeightsRequest(worker_id=2**64)
    with pytest.raises(AttributeError):  # frozen
        msg.seq = 5


def test_encode_refuses_oversized(monkeypatch):
    rng = np.random.default_rng(5)
    msg = make_unroll(rng, M=4, T=20, A=6, F=64)
    monkeypatch.setattr(P.framework, "MAX_MESSAGE_BYTES", 4096)
    with pytest.raises(ProtocolError, match="Unroll"):
        msg.encode()


# ---------------------------------------------------------------------------
# weights frame
# ---------------------------------------------------------------------------


def test_weights_round_trip():
    rng = np.random.default_rng(6)
    flat = rng.standard_normal(100_003).astype(np.float32)
    data = encode_weights(42, 1234, flat)
    assert isinstance(data, bytes)
    assert len(data) == P.WEIGHTS_HEADER_BYTES + flat.nbytes
    assert data[:4] == b"ZRLW"
    version, step, out = decode_weights(data)
    assert (version, step) == (42, 1234)
    assert type(version) is int and type(step) is int
    assert out.dtype == np.float32 and out.shape == flat.shape
    assert not out.flags.owndata  # zero-copy view
    np.testing.assert_array_equal(out, flat)
    # memoryview / bytearray inputs and negative / empty values
    v, s, out2 = decode_weights(memoryview(encode_weights(-1, 0, flat[:0])))
    assert (v, s, out2.size) == (-1, 0, 0)
    v, s, out3 = decode_weights(bytearray(data))
    np.testing.assert_array_equal(out3, flat)


def test_weights_header_layout():
    flat = np.arange(3, dtype=np.float32)
    data = encode_weights(7, 9, flat)
    magic, fmt, reserved, version, step, count = struct.unpack_from("<4sHHqqQ", data)
    assert (magic, fmt, reserved, version, step, count) == (b"ZRLW", 1, 0, 7, 9, 3)


def test_weights_encode_rejects_bad_arrays():
    with pytest.raises(ValueError):
        encode_weights(1, 1, np.zeros(4, np.float64))
    with pytest.raises(ValueError):
        encode_weights(1, 1, np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError):
        encode_weights(1, 1, np.zeros(8, np.float32)[::2])
    with pytest.raises(ValueError):
        encode_weights(1, 1, [0.0, 1.0])
    with pytest.raises(ValueError):
        encode_weights(2**63, 1, np.zeros(2, np.float32))


def test_weights_decode_rejects_malformed():
    flat = np.arange(10, dtype=np.float32)
    good = encode_weights(3, 4, flat)
    hdr = P.WEIGHTS_HEADER_BYTES
    bad = {
        "magic": b"XRLW" + good[4:],
        "short": good[:-1],
        "long": good + b"\x00\x00\x00\x00",
        "header-only-truncated": good[: hdr - 1],
        "empty": b"",
        "count": good[:24] + struct.pack("<Q", 11) + good[hdr:],
        "count-huge": good[:24] + struct.pack("<Q", 2**64 - 1) + good[hdr:],
        "fmt": good[:4] + struct.pack("<H", 2) + good[6:],
        "reserved": good[:6] + struct.pack("<H", 1) + good[8:],
    }
    for data in bad.values():
        with pytest.raises(ProtocolError, match="weights"):
            decode_weights(data)
    with pytest.raises(ProtocolError):
        decode_weights(None)
    # weights frames are not msgpack messages and vice versa
    with pytest.raises(ProtocolError):
        decode(good)
    with pytest.raises(ProtocolError):
        decode_weights(make_episode(np.random.default_rng(0)).encode())


# ---------------------------------------------------------------------------
# malformed msgpack messages
# ---------------------------------------------------------------------------


def test_truncated_every_prefix():
    rng = np.random.default_rng(7)
    data = make_unroll(rng, M=2, T=4, A=3, F=2).encode()
    for n in range(len(data)):
        with pytest.raises(ProtocolError):
            decode(data[:n])


def test_trailing_bytes():
    data = make_episode(np.random.default_rng(8)).encode()
    expect_error(data + b"\x00", "msgpack")
    expect_error(data + data, "msgpack")


def test_random_garbage():
    rng = np.random.default_rng(9)
    for _ in range(3000):
        n = int(rng.integers(0, 200))
        data = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        with pytest.raises(ProtocolError):
            decode(data)


def test_bit_flip_fuzz_never_crashes():
    """Corrupted real messages either decode to a valid message or raise
    ProtocolError -- never anything else."""
    rng = np.random.default_rng(10)
    seeds = [
        make_unroll(rng, M=2, T=3, A=4, F=2).encode(),
        make_batch(rng, B=2, T=3, A=4).encode(),
        make_learner_stats(rng).encode(),
        make_worker_stats(rng).encode(),
    ]
    ok = errors = 0
    for i in range(4000):
        buf = bytearray(seeds[i % len(seeds)])
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(0, len(buf)))
            if rng.random() < 0.5:
                buf[pos] ^= 1 << int(rng.integers(0, 8))
            else:
                buf[pos] = int(rng.integers(0, 256))
        try:
            msg = decode(bytes(buf))
        except ProtocolError:
            errors += 1
        else:
            assert isinstance(msg, P.Message)
            ok += 1
    assert errors > 0 and ok > 0


@pytest.mark.parametrize("bad", [None, 123, "text", 1.5, [1, 2]])
def test_non_bytes_input(bad):
    with pytest.raises(ProtocolError):
        decode(bad)


def test_not_a_map():
    expect_error(pack([1, 2, 3]), "map")
    expect_error(pack(5), "map")
    expect_error(pack(b"raw"), "map")


def test_wrong_or_missing_version():
    w = wire(make_episode(np.random.default_rng(11)))
    for v in (0, 2, -1, "1", 1.0, True, None):
        expect_error(pack({**w, "v": v}), "Episode", "version")
    del w["v"]
    expect_error(pack(w), "Episode", "version")


def test_unknown_or_missing_type():
    w = wire(make_episode(np.random.default_rng(12)))
    for t in ("nope", "", 5, None, b"episode", "Episode"):
        expect_error(pack({**w, "t": t}), "unknown type")
    del w["t"]
    expect_error(pack(w), ".t")


def test_missing_field():
    rng = np.random.default_rng(13)
    for msg in (make_unroll(rng), make_batch(rng), make_learner_stats(rng)):
        w = wire(msg)
        for name in [f.name for f in msgspec.structs.fields(msg) if f.required]:  # the rest have defaults
            d = dict(w)
            del d[name]
            expect_error(pack(d), type(msg).__name__, name, "missing")


def test_extra_field():
    w = wire(make_unroll(np.random.default_rng(14)))
    expect_error(pack({**w, "bonus": 1}), "Unroll", "bonus", "unknown")
    # an extra field in place of a missing one is still caught
    d = dict(w)
    del d["seq"]
    d["seqq"] = 0
    expect_error(pack(d), "Unroll", "seq")
    # bytes keys are not field names
    d = dict(w)
    d[b"extra"] = 1
    expect_error(pack(d), "map key", "bytes")


def test_wrong_scalar_types():
    rng = np.random.default_rng(15)
    w = wire(make_learner_stats(rng))
    cases = [
        ("learner_step", 1.0),  # float for int
        ("learner_step", True),  # bool is not an int
        ("learner_step", "1"),
        ("learner_step", None),
        ("learner_step", [1]),
        ("learner_step", b"\x01"),
        ("total_loss", "0.5"),  # str for float
        ("total_loss", False),  # bool for float
        ("total_loss", None),
        ("checkpoint_path", 0),  # int for str
        ("checkpoint_path", b"/tmp/x"),  # bin for str
        ("checkpoint_path", {"a": 1}),
    ]
    for name, value in cases:
        expect_error(pack({**w, name: value}), "LearnerStats", name)
    # ints ARE accepted for float fields, and come back as float
    out = decode(pack({**w, "total_loss": 3}))
    assert type(out.total_loss) is float and out.total_loss == 3.0
    # ext types never validate
    expect_error(pack({**w, "pid": msgpack.ExtType(5, b"x")}), "")


def test_array_field_structure_errors():
    rng = np.random.default_rng(16)
    w = wire(make_unroll(rng, M=2, T=3, A=4, F=5))
    r = w["rewards"]
    cases = [
        [[0.0] * 3] * 2,  # a Python list instead of an array map
        r["data"],  # bare bytes
        {"dtype": "<f4", "shape": [2, 3]},  # missing data
        {**r, "order": "C"},  # extra key
        {**r, "data": r["data"].decode("latin-1")},  # str data
        {**r, "shape": (2, 3).__repr__()},  # str shape
        {**r, "shape": [2.0, 3]},  # float dim
        {**r, "shape": [True, 3]},  # bool dim
        {**r, "shape": [[2], 3]},
        {**r, "dtype": None},
    ]
    for bad in cases:
        expect_error(pack({**w, "rewards": bad}), "Unroll", "rewards")


def test_wrong_dtype():
    w = wire(make_unroll(np.random.default_rng(17), M=2, T=3, A=4, F=0))
    a = w["actions"]
    for dt in ("<f4", "<i8", ">i4", "|i1", "int32", "<u4", "O", "V4"):
        expect_error(pack({**w, "actions": {**a, "dtype": dt}}), "Unroll", "actions", "dtype")
    r = w["rewards"]
    for dt in ("<f8", "<f2", ">f4", "<i4"):
        expect_error(pack({**w, "rewards": {**r, "dtype": dt}}), "Unroll", "rewards", "dtype")


def test_shape_data_length_mismatch():
    w = wire(make_batch(np.random.default_rng(18), B=3, T=4, A=2))
    a = w["behaviour_logits"]
    for data in (a["data"][:-1], a["data"] + b"\x00", a["data"][:-4], b""):
        expect_error(
            pack({**w, "behaviour_logits": {**a, "data": data}}),
            "Batch",
            "behaviour_logits",
            "bytes",
        )
    # shape changed but data kept
    expect_error(pack({**w, "behaviour_logits": {**a, "shape": [3, 4, 3]}}), "Batch", "behaviour_logits")


def test_negative_and_huge_dims():
    w = wire(make_unroll(np.random.default_rng(19), M=2, T=3, A=4, F=0))
    r = w["rewards"]
    expect_error(pack({**w, "rewards": {**r, "shape": [-2, -3]}}), "Unroll.rewards.shape[0]", ">= 0")
    expect_error(pack({**w, "rewards": {**r, "shape": [2, -3]}}), "Unroll.rewards.shape[1]", ">= 0")
    # zero-size product with an absurd other dim must not reach numpy
    expect_error(
        pack({**w, "rewards": {**r, "shape": [0, 2**64 - 1], "data": b""}}),
        "Unroll",
        "rewards",
    )
    expect_error(pack({**w, "rewards": {**r, "shape": [2**40, 2**40]}}), "Unroll", "rewards")


def test_wrong_ndim():
    w = wire(make_unroll(np.random.default_rng(20), M=2, T=3, A=4, F=0))
    r = w["rewards"]
    expect_error(pack({**w, "rewards": {**r, "shape": [6]}}), "Unroll", "rewards", "ndim")
    expect_error(pack({**w, "rewards": {**r, "shape": [2, 3, 1]}}), "Unroll", "rewards", "ndim")
    f = w["features"]
    expect_error(pack({**w, "features": {**f, "shape": [0, 0]}}), "Unroll", "features", "ndim")


def _arr(shape, dtype="<f4"):
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    return {"dtype": dt.str, "shape": list(shape), "data": bytes(n * dt.itemsize)}


def test_dims_disagree():
    rng = np.random.default_rng(21)
    M, T, A, F = 2, 3, 4, 5
    w = wire(make_unroll(rng, M=M, T=T, A=A, F=F))
    cases = {
        "rewards": _arr((M, T + 1)),
        "discounts": _arr((M + 1, T)),
        "actions": _arr((M, T - 1), "<i4"),
        "behaviour_logits": _arr((M, T + 1, A)),
        "behaviour_values": _arr((M + 1, T)),
        "features": _arr((M, T + 1, F)),
    }
    for name, arr in cases.items():
        expect_error(pack({**w, name: arr}), "Unroll", name)
    # header fields disagree with all arrays
    expect_error(pack({**w, "length": T + 1}), "Unroll", "length")
    expect_error(pack({**w, "num_envs": M - 1}), "Unroll", "num_envs")
    expect_error(pack({**w, "num_envs": -1}), "Unroll", "num_envs")
    # features: [0,0,0] means "not sent" but other partly-empty shapes must agree
    assert decode(pack({**w, "features": _arr((0, 0, 0))})).features.size == 0
    assert decode(pack({**w, "features": _arr((M, T, 0))})).features.shape == (M, T, 0)
    expect_error(pack({**w, "features": _arr((0, T, 0))}), "Unroll", "features")

    # Batch: B is bound by the first array and must agree; A is free but shared
    wb = wire(make_batch(rng, B=3, T=4, A=2))
    expect_error(pack({**wb, "env_index": _arr((4,), "<i4")}), "Batch", "env_index")
    expect_error(pack({**wb, "policy_versions": _arr((2,), "<i8")}), "Batch", "policy_versions")
    expect_error(pack({**wb, "behaviour_logits": _arr((3, 5, 2))}), "Batch", "behaviour_logits")
    expect_error(pack({**wb, "length": 5}), "Batch")


def test_oversized_message():
    big = b"\x00" * (MAX_MESSAGE_BYTES + 1)
    expect_error(big, "MAX_MESSAGE_BYTES")
    expect_error(memoryview(big), "MAX_MESSAGE_BYTES")


def test_msgpack_bombs_fail_fast():
    bombs = [
        b"\xc6\xff\xff\xff\xff",  # bin32 of 4 GiB, no payload
        b"\xc6\x7f\xff\xff\xff" + b"\x00" * 16,
        b"\xdb\xff\xff\xff\xff",  # str32 of 4 GiB
        b"\xdd\xff\xff\xff\xff",  # array32 of 4G elements
        b"\xdf\xff\xff\xff\xff",  # map32 of 4G entries
        b"\xc9\xff\xff\xff\xff\x01",  # ext32 of 4 GiB
        b"\x91" * 100_000,  # absurdly deep nesting
        b"\xdd\x00\x01\x00\x00" + b"\xc0" * 65536,  # array of 65536 nils
        b"\xde\x01\x00" + b"\xa1a\xc0" * 256,  # map with too many entries
    ]
    # a plausible header whose "data" claims a gigantic bin
    w = wire(make_episode(np.random.default_rng(22)))
    head = pack({**w, "wall_time": 0.0})
    bombs.append(head[:-9] + b"\xc6\xff\xff\xff\xff")
    t0 = time.perf_counter()
    for bomb in bombs:
        with pytest.raises(ProtocolError):
            decode(bomb)
    assert time.perf_counter() - t0 < 2.0


def test_error_is_only_protocol_error_for_wrapped_types():
    # map keys that are not str are refused
    expect_error(b"\x81\x01\x02", "map key")
    expect_error(b"\x81\x90\x02", "map key")  # list key


def test_decoding_and_construction_accept_the_same():
    """One declaration checks a message whether it is decoded or built here: on bit-flipped real messages,
    whatever decodes can be built again from its fields, equal and encoding to the same bytes."""
    rng = np.random.default_rng(11)
    seeds = [
        make_unroll(rng, M=2, T=3, A=4, F=2).encode(),
        make_unroll(rng, M=2, T=3, A=4, F=0).encode(),
        make_batch(rng, B=2, T=3, A=4).encode(),
        make_learner_stats(rng).encode(),
        make_replay_index(rng).encode(),
        make_transitions(rng).encode(),
    ]
    accepted = 0
    for i in range(6000):
        buf = bytearray(seeds[i % len(seeds)])
        for _ in range(int(rng.integers(0, 3))):
            buf[int(rng.integers(0, len(buf)))] ^= 1 << int(rng.integers(0, 8))
        try:
            msg = decode(bytes(buf))
        except ProtocolError:
            continue
        rebuilt = type(msg)(**{name: getattr(msg, name) for name in msg.FIELDS})
        assert_msg_equal(msg, rebuilt)
        assert rebuilt.encode() == msg.encode()
        accepted += 1
    assert accepted > 1000


def test_the_wire_keeps_its_layout():
    """The map the dataclass protocol sent (v before t) decodes; the keys, array maps and values are the same."""
    rng = np.random.default_rng(24)
    for kind in ("Unroll", "Batch", "LearnerStats", "ReplayIndex", "Transitions"):
        msg = FACTORIES[kind](rng)
        w = wire(msg)
        assert list(w)[:2] == ["t", "v"] and list(w)[2:] == list(msg.FIELDS)
        old_order = {"v": w.pop("v"), "t": w.pop("t"), **w}
        assert_msg_equal(msg, decode(pack(old_order)))
