"""zrl.protocol behind a real ZeroMQ receiver: garbage among valid messages costs a decode error each and never
the receiver. The decoder's own tests (round trips, strict decoding, hostile input) are tests/test_protocol.py."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq
from test_protocol import assert_msg_equal, make_episode, make_learner_stats, make_unroll, make_worker_stats

from zrl.agents.vtrace.messages import Unroll
from zrl.protocol import ProtocolError, decode, encode_weights

pytestmark = pytest.mark.integration


def test_zmq_receiver_survives_garbage():
    rng = np.random.default_rng(23)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    push = ctx.socket(zmq.PUSH)
    try:
        for s in (pull, push):
            s.setsockopt(zmq.LINGER, 0)
        pull.bind("inproc://zrl-protocol-test")
        push.connect("inproc://zrl-protocol-test")

        valid = [make_unroll(rng, M=2, T=5, A=4, F=(i % 2) * 3, seq=i) for i in range(40)]
        valid += [make_worker_stats(rng), make_episode(rng), make_learner_stats(rng)]
        valid_bytes = [m.encode() for m in valid]
        garbage = [rng.integers(0, 256, size=int(rng.integers(0, 300)), dtype=np.uint8).tobytes() for _ in range(60)]
        garbage += [
            valid_bytes[0][:50],
            valid_bytes[1] + b"\x00",
            b"",
            b"\xc6\xff\xff\xff\xff",
            encode_weights(1, 1, np.zeros(4, np.float32)),
        ]

        frames = [(True, b) for b in valid_bytes] + [(False, g) for g in garbage]
        order = rng.permutation(len(frames))
        for i in order:
            push.send(frames[i][1], copy=False)

        poller = zmq.Poller()
        poller.register(pull, zmq.POLLIN)
        decoded, decode_errors = [], 0
        deadline = time.monotonic() + 5.0
        while len(decoded) + decode_errors < len(frames) and time.monotonic() < deadline:
            if not dict(poller.poll(timeout=100)):
                continue
            frame = pull.recv(copy=False)
            try:
                decoded.append(decode(frame.buffer))
            except ProtocolError:
                decode_errors += 1

        assert decode_errors == len(garbage)
        assert len(decoded) == len(valid)
        # PUSH/PULL over inproc preserves order
        expected = [frames[i][1] for i in order if frames[i][0]]
        for got, want in zip(decoded, expected):
            assert_msg_equal(got, decode(want))
        assert sorted(m.seq for m in decoded if isinstance(m, Unroll)) == list(range(40))
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        ctx.term()
