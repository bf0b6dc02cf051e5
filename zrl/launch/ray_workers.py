"""zrl-launch --ray: the run's remote workers (workers.remote) as actors on a Ray cluster.

Ray places them and restarts them; zrl's own data plane carries everything else. Each actor runs the remote worker
process's loop (zrl/roles/remote.py ``serve``), which joins the run's ingest over TCP like a zrl-worker started by
hand: its frames go over ZeroMQ (CurveZMQ where the run has keys), never through Ray. The local workers
(workers.count) stay the launcher's own processes on its node, on the shared-memory rings; the actors go round the
cluster's nodes, the other nodes first (node affinity, soft: Ray may move one whose node is gone); one that lands
on the launcher's node goes over TCP loopback like the others.

The actors are named zrl-ray-<i> (in Ray, and in the run's log with their node and pid); the ingest gives each the
first free remote slot when it joins (zrl-worker-<n> in the log, by the same pid). An actor that dies is restarted by
Ray; the launcher sees its call end, counts and logs the restart as it does a local worker's (workers.max_restarts
within workers.restart_window_s, the one rule: Ray's own count is unbounded, and zrl kills an actor past it), and
starts the loop again in the new actor. At the end the actors are asked to stop, then killed, and the driver leaves
the cluster; nothing of the run stays in Ray.

The launcher's stop signals stay the launcher's: ``ray.init`` sets a SIGTERM handler of its own (``sys.exit``), which
would turn a scheduler's SIGTERM into an exception wherever the launcher happens to be, not an orderly stop with a
final checkpoint; ``join`` puts the launcher's handlers back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections import deque

from zrl.config import Config, ConfigError
from zrl.envs.trust import env_module

log = logging.getLogger("zrl")

INSTALL = "pip install 'zrl[cluster]' (from a checkout: pip install -e '.[cluster]')"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
STOP_WAIT_S = 10.0
PROBE_S = 5.0
PLACE_WARN_S = 30.0  # an actor Ray has not placed by then is said to wait (no free CPU on the cluster?)
RETRY_AFTER_S = 1.0


def require_ray():
    """The ray module, or a ConfigError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--ray: Ray is not installed here; install zrl's cluster extra: {INSTALL}") from None
    return ray


def check(cfg: Config, keys: str) -> None:
    """What --ray needs of the config, before anything starts: remote slots to place, and a client key folder for
    the actors where the run has CurveZMQ keys."""
    if not cfg.workers.remote:
        raise ConfigError(
            "--ray: it places the run's remote workers on the cluster, and workers.remote is 0; give it, e.g. "
            "--set workers.remote=4 (the workers.count local workers stay on this node)"
        )
    if cfg.transport.curve_keys and not keys:
        raise ConfigError(
            "--ray-keys: the run has CurveZMQ keys, so its Ray actors need a client key folder (zrl-keys --client "
            "NAME) at the same path on every node; give it with --ray-keys DIR"
        )
    require_ray()


@contextlib.contextmanager
def own_signals():
    """Every signal handler the program set (the launcher's stop signals among them) is its own again after the block,
    whatever Ray set inside. Each is set anew even where it looks unchanged: Ray's C++ core may have replaced one
    under Python's record of it. Signals left at their default are Ray's to take."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread has handlers to set
        yield
        return
    saved = {s: h for s in signal.valid_signals() if (h := signal.getsignal(s)) not in (None, signal.SIG_DFL)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


class _Worker:
    """The actor: the remote worker loop, and a stop its second thread can ask for (max_concurrency=2)."""

    def __init__(self) -> None:
        self.stopped = False

    def where(self) -> tuple[str, str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), socket.gethostname(), os.getpid()

    def run(self, connect: str, keys: str, envs: int, run: str, trusted: tuple[str, ...] = ()) -> int:
        from zrl.roles import remote

        self.stopped = False
        return remote.serve(
            connect,
            keys,
            envs,
            run,
            say=lambda text: print(f"zrl-worker: {text}", flush=True),
            stopping=lambda: self.stopped,
            trusted=trusted,
        )

    def stop(self) -> None:
        self.stopped = True


class RayWorkers:
    """The run's remote workers as Ray actors: ``start`` places them, ``check`` (from the launcher's loop) notices
    a dead one and runs the loop again in the actor Ray restarted, ``close`` stops and removes them all."""

    def __init__(self, cfg: Config, address: str, keys: str, run_name: str, say) -> None:
        self.cfg, self.address, self.keys, self.run_name, self.say = cfg, address, keys, run_name, say
        self.ray = require_ray()
        self.actors: list = []
        self.calls: dict[int, object] = {}  # slot -> its running loop's ObjectRef
        self.where: dict[int, object] = {}  # slot -> the ObjectRef of its placement, until logged
        self.restarts = 0
        self.failures: dict[int, deque] = {}  # each slot's failure times within workers.restart_window_s
        self.retry_at: dict[int, float] = {}
        self.connect = ""
        self.stopping = False
        self._joined = False
        self.placed_by = 0.0  # when the actors should have been placed: a warning after

    def join(self) -> None:
        """Join the cluster (ConfigError when there is none to join: an address that does not answer is found out
        within seconds here, where Ray would try for minutes)."""
        ray = self.ray
        host, _, port = self.address.removeprefix("ray://").rpartition(":")
        if self.address != "auto" and port.isdigit():
            try:
                socket.create_connection((host or "127.0.0.1", int(port)), timeout=PROBE_S).close()
            except OSError as err:
                raise ConfigError(
                    f"--ray {self.address}: no Ray cluster to join there ({err.strerror or err}); start one with "
                    "`ray start --head` (and `ray start --address HEAD:6379` on each other node)"
                ) from None
        try:
            with own_signals():
                ray.init(
                    address=self.address, namespace=f"zrl-{self.run_name}", log_to_driver=False, configure_logging=False
                )
        except (ConnectionError, ValueError, RuntimeError) as err:
            raise ConfigError(
                f"--ray {self.address}: no Ray cluster to join there ({err}); start one with `ray start --head` "
                "(and `ray start --address HEAD:6379` on each other node)"
            ) from None
        self._joined = True

    def place(self, gate_port: int) -> None:
        """Start one actor per remote slot, going round the nodes, each running the loop against the gate."""
        ray, cfg = self.ray, self.cfg
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        address = {n["NodeID"]: n.get("NodeManagerAddress") for n in nodes}
        if cfg.transport.bind_host in LOOPBACK:  # the gate is reachable from this machine alone
            reachable = [n for n in nodes if address[n["NodeID"]] == address.get(here)]
            if len(reachable) < len(nodes):
                text = (
                    f"the run binds {cfg.transport.bind_host}, so its Ray actors go only on this machine's nodes "
                    f"({len(reachable)} of {len(nodes)}); bind another address, with keys, to use the others"
                )
                log.warning(text)
                self.say(text)
            nodes = reachable
        order = [n["NodeID"] for n in nodes if n["NodeID"] != here] + [here]  # the other nodes first
        host = cfg.transport.public_host or (
            ray.util.get_node_ip_address()
            if cfg.transport.bind_host in ("0.0.0.0", "::", "*")
            else cfg.transport.bind_host
        )
        self.connect = f"tcp://{host}:{gate_port}"
        actor_class = ray.remote(_Worker)
        for i in range(cfg.workers.remote):
            node = order[i % len(order)]
            actor = actor_class.options(
                name=f"zrl-ray-{i}",
                # unbounded, so that zrl's window (``_failed``) is the one rule; 0 stays 0 (no restart to undo)
                max_restarts=-1 if cfg.workers.max_restarts else 0,
                max_concurrency=2,
                num_cpus=1,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
            ).remote()
            self.actors.append(actor)
            self.where[i] = actor.where.remote()
            self._run(i)
        self.placed_by = time.monotonic() + PLACE_WARN_S
        text = (
            f"placing {cfg.workers.remote} remote workers as Ray actors on {min(len(order), cfg.workers.remote)} of the "
            f"cluster's {len(nodes)} nodes (the {cfg.workers.count} local workers stay on this one); they join "
            f"{self.connect}"
        )
        log.info(text)
        self.say(text)

    def _run(self, i: int) -> None:
        trusted = (env_module(self.cfg.env.id),)  # the launcher's own run: its env module passed the launch's check
        self.calls[i] = self.actors[i].run.remote(
            self.connect, self.keys, self.cfg.workers.envs_per_worker, self.run_name, trusted
        )

    def check(self) -> None:
        """Log where actors landed; an actor whose loop ended by its death gets it again once Ray restarted it (a
        restart, counted), and one out of restarts is said to be gone (the run goes on without it)."""
        ray = self.ray
        if self.placed_by and time.monotonic() > self.placed_by:
            self.placed_by = 0.0
            waiting = [f"zrl-ray-{i}" for i in self.where]
            if waiting:
                text = (
                    f"Ray has not placed {', '.join(waiting)} after {PLACE_WARN_S:g} s: each actor asks for a CPU, and "
                    "the cluster may have none free (ray status shows it); the run goes on"
                )
                log.warning(text)
                self.say(text)
        for i, ref in list(self.where.items()):
            done, _ = ray.wait([ref], timeout=0)
            if done:
                del self.where[i]
                try:
                    node, host, pid = ray.get(ref)
                    log.info("Ray actor zrl-ray-%d is on node %s (%s), pid %d", i, node[:12], host, pid)
                except ray.exceptions.RayError:
                    pass
        now = time.monotonic()
        for i, ref in list(self.calls.items()):
            if ref is None:
                if now >= self.retry_at.get(i, 0.0):
                    self._run(i)
                continue
            done, _ = ray.wait([ref], timeout=0)
            if not done:
                continue
            name = f"zrl-ray-{i}"
            try:
                code = ray.get(ref)
            except ray.exceptions.RayActorError as err:  # the actor died: Ray restarts it
                self._failed(i, name, "died", err, now)
                continue
            except ray.exceptions.RayError as err:  # its loop raised: the actor lives, and runs the loop again
                self._failed(i, name, "failed", err, now)
                continue
            if code == 0 and self.stopping:
                del self.calls[i]
                continue
            text = f"{name}'s Ray actor ended its loop with exit code {code} (refused by the run for good)"
            log.warning(text)
            self.say(text)
            del self.calls[i]

    def _failed(self, i: int, name: str, how: str, err: Exception, now: float) -> None:
        """Slot ``i``'s loop ended by its actor's death or an exception: once more after a moment (Ray restarts a
        dead actor first), unless it failed more than workers.max_restarts times within workers.restart_window_s, the
        rule and the count a local worker's restarts have (Ray's own is unbounded); then the actor is killed for
        good."""
        cfg = self.cfg
        times = self.failures.setdefault(i, deque())
        times.append(now)
        while now - times[0] > cfg.workers.restart_window_s:
            times.popleft()
        recent = len(times)
        first_line = (str(err).strip().splitlines() or [""])[-1][:300]
        if recent > cfg.workers.max_restarts:
            text = (
                f"{name}'s Ray actor {how} more than workers.max_restarts = {cfg.workers.max_restarts} times within "
                f"workers.restart_window_s = {cfg.workers.restart_window_s:g} s; the run goes on without it"
            )
            log.warning("%s (%s)", text, first_line)
            self.say(text)
            del self.calls[i]
            with contextlib.suppress(Exception):
                self.ray.kill(self.actors[i], no_restart=True)
            return
        self.restarts += 1
        text = (
            f"{name}'s Ray actor {how}; {'Ray restarts it' if how == 'died' else 'its loop starts again'} "
            f"(restart {recent} of {cfg.workers.max_restarts} allowed within {cfg.workers.restart_window_s:g} s)"
        )
        log.warning("%s: %s", text, first_line)
        self.say(text)
        if how == "died":
            self.where[i] = self.actors[i].where.remote()
        self.calls[i], self.retry_at[i] = None, now + RETRY_AFTER_S

    def close(self) -> None:
        """Ask every actor to stop, wait a little for their loops to end, kill them all and leave the cluster."""
        if not self._joined:
            return
        ray = self.ray
        self.stopping = True
        try:
            for actor in self.actors:
                try:
                    actor.stop.remote()
                except ray.exceptions.RayError:
                    pass
            pending = [ref for ref in self.calls.values() if ref is not None]
            if pending:
                ray.wait(pending, num_returns=len(pending), timeout=STOP_WAIT_S)
            for actor in self.actors:
                try:
                    ray.kill(actor, no_restart=True)
                except ray.exceptions.RayError:
                    pass
        finally:
            self.actors.clear()
            ray.shutdown()
            self._joined = False
