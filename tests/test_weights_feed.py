"""A worker's weights feed on real ZeroMQ sockets: broadcasts come through, and a lost broadcast is asked for
instead of being waited on for ever (a deterministic run's worker did that once, and the run hung)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import zmq

from shm.ring import RingSpec
from zrl import protocol, transport
from zrl.roles.run_wiring import RunWiring
from zrl.roles.weights_feed import WeightsFeed
from zrl.transport import ENDPOINT_NAMES, Endpoints

pytestmark = pytest.mark.integration


class FakeLearner:
    """The learner's two weights sockets: a PUB it broadcasts on, and a ROUTER that answers requests with the
    current version (counted)."""

    def __init__(self, folder) -> None:
        self.endpoints = Endpoints(**{n: f"ipc://{folder}/{n}" for n in ENDPOINT_NAMES})
        self.ctx = zmq.Context()
        self.pub = transport.socket(self.ctx, zmq.PUB, hwm=2, bind=self.endpoints.weights)
        self.version, self.requests, self.stop = 0, 0, threading.Event()
        self.thread = threading.Thread(target=self._answer, daemon=True)
        self.thread.start()

    def weights(self, version: int) -> bytes:
        return protocol.encode_weights(version, version, np.full(3, version, np.float32))

    def _answer(self) -> None:
        rep = transport.socket(self.ctx, zmq.ROUTER, hwm=16, bind=self.endpoints.weights_req)
        while not self.stop.is_set():
            if rep.poll(20, zmq.POLLIN):
                frames = rep.recv_multipart()
                self.requests += 1
                rep.send_multipart([frames[0], self.weights(self.version)])
        rep.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.pub.close()
        self.ctx.term()


@pytest.fixture()
def learner(tmp_path):
    fake = FakeLearner(tmp_path)
    yield fake
    fake.close()


def _feed(learner: FakeLearner, ask_after_s: float = 0.5, stop_event=None):
    wiring = RunWiring(
        endpoints=learner.endpoints,
        ring_names=(),
        ring_spec=RingSpec(capacity=1, fields={"frame": ((1,), "uint8")}),
        frame_shape=(1,),
        frame_dtype="uint8",
        num_actions=2,
        frames_per_step=1,
        launcher_pid=os.getppid(),
    )
    ctx = zmq.Context()
    return ctx, WeightsFeed(
        ctx, wiring, requester_id=0, poll_ms=50, stop_event=stop_event or threading.Event(), ask_after_s=ask_after_s
    )


def test_a_lost_broadcast_is_asked_for_instead_of_waited_on(learner):
    learner.version = 1
    learner.pub.send(learner.weights(1))  # before the worker subscribed: lost
    stop = threading.Event()
    ctx, feed = _feed(learner, stop_event=stop)
    try:
        result = []
        waiter = threading.Thread(target=lambda: result.append(feed.at_least(1)))
        waiter.start()
        waiter.join(10)
        stop.set()  # a feed that waits for ever is stopped: the test fails, and does not hang
        waiter.join()
        got = result[0]
        assert got is not None and got.version == 1 and np.all(got.flat == 1)
        assert learner.requests == 1
    finally:
        feed.close()
        ctx.term()


def test_broadcasts_come_through_without_asking_and_older_ones_are_skipped(learner):
    ctx, feed = _feed(learner, ask_after_s=20)
    try:
        deadline = time.monotonic() + 10
        got = None
        while got is None and time.monotonic() < deadline:  # until the subscription has reached the PUB
            learner.pub.send(learner.weights(1))
            got = feed.newer(0, 50)
        assert got is not None and got.version == 1
        while feed.newer(1, 0) or feed.sub.poll(200, zmq.POLLIN):  # the other copies of 1
            feed.sub.recv()
        learner.pub.send(learner.weights(1))  # a stale copy ahead of the version waited for
        learner.pub.send(learner.weights(2))
        got = feed.at_least(2)
        assert got is not None and got.version == 2 and np.all(got.flat == 2)
        assert learner.requests == 0
    finally:
        feed.close()
        ctx.term()


def test_a_broadcast_of_weights_that_are_not_finite_is_skipped(learner):
    """A learner gone wrong, or a forged PUB: a worker never acts on NaN weights, it waits for good ones."""
    ctx, feed = _feed(learner, ask_after_s=20)
    try:
        bad = protocol.encode_weights(2, 2, np.full(3, np.nan, np.float32))
        deadline = time.monotonic() + 10
        got = None
        while got is None and time.monotonic() < deadline:  # until the subscription has reached the PUB
            learner.pub.send(bad)
            learner.pub.send(learner.weights(3))
            got = feed.newer(1, 50)
        assert got is not None and got.version == 3 and np.all(got.flat == 3)
    finally:
        feed.close()
        ctx.term()
