"""The ingest: where workers on other hosts deliver (zrl-worker, or zrl-launch --ray's actors; zrl/roles/remote.py).

It binds the run's gate, a ROUTER on tcp (CurveZMQ beyond loopback, each client key checked against the
authorized folder as it is now), and a PUB that passes the learner's weights on. A remote worker joins and is given
a slot, one of the ``workers.remote`` rings the launcher made, with the run's config; from then on it sends, with
each of its messages (V-trace's unrolls, Ape-X's transitions), the frames it wrote since the one before, compressed
with zstd. The ingest checks them (the session's numbering, the sizes, the frame numbers the message names),
writes them into the slot's ring and forwards the message to the broker in the slot's name, as a local worker would
have sent it: the broker, the learner's gather and every replay see one more local worker. A remote worker's stats
and episodes go on to the launcher the same way. What it refuses it counts (IngestStats) and answers with a
Refused; it never writes a slot that is not the sender's, and a sender names no slot.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import cast

import msgspec
import numpy as np
import zmq
import zstandard

from shm.ring import Ring
from zrl import __version__, agents, bounds, protocol, transport
from zrl.config import Config, dumps
from zrl.connections import ConnectionCap, raise_file_limit, source_fd
from zrl.roles.inbound import Decoder
from zrl.roles.lifecycle import Every, should_stop, start_role
from zrl.roles.reporting import StatsOut, crash_report
from zrl.roles.run_wiring import RunWiring, WorkerStart, env_spec_text, silence_limit
from zrl.roles.weights_feed import finite_weights

NAME = "zrl-ingest"
HOST_CHARS = 100  # of a remote worker's host name or version, as logged
STATS_EVERY_S = 1.0
REVOKED = "was shut out: its key is no longer in authorized/"
HANDLE_AT_MOST = 256
HANGUPS_EVERY_S = 60.0  # a flood's hang-ups are said in zrl.log at most this often
GATE_HWM = 32  # messages a connection may have queued at the gate
MESSAGE_ROOM_BYTES = (
    8 << 20
)  # a RemoteData's own message and header, on top of its frames  # gate messages per turn, so that weights and the stats keep their turn


def run(cfg: Config, wiring: RunWiring, stop_event, run_name: str, slots: tuple[WorkerStart, ...] = ()) -> None:
    """``slots``: each remote slot's place when the run's roles were restarted (its frame count going on, its joins
    numbered on from a generation of their own); empty for a launch's first ingest."""
    start_role(NAME, wiring.launcher_pid)
    raise_file_limit()  # its sockets face the network: a flood takes files faster than the caps hang them up
    transport.configure(cfg.transport)
    with crash_report(NAME, wiring):
        ingest = Ingest(cfg, wiring, stop_event, run_name)
        for slot, start in enumerate(slots):
            ingest.slot_frames[slot], ingest.generation[slot] = start.env_frames, start.generation
        try:
            ingest.run()
        finally:
            ingest.close()


@dataclass
class Session:
    """One remote worker's admission: its connection (``rid``), key, slot and place in its numbering."""

    rid: bytes
    key: str  # its CurveZMQ public key, z85 ("" on loopback without keys)
    who: str  # its key's name and host, for the log
    slot: int  # which remote slot: worker id workers.count + slot
    worker_id: int
    start: int  # the ring frame its first frame went to: its messages may name frames from here on
    last_heard: float
    fd: int = -1  # the file of the gate connection it last sent on (zmq.SRCFD): a flood's hang-ups spare it
    seq: int = 0  # the RemoteData it sends next
    offset: int | None = None  # ring frame = its own frame number + offset, known from its first RemoteData
    next_frame: int = 0  # its own number of the frame it sends next


class Refusal(Exception):
    """A remote message refused: the reason, whether the session ends with it (the worker, refused, joins again, so
    by default it does), and whether the worker should give up (``final``: it can never fit this run)."""

    def __init__(self, reason: str, ends_session: bool = True, final: bool = False) -> None:
        super().__init__(reason)
        self.ends_session, self.final = ends_session, final


class Ingest:
    def __init__(self, cfg: Config, wiring: RunWiring, stop_event, run_name: str) -> None:
        self.cfg, self.wiring, self.stop_event, self.run_name = cfg, wiring, stop_event, run_name
        self.local = cfg.workers.count
        self.poll_ms = cfg.transport.poll_timeout_ms
        self.config_text = dumps(cfg)
        self.spec_text = env_spec_text(wiring)
        self.frame_bytes = [  # each ring field: its name, slot shape, dtype and bytes per slot
            (name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
            for name, (shape, dtype) in wiring.ring_spec.fields.items()
        ]
        self.slot_bytes = sum(n for *_, n in self.frame_bytes)
        self.rings: list[Ring] = []
        self.ctx = transport.context(cfg.transport)
        self.sockets: list[zmq.Socket] = []
        try:
            for name in wiring.ring_names[self.local :]:
                self.rings.append(Ring.attach(name, wiring.ring_spec))
            self.keys = None
            if cfg.transport.curve_keys:
                self.keys = transport.AuthorizedKeys(transport.load_curve_keys(cfg.transport.curve_keys).authorized)
                transport.check_clients(self.ctx, self.keys)
            ep = wiring.endpoints
            self.max_slots = agents.get(cfg.algo).slots_per_message(cfg)
            self.message_type = agents.get(cfg.algo).broker_part().message_type
            # a connection queues at most GATE_HWM messages, each at most what max_slots slots and one message take
            # (incompressible), while the ingest waits on the broker
            self.gate = self._socket(
                zmq.ROUTER,
                hwm=GATE_HWM,
                bind=ep.gate,
                max_bytes=min(protocol.MAX_MESSAGE_BYTES, self.max_slots * self.slot_bytes + MESSAGE_ROOM_BYTES),
            )
            self.gate.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a worker that reconnects takes its routing id back
            self.pub = self._socket(zmq.PUB, hwm=2, bind=ep.remote_weights)
            cap = cfg.transport.max_connections
            self.caps = [ConnectionCap(self.gate, cap), ConnectionCap(self.pub, cap)]  # closed before their sockets
            self.to_broker = self._socket(zmq.PUSH, hwm=cfg.transport.hwm, connect=ep.unrolls)
            self.stats = StatsOut(self._socket(zmq.PUSH, hwm=1000, connect=ep.stats), self.wiring.stats_token)
            self.sub = self._socket(zmq.SUB, hwm=1, connect=ep.weights)
            self.req = self._socket(zmq.DEALER, hwm=4, connect=ep.weights_req)
        except BaseException:
            self.close()
            raise
        self.weights_port = int(ep.remote_weights.rsplit(":", 1)[1])
        self.decoded = Decoder()
        self.sessions: dict[bytes, Session] = {}
        self.free = list(range(len(self.rings)))
        self.slot_seq = [0] * len(self.rings)  # the next message number each slot forwards to the broker
        self.slot_frames = [0] * len(self.rings)  # each slot's env frames in this launch (its workers' counts go on)
        self.generation = [0] * len(self.rings)
        self.current: bytes | None = None  # the learner's newest weights
        self.version = -1
        self.asked_at = -float("inf")
        self.waiting: list[bytes] = []  # remote weights requests waiting for the first weights
        self.unzip = zstandard.ZstdDecompressor()
        self.counts = dict(joins=0, frames=0, bytes=0, raw_bytes=0)
        self.busy_s = 0.0
        self.unforeseen = 0
        self.frames_per_slot = cfg.workers.envs_per_worker * wiring.frames_per_step
        self.hangups_said, self.hangups_said_at = 0, -float("inf")

    def _socket(self, kind: int, **kwargs) -> zmq.Socket:
        sock = transport.socket(self.ctx, kind, **kwargs)
        self.sockets.append(sock)
        return sock

    def close(self) -> None:
        for cap in getattr(self, "caps", ()):
            cap.close()
        self.caps = []
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()
        transport.term(self.ctx)
        for ring in self.rings:
            ring.close()
        self.rings.clear()

    # -- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> None:
        poller = zmq.Poller()
        for sock in (self.gate, self.sub, self.req):
            poller.register(sock, zmq.POLLIN)
        report = Every(STATS_EVERY_S)
        gate_cap, pub_cap = self.caps
        for cap in self.caps:
            poller.register(cap.monitor, zmq.POLLIN)
        while not should_stop(self.stop_event):
            ready = dict(poller.poll(self.poll_ms))
            if self.sub in ready or self.req in ready:
                self._take_weights()
            if self.current is None and time.monotonic() - self.asked_at > 1.0:
                self.asked_at = time.monotonic()
                transport.send_nowait(self.req, protocol.WeightsRequest(worker_id=0).encode())
            if self.gate in ready:
                for _ in range(HANDLE_AT_MOST):
                    try:
                        frames = self.gate.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._handle(frames)
                    if (session := self.sessions.get(frames[0].bytes)) is not None:
                        session.fd = source_fd(frames[-1])  # the connection the gate's cap spares
            gate_cap.turn({s.fd for s in self.sessions.values()})  # after the joins this turn read: they are spared
            pub_cap.turn()  # none is spared: a worker hung up there connects again, for the next weights
            if report.due():
                self._expire()
                self._send_stats()
                self._say_hangups()
        for rid in list(self.sessions):
            self._reply(rid, protocol.Refused(reason="the run is stopping", final=0))
        self.gate.setsockopt(zmq.LINGER, 500)  # those last words get out before the socket closes

    def _say_hangups(self) -> None:
        """Say in zrl.log, at most once a minute, that a flood of connections is being hung up."""
        hangups = sum(cap.hangups for cap in self.caps)
        now = time.monotonic()
        if hangups > self.hangups_said and now - self.hangups_said_at >= HANGUPS_EVERY_S:
            gate, pub = self.caps
            self._notice(
                f"hung up {hangups - self.hangups_said} connections past transport.max_connections = {gate.cap} "
                f"(the gate holds {gate.count()}, the weights {pub.count()}): a flood of idle connections"
            )
            self.hangups_said, self.hangups_said_at = hangups, now

    def _take_weights(self) -> None:
        """The learner's newest weights, from its broadcast or an answer to this role's request: kept, passed on
        to the remote workers, and given to those that asked before there were any."""
        for sock in (self.sub, self.req):
            while True:
                data = transport.recv(sock, 0)
                if data is None:
                    break
                try:
                    version, _, _ = finite_weights(data)
                except protocol.ProtocolError:
                    self.decoded.refuse()
                    continue
                if version > self.version:
                    self.version, self.current = version, data
                    self.pub.send(data, zmq.NOBLOCK, copy=False)
        if self.current is not None:
            for rid in self.waiting:
                self._send(rid, self.current)
            self.waiting.clear()

    # -- a remote message --------------------------------------------------------------------------------------
    def _handle(self, frames: list[zmq.Frame]) -> None:
        rid = frames[0].bytes
        if len(frames) != 2:
            self._refuse(rid, "a message of one frame was expected")
            return
        payload = frames[1]
        key = cast(str, payload.get("User-Id")) if self.keys is not None else ""  # a str property of the frame
        self.counts["bytes"] += len(payload)
        session = self.sessions.get(rid)
        if self.keys is not None and self.keys.name_of(key) is None:  # revoked since it connected
            if session is not None:
                self._end(session, REVOKED)
            self._refuse(rid, "this worker's key is not authorized (any more)", final=1)
            return
        msg = self.decoded(payload.buffer, protocol.Message)
        if msg is None:  # counted by the decoder
            self._refuse(rid, "not a zrl message of this version", counted=False)
            return
        try:
            if isinstance(msg, protocol.Join):
                self._join(rid, key, msg)
            elif session is None:
                raise Refusal("this connection has not joined (the run may have restarted): join again")
            elif session.key != key:
                raise Refusal("a message from another key than the one that joined")
            elif isinstance(msg, protocol.WeightsRequest):  # the run's weights go only to a worker that joined
                if self.current is None:
                    self.waiting = self.waiting[-999:] + [rid]
                else:
                    self._send(rid, self.current)
            elif isinstance(msg, protocol.RemoteData):
                t0 = time.perf_counter()
                try:
                    self._data(session, msg)
                finally:
                    self.busy_s += time.perf_counter() - t0
            elif isinstance(msg, protocol.WorkerStats):
                session.last_heard = time.monotonic()
                delivered = self._delivered(session, msg.env_frames)
                self.slot_frames[session.slot] = delivered
                self._report(
                    msgspec.structs.replace(
                        msg,
                        worker_id=session.worker_id,
                        pid=os.getpid(),
                        env_frames=delivered,
                        env_steps=min(max(msg.env_steps, 0), delivered // self.wiring.frames_per_step),
                    )
                )
                self._reply(rid, protocol.Ack(live_workers=self.local + self._live()))
            elif isinstance(msg, protocol.Episode):
                if why := bounds.episode_misfit(msg, self.cfg.workers.envs_per_worker):
                    raise Refusal(why)
                delivered = self._delivered(session, msg.env_frames)
                self._report(
                    msgspec.structs.replace(msg, worker_id=session.worker_id, pid=os.getpid(), env_frames=delivered)
                )
            elif isinstance(msg, protocol.Leave):
                self._end(session, f"left ({bounds.printable(msg.reason)})" if msg.reason else "left")
            else:
                raise Refusal(f"a {type(msg).__name__} has no business on the gate")
        except Refusal as refusal:
            self.decoded.refuse()
            if refusal.ends_session and rid in self.sessions:
                self._end(self.sessions[rid], f"was refused: {refusal}")
            self._refuse(rid, str(refusal), final=int(refusal.final), counted=False)
        except Exception as err:  # a message no check foresaw: it ends its session, never the ingest
            self.decoded.refuse()
            self.unforeseen += 1
            if rid in self.sessions:
                self._end(self.sessions[rid], "sent a message the ingest could not take")
            if self.unforeseen <= 10:
                self._notice(f"a remote message failed unforeseen ({type(err).__name__}: {err}); it was refused")
            self._refuse(rid, f"the ingest could not take it ({type(err).__name__})", counted=False)

    def _join(self, rid: bytes, key: str, msg: protocol.Join) -> None:
        cfg = self.cfg
        if msg.run and msg.run != self.run_name:
            raise Refusal(f"this is run {self.run_name}, not {msg.run}", final=True)
        if msg.envs_per_worker not in (0, cfg.workers.envs_per_worker):  # 0: whatever the run's are
            raise Refusal(
                f"this run's workers step {cfg.workers.envs_per_worker} envs each, not {msg.envs_per_worker}: give "
                f"--envs-per-worker {cfg.workers.envs_per_worker} or leave it out",
                ends_session=True,
                final=True,
            )
        old = self.sessions.get(rid)
        if old is not None:
            self._end(old, "joined again")
        if not self.free:
            self._refuse(
                rid,
                f"all {len(self.rings)} remote worker slots of this run are taken (workers.remote = {len(self.rings)})",
                final=0,
                counted=False,
            )
            return
        slot = self.free.pop(0)
        name = self.keys.name_of(key) if self.keys is not None else None
        host = bounds.printable(msg.host, HOST_CHARS) or "?"  # the peer's own words: never printed raw
        who = f"{name + ' on ' if name else ''}{host} (pid {msg.pid})"
        session = Session(rid, key, who, slot, self.local + slot, self.rings[slot].head, time.monotonic())
        self.sessions[rid] = session
        self.generation[slot] += 1
        self.counts["joins"] += 1
        self._reply(
            rid,
            protocol.Welcome(
                run=self.run_name,
                worker_id=session.worker_id,
                generation=self.generation[slot],
                env_frames=self.slot_frames[slot],
                env_frames_start=self.wiring.env_frames_start,
                weights_port=self.weights_port,
                env_spec=self.spec_text,
                config=self.config_text,
            ),
        )
        theirs = bounds.printable(msg.zrl_version, HOST_CHARS)
        version = "" if msg.zrl_version == __version__ else f", zrl {theirs} (this host: {__version__})"
        self._notice(f"remote worker {who} joined as zrl-worker-{session.worker_id}{version}")

    def _data(self, session: Session, msg: protocol.RemoteData) -> None:
        """Check a RemoteData whole, then write its frames into the session's ring and forward its message."""
        ring = self.rings[session.slot]
        if msg.seq != session.seq:
            raise Refusal(f"message {msg.seq} where {session.seq} was due (one was lost)")
        if msg.first_frame != session.next_frame:  # 0 for a session's first: its own numbering starts there
            raise Refusal(f"frames from {msg.first_frame} where {session.next_frame} were due")
        if msg.count > self.max_slots:
            raise Refusal(f"{msg.count} frames in one message; this run's workers write at most {self.max_slots}")
        offset = ring.head - msg.first_frame if session.offset is None else session.offset
        fields = self._inflate(msg.frames, msg.count)
        try:
            inner = protocol.decode(msg.message.data)
        except protocol.ProtocolError as err:
            raise Refusal(f"its message does not decode ({err})") from None
        if not isinstance(inner, self.message_type):
            raise Refusal(
                f"its message is a {type(inner).__name__}, not the {self.message_type.__name__} this run takes"
            )
        if inner.worker_id != session.worker_id:
            raise Refusal(f"its message names worker {inner.worker_id}, not {session.worker_id}")
        low, high = session.start, ring.head + msg.count  # the frames it may name: this session's, once written
        try:
            out = inner.renumbered(self.slot_seq[session.slot], offset, low, high)
        except ValueError as err:
            raise Refusal(f"its message {err}") from None
        data = out.encode()
        for k in range(msg.count):
            ring.write(**{name: values[k] for name, values in fields.items()})
        session.offset, session.seq = offset, session.seq + 1
        session.next_frame = msg.first_frame + msg.count
        session.last_heard = time.monotonic()
        self.counts["frames"] += msg.count * self.cfg.workers.envs_per_worker
        self.counts["raw_bytes"] += msg.count * self.slot_bytes
        while not transport.send(self.to_broker, data, self.poll_ms):  # the broker's backpressure reaches the gate
            if should_stop(self.stop_event):
                return
        self.slot_seq[session.slot] += 1

    def _delivered(self, session: Session, env_frames: int) -> int:
        """A remote worker's count of env frames, as far as the frames it delivered bear it out: a count beyond its
        slot's ring (forged, or steps whose frames were lost with a dropped session) would end the run's budget early
        and, carried into its next session, make the broker refuse that session's messages as past the ring."""
        return max(0, min(env_frames, self.rings[session.slot].head * self.frames_per_slot))

    def _inflate(self, frames: np.ndarray, count: int) -> dict[str, np.ndarray]:
        """``count`` slots' fields from their zstd bytes: exactly that many bytes, or a Refusal (no more are ever
        decompressed than the slots hold)."""
        want = count * self.slot_bytes
        try:
            raw = self.unzip.stream_reader(frames.data).read(want + 1) if want else b""
        except zstandard.ZstdError as err:
            raise Refusal(f"its frames do not decompress ({err})") from None
        if len(raw) != want:
            raise Refusal(f"its frames hold {len(raw)}{'+' if len(raw) > want else ''} bytes, not {want}", True)
        buf, at, fields = np.frombuffer(raw, np.uint8), 0, {}
        for name, shape, dtype, nbytes in self.frame_bytes:
            fields[name] = buf[at : at + count * nbytes].view(dtype).reshape(count, *shape)
            at += count * nbytes
        return fields

    # -- sessions, replies, reports ----------------------------------------------------------------------------
    def _end(self, session: Session, why: str) -> None:
        if self.sessions.pop(session.rid, None) is None:
            return
        self.free.append(session.slot)
        self._notice(f"remote worker {session.who} (zrl-worker-{session.worker_id}) {why}; its slot is free")

    def _live(self) -> int:
        """The remote workers heard from lately: those the workers' pacing shares the learner's appetite among. A
        worker that went silent keeps its slot until the silence limit, but stops counting at once (counted, its
        share would go unproduced, and the learner would starve on the others' pacing)."""
        since = time.monotonic() - max(3.0, 3 * self.cfg.workers.stats_interval_s)
        return sum(1 for s in self.sessions.values() if s.last_heard >= since)

    def _expire(self) -> None:
        """End the sessions that went silent, or whose key was revoked."""
        now, limit = time.monotonic(), silence_limit(self.cfg)
        for session in list(self.sessions.values()):
            if now - session.last_heard > limit:
                self._end(session, f"sent nothing for {now - session.last_heard:.0f} s")
            elif self.keys is not None and self.keys.name_of(session.key) is None:
                self._end(session, REVOKED)
                self._refuse(session.rid, "this worker's key is not authorized any more", final=1, counted=False)

    def _refuse(self, rid: bytes, reason: str, final: int = 0, counted: bool = True) -> None:
        if counted:
            self.decoded.refuse()
        self._reply(rid, protocol.Refused(reason=reason[: protocol.TRACEBACK_CHARS], final=final))

    def _reply(self, rid: bytes, msg) -> None:
        self._send(rid, msg.encode())

    def _send(self, rid: bytes, data: bytes) -> None:
        try:
            self.gate.send_multipart([rid, data], zmq.NOBLOCK, copy=False)
        except zmq.Again:  # that worker is not reading: it finds out when its heartbeats go unanswered
            pass

    def _report(self, msg) -> None:
        self.stats.send(msg.encode())

    def _notice(self, text: str) -> None:
        self._report(protocol.Notice(role=NAME, pid=os.getpid(), text=text))

    def _send_stats(self) -> None:
        c = self.counts
        self._report(
            protocol.IngestStats(
                pid=os.getpid(),
                time=time.time(),
                remote_workers=self._live(),
                remote_joins=c["joins"],
                remote_frames=c["frames"],
                remote_bytes=c["bytes"],
                remote_raw_bytes=c["raw_bytes"],
                remote_refused=self.decoded.errors,
                remote_auth_refused=self.keys.refused if self.keys is not None else 0,
                ingest_busy_s=self.busy_s,
            )
        )
