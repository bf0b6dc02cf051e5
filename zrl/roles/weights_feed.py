"""How the learner's weights reach the workers: the broadcasts a worker takes (WeightsFeed), the direct requests it
makes when one is overdue and the learner's answers to them, and the check that weights are finite."""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import zmq

from zrl import bounds, protocol, transport
from zrl.roles.inbound import Decoder
from zrl.roles.lifecycle import should_stop
from zrl.roles.run_wiring import RunWiring


def finite_weights(data) -> tuple[int, int, np.ndarray]:
    """``protocol.decode_weights``, and a ProtocolError for weights that are not all finite: a worker acting on
    them would fill the replays with NaN, and the ingest would pass them on to every remote worker."""
    version, step, flat = protocol.decode_weights(data)
    if not bounds.finite(flat):
        raise protocol.ProtocolError(f"weights version {version} hold non-finite numbers")
    return version, step, flat


class Weights(NamedTuple):
    version: int
    flat: np.ndarray  # float32, every parameter in order
    learner_step: int  # the learner step they were published at


class WeightsFeed:
    """A worker's copy of the learner's weights: the broadcasts on SUB, and direct requests when a broadcast is
    overdue. A broadcast can be lost, one sent before this SUB's subscription reached the learner above all,
    and a request's answer cannot; a worker that waits on a lost version would otherwise wait for ever."""

    def __init__(
        self, ctx: zmq.Context, wiring: RunWiring, requester_id: int, poll_ms: int, stop_event, ask_after_s: float = 1.0
    ) -> None:
        self.ctx, self.wiring, self.requester_id = ctx, wiring, requester_id
        self.poll_ms, self.stop_event, self.ask_after_s = poll_ms, stop_event, ask_after_s
        self.sub = transport.socket(ctx, zmq.SUB, hwm=1, connect=wiring.endpoints.weights)

    def ask(self) -> Weights | None:
        """The learner's current weights (version, flat float32), asked for; None if the run stops first."""
        return wait_for_weights(self.ctx, self.wiring, self.requester_id, self.poll_ms, self.stop_event)

    def newer(self, than: int, wait_ms: int) -> Weights | None:
        """A broadcast version above ``than`` if one comes within ``wait_ms`` (older ones are skipped)."""
        deadline = time.monotonic() + wait_ms / 1000
        while self.sub.poll(max(0, int((deadline - time.monotonic()) * 1000)), zmq.POLLIN):
            try:
                version, step, flat = finite_weights(self.sub.recv())
            except protocol.ProtocolError:
                continue
            if version > than:  # a broadcast queued before the worker's first request may be older
                return Weights(version, flat, step)
        return None

    def at_least(self, version: int, idle=lambda: None) -> Weights | None:
        """Weights of ``version`` or newer: broadcast, or asked for after ``ask_after_s`` without them; ``idle``
        runs between polls (a heartbeat). None if the run stops first."""
        asked = time.monotonic()
        while not should_stop(self.stop_event):
            got = self.newer(version - 1, self.poll_ms)
            if got is not None:
                return got
            if time.monotonic() - asked >= self.ask_after_s:
                got = self.ask()
                if got is None or got.version >= version:
                    return got
                asked = time.monotonic()
            idle()
        return None

    def close(self) -> None:
        self.sub.close()


def answer_weight_requests(rep: zmq.Socket, current: bytes, decoded: Decoder) -> None:
    """The learner's side of :func:`wait_for_weights`: answer every waiting request on the ROUTER ``rep`` with
    the encoded ``current`` weights; a malformed one goes unanswered, counted by ``decoded``."""
    while rep.poll(0, zmq.POLLIN):
        frames = rep.recv_multipart()
        if decoded(frames[-1], protocol.WeightsRequest) is not None:
            rep.send_multipart([frames[0], current], copy=False)


def next_batch(
    batches: zmq.Socket, poll_ms: int, rep: zmq.Socket, current: bytes, decoded: Decoder, timing: dict[str, float]
) -> bytes | None:
    """A learner's turn before it trains: answer the waiting weights requests, then wait up to ``poll_ms`` for
    the next message on ``batches`` (the wait counts as ``timing["wait"]``); None if none came."""
    answer_weight_requests(rep, current, decoded)
    t0 = time.perf_counter()
    data = transport.recv(batches, poll_ms)
    timing["wait"] += time.perf_counter() - t0
    return data


def wait_for_weights(
    ctx: zmq.Context, wiring: RunWiring, requester_id: int, poll_ms: int, stop_event
) -> Weights | None:
    """Ask the learner for its current weights; None if the run stops first."""
    req = transport.socket(ctx, zmq.DEALER, hwm=4, connect=wiring.endpoints.weights_req)
    try:
        ask = protocol.WeightsRequest(worker_id=requester_id).encode()
        while not should_stop(stop_event):
            if not transport.send(req, ask, poll_ms):
                continue
            reply = transport.recv(req, 2000)
            if reply is not None:
                try:
                    version, step, flat = finite_weights(reply)
                except protocol.ProtocolError:  # not weights (a remote worker's refusal): ask again, or stop
                    continue
                return Weights(version, flat, step)
        return None
    finally:
        req.close()
