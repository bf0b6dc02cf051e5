"""What every role process does at start and while it runs: its title, signals, the stop check."""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import zmq

from shm import pid_alive
from shm.ring import Ring, RingSpec
from zrl import bounds, protocol, transport
from zrl.config import Config
from zrl.forkserver import die_with_parent, let_the_fork_server_go
from zrl.namespace import role_title
from zrl.transport import Endpoints

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def ring_slots(cfg: Config) -> int:
    """Ring slots per worker: workers.ring_slots, or (0, auto) as many as the agent's replay may still need."""
    return cfg.workers.ring_slots or _agent(cfg.algo).ring_slots(cfg)


def make_ring_spec(cfg: Config, spec) -> RingSpec:
    """A worker's ring: per slot one frame of each of its envs and each env's step within its episode."""
    m = cfg.workers.envs_per_worker  # spec: the env's (zrl.envs.EnvSpec)
    return RingSpec(
        ring_slots(cfg), {"frame": ((m, *spec.frame_shape), spec.frame_dtype), "episode_step": ((m,), "int32")}
    )


def _agent(name: str):
    from zrl import agents

    return agents.get(name)


@dataclass(frozen=True)
class RunWiring:
    """Everything a role needs to find its peers: endpoints, ring names and their layout."""

    endpoints: Endpoints
    ring_names: tuple[str, ...]
    ring_spec: RingSpec
    frame_shape: tuple[int, ...]
    frame_dtype: str
    num_actions: int
    frames_per_step: int
    launcher_pid: int
    env_frames_start: int = 0  # env frames of the run before this launch (resume)
    sample_calls: tuple[int, ...] = ()  # each replay's sample calls before this launch (elite lambda annealing)
    replay_from: str = ""  # deterministic resume: the checkpoint whose trained actions the worker plays again first
    replay_dir: str = ""  # run.checkpoint_replay: where the broker writes replay checkpoints ("": it does not)
    replay_state: str = ""  # a replay checkpoint's manifest whose replays the broker starts with ("": empty ones)
    replay_stream: str = ""  # the token of this launch's rings in replay checkpoint file names
    # the first frame of every stats message a role sends: only the launcher's own children know it (it is never on
    # disk, nor on the wire but to the launcher), so a message without it is not from one of its roles, whatever pid
    # it names (StatsOut, Wiring.take_stats)
    stats_token: bytes = b""


def env_spec_text(wiring: RunWiring) -> str:
    """What a remote worker's envs must give, as the Welcome says it and the worker compares it."""
    shape = "x".join(str(n) for n in wiring.frame_shape)
    return f"frames {shape} {np.dtype(wiring.frame_dtype).name}, {wiring.num_actions} actions, {wiring.frames_per_step} frames per step"


def silence_limit(cfg) -> float:
    """How long either side of a remote worker's session waits for the other before it gives the session up (the
    ingest frees the slot; the worker joins again): run.heartbeat_timeout_s, at least 5 s."""
    return max(cfg.run.heartbeat_timeout_s, 5.0)


class StopFlag:
    """The launcher's stop request, shared with the roles: one byte of shared memory, read and written without a
    lock, so that a role killed at any instant cannot leave it held (as a killed reader can an mp.Event's lock,
    which would then block the launcher's own stop). Beside it, how many workers are live (the local ones and
    the remote ones that have joined), which the workers' pacing shares the learner's appetite among."""

    def __init__(self, ctx) -> None:
        self._flag = ctx.RawValue(ctypes.c_bool, False)
        self._live = ctx.RawValue(ctypes.c_int, 0)

    @property
    def live_workers(self) -> int:
        """Workers live now; 0 until the launcher says."""
        return int(self._live.value)

    @live_workers.setter
    def live_workers(self, n: int) -> None:
        self._live.value = n

    def set(self) -> None:
        self._flag.value = True

    def is_set(self) -> bool:
        return bool(self._flag.value)


@dataclass(frozen=True)
class WorkerStart:
    """A worker's place in the run: ``generation`` counts its restarts (its envs are seeded anew each time)
    and ``env_frames`` is what it had played before, so that its counts go on."""

    generation: int = 0
    env_frames: int = 0


class StatsOut:
    """A role's stats socket: each message goes out behind the run's stats token (a remote worker's, on its gate,
    without one: the ingest passes its reports on behind its own)."""

    def __init__(self, sock: zmq.Socket, token: bytes | None) -> None:
        self.sock, self.token = sock, token

    @classmethod
    def connect(cls, ctx: zmq.Context, wiring: RunWiring, hwm: int) -> StatsOut:
        return cls(transport.socket(ctx, zmq.PUSH, hwm=hwm, connect=wiring.endpoints.stats), wiring.stats_token)

    def _frames(self, data: bytes) -> list:
        return [data] if self.token is None else [self.token, data]

    def send(self, data: bytes) -> bool:
        """Send if the socket has room now: stats are dropped rather than ever block a hot loop."""
        try:
            self.sock.send_multipart(self._frames(data), zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def send_waiting(self, data: bytes, timeout_ms: int) -> bool:
        """Send, waiting up to ``timeout_ms`` for room (a result that must arrive)."""
        return self.send(data) or bool(self.sock.poll(timeout_ms, zmq.POLLOUT)) and self.send(data)

    def linger(self, ms: int) -> None:
        self.sock.setsockopt(zmq.LINGER, ms)

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def crash_report(role: str, wiring: RunWiring):
    """Run a role's body; if it dies of an exception, send its traceback to the launcher first (best effort,
    on a socket of its own, since the role's sockets are closed by then), then let the exception go on."""
    try:
        yield
    except Exception:
        text = traceback.format_exc()[-protocol.TRACEBACK_CHARS :].encode("utf-8", "replace").decode("utf-8")
        try:
            message = protocol.RoleError(role=role, pid=os.getpid(), traceback=text).encode()
            ctx = zmq.Context()
            sock = StatsOut.connect(ctx, wiring, hwm=10)
            try:
                sock.linger(2000)  # long enough for the message to leave
                sock.send(message)
            finally:
                sock.close()
                ctx.term()
        except Exception:  # the report is best effort; the role's own exception is what goes on
            pass
        raise


@dataclass(frozen=True)
class StartFrom:
    """A checkpoint the learner starts from: ``resume`` continues its counters, optimiser, schedule and RNG
    (the same run); otherwise only its weights are taken, and its optimiser state if ``optimizer``."""

    path: str
    resume: bool = True
    optimizer: bool = True


# This role's parent, the launcher's fork server (zrl/launch/wiring.py), as start_role found it.
_parent: int | None = None


def start_role(title: str, launcher_pid: int) -> None:
    """Name the process (with its namespace, zrl/namespace.py), leave Ctrl-C to the launcher, and die with the launcher."""
    try:
        import setproctitle

        setproctitle.setproctitle(role_title(title))
    except ImportError:  # pragma: no cover - setproctitle is a requirement; ps shows python then
        pass
    # The terminal sends SIGINT, and SIGHUP when it closes, to the whole process group; only the launcher decides
    # what they mean (an orderly stop, in which it stops the roles).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # SIGTERM (from a process-group kill, or the parent-death signal) stops the role in order.
    signal.signal(signal.SIGTERM, _on_sigterm)
    # The parent is the launcher's fork server, which exits when the launcher does: the chain that carries a
    # launcher's death to its roles (the signal below, and should_stop's check of the parent).
    global _parent
    _parent = os.getppid()
    let_the_fork_server_go()
    die_with_parent(signal.SIGTERM)
    if os.getppid() != _parent or not pid_alive(launcher_pid):  # either died before prctl took effect
        os._exit(1)
    # kill -USR1 <pid> prints where every thread of a stuck role is, to the launcher's stderr.
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory in this process's heap for the next allocation, rather than unmapping
    every large block when it is freed (run.keep_freed_memory). A PyTorch training step on CPU allocates
    and frees hundreds of MB of activations; unmapped, each step faults them all in again (about 150,000
    page faults a step for the Atari learner here, nearly half its time). The process keeps its peak
    memory instead. True when set; False where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


_terminated = False


def _on_sigterm(_signum, _frame) -> None:
    global _terminated
    _terminated = True


def should_stop(stop_event) -> bool:
    """True once the launcher asked for a stop, the role got SIGTERM, or the launcher is gone (its fork server, this
    role's parent, exits with it; a pid that changes is never reused for the old parent, unlike a pid watched). In
    a process that start_role did not start (a test's own), only the first two."""
    return _terminated or stop_event.is_set() or (_parent is not None and os.getppid() != _parent)


class Every:
    """A cheap timer for 'do this every N seconds' inside a hot loop."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next = time.monotonic() + seconds

    def due(self) -> bool:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.seconds
            return True
        return False


class EpisodeReporter:
    """A worker's finished episodes, sent to the launcher with their SABER-style scores (capped at 5 and at 30
    minutes of play, and uncapped)."""

    def __init__(self, stats: StatsOut, worker_id: int, num_envs: int, frames_per_step: int) -> None:
        from zrl.scores import SaberEpisodes

        self.stats, self.worker_id, self.frames_per_step = stats, worker_id, frames_per_step
        self.saber = SaberEpisodes(num_envs)

    def step(self, raw_rewards: np.ndarray, game_over: np.ndarray, env_frames: int, send: bool = True) -> None:
        """Add one step of every env; send the episodes it ends (unless ``send`` is False: a replay of steps
        whose episodes were reported before)."""
        for env, score_5, score_30, score, frames in self.saber.step(raw_rewards, self.frames_per_step, game_over):
            if send:
                self.stats.send(
                    protocol.Episode(
                        worker_id=self.worker_id,
                        pid=os.getpid(),
                        env_index=env,
                        raw_return=score,
                        length_frames=frames,
                        length_env_steps=frames // self.frames_per_step,
                        env_frames=env_frames,
                        wall_time=time.time(),
                        score_5min=score_5,
                        score_30min=score_30,
                    ).encode(),
                )


class SeqGaps:
    """Each worker's next message number, and how many numbers were skipped: messages lost in flight (libzmq can
    drop a dying PUSH's last ones). A restarted worker numbers from 0 again, which is no gap."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}
        self.count = 0

    def see(self, worker_id: int, seq: int) -> None:
        expected = self.next.get(worker_id, 0)
        if seq > expected:
            self.count += seq - expected
        self.next[worker_id] = seq + 1


class Decoder:
    """``protocol.decode`` for a role's inbound sockets, counting what it refuses (its stats' decode_errors):
    undecodable bytes, a message of another kind than the socket carries, and any the role finds misfit."""

    def __init__(self) -> None:
        self.errors = 0

    def __call__(self, data: bytes, kind: type | tuple[type, ...]):
        """The message if ``data`` decodes to a ``kind``; else None, counted."""
        try:
            message = protocol.decode(data)
        except protocol.ProtocolError:
            message = None
        if isinstance(message, kind):
            return message
        self.errors += 1
        return None

    def refuse(self) -> None:
        """Count a well-formed message the role cannot use (forged or from another run)."""
        self.errors += 1


def finite_weights(data) -> tuple[int, int, np.ndarray]:
    """``protocol.decode_weights``, and a ProtocolError for weights that are not all finite: a worker acting on
    them would fill the replays with NaN, and the ingest would pass them on to every remote worker."""
    version, step, flat = protocol.decode_weights(data)
    if not bounds.finite(flat):
        raise protocol.ProtocolError(f"weights version {version} hold non-finite numbers")
    return version, step, flat


def frames_past_ring(worker_id: int, env_frames: int, rings: list[Ring], frames_per_slot: int) -> bool:
    """Whether a worker's message claims more env frames than its ring has slots for in this launch (a forged
    or damaged count, which would otherwise end the run's budget or pacing). A worker writes each env step's
    frames, one slot of ``frames_per_slot`` env frames, before it sends the message that counts them, and it
    counts this launch's frames only. A worker id outside the rings is left to the message's other checks."""
    return 0 <= worker_id < len(rings) and env_frames > rings[worker_id].head * frames_per_slot


def worker_env(cfg, worker_id: int, offset: int):
    """Worker ``worker_id``'s vector env, seeded apart from every other worker's (``offset`` moves a resumed or
    restarted worker onto new games)."""
    from zrl.envs import make_vector_env

    m = cfg.workers.envs_per_worker
    return make_vector_env(cfg.env, m, seed=(cfg.run.seed * 100_003 + worker_id * m + offset) % 2**31)


class WorkerLink:
    """A worker's env, ring and sockets, closed together: its vector env (seeded apart per worker; ``offset``
    moves a resumed or restarted worker onto new games), the ring it writes, a PUSH for its experience
    (``out``), a PUSH for its stats and episodes, and its weights feed."""

    def __init__(self, worker_id: int, cfg, wiring: RunWiring, stop_event, offset: int) -> None:
        self.worker_id, self.frames_per_step = worker_id, wiring.frames_per_step
        with contextlib.ExitStack() as opened:
            self.env = worker_env(cfg, worker_id, offset)
            opened.callback(self.env.close)
            self.ring = Ring.attach(wiring.ring_names[worker_id], wiring.ring_spec)
            opened.callback(self.ring.close)
            self.ctx = transport.context(cfg.transport, binds=False)
            opened.callback(transport.term, self.ctx)
            self.out = transport.socket(self.ctx, zmq.PUSH, hwm=cfg.transport.hwm, connect=wiring.endpoints.unrolls)
            opened.callback(self.out.close)
            self.stats = StatsOut.connect(self.ctx, wiring, hwm=1000)
            opened.callback(self.stats.close)
            self.weights = WeightsFeed(self.ctx, wiring, worker_id, cfg.transport.poll_timeout_ms, stop_event)
            self._close = opened.pop_all().close

    def send(self, message: bytes, timeout_ms: int) -> bool:
        """Send one of the actor's messages to the broker; False if it stayed full for ``timeout_ms``."""
        return transport.send(self.out, message, timeout_ms)

    def send_stats(
        self, env_steps: int, sent: int, policy_version: int, weight_updates: int, timing: dict[str, float]
    ) -> None:
        """The worker's heartbeat: its counts and where its time went (``timing``'s step, inference,
        ring_write, send and weights_wait seconds)."""
        self.stats.send(
            protocol.WorkerStats(
                worker_id=self.worker_id,
                pid=os.getpid(),
                time=time.time(),
                env_frames=env_steps * self.frames_per_step,
                env_steps=env_steps,
                unrolls_sent=sent,
                policy_version=policy_version,
                weight_updates=weight_updates,
                step_time_s=timing["step"],
                inference_time_s=timing["inference"],
                ring_write_time_s=timing["ring_write"],
                send_time_s=timing["send"],
                weights_wait_time_s=timing["weights_wait"],
            ).encode(),
        )

    def close(self) -> None:
        self.weights.close()
        self._close()

    def __enter__(self) -> WorkerLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
