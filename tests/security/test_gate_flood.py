"""A flood of connections to a run's gate costs the run nothing: a real ingest (tests/test_remote.py's harness) held by
loopback connections that never start their handshake, or that finish it and then say nothing (ZeroMQ DEALERs, which
connect again at once when hung up), holds no more of them than transport.max_connections on its gate and on its
weights socket, keeps the worker that had joined, and lets a new one join at once; and one started with a soft limit of
open files below what the flood takes lifts it (zrl/connections.py). The launcher's part, restarting a worker and
writing checkpoints, never depended on the ingest's files: a flood of the old gate left it whole."""

from __future__ import annotations

import contextlib
import resource
import time

import psutil
import pytest
import zmq
from conftest import worker_stats_message
from flood import Slowloris, established
from remote_client import Client
from test_remote import ingest_running

from zrl import protocol

pytestmark = pytest.mark.integration

CAP = 32
FLOOD = 100
LAG = 8  # connections accepted since the ingest's last turn, not yet hung up


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _peak(pid: int, ports: tuple[int, ...], seconds: float) -> list[int]:
    """The most connections ``pid`` held at once on each of ``ports`` over ``seconds``."""
    peak = [0] * len(ports)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = [max(p, established(pid, port)) for p, port in zip(peak, ports)]
        time.sleep(0.1)
    return peak


@contextlib.contextmanager
def _idle_peers(endpoint: str, count: int, kind: int):
    """``count`` sockets of ``kind`` connected to ``endpoint`` that handshake and then say nothing."""
    ctx = zmq.Context()
    socks = []
    try:
        for _ in range(count):
            sock = ctx.socket(kind)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            socks.append(sock)
        yield
    finally:
        for sock in socks:
            sock.close()
        ctx.term()


def _joins_at_once(h) -> protocol.Welcome:
    t0 = time.monotonic()
    welcome = h.client().join()
    assert isinstance(welcome, protocol.Welcome), f"a new worker got {welcome} (None: no answer within 3 s)"
    assert time.monotonic() - t0 < 3.0
    return welcome


def _still_served(client: Client) -> None:
    ack = client.ask(worker_stats_message(worker_id=1))
    assert isinstance(ack, protocol.Ack), f"the worker that had joined got {ack}"


@pytest.mark.parametrize("kind", ["never_handshake", "handshake_then_idle"])
def test_a_flood_of_idle_connections_is_held_to_the_cap_and_a_worker_still_joins(kind, no_leaks):
    with ingest_running(f"transport.max_connections={CAP}", remote=2) as h:
        first = h.client()
        welcome = first.join()  # the gate is up; this worker's connection is spared through the flood
        assert isinstance(welcome, protocol.Welcome), welcome
        gate, weights = _port(h.gate), welcome.weights_port
        with contextlib.ExitStack() as flood:
            if kind == "never_handshake":
                flood.enter_context(Slowloris(gate, FLOOD, every_s=0.5, byte=b""))
                flood.enter_context(Slowloris(weights, FLOOD, every_s=0.5, byte=b""))
            else:
                flood.enter_context(_idle_peers(h.gate, FLOOD, zmq.DEALER))
                flood.enter_context(_idle_peers(f"tcp://127.0.0.1:{weights}", FLOOD, zmq.SUB))
            time.sleep(2)  # the flood takes its hold
            held = _peak(h.proc.pid, (gate, weights), 3.0)
            assert held[0] <= CAP + LAG, f"the ingest held {held[0]} connections on its gate (cap {CAP})"
            assert held[1] <= CAP + LAG, f"the ingest held {held[1]} connections on its weights (cap {CAP})"
            _joins_at_once(h)
            _still_served(first)
        h.ingest_stats(lambda s: any(isinstance(m, protocol.Notice) and "hung up" in m.text for m in h.stats))
        said = next(m.text for m in h.stats if isinstance(m, protocol.Notice) and "hung up" in m.text)
        assert f"transport.max_connections = {CAP}" in said, said


OPEN_FILES = 128  # the ingest's soft limit: the flood alone would take more


@contextlib.contextmanager
def _soft_file_limit(files: int):
    """This process's soft limit of open files at ``files`` (at least 64 above what it holds) for the block: what a
    fork server started in it, and the roles it forks, inherit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = max(files, psutil.Process().num_fds() + 64)
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, hard))
    try:
        yield files
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_ingest_whose_file_limit_is_below_the_flood_lifts_it_and_a_worker_still_joins(no_leaks):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2 * OPEN_FILES + 3 * FLOOD:
        pytest.skip(f"the hard limit of open files, {hard}, leaves no room above the soft limit this test sets")
    with contextlib.ExitStack() as stack:
        with _soft_file_limit(OPEN_FILES) as files:
            h = stack.enter_context(ingest_running(remote=2))
        assert isinstance(h.client().join(), protocol.Welcome)
        gate = _port(h.gate)
        with Slowloris(gate, files + FLOOD, every_s=0.5, byte=b""):
            time.sleep(3)  # the flood takes its hold
            _joins_at_once(h)
            held = established(h.proc.pid, gate)
            assert held > files, f"the ingest held only {held} connections: was its gate flooded?"
