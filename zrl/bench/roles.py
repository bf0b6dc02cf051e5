"""A pipeline's rings, sockets and role processes, wired as zrl-launch wires them (zrl.launch.wiring) but without
a run folder, CSV files or supervision: what zrl-bench's sampling and learner modes measure.

Without a learner the bench process itself serves the initial weights (a fixed policy). Workers have their
own stop event, so the learner mode can stop them once the replay is full and time the learner alone on it.
On exit every process is stopped in order (killed after a grace period), and the wiring torn down: every ring
unlinked and the socket folder removed, whatever happened.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import torch
import zmq

from zrl import agents, envs, protocol, transport
from zrl.config import Config
from zrl.launch.supervise import kill_all, stop_in_order
from zrl.launch.tally import Tally
from zrl.launch.wiring import Wiring, sweep_stale
from zrl.models import flat_parameters

STOP_GRACE_S = 30.0


class RoleDied(RuntimeError):
    """A role process of the benchmarked pipeline exited while it was being measured."""


def _resume_orphans(parent: int, pids: list[int]) -> None:
    """The watchdog: once ``parent`` is gone, SIGCONT each of ``pids`` (their pending parent-death SIGTERM
    then stops them in order), and exit."""
    while os.getppid() == parent:
        time.sleep(0.5)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


class Pipeline:
    def __init__(self, cfg: Config, spec: envs.EnvSpec, *, with_learner: bool, workdir: Path) -> None:
        self.cfg, self.spec, self.with_learner, self.workdir = cfg, spec, with_learner, workdir
        self.tally = Tally()  # the roles' latest stats
        self.procs: dict[str, mp.process.BaseProcess] = {}
        self._paused: set[str] = set()
        self._watchdog: mp.process.BaseProcess | None = None
        self.wiring = Wiring(cfg, spec)
        self._weights_rep: zmq.Socket | None = None
        self._initial = b""

    @property
    def workers(self) -> dict[int, protocol.WorkerStats]:
        return self.tally.workers

    @property
    def broker(self) -> protocol.BrokerStats | None:
        return self.tally.broker

    @property
    def learner(self) -> protocol.LearnerStats | None:
        return self.tally.learner

    @property
    def endpoints(self) -> transport.Endpoints:
        return self.wiring.endpoints

    def __enter__(self) -> Pipeline:
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        cfg, spec, wiring = self.cfg, self.spec, self.wiring
        if cfg.transport.curve_keys:  # a ConfigError naming the file, before anything is made
            transport.load_curve_keys(cfg.transport.curve_keys)
        sweep_stale()
        wiring.open()
        if not self.with_learner:  # the bench serves a fixed policy: the initial weights
            torch.manual_seed(cfg.run.seed)
            model = agents.get(cfg.algo).build_model(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)
            self._initial = protocol.encode_weights(0, 0, flat_parameters(model))
            self._weights_rep = wiring.serve_weights()
        self._stop, self._workers_stop = wiring.stop_flag(), wiring.stop_flag()
        self.procs["zrl-broker"] = wiring.broker(self._stop)
        if self.with_learner:
            self.procs["zrl-learner"] = wiring.learner(self._stop, str(self.workdir))
        for i in range(cfg.workers.count):
            self.procs[f"zrl-worker-{i}"] = wiring.worker(i, self._workers_stop)
        for proc in self.procs.values():
            proc.start()

    def watch(self, seconds: float, until=None) -> None:
        """Take stats messages (and serve weights) for ``seconds``, or until ``until(self)`` is true; RoleDied
        if a role exits meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until(self)):
            data = self.wiring.take_stats(50)
            while data is not None:
                self._take(data)
                data = self.wiring.take_stats(0)
            while self._weights_rep is not None and self._weights_rep.poll(0, zmq.POLLIN):
                frames = self._weights_rep.recv_multipart()
                self._weights_rep.send_multipart([frames[0], self._initial])
            for name, proc in self.procs.items():
                stopped = name.startswith("zrl-worker") and self._workers_stop.is_set()
                if proc.exitcode is not None and not stopped:
                    raise RoleDied(f"{name} exited with code {proc.exitcode} during the measurement")

    def _take(self, data: bytes) -> None:
        try:
            self.tally.take(protocol.decode(data))
        except protocol.ProtocolError:
            return

    def all_reported(self) -> bool:
        return (
            len(self.workers) == self.cfg.workers.count
            and self.broker is not None
            and (self.learner is not None or not self.with_learner)
        )

    def stop_workers(self) -> None:
        self._workers_stop.set()
        for name, proc in self.procs.items():
            if name.startswith("zrl-worker"):
                proc.join(STOP_GRACE_S)

    def pause(self, name: str) -> None:
        """Suspend one role (SIGSTOP), e.g. the learner while the bare loop has the cores. A watchdog process
        resumes it should this process die meanwhile (even by SIGKILL): a stopped role would otherwise never
        act on its parent-death signal and would keep its memory and rings for good."""
        if self._watchdog is None:
            ctx = mp.get_context("spawn")
            self._watchdog = ctx.Process(
                target=_resume_orphans,
                name="zrl-bench-watchdog",
                args=(os.getpid(), [p.pid for p in self.procs.values()]),
                daemon=True,
            )
            self._watchdog.start()
        os.kill(self._pid(name), signal.SIGSTOP)
        self._paused.add(name)

    def resume(self, name: str) -> None:
        os.kill(self._pid(name), signal.SIGCONT)
        self._paused.discard(name)

    def _pid(self, name: str) -> int:
        pid = self.procs[name].pid
        assert pid is not None  # the roles started with the pipeline
        return pid

    def __exit__(self, *_exc) -> None:
        for name in list(self._paused):
            if self.procs[name].exitcode is None:
                self.resume(name)
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.join(5)
        if self.procs:
            self._stop.set()
            self._workers_stop.set()
            stop_in_order(self.procs, STOP_GRACE_S)
            kill_all(self.procs)
        self.wiring.close()


def frames_rate(start: dict[int, protocol.WorkerStats], end: dict[int, protocol.WorkerStats]) -> float:
    """Env frames per second of all workers between two snapshots, each worker timed by its own reports."""
    total = 0.0
    for wid, last in end.items():
        first = start.get(wid)
        if first is not None and last.time > first.time:
            total += (last.env_frames - first.env_frames) / (last.time - first.time)
    return total
