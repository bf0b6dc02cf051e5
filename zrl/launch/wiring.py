"""The wiring of a pipeline, created and torn down in one place: the shared-memory rings (sized here, created and
unlinked only by the process that holds a Wiring), the private socket folder, the plan of who binds what
(``transport.plan_endpoints``), the ZeroMQ context and the sockets this process binds (the stats channel, and
for zrl-bench the weights a fixed policy serves), the RunWiring every role is given, and the role processes
(which function each runs, with which arguments). zrl-launch and zrl-bench's pipelines both use it.

Segment and folder names carry this process's pid, so that a later launch sweeps what a dead one left, and the
namespace (zrl/namespace.py), so that it sweeps only its own namespace's.
"""

from __future__ import annotations

import dataclasses
import hmac
import multiprocessing as mp
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import zmq

import shm
from shm.ring import Ring, RingSpec
from zrl import envs, protocol, transport
from zrl.config import Config, worker_slots
from zrl.envs.trust import env_module
from zrl.forkserver import (
    adopted,
    close_reaper,
    fork_server_folder,
    new_run_id,
    private_folder,
    role_context,
    run_role,
    start_fork_server,
    start_reaper,
    stop_fork_server,
    taken,
)
from zrl.namespace import private_prefix, shm_prefix
from zrl.roles.run_wiring import RunWiring, StartFrom, StopFlag, WorkerStart, make_ring_spec

_open_wiring = None  # the Wiring open in this process: the one its fork server serves


FORGED_PER_TAKE = 1000  # messages without the stats token dropped in one take: a flood cannot hold the launcher


def create_rings(cfg: Config, ring_spec: RingSpec, run_id: str, rings: list[Ring]) -> None:
    """Create every worker's ring into ``rings``, the local workers' and then the remote slots' (named for this
    process, so that a later launch can sweep them if it dies); an OSError that says what they need when /dev/shm
    has no room. The caller unlinks them."""
    slots = worker_slots(cfg)
    for i in range(slots):
        name = shm.segment_name(shm_prefix(), run_id, os.getpid(), f"ring{i}")
        try:
            rings.append(Ring.create(name, ring_spec))
        except OSError as err:
            raise OSError(
                f"cannot create shared memory for ring {i}: {err.strerror or err}; the rings need "
                f"{slots * ring_spec.nbytes / 1e6:.0f} MB in /dev/shm (lower "
                "workers.ring_slots, workers.count or workers.remote, or give /dev/shm more room)"
            ) from None


def sweep_stale() -> tuple[list[str], list[str], list[str]]:
    """Remove this namespace's segments and private socket folders whose launcher is dead: the removed segments,
    the removed folders, and what was left because it could not be judged (a note each: see ``shm.sweep``)."""
    skipped: list[str] = []
    segments = shm.sweep(shm_prefix(), skipped=skipped)
    folders, prefix, uid, highest = [], private_prefix(), os.geteuid(), shm.pid_max()
    tmp = Path(tempfile.gettempdir())
    for path in tmp.glob(f"{prefix}*"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if not pid.isdigit() or not stat.S_ISDIR(st.st_mode):
            continue
        if st.st_uid != uid:
            skipped.append(f"{path}: owned by uid {st.st_uid}, not this user")
        elif not 0 < int(pid) <= highest:
            skipped.append(f"{path}: pid {pid} is beyond this system's pid_max ({highest})")
        elif not shm.pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            if path.exists():
                skipped.append(f"{path}: cannot remove it all")
            else:
                folders.append(str(path))
    return segments, folders, skipped


class Wiring:
    """One pipeline's rings, sockets and role processes. ``open()`` makes the private socket folder, the ZeroMQ
    context, the rings (an OSError naming what they need when /dev/shm has no room), the endpoints and the
    stats socket; ``close()``, once the role processes are down, closes and unlinks all of it, whatever
    ``open()`` got to. ``env_frames_start``, ``sample_calls`` and ``replay_from`` carry a resumed run's place
    to the roles (RunWiring)."""

    def __init__(
        self,
        cfg: Config,
        spec: envs.EnvSpec,
        *,
        env_frames_start: int = 0,
        sample_calls: tuple[int, ...] = (),
        replay_from: str = "",
    ) -> None:
        self.cfg, self.spec = cfg, spec
        self._resumed = (env_frames_start, sample_calls, replay_from)
        self.run_id = new_run_id()
        self.ring_spec: RingSpec | None = None
        self.rings: list[Ring] = []
        self.mp_ctx = role_context()
        self.private: str | None = None
        self._tempdir_before: str | None = None
        self.zctx: zmq.Context | None = None
        self.sockets: list[zmq.Socket] = []
        self.stats: zmq.Socket | None = None  # every role's stats, episodes and last words, to this process
        self.stats_token = os.urandom(16)  # what every role's stats message starts with (RunWiring.stats_token)
        self.stats_forged = 0  # stats messages without it, dropped
        self.evaluations: zmq.Socket | None = None  # eval.interval_frames: this process's requests to the evaluator
        self.roles: RunWiring | None = None  # what each role is given to find its peers
        self.reaper: subprocess.Popen | None = None

    def open(self) -> Wiring:
        cfg, spec = self.cfg, self.spec
        global _open_wiring
        if _open_wiring is not None:
            raise RuntimeError("another Wiring is open in this process; its fork server is this process's only one")
        started = adopted()  # zrl-launch's, started before its imports (zrl/forkserver.py)
        if started is not None:
            self.run_id, self.reaper, self.private = started.run_id, started.reaper, started.private
            self._tempdir_before = started.tempdir_before
            _open_wiring = self
            taken()  # close() stops it from here on
        else:
            private = private_folder(self.run_id)
            self.reaper = start_reaper(self.run_id, private)  # first: whatever is made next, it removes if we die
            self.private = transport.make_private_dir(*os.path.split(private))
            _open_wiring = self
            self._tempdir_before = fork_server_folder(self.private)
            start_fork_server()
        self.zctx = transport.context(cfg.transport)
        self.ring_spec = make_ring_spec(cfg, spec)
        create_rings(cfg, self.ring_spec, self.run_id, self.rings)
        self.endpoints = transport.plan_endpoints(cfg.transport, self.private)
        if cfg.workers.remote:
            gate, weights = transport.plan_remote(cfg.transport)
            self.endpoints = dataclasses.replace(self.endpoints, gate=gate, remote_weights=weights)
        self.stats = self.socket(zmq.PULL, hwm=10_000, bind=self.endpoints.stats)
        if cfg.eval.interval_frames:
            self.evaluations = self.socket(zmq.PUSH, hwm=100, bind=self.endpoints.evaluations)
        self.roles = RunWiring(
            self.endpoints,
            tuple(r.name for r in self.rings),
            self.ring_spec,
            spec.frame_shape,
            spec.frame_dtype,
            spec.num_actions,
            spec.frames_per_step,
            os.getpid(),
            *self._resumed,
            stats_token=self.stats_token,
        )
        return self

    def take_stats(self, timeout_ms: int) -> bytes | None:
        """The next message a role of this run sent on the stats channel, waiting up to ``timeout_ms`` for one;
        None when none came. A message without the run's stats token is dropped and counted in ``stats_forged``:
        a pid in it names a role, but only the token says a role sent it."""
        stats = self.stats
        assert stats is not None  # open() bound it
        wait, dropped = timeout_ms, 0
        while dropped < FORGED_PER_TAKE and stats.poll(wait, zmq.POLLIN):
            wait = 0
            try:
                frames = stats.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:  # a poll can say "readable" with nothing to read (CURVE's handshakes, heartbeats)
                return None
            if len(frames) == 2 and hmac.compare_digest(frames[0], self.stats_token):
                return frames[1]
            self.stats_forged += 1
            dropped += 1
        return None

    def socket(self, kind: int, **kwargs) -> zmq.Socket:
        """A socket of this process (transport.socket's options), closed by close()."""
        assert self.zctx is not None  # open() made it
        sock = transport.socket(self.zctx, kind, **kwargs)
        self.sockets.append(sock)
        return sock

    def serve_weights(self) -> zmq.Socket:
        """Bind the learner's weight endpoints in this process, for a pipeline without a learner: the ROUTER that
        answers the workers' requests for weights (returned) and a PUB that never publishes."""
        rep = self.socket(zmq.ROUTER, hwm=256, bind=self.endpoints.weights_req)
        self.socket(zmq.PUB, hwm=2, bind=self.endpoints.weights)
        return rep

    def stop_flag(self) -> StopFlag:
        return StopFlag(self.mp_ctx)

    # -- the role processes (made, not started) ------------------------------------------------------------
    def broker(self, stop: StopFlag) -> mp.process.BaseProcess:
        return self._role("broker", "zrl-broker", self.cfg, self.roles, stop)

    def learner(self, stop: StopFlag, run_dir: str, start: StartFrom | None = None) -> mp.process.BaseProcess:
        return self._role("learner", "zrl-learner", self.cfg, self.roles, run_dir, stop, start)

    def ingest(self, stop: StopFlag, run_name: str, slots: tuple[WorkerStart, ...] = ()) -> mp.process.BaseProcess:
        """The role that admits remote workers (workers.remote) on the gate, for the run called ``run_name``;
        ``slots``: each remote slot's place after a restart of the run's roles."""
        return self._role("ingest", "zrl-ingest", self.cfg, self.roles, stop, run_name, slots)

    def evaluator(
        self, stop: StopFlag, run_dir: str, final: protocol.EvalRequest | None = None
    ) -> mp.process.BaseProcess:
        """The role that evaluates the learner's latest weights when asked (eval.interval_frames); with ``final``,
        the one that plays that request's checkpoint and exits (eval.final)."""
        request = final.encode() if final is not None else None
        return self._role("evaluator", "zrl-evaluator", self.cfg, self.roles, run_dir, stop, request)

    def connect_line(self, run_name: str, local_keys: str = "") -> str:
        """The command a remote host runs to work for this run; "$ZRL_KEYS" stands for that host's key folder,
        ``local_keys`` (the run's own client keys for this host) where the run made its own."""
        gate = self.endpoints.gate
        port = gate.rsplit(":", 1)[1]
        keys = ' --keys "$ZRL_KEYS"' if self.cfg.transport.curve_keys else ""
        keys = f" --keys {shlex.quote(local_keys)}" if local_keys else keys
        module = env_module(self.cfg.env.id)  # the run's own env module: the worker imports it only when told to
        trust = f" --trust-env-module {shlex.quote(module)}" if module else ""
        return (
            f"zrl-worker --connect tcp://{transport.public_host(self.cfg.transport)}:{port}{keys} "
            f"--envs-per-worker {self.cfg.workers.envs_per_worker} --run {run_name}{trust}"
        )

    def worker(self, worker_id: int, stop: StopFlag, start: WorkerStart = WorkerStart()) -> mp.process.BaseProcess:
        return self._role("worker", f"zrl-worker-{worker_id}", worker_id, self.cfg, self.roles, stop, start)

    def _role(self, role: str, name: str, *args) -> mp.process.BaseProcess:
        """The process of zrl/roles/<role>.py's run(*args), named (not imported) here: the fork server has the
        roles imported, and the process that wires them (zrl-launch) need not import them, nor torch with them."""
        return self.mp_ctx.Process(target=run_role, name=name, args=(f"zrl.roles.{role}:run", *args))

    def close(self) -> None:
        """Close the sockets and the context, unlink the rings, stop the fork server and remove the socket folder
        (the role processes must be down: a ring is never unlinked under a live writer's feet)."""
        global _open_wiring
        try:
            for sock in self.sockets:
                sock.close()
            self.sockets.clear()
            if self.zctx is not None:
                transport.term(self.zctx)
                self.zctx = None
            for ring in self.rings:
                ring.close()
                ring.unlink()
            self.rings.clear()
        finally:
            if _open_wiring is self:
                stop_fork_server()
                fork_server_folder(self._tempdir_before)
                _open_wiring = None
            if self.private:
                shutil.rmtree(self.private, ignore_errors=True)
                self.private = None
            if self.reaper is not None:  # nothing is left for it: it finds nothing, and exits
                close_reaper(self.reaper)
                self.reaper = None
