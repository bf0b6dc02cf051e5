"""Remote workers: the ingest role on its gate, with real sockets, shared memory and processes.

A test client plays a remote worker by hand (a DEALER that joins and sends RemoteData), so that it can send what a
real zrl-worker never would: frames it does not send, wrong sizes, decompression bombs, gaps, another worker's id,
another run's name, garbage, keys that are not (or no longer) authorized. Each is refused with a Refused, counted
in IngestStats, and leaves the slot's ring as it was; the well-formed messages land in the slot's ring exactly as
sent and reach the broker in the slot's name. The whole path with a real zrl-worker process (in its own network
namespace) is in tests/test_remote_e2e.py.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import pytest
import zmq
import zmq.auth
from conftest import REPO, transitions_message, worker_stats_message
from remote_client import Client, M, T, deflate, remote_data, slots

from zrl import envs, protocol, transport
from zrl.agents.vtrace.messages import Unroll
from zrl.config import TransportConfig, load
from zrl.launch.wiring import Wiring

pytestmark = pytest.mark.integration

CARTPOLE = REPO / "config" / "cartpole.toml"


class Harness:
    """A Wiring with one local and ``remote`` remote slots, its ingest role running, and this process playing the
    broker (a PULL on the unrolls endpoint) and the launcher (the Wiring's stats PULL)."""

    def __init__(self, wiring: Wiring, broker: zmq.Socket, proc) -> None:
        self.wiring, self.broker, self.proc = wiring, broker, proc
        self.gate = wiring.endpoints.gate
        self.ring = wiring.rings[1]  # the first remote slot's: worker 1
        self.stats: list = []
        self.ctx = zmq.Context()
        self.socks: list[zmq.Socket] = []

    def client(self, keys: transport.CurveKeys | None = None) -> Client:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTING_ID, os.urandom(16))
        if keys is not None:
            sock.curve_publickey, sock.curve_secretkey = keys.client_public, keys.client_secret
            sock.curve_serverkey = keys.server_public
        sock.connect(self.gate)
        self.socks.append(sock)
        return Client(sock)

    def forwarded(self, wait_ms: int = 300) -> list[Unroll]:
        out = []
        while self.broker.poll(wait_ms, zmq.POLLIN):
            out.append(protocol.decode(self.broker.recv()))
            wait_ms = 50
        return out

    def ingest_stats(self, until=lambda s: True, timeout: float = 5.0) -> protocol.IngestStats:
        """The ingest's newest IngestStats once ``until`` holds for it."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            data = self.wiring.take_stats(100)
            if data is None:
                continue
            msg = protocol.decode(data)
            self.stats.append(msg)
            if isinstance(msg, protocol.IngestStats):
                last = msg
                if until(msg):
                    return msg
        raise AssertionError(f"no IngestStats as wanted within {timeout:g} s; the last: {last}")

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.ctx.term()


@contextlib.contextmanager
def ingest_running(*sets: str, remote: int = 1):
    cfg = load(
        CARTPOLE,
        ["workers.count=1", f"workers.remote={remote}", f"workers.envs_per_worker={M}", f"learner.unroll_length={T}"]
        + list(sets),
    )
    wiring = Wiring(cfg, envs.probe(cfg.env))
    harness = None
    try:
        wiring.open()
        broker = wiring.socket(zmq.PULL, hwm=100, bind=wiring.endpoints.unrolls)
        wiring.serve_weights()
        stop = wiring.stop_flag()
        proc = wiring.ingest(stop, "run_a")
        proc.start()
        harness = Harness(wiring, broker, proc)
        try:
            yield harness
        finally:
            stop.set()
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            assert proc.exitcode == 0, f"the ingest exited with {proc.exitcode}"
    finally:
        if harness is not None:
            harness.close()
        wiring.close()
        transport.configure(TransportConfig())  # this process's later sockets are plain again


def test_a_remote_workers_frames_land_in_its_slot_and_its_unrolls_reach_the_broker_in_its_name(no_leaks):
    with ingest_running() as h:
        client = h.client()
        welcome = client.join()
        assert isinstance(welcome, protocol.Welcome), welcome
        assert (welcome.worker_id, welcome.run, welcome.generation) == (1, "run_a", 1)
        assert "frames 4 float32, 2 actions" in welcome.env_spec and "CartPole-v1" in welcome.config
        client.send(remote_data(0, 0, T + 1, 0))
        client.send(remote_data(1, T + 1, T, T))
        first, second = h.forwarded()
        assert (first.worker_id, first.seq, first.first_frame) == (1, 0, 0)
        assert (second.worker_id, second.seq, second.first_frame) == (1, 1, T)
        assert h.ring.head == 2 * T + 1
        for name, values in slots(0, 2 * T + 1).items():
            np.testing.assert_array_equal(h.ring.fields[name][: 2 * T + 1], values)
        forged = {"worker_id": 7, "pid": 123, "env_frames": 10**15, "env_steps": 10**15}  # frames it never sent
        stats = client.ask(protocol.WorkerStats(**{**_worker_stats(), **forged}))
        assert isinstance(stats, protocol.Ack) and stats.live_workers == 2
        got = h.ingest_stats(lambda s: s.remote_frames == (2 * T + 1) * M)
        assert (got.remote_workers, got.remote_joins, got.remote_refused) == (1, 1, 0)
        reported = [s for s in h.stats if isinstance(s, protocol.WorkerStats)]
        assert reported and reported[-1].worker_id == 1 and reported[-1].pid == h.proc.pid  # in the slot's name
        # counted only as far as the frames it delivered bear out (one frame per step of each env, CartPole)
        assert reported[-1].env_frames == (2 * T + 1) * M and reported[-1].env_steps == (2 * T + 1) * M


def _worker_stats() -> dict:
    msg = worker_stats_message()
    return {name: getattr(msg, name) for name in msg.FIELDS}


FORGERIES = {
    "names frames it has not sent": lambda: remote_data(0, 0, T + 1, 3),
    "holds 1 bytes": lambda: remote_data(0, 0, T + 1, 0, frames=deflate(slots(0, T))),  # a slot short
    "a decompression bomb": lambda: remote_data(0, 0, T + 1, 0, frames=deflate(slots(0, 50 * T))),
    "do not decompress": lambda: remote_data(0, 0, T + 1, 0, frames=np.arange(200, dtype=np.uint8)),
    "message 3 where 0 was due": lambda: remote_data(3, 0, T + 1, 0),
    "names worker 0": lambda: remote_data(0, 0, T + 1, 0, worker_id=0),
    "does not decode": lambda: remote_data(0, 0, T + 1, 0, message=b"\x93garbage"),
    "not the Unroll this run takes": lambda: remote_data(0, 0, T + 1, 0, message=protocol.Credit(batches=1).encode()),
    # another agent's message: a V-trace run's ingest has not even imported its type
    "unknown type tag": lambda: remote_data(0, 0, T + 1, 0, message=transitions_message().encode()),
    "at most 6": lambda: remote_data(0, 0, T + 2, 0),  # more slots than a worker writes between two messages
    "frames from 5 where 0 were due": lambda: remote_data(0, 5, T + 1, 5),  # a session's numbering starts at 0
}
REASONS = {"holds 1 bytes": "bytes, not", "a decompression bomb": "+ bytes, not"}


def test_forged_and_damaged_messages_are_refused_counted_and_write_nothing(no_leaks):
    with ingest_running() as h:
        refused = 0
        for name, forge in FORGERIES.items():
            client = h.client()
            assert isinstance(client.join(), protocol.Welcome), name  # the last refusal freed the slot
            answer = client.ask(forge())
            refused += 1
            assert isinstance(answer, protocol.Refused) and answer.final == 0, (name, answer)
            assert REASONS.get(name, name) in answer.reason, (name, answer.reason)
            assert h.ring.head == 0 and h.forwarded(100) == [], name
        # the slot was freed each time: a well-formed worker still gets in and through
        client = h.client()
        assert isinstance(client.join(), protocol.Welcome)
        client.send(remote_data(0, 0, T + 1, 0))
        (unroll,) = h.forwarded()
        assert unroll.worker_id == 1 and h.ring.head == T + 1
        # a gap in its frame numbers after that
        assert "were due" in client.ask(remote_data(1, 2 * T, T, 2 * T)).reason
        refused += 1
        h.ingest_stats(lambda s: s.remote_refused == refused and s.remote_workers == 0)


def test_strangers_garbage_and_another_run_get_nothing_through(no_leaks):
    with ingest_running() as h:
        stranger = h.client()
        assert "has not joined" in stranger.ask(remote_data(0, 0, T + 1, 0)).reason
        assert "not a zrl message" in stranger.ask(b"\x00\x01garbage").reason
        stranger.sock.send_multipart([b"two", b"frames"])
        assert "one frame" in stranger.answer().reason
        other_run = stranger.join(run="run_b")
        assert isinstance(other_run, protocol.Refused) and other_run.final == 1 and "not run_b" in other_run.reason
        misfit = stranger.join(envs_per_worker=M + 1)
        assert misfit.final == 1 and f"--envs-per-worker {M}" in misfit.reason
        first = h.client()
        assert isinstance(first.join(), protocol.Welcome)
        full = h.client().join()
        assert isinstance(full, protocol.Refused) and full.final == 0 and "slots of this run are taken" in full.reason
        first.send(protocol.Leave(reason="done"))
        assert isinstance(h.client().join(), protocol.Welcome)  # the slot a worker left is free at once
        h.ingest_stats(lambda s: s.remote_refused == 5 and s.remote_joins == 2)
        assert h.ring.head == 0 and h.forwarded(100) == []
        notices = [s.text for s in h.stats if isinstance(s, protocol.Notice)]
        assert any("joined as zrl-worker-1" in t for t in notices) and any("left (done)" in t for t in notices)


def test_only_authorized_keys_get_in_and_a_deleted_key_is_shut_out(tmp_path, no_leaks):
    folder = tmp_path / "keys"
    transport.make_curve_keys(str(folder))
    host_b = transport.load_client_keys(str(transport.make_client_keys(str(folder), "hostb")))
    elsewhere = tmp_path / "elsewhere"  # a key pair of another key folder: not authorized here
    transport.make_curve_keys(str(elsewhere))
    intruder = transport.load_client_keys(str(elsewhere))
    intruder = transport.CurveKeys(host_b.server_public, b"", intruder.client_public, intruder.client_secret, "")
    with ingest_running(f"transport.curve_keys={str(folder)!r}") as h:
        assert h.client(intruder).join() is None  # no handshake: nothing arrives, nothing is answered
        assert h.client().join() is None  # plain text, no key at all
        h.ingest_stats(lambda s: s.remote_auth_refused >= 1)
        client = h.client(host_b)
        welcome = client.join()
        assert isinstance(welcome, protocol.Welcome)
        notices = [s.text for s in h.stats if isinstance(s, protocol.Notice)]
        client.send(remote_data(0, 0, T + 1, 0))
        assert len(h.forwarded()) == 1
        (folder / "authorized" / "hostb.key").unlink()  # revoked
        time.sleep(1.2)  # the ingest reads the folder again at most every second
        answer = client.ask(remote_data(1, T + 1, T, T))
        assert isinstance(answer, protocol.Refused) and answer.final == 1 and "not authorized" in answer.reason
        assert h.forwarded(100) == [] and h.ring.head == T + 1
        h.ingest_stats(lambda s: s.remote_joins == 1 and s.remote_workers == 0)
        notices = [s.text for s in h.stats if isinstance(s, protocol.Notice)]
        assert any("hostb on b" in t and "joined" in t for t in notices), notices
        assert any("its key is no longer in authorized/; its slot is free" in t for t in notices), notices
