"""The broker: one loop for every agent. It receives the workers' messages (V-trace's unrolls, Ape-X's
transitions), has the agent's broker part store them (zrl/agents/<name>/broker.py), and sends batches ahead of
the learner under credit-based flow control: the learner grants ``prefetch_batches`` credits and one more per
batch it takes, and the broker sends one batch per credit, made at that moment from the replays. So at most
``prefetch_batches`` batches wait for the learner, wherever they wait (ZeroMQ's high-water marks count messages,
not the bytes in a unix socket's buffer). The loop owns the sockets, the counts every agent shares (messages
lost in flight, each worker's frames) and the stats, which double as its heartbeat.
"""

from __future__ import annotations

import os
import time

import torch
import zmq

from shm.ring import Ring
from zrl import agents, protocol, replay_checkpoint, transport
from zrl.config import Config
from zrl.replay.snapshot import SnapshotMismatch
from zrl.replay_checkpoint import ReplayWriter
from zrl.roles.inbound import Decoder, SeqGaps, frames_past_ring
from zrl.roles.lifecycle import Every, keep_freed_memory, should_stop, start_role
from zrl.roles.reporting import StatsOut, crash_report
from zrl.roles.run_wiring import RunWiring
from zrl.roles.weights_feed import wait_for_weights


def run(cfg: Config, wiring: RunWiring, stop_event) -> None:
    start_role("zrl-broker", wiring.launcher_pid)
    transport.configure(cfg.transport)  # before anything can fail: the crash report uses the keys too
    with crash_report("zrl-broker", wiring):
        if cfg.run.keep_freed_memory:
            keep_freed_memory()
        torch.set_num_threads(cfg.broker.torch_threads)
        rings = [Ring.attach(name, wiring.ring_spec) for name in wiring.ring_names]
        try:
            BrokerLoop(cfg, wiring, stop_event, rings).run()
        finally:
            for ring in rings:
                ring.close()


class BrokerLoop:
    def __init__(self, cfg: Config, wiring: RunWiring, stop_event, rings: list[Ring]) -> None:
        self.cfg, self.wiring, self.stop_event, self.rings = cfg, wiring, stop_event, rings
        self.part = agents.get(cfg.algo).broker_part()(cfg, wiring, rings)
        self.gaps = SeqGaps()
        self.worker_frames: dict[int, int] = {}  # each worker's env frames in this launch, from its messages
        self.received = self.batches_sent = self.credits = self.credits_granted = 0
        self.insert_time_s = 0.0
        self.decoded = Decoder()
        self.saver = ReplayWriter(wiring.replay_dir, rings, wiring.replay_stream) if wiring.replay_dir else None
        self.last_save_step = 0  # the learner step of the last replay checkpoint asked for
        self.told = ""  # the saver's last failure, once said
        self.refusals, self.next_told = 0, 1  # workers' messages refused, and the count at which the next is said

    def _notice(self, text: str) -> None:
        self.stats.send(protocol.Notice(role="zrl-broker", pid=os.getpid(), text=text).encode())

    def _restore_replay(self) -> None:
        """Start with the replays of the replay checkpoint the launcher names (a resumed or restarted run); said
        either way, and an unusable one leaves the replays to refill."""
        if not self.wiring.replay_state:
            return
        try:
            held = self.part.restore(replay_checkpoint.load_state(self.wiring.replay_state))
        except Exception as err:  # a file that does not fit or is damaged: never a crash loop, never half a replay
            why = err if isinstance(err, SnapshotMismatch) else f"{type(err).__name__}: {err}"
            self._notice(f"the replays refill: the replay checkpoint cannot be used ({why})")
            self.part = agents.get(self.cfg.algo).broker_part()(self.cfg, self.wiring, self.rings)
            return
        self._notice(f"the replays start with {held} units from {self.wiring.replay_state}")

    def _save_replay(self, step: int, wait: bool = False) -> None:
        """Write a replay checkpoint for learner step ``step``: in the writer's thread, or here with ``wait`` (the
        broker's last one). One asked for while the last is still being written is skipped."""
        self.last_save_step = max(self.last_save_step, step)
        if self.saver is None or self.saver.busy():
            return
        state, oldest = self.part.snapshot(), self.part.oldest_frames()
        if wait:
            try:
                self.saver.save(step, state, oldest)
            except Exception as err:  # a full disk, or anything else: the previous snapshot stays
                self.saver.error = f"the last replay checkpoint failed ({err})"
        else:
            self.saver.start(step, state, oldest)
        if self.saver.error and self.saver.error != self.told:
            self.told = self.saver.error
            self._notice(self.saver.error)

    def run(self) -> None:
        cfg, wiring, part, decoded = self.cfg, self.wiring, self.part, self.decoded
        poll_ms, prefetch = cfg.transport.poll_timeout_ms, cfg.broker.prefetch_batches
        frames_per_slot = cfg.workers.envs_per_worker * wiring.frames_per_step
        ctx = transport.context(cfg.transport)
        inbox = transport.socket(ctx, zmq.PULL, hwm=cfg.transport.hwm, bind=wiring.endpoints.unrolls)
        batches = transport.socket(ctx, zmq.PUSH, hwm=prefetch, connect=wiring.endpoints.batches)
        credits_sock = transport.socket(ctx, zmq.PULL, hwm=1000, bind=wiring.endpoints.credits)
        self.stats = StatsOut.connect(ctx, wiring, hwm=1000)
        replies = None
        if part.reply_type is not None:
            replies = transport.socket(ctx, zmq.PULL, hwm=1000, bind=wiring.endpoints.priorities)
        weights = (
            transport.socket(ctx, zmq.SUB, hwm=1, connect=wiring.endpoints.weights) if part.wants_weights else None
        )
        poller = zmq.Poller()
        for sock in (inbox, credits_sock, replies):
            if sock is not None:
                poller.register(sock, zmq.POLLIN)
        report = Every(1.0)
        try:
            self._restore_replay()
            part = self.part  # a new one if the replay checkpoint could not be used
            if weights is not None:  # the part needs the current policy (elite features) before it can sample
                first = wait_for_weights(ctx, wiring, -1, poll_ms, self.stop_event)
                if first is None:
                    return
                part.load_weights(first.version, first.flat)
            while not should_stop(self.stop_event):
                poller.poll(poll_ms)
                while (data := transport.recv(credits_sock, 0)) is not None:
                    msg = decoded(data, (protocol.Credit, protocol.IndexRequest, protocol.SaveReplay))
                    if isinstance(msg, protocol.IndexRequest):  # for the learner's next checkpoint
                        if (index := part.index()) is not None:
                            transport.send(batches, index, poll_ms)
                    elif isinstance(msg, protocol.SaveReplay):  # the learner wrote a checkpoint
                        self._save_replay(msg.learner_step)
                    elif msg is not None and msg.batches > 0:
                        self.credits += msg.batches
                        self.credits_granted += msg.batches
                while replies is not None and (data := transport.recv(replies, 0)) is not None:
                    msg = decoded(data, part.reply_type)
                    if msg is not None and part.reply(msg) is not None:
                        decoded.refuse()
                self._take(inbox, frames_per_slot)
                while self.credits > 0:
                    self._latest_weights(weights)
                    frames_here = sum(self.worker_frames.values())
                    made = part.next_batch(
                        self.batches_sent + 1,
                        wiring.env_frames_start + frames_here,
                        frames_here // wiring.frames_per_step,
                    )
                    if made is None:
                        break
                    message, taken = made
                    if not transport.send(batches, message, poll_ms):
                        part.put_back(taken)  # the learner is not connected (yet, or any more)
                        break
                    self.credits -= 1
                    self.batches_sent += 1
                    if report.due():  # making elite batches takes a while: keep the heartbeat going
                        self._send_stats(prefetch)
                if report.due():
                    self._send_stats(prefetch)
            if (
                self.saver is not None
            ):  # the run stops in order: the replays as they are now, beside its last checkpoint
                self.saver.wait()
                self._save_replay(self.last_save_step, wait=True)
                self._send_stats(prefetch)
        finally:
            for closing in (inbox, batches, credits_sock, self.stats, replies, weights):
                if closing is not None:
                    closing.close()
            transport.term(ctx)

    def _take(self, inbox: zmq.Socket, frames_per_slot: int) -> None:
        """The workers' waiting messages (at most the part's inbox_per_turn): each one that fits the run is
        stored; one that does not (forged, damaged, or claiming frames its ring never held) is counted."""
        part, decoded = self.part, self.decoded
        t0 = time.perf_counter()
        for _ in range(part.inbox_per_turn):
            if (data := transport.recv(inbox, 0)) is None:
                break
            if (msg := decoded(data, part.message_type)) is None:
                continue
            past = frames_past_ring(msg.worker_id, msg.env_frames, self.rings, frames_per_slot)
            if why := ("frames its ring never held" if past else part.insert(msg)):
                decoded.refuse()
                self._refused(msg.worker_id, why)
                continue
            self.gaps.see(msg.worker_id, msg.seq)
            self.received += part.units(msg)
            self.worker_frames[msg.worker_id] = max(self.worker_frames.get(msg.worker_id, 0), msg.env_frames)
        self.insert_time_s += time.perf_counter() - t0

    def _refused(self, worker_id: int, why: str) -> None:
        """Say why a worker's message was refused: the 1st, 10th, 100th... refusal of the run, so that a flood of
        them (a forged stream) cannot flood the log. Each is counted in decode_errors."""
        self.refusals += 1
        if self.refusals >= self.next_told:
            self.next_told *= 10
            self._notice(
                f"refused a message from worker {worker_id}: {why} ({self.refusals} refused so far; the next said "
                f"is the {self.next_told}th)"
            )

    def _latest_weights(self, weights: zmq.Socket | None) -> None:
        while weights is not None and weights.poll(0, zmq.POLLIN):
            try:
                version, _, flat = protocol.decode_weights(weights.recv())
            except protocol.ProtocolError:
                continue
            self.part.load_weights(version, flat)

    def _send_stats(self, prefetch: int) -> None:
        message = protocol.BrokerStats(
            pid=os.getpid(),
            time=time.time(),
            unrolls_received=self.received,
            seq_gaps=self.gaps.count,
            decode_errors=self.decoded.errors,
            batches_sent=self.batches_sent,
            ready_batches=self.batches_sent - max(0, self.credits_granted - prefetch),
            insert_time_s=self.insert_time_s,
            replay_saves=self.saver.saves if self.saver else 0,
            replay_save_s=self.saver.last_s if self.saver else 0.0,
            replay_bytes=self.saver.bytes if self.saver else 0,
            **self.part.stats(),
        )
        self.stats.send(message.encode())
