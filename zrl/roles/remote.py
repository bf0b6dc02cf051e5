"""A worker on another host: ``zrl-worker --connect tcp://HOST:PORT`` (or a zrl-launch --ray actor).

It runs the one worker loop (zrl/roles/worker.py) with a RemoteLink in place of the shared-memory one: its frames
go into a ring in its own memory, and with each of its messages it sends the frames written since the one before,
zstd-compressed (level 1: 58-192x smaller on Atari frames at 1-2 us a frame; perf/frame_compression.py), to the
run's ingest (zrl/roles/ingest.py), which writes them into the slot's ring on the learner's host. Its stats and
episodes go the same way; the learner's weights come from the ingest's PUB, and on (re)start by asking the gate.

``serve`` is the process: join (the run's config comes back: the learner's host is the one source of it), work
until the session ends, and join again with backoff while the learner is not up, restarts, or drops the worker.
"""

from __future__ import annotations

import os
import socket as _socket
import time
import tomllib
from collections.abc import Callable

import numpy as np
import zmq
import zstandard

from shm.ring import Ring
from zrl import __version__, protocol, transport
from zrl.bounds import printable
from zrl.roles.lifecycle import should_stop
from zrl.roles.reporting import StatsOut
from zrl.roles.run_wiring import RunWiring, WorkerStart, env_spec_text, make_ring_spec, silence_limit
from zrl.roles.weights_feed import Weights, WeightsFeed, finite_weights
from zrl.roles.worker_link import WorkerLink, worker_env
from zrl.transport import ENDPOINT_NAMES, Endpoints

JOIN_WAIT_S = 5.0  # how long a join waits for the gate's answer before it tries again
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # the waits between tries, the last repeated
PROGRESS_EVERY_S = 10.0
SHORT_SESSION_S = 30.0  # a session that ended sooner does not reset the backoff
CHECK_EVERY_S = 0.05  # how often the loop's stop check looks at the gate
SAID_CHARS = 2000  # of a line zrl-worker says, the gate's words in it
ASK_TIMEOUT_S = 2.0  # how long an answer to a weights request is waited for before it is asked again


class Session:
    """One admission to a run, and the stop check of the worker loop that runs under it (``is_set``): the session
    ends when the process is asked to stop, when the ingest refuses the worker, or when its heartbeats go
    unanswered for ``silence_s``. ``live_workers`` is what the ingest said last."""

    def __init__(self, ctx: zmq.Context, gate: zmq.Socket, welcome: protocol.Welcome, stopping, silence_s: float):
        self.ctx, self.gate, self.welcome, self.stopping, self.silence_s = ctx, gate, welcome, stopping, silence_s
        self.live_workers = 0
        self.last_heard = time.monotonic()
        self.refused: protocol.Refused | None = None
        self.lost = False
        self.weights: bytes | None = None  # a weights frame the gate sent, asked for by ask_weights
        self._next_check = 0.0

    def is_set(self) -> bool:
        if self.refused is not None or self.lost or self.stopping():
            return True
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + CHECK_EVERY_S
        if self._read(now):
            return True
        if now - self.last_heard > self.silence_s:
            self.lost = True
        return self.lost

    def _read(self, now: float) -> bool:
        """Take what the gate answered: acks, a refusal (True: the session ends), and the weights asked for, kept
        in ``weights`` for ``ask_weights``."""
        while (data := transport.recv(self.gate, 0)) is not None:
            try:
                msg = protocol.decode(data)
            except protocol.ProtocolError:
                self.weights = data  # the one answer that is not a message: a weights frame (ask_weights checks it)
                continue
            if isinstance(msg, protocol.Ack):
                self.last_heard, self.live_workers = now, msg.live_workers
            elif isinstance(msg, protocol.Refused):
                self.refused = msg
                return True
        return False

    def ask_weights(self, requester_id: int, poll_ms: int) -> Weights | None:
        """The run's current weights, asked for on this session's own connection to the gate (the gate gives weights
        only to a worker that has joined); None if the session ends first."""
        ask = protocol.WeightsRequest(worker_id=requester_id).encode()
        while not self.is_set():
            self.weights = None
            if not transport.send(self.gate, ask, poll_ms):
                continue
            deadline = time.monotonic() + ASK_TIMEOUT_S
            while time.monotonic() < deadline and not self.is_set():
                if self.gate.poll(poll_ms, zmq.POLLIN) and self._read(time.monotonic()):
                    return None  # refused: the session ends
                if self.weights is not None:
                    try:
                        version, step, flat = finite_weights(self.weights)
                    except protocol.ProtocolError:  # not weights after all: ask again
                        break
                    return Weights(version, flat, step)
        return None


class GateWeightsFeed(WeightsFeed):
    """A remote worker's weights: the broadcasts of the ingest's PUB, and requests on the session's gate."""

    def __init__(self, session: Session, wiring: RunWiring, worker_id: int, poll_ms: int) -> None:
        super().__init__(session.ctx, wiring, worker_id, poll_ms, session)
        self.session = session

    def ask(self) -> Weights | None:
        return self.session.ask_weights(self.requester_id, self.poll_ms)


class RemoteLink(WorkerLink):
    """A remote worker's env, private ring and sockets: ``send`` puts the frames written since the last message in
    front of each message (RemoteData); ``stats`` and ``out`` are both the session's gate."""

    def __init__(self, worker_id: int, cfg, wiring: RunWiring, session: Session, offset: int) -> None:
        self.worker_id, self.frames_per_step = worker_id, wiring.frames_per_step
        self.session, self.say = session, None
        self.env = worker_env(cfg, worker_id, offset)
        self.ring = Ring.private(wiring.ring_spec)
        self.out, self.stats = session.gate, StatsOut(session.gate, None)  # both on the gate; the ingest vouches
        self.weights = GateWeightsFeed(session, wiring, worker_id, cfg.transport.poll_timeout_ms)
        self.zip = zstandard.ZstdCompressor(level=1)
        self.sent_to = self.seq = 0
        self.pending: tuple[int, bytes] | None = None  # a RemoteData made and not yet sent (backpressure)
        self.bytes_sent = self.frames_sent = 0
        self.started = self.progress_at = time.monotonic()

    def send(self, message: bytes, timeout_ms: int) -> bool:
        if self.pending is None:
            head = self.ring.head
            data = protocol.RemoteData(
                seq=self.seq,
                first_frame=self.sent_to,
                count=head - self.sent_to,
                frames=deflate_slots(self.ring, self.sent_to, head, self.zip),
                message=np.frombuffer(message, np.uint8),
            ).encode()
            self.pending = (head, data)
        head, data = self.pending
        if not transport.send(self.out, data, timeout_ms):
            return False
        self.frames_sent += head - self.sent_to
        self.sent_to, self.seq, self.pending = head, self.seq + 1, None
        self.bytes_sent += len(data)
        return True

    def send_stats(self, env_steps, sent, policy_version, weight_updates, timing) -> None:
        super().send_stats(env_steps, sent, policy_version, weight_updates, timing)
        now = time.monotonic()
        if self.say is not None and now - self.progress_at >= PROGRESS_EVERY_S:
            self.progress_at = now
            frames = env_steps * self.frames_per_step
            rate = self.bytes_sent / max(now - self.started, 1e-9)
            per_frame = self.bytes_sent / max(self.frames_sent * self.ring.spec.fields["frame"][0][0], 1)
            self.say(
                f"zrl-worker-{self.worker_id}: {frames:,} env frames, {self.bytes_sent / 1e6:,.1f} MB sent "
                f"({rate / 1e3:,.0f} kB/s, {per_frame:,.0f} B per observation), weights version {policy_version}"
            )

    def close(self) -> None:
        self.weights.close()
        self.env.close()
        self.ring.close()


def deflate_slots(ring: Ring, first: int, head: int, zip: zstandard.ZstdCompressor) -> np.ndarray:
    """Ring slots ``first`` to ``head`` (exclusive), field by field as the ring lays them out, as one zstd frame:
    what a RemoteData carries, and the ingest inflates."""
    slots = np.arange(first, head) % ring.capacity
    stream = zip.compressobj()
    parts = [stream.compress(np.ascontiguousarray(field[slots]).data) for field in ring.fields.values()]
    parts.append(stream.flush())
    return np.frombuffer(b"".join(parts), np.uint8)


def welcome_config(welcome: protocol.Welcome, trusted: tuple[str, ...] = ()):
    """The run's config as its Welcome carries it: data from the host the worker connected to, so its env.id may
    import a module only one of ``trusted`` (ConfigError otherwise, before anything is imported)."""
    from zrl.config import from_dict
    from zrl.envs.trust import check_env_import

    source = f"the config of run {welcome.run}"
    cfg = from_dict(tomllib.loads(welcome.config), source)
    check_env_import(cfg.env.id, source, trusted)
    return cfg


def _wiring(connect: str, welcome: protocol.Welcome, cfg) -> RunWiring:
    """The worker's view of the run: the gate for weights requests, the ingest's PUB for broadcasts, and its ring's
    layout from its own env (which must give what the run's does)."""
    from zrl import envs

    spec = envs.probe(cfg.env)
    host = connect.rsplit(":", 1)[0]
    endpoints = Endpoints(
        **{name: "" for name in ENDPOINT_NAMES} | {"weights": f"{host}:{welcome.weights_port}", "weights_req": connect}
    )
    return RunWiring(
        endpoints,
        (),
        make_ring_spec(cfg, spec),
        spec.frame_shape,
        spec.frame_dtype,
        spec.num_actions,
        spec.frames_per_step,
        0,
        env_frames_start=welcome.env_frames_start,
    )


def _join(gate: zmq.Socket, join: bytes, stopping) -> protocol.Welcome | protocol.Refused | None:
    """Send a Join and wait up to JOIN_WAIT_S for the answer; None if none came (or the process stops)."""
    if not transport.send(gate, join, 1000):
        return None
    deadline = time.monotonic() + JOIN_WAIT_S
    while not stopping() and time.monotonic() < deadline:
        data = transport.recv(gate, 100)
        if data is None:
            continue
        try:
            msg = protocol.decode(data)
        except protocol.ProtocolError:
            continue
        if isinstance(msg, (protocol.Welcome, protocol.Refused)):
            return msg
    return None


def serve(
    connect: str,
    keys: str,
    envs_per_worker: int | None,
    run: str,
    say: Callable[[str], None],
    stopping: Callable[[], bool],
    trusted: tuple[str, ...] = (),
) -> int:
    """Work for the run whose gate is ``connect`` (tcp://HOST:PORT) until ``stopping()``: join, run the worker loop,
    join again when the session ends. ``keys``: this host's client key folder ("" on loopback without CurveZMQ);
    ``run``: the run's name it must be ("" for whichever listens); ``trusted``: the env modules it may import for
    the run's env.id, which arrives as data (--trust-env-module). The exit code: 0 when stopped, 2 when the run
    refuses this worker for good (another run, a misfit) or this host cannot play its env."""
    told = say
    say = lambda text: told(printable(text, SAID_CHARS))  # noqa: E731 - what the run sends is never printed raw
    transport.configure_client(keys)
    ctx = transport.context(None, binds=False)
    join = protocol.Join(
        run=run,
        host=_socket.gethostname(),
        pid=os.getpid(),
        envs_per_worker=envs_per_worker or 0,
        zrl_version=__version__,
    ).encode()
    tries = 0
    try:
        while not stopping():
            gate = transport.socket(ctx, zmq.DEALER, hwm=64)
            gate.setsockopt(zmq.ROUTING_ID, os.urandom(16))  # its own for this session, kept across reconnects
            try:
                try:
                    gate.connect(connect)
                except zmq.ZMQError as err:
                    say(f"cannot connect to {connect}: {err}")
                    return 2
                answer = _join(gate, join, stopping)
                if stopping():
                    break
                if isinstance(answer, protocol.Welcome):
                    began = time.monotonic()
                    code = _work(ctx, gate, connect, answer, envs_per_worker, say, stopping, trusted)
                    if code is not None:
                        return code
                    if time.monotonic() - began >= SHORT_SESSION_S:
                        tries = 0
                        continue
                    wait = BACKOFF_S[min(tries, len(BACKOFF_S) - 1)]  # refused again and again: not so fast
                    tries += 1
                    _sleep(wait, stopping)
                    continue
                if isinstance(answer, protocol.Refused) and answer.final:
                    say(f"refused by {connect}: {answer.reason}")
                    return 2
                why = f"refused: {answer.reason}" if answer is not None else f"no answer within {JOIN_WAIT_S:g} s"
                wait = BACKOFF_S[min(tries, len(BACKOFF_S) - 1)]
                tries += 1
                say(f"{connect}: {why} (try {tries}); trying again in {wait:g} s")
                _sleep(wait, stopping)
            finally:
                gate.close()
        return 0
    finally:
        transport.term(ctx)


def _sleep(seconds: float, stopping) -> None:
    deadline = time.monotonic() + seconds
    while not stopping() and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def _work(ctx, gate, connect: str, welcome: protocol.Welcome, envs_per_worker, say, stopping, trusted=()) -> int | None:
    """One session: the worker loop under the run's config. The exit code when the process should end, None to
    join again."""
    import torch

    from zrl.config import ConfigError
    from zrl.roles.worker import Worker

    try:
        cfg = welcome_config(welcome, trusted)
        wiring = _wiring(connect, welcome, cfg)
    except (ConfigError, tomllib.TOMLDecodeError, ValueError) as err:
        _leave(gate, "cannot play the run's env here")
        say(f"run {welcome.run}: cannot take its config or make its env on this host: {err}")
        return 2
    mine = env_spec_text(wiring)
    if mine != welcome.env_spec:
        _leave(gate, "its env differs here")
        say(f"run {welcome.run}'s env gives {welcome.env_spec}; on this host it gives {mine} (another ale-py?)")
        return 2
    say(
        f"joined run {welcome.run} as zrl-worker-{welcome.worker_id} ({cfg.env.id}, {cfg.workers.envs_per_worker} "
        f"envs); weights from port {welcome.weights_port}"
    )
    session = Session(ctx, gate, welcome, stopping, silence_limit(cfg))
    torch.set_num_threads(cfg.workers.torch_threads)
    worker = Worker(
        welcome.worker_id,
        cfg,
        wiring,
        session,
        WorkerStart(welcome.generation, welcome.env_frames),
        make_link=RemoteLink,
    )
    worker.link.say = say
    try:
        worker.run()
    finally:
        worker.link.close()
    if should_stop(session) and stopping():
        _leave(gate, "stopped")
        return 0
    if session.refused is not None:
        say(f"refused by {connect}: {session.refused.reason}")
        return 2 if session.refused.final else None
    say(f"{connect} has not answered for {session.silence_s:g} s; joining again")
    return None


def _leave(gate: zmq.Socket, reason: str) -> None:
    """Say goodbye, so that the ingest frees the slot at once; the socket keeps it a second to get it out."""
    transport.send(gate, protocol.Leave(reason=reason).encode(), 200)
    gate.setsockopt(zmq.LINGER, 1000)
