"""The launcher: checks everything it can before any process starts, creates the run folder and the
shared-memory rings, spawns broker, learner and workers, watches their heartbeats, prints progress,
writes episodes.csv and metrics.csv, and turns SIGINT/SIGTERM into an orderly stop.

It alone creates and unlinks segments; at exit, whatever happened, nothing is left in /dev/shm, no child
process and no socket file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import zmq

import shm
from shm.ring import Ring, RingSpec
from zrl import __version__, agents, checkpoint, envs, protocol, transport
from zrl.config import SAFE_ON_RESUME, Config, ConfigError, dumps, fill_target, queue_capacity, split_note, to_dict
from zrl.launch.tally import Tally, progress_line
from zrl.metrics import EPISODE_COLUMNS, METRIC_COLUMNS, CsvLog
from zrl.roles import broker, learner, worker
from zrl.roles.common import RunWiring, StartFrom, StopFlag, WorkerStart

SHM_PREFIX = "zrl"
PRIVATE_PREFIX = "zrl-"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_SIGINT, EXIT_SIGTERM = 0, 1, 2, 130, 143
STOP_GRACE_S = 60.0  # how long an orderly stop waits for the learner's final checkpoint
STARTUP_GRACE_S = 60.0  # the least time a role has for its first report (imports, env creation, first weights)

log = logging.getLogger("zrl")


def ring_slots(cfg: Config) -> int:
    """Ring slots per worker: workers.ring_slots, or (0, auto) as many as the agent's replay may still need."""
    return cfg.workers.ring_slots or agents.get(cfg.algo).ring_slots(cfg)


def make_ring_spec(cfg: Config, spec: envs.EnvSpec) -> RingSpec:
    """A worker's ring: per slot one frame of each of its envs and each env's step within its episode."""
    m = cfg.workers.envs_per_worker
    return RingSpec(
        ring_slots(cfg), {"frame": ((m, *spec.frame_shape), spec.frame_dtype), "episode_step": ((m,), "int32")}
    )


def create_rings(cfg: Config, ring_spec: RingSpec, run_id: str, rings: list[Ring]) -> None:
    """Create every worker's ring into ``rings`` (named for this process, so that a later launch can sweep them
    if it dies); an OSError that says what they need when /dev/shm has no room. The caller unlinks them."""
    for i in range(cfg.workers.count):
        name = shm.segment_name(SHM_PREFIX, run_id, os.getpid(), f"ring{i}")
        try:
            rings.append(Ring.create(name, ring_spec))
        except OSError as err:
            raise OSError(
                f"cannot create shared memory for ring {i}: {err.strerror or err}; the rings need "
                f"{cfg.workers.count * ring_spec.nbytes / 1e6:.0f} MB in /dev/shm (lower "
                "workers.ring_slots or workers.count, or give /dev/shm more room)"
            ) from None


def preflight(cfg: Config) -> envs.EnvSpec:
    """Every check that needs no process: CurveZMQ keys, environment, model shape, device, results folder."""
    if cfg.transport.curve_keys:  # here, not in zrl.config, which transport imports
        transport.load_curve_keys(cfg.transport.curve_keys)
    spec = envs.probe(cfg.env)
    from zrl.models import parameter_count

    try:
        model = agents.get(cfg.algo).build_model(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)
    except ValueError as err:
        raise ConfigError(f"model.kind: {err}") from None
    check_weights_fit(parameter_count(model))
    if cfg.learner.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"learner.device: {cfg.learner.device!r} but no CUDA device is available; use auto or cpu"
            )
    results = Path(cfg.run.results_dir)
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"run.results_dir: cannot create {results} ({err.strerror}); give a folder you can write "
            "with --set run.results_dir=PATH"
        ) from None
    if not os.access(results, os.W_OK | os.X_OK):
        raise ConfigError(
            f"run.results_dir: {results} is not writable; give a folder you can write with --set run.results_dir=PATH"
        )
    return spec


def check_weights_fit(parameters: int) -> None:
    """ConfigError when the network's weights, which travel to the workers as one float32 message, would be
    larger than a zrl socket takes (MAX_MESSAGE_BYTES): zmq would drop them and the workers would wait for
    weights for ever."""
    most = (protocol.MAX_MESSAGE_BYTES - protocol.WEIGHTS_HEADER_BYTES) // 4
    if parameters > most:
        raise ConfigError(
            f"model: the network has {parameters:,} parameters ({parameters * 4 / 2**20:.0f} MiB as "
            f"float32), more than the {most:,} that fit in one weights message of "
            f"{protocol.MAX_MESSAGE_BYTES // 2**20} MiB; make it smaller (model.hidden_size, model.mlp_hidden, "
            "apex.embedding_dim)"
        )


def sweep_stale() -> tuple[list[str], list[str]]:
    """Remove segments and private socket folders whose launcher is dead."""
    segments = shm.sweep(SHM_PREFIX)
    folders = []
    tmp = Path(tempfile.gettempdir())
    for path in tmp.glob(f"{PRIVATE_PREFIX}*"):
        pid = path.name[len(PRIVATE_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or not path.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            folders.append(str(path))
        except PermissionError:
            pass
    return segments, folders


LOCK_NAME = ".zrl-launch.lock"


class RunLock:
    """One launcher's exclusive hold on a run folder: an flock on ``<run>/.zrl-launch.lock``, which holds the
    pid. The kernel drops the hold when the process dies, however it dies, so a stale file never blocks."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_NAME
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as err:
                raise ConfigError(
                    f"{run_dir}: cannot write its lock file {LOCK_NAME} ({err.strerror}); a run folder "
                    "must be writable to train in it"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise ConfigError(
                    f"{run_dir}: in use by another zrl-launch (pid {holder}); stop that one first, "
                    "or resume another run"
                ) from None
            try:  # the holder before us may have unlinked the file between our open and our lock
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


def make_run_dir(cfg: Config) -> Path:
    name = cfg.env.id.replace("/", "-")
    stamp = int(time.time())
    base = Path(cfg.run.results_dir)
    try:
        base.mkdir(parents=True, exist_ok=True)
        for suffix in [""] + [f"-{i}" for i in range(1, 100)]:
            path = base / f"{name}_{stamp}{suffix}"
            try:
                path.mkdir()
            except FileExistsError:
                continue
            (path / "checkpoints").mkdir()
            return path
    except OSError as err:
        raise ConfigError(
            f"run.results_dir: cannot make a run folder in {base} ({err.strerror or err}); give a "
            "folder you can write with --set run.results_dir=PATH"
        ) from None
    raise ConfigError(f"run.results_dir: could not make a new run folder under {base}")


def checkpoint_bytes(cfg: Config, spec: envs.EnvSpec) -> int:
    """About what one checkpoint takes: the weights and two optimiser moments of each, plus a margin."""

    model = agents.get(cfg.algo).build_model(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)
    return int(sum(p.numel() for p in model.parameters()) * 4 * 3 * 1.1) + 1_000_000


def check_room(folder: Path, need: int) -> None:
    """ConfigError when ``folder``'s disk has less than ``need`` bytes free (checked at start, so that a run does
    not train for hours toward a checkpoint that cannot be written)."""
    existing = next(p for p in (folder.resolve(), *folder.resolve().parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if free < need:
        raise ConfigError(
            f"run.results_dir: {folder} has {free / 1e6:.0f} MB free, and this run's checkpoints need "
            f"about {need / 1e6:.0f} MB; free some space or give another folder with "
            "--set run.results_dir=PATH"
        )


class Launcher:
    def __init__(
        self,
        cfg: Config,
        spec: envs.EnvSpec,
        quiet: bool = False,
        run_dir: Path | None = None,
        start: StartFrom | None = None,
        env_frames_start: int = 0,
        sample_calls: tuple[int, ...] = (),
        lock: RunLock | None = None,
    ) -> None:
        self.cfg = cfg
        self.spec = spec
        self.quiet = quiet
        self.tty = sys.stdout.isatty()
        self.signals: list[int] = []
        self.tally = Tally(frames_start=env_frames_start)
        self.resume_dir = run_dir
        self.start = start
        self.notes = [n for n in (split_note(cfg),) if n]  # said and logged once the run's log is open
        self.sample_calls = sample_calls
        self.lock = lock  # a resumed run's folder is locked before its checkpoints are looked at
        self.stop_reason = "budget reached"
        self.restarts: dict[int, deque] = {}  # each worker's restart times within the window
        self.generations: dict[int, int] = {}
        self.reported: set[str] = set()  # roles that have sent something since they (re)started
        self.tracebacks: dict[str, str] = {}  # the last traceback each role sent as it died
        self.pids: dict[str, int] = {}  # each role's current process
        self.retired: set[int] = set()  # the processes of replaced workers
        self.last_seen: dict[str, float] = {}  # when each role last sent something
        self.last_checkpoint = ""  # the last checkpoint the learner said it wrote

    # -- signals -------------------------------------------------------------------------------
    def _on_signal(self, signum, _frame) -> None:
        self.signals.append(signum)
        if len(self.signals) == 2:
            # A second signal: no more waiting. Children are killed; the finally block cleans up.
            raise KeyboardInterrupt

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> int:
        cfg = self.cfg
        segments, folders = sweep_stale()
        # the periodic checkpoints kept, best.pt and one being written
        need = checkpoint_bytes(cfg, self.spec) * (cfg.run.keep_checkpoints + 2)
        check_room(self.resume_dir or Path(cfg.run.results_dir), need)
        run_dir = self.resume_dir or make_run_dir(cfg)
        self.run_dir = run_dir
        lock = self.lock or RunLock(run_dir)
        try:
            return self._run(run_dir, segments, folders)
        finally:
            lock.release()

    def _run(self, run_dir: Path, segments: list[str], folders: list[str]) -> int:
        cfg = self.cfg
        (run_dir / "config.toml").write_text(dumps(cfg))
        handler = logging.FileHandler(run_dir / "zrl.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.info("zrl %s run %s, pid %d, config %s", __version__, run_dir, os.getpid(), run_dir / "config.toml")
        for note in self.notes:
            log.warning(note)
            self._say(note)
        if self.resume_dir is not None:
            self.tally.seed(run_dir)
            text = (
                f"resuming {run_dir} from {self.start.path}: {self.tally.env_frames:,} env frames, "
                f"{self.tally.episodes} episodes so far; frames in the replay are not kept across a restart, "
                "so the replays refill before learning resumes"
            )
            log.info(text)
            self._say(text)
        elif self.start is not None:
            text = (
                f"starting from the weights{' and optimiser state' if self.start.optimizer else ''} of "
                f"{self.start.path}"
            )
            log.info(text)
            self._say(text)
        for name in segments + folders:
            log.info("removed %s left by a launcher that is no longer running", name)
        if segments or folders:
            self._say(f"removed {len(segments)} stale shared-memory segments and {len(folders)} socket folders")
        self._say(f"run folder {run_dir}")

        episodes = CsvLog(run_dir / "episodes.csv", EPISODE_COLUMNS)
        metrics = CsvLog(run_dir / "metrics.csv", METRIC_COLUMNS)
        run_id = f"{int(time.time())}{os.urandom(2).hex()}"
        rings: list[Ring] = []
        private = transport.make_private_dir(tempfile.gettempdir(), f"{PRIVATE_PREFIX}{os.getpid()}-{run_id}")
        mp_ctx = mp.get_context("spawn")
        stop_event = StopFlag(mp_ctx)
        procs: dict[str, mp.Process] = {}
        zctx = transport.context(cfg.transport)
        stats_sock = None
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        code = EXIT_OK
        try:
            ring_spec = make_ring_spec(cfg, self.spec)
            try:
                create_rings(cfg, ring_spec, run_id, rings)
            except OSError as err:
                self._error(str(err))
                code = EXIT_USAGE
                return code
            log.info("%d rings of %d slots, %.1f MB each", len(rings), ring_spec.capacity, ring_spec.nbytes / 1e6)
            log.info(
                "replays: %s; training starts once they hold %s units",
                ", ".join(
                    f"{r.type} of {queue_capacity(cfg, r) if r.type == 'queue' else r.capacity} x {r.sample_ratio:g}"
                    for r in cfg.replay
                ),
                " + ".join(str(fill_target(cfg, r)) for r in cfg.replay),
            )
            endpoints = transport.plan_endpoints(cfg.transport, private)
            stats_sock = transport.socket(zctx, zmq.PULL, hwm=10_000, bind=endpoints.stats)
            wiring = RunWiring(
                endpoints,
                tuple(r.name for r in rings),
                ring_spec,
                self.spec.frame_shape,
                self.spec.frame_dtype,
                self.spec.num_actions,
                self.spec.frames_per_step,
                os.getpid(),
                self.tally.frames_start,
                self.sample_calls,
                self.start.path if self.resume_dir and cfg.run.deterministic else "",
            )
            procs["zrl-broker"] = mp_ctx.Process(target=broker.run, args=(cfg, wiring, stop_event), name="zrl-broker")
            procs["zrl-learner"] = mp_ctx.Process(
                target=learner.run, name="zrl-learner", args=(cfg, wiring, str(run_dir), stop_event, self.start)
            )
            self._new_worker = lambda i, start: mp_ctx.Process(
                target=worker.run, name=f"zrl-worker-{i}", args=(i, cfg, wiring, stop_event, start)
            )
            for i in range(cfg.workers.count):
                procs[f"zrl-worker-{i}"] = self._new_worker(i, WorkerStart())
            start = time.monotonic()
            for name, proc in procs.items():
                self._start(name, proc, start)
            code = self._supervise(procs, stats_sock, episodes, metrics, start)
            self._say_line("")
            reason = (
                self.stop_reason
                if code == EXIT_OK
                else "interrupted"
                if code in (EXIT_SIGINT, EXIT_SIGTERM)
                else "error"
            )
            self._say(f"stopping ({reason}); waiting for the final checkpoint")
            stop_event.set()
            self._drain_until_exit(procs, stats_sock, episodes, STOP_GRACE_S)
        except KeyboardInterrupt:
            code = EXIT_SIGINT if signal.SIGINT in self.signals else EXIT_SIGTERM
            log.warning("second signal: stopping at once")
        finally:
            for s in old_handlers:
                signal.signal(s, signal.SIG_IGN)  # cleanup below must not be cut short by more signals
            stop_event.set()
            for name, proc in procs.items():
                if proc.is_alive():
                    proc.kill()
                    log.warning("killed %s", name)
            for proc in procs.values():
                if proc.pid is not None:
                    proc.join(5)
            if stats_sock is not None:
                stats_sock.close()
            transport.term(zctx)
            for ring in rings:
                ring.close()
                ring.unlink()
            rings.clear()
            shutil.rmtree(private, ignore_errors=True)
            for partial in (run_dir / "checkpoints").glob(".*.tmp-*"):  # a learner killed mid-write
                partial.unlink(missing_ok=True)
            episodes.close()
            metrics.close()
            self._final_report(code)
            log.removeHandler(handler)
            handler.close()
            for s, h in old_handlers.items():
                signal.signal(s, h)
        return code

    def _supervise(self, procs, stats_sock, episodes: CsvLog, metrics: CsvLog, start: float) -> int:
        cfg = self.cfg
        next_report = start + cfg.run.log_interval_s
        self.tally.rates(start)
        while True:
            self._drain(stats_sock, episodes, cfg.transport.poll_timeout_ms)
            if self.signals:  # after the drain: a process-group SIGTERM may already have stopped children
                return EXIT_SIGINT if self.signals[0] == signal.SIGINT else EXIT_SIGTERM
            now = time.monotonic()
            for name, proc in list(procs.items()):
                silent = now - self.last_seen[name]
                timeout = (
                    cfg.run.heartbeat_timeout_s
                    if name in self.reported
                    else max(cfg.run.heartbeat_timeout_s, STARTUP_GRACE_S)
                )
                if proc.exitcode is None and silent <= timeout:
                    continue
                self._drain(stats_sock, episodes, 200)  # its last words (a RoleError) may still be on the way
                if proc.exitcode is None:  # hung: where it is stuck goes to stderr before it is killed
                    with contextlib.suppress(OSError):
                        os.kill(proc.pid, signal.SIGUSR1)  # faulthandler, registered by start_role
                    time.sleep(0.5)
                why = (
                    f"exited with code {proc.exitcode}"
                    if proc.exitcode is not None
                    else f"sent nothing for {silent:.0f} s (hung)"
                )
                if name.startswith("zrl-worker") and self._restart(procs, name, why, now):
                    continue
                self._died(name, why)
                return EXIT_FAILED
            if self._budget_reached() or (cfg.run.max_seconds and now - start >= cfg.run.max_seconds):
                self.stop_reason = "budget reached" if self._budget_reached() else "time limit reached"
                metrics.write(self.tally.metrics_row(now - start, 0.0, 0.0))
                return EXIT_OK
            if now >= next_report:
                fps, sps = self.tally.rates(now)
                metrics.write(self.tally.metrics_row(now - start, fps, sps))
                line = progress_line(self.tally, now - start, fps, [fill_target(cfg, r) for r in cfg.replay])
                log.info(line)
                self._say_line(line)
                next_report = now + cfg.run.log_interval_s

    @staticmethod
    def _sender(msg) -> str | None:
        """The role a stats-channel message says it is from; None for a message that has no business there."""
        if isinstance(msg, (protocol.Episode, protocol.WorkerStats)):
            return f"zrl-worker-{msg.worker_id}"
        if isinstance(msg, protocol.BrokerStats):
            return "zrl-broker"
        if isinstance(msg, protocol.LearnerStats):
            return "zrl-learner"
        if isinstance(msg, protocol.RoleError):
            return msg.role
        return None

    def _seen(self, name: str, now: float) -> None:
        self.last_seen[name] = now
        self.reported.add(name)

    def _start(self, name: str, proc: mp.Process, now: float) -> None:
        # Children start with SIGINT ignored, so a Ctrl-C while they import is the launcher's alone.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            proc.start()
        finally:
            signal.signal(signal.SIGINT, self._on_signal)
        self.last_seen[name] = now
        self.reported.discard(name)
        if name in self.pids:
            self.retired.add(self.pids[name])
        self.pids[name] = proc.pid
        log.info("started %s, pid %d", name, proc.pid)

    def _restart(self, procs: dict, name: str, why: str, now: float) -> bool:
        """Replace a dead or hung worker with a new one on the same ring, unless it has needed too many restarts
        lately (or the run is deterministic, which a restart would break); False then."""
        cfg = self.cfg
        wid = int(name.rsplit("-", 1)[1])
        times = self.restarts.setdefault(wid, deque())
        times.append(now)
        while times and now - times[0] > cfg.workers.restart_window_s:
            times.popleft()
        if cfg.run.deterministic or len(times) > cfg.workers.max_restarts:
            return False
        old = procs[name]
        if old.exitcode is None:  # hung: it goes first
            old.kill()
            old.join(10)
        generation = self.generations[wid] = self.generations.get(wid, 0) + 1
        stats = self.tally.workers.get(wid)
        procs[name] = self._new_worker(wid, WorkerStart(generation, stats.env_frames if stats else 0))
        self._start(name, procs[name], now)
        self.tally.worker_restarts += 1
        text = (
            f"{name} {why}; restarted it with the current weights (restart {len(times)} of "
            f"{cfg.workers.max_restarts} allowed within {cfg.workers.restart_window_s:g} s)"
        )
        log.warning(text)
        if name in self.tracebacks:
            log.warning("%s's traceback:\n%s", name, self.tracebacks.pop(name))
        self._say_line("")
        self._say(text)
        return True

    def _died(self, name: str, why: str) -> None:
        """Say what died, why, its traceback when it sent one, and how to go on."""
        cfg = self.cfg
        if name.startswith("zrl-worker"):
            if cfg.run.deterministic:
                why += "; a deterministic run does not restart workers"
            else:
                why += (
                    f"; that is more than workers.max_restarts = {cfg.workers.max_restarts} restarts within "
                    f"workers.restart_window_s = {cfg.workers.restart_window_s:g} s"
                )
        latest = checkpoint.latest(self.run_dir / "checkpoints")
        hint = (
            f"the last checkpoint is {latest}; continue with: zrl-launch --resume {self.run_dir}"
            if latest
            else "no checkpoint was written yet"
        )
        tb = self.tracebacks.get(name)
        self._error(f"{name} {why}; the run stopped ({hint})" + (f"\n{name}'s traceback:\n{tb.rstrip()}" if tb else ""))

    def _budget_reached(self) -> bool:
        """Frames played reach run.max_env_frames; in a deterministic run, frames trained do."""
        if not self.cfg.run.deterministic:
            return self.tally.env_frames >= self.cfg.run.max_env_frames
        return self.tally.learner is not None and self.tally.learner.env_frames_trained >= self.cfg.run.max_env_frames

    def _drain(self, sock, episodes: CsvLog, timeout_ms: int) -> None:
        data = transport.recv(sock, timeout_ms)
        while data is not None:
            self._take(data, episodes)
            data = transport.recv(sock, 0)

    def _drain_until_exit(self, procs, sock, episodes: CsvLog, grace: float) -> None:
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.is_alive() for p in procs.values()):
            self._drain(sock, episodes, 50)
        self._drain(sock, episodes, 0)
        for name, proc in procs.items():
            if proc.is_alive():
                log.warning("%s did not stop within %.0f s", name, grace)

    def _take(self, data: bytes, episodes: CsvLog) -> None:
        t = self.tally
        try:
            msg = protocol.decode(data)
            role = self._sender(msg)
            if role is None:
                raise protocol.ProtocolError(f"{type(msg).__name__}: not a stats message")
            if self.pids.get(role) != msg.pid:  # only the processes this launcher started report
                if msg.pid in self.retired:  # late news from a worker that has been replaced
                    if isinstance(msg, protocol.RoleError):
                        self.tracebacks[msg.role] = msg.traceback
                        log.error("%s (pid %d) died of an exception:\n%s", msg.role, msg.pid, msg.traceback.rstrip())
                    return
                raise protocol.ProtocolError(f"{type(msg).__name__}: pid {msg.pid} is not {role} of this run")
        except protocol.ProtocolError as err:
            t.stats_errors += 1
            if t.stats_errors <= 10:  # counted in metrics.csv; logged only at first
                log.warning("dropped a malformed stats message: %s", err)
            return
        now = time.monotonic()
        if isinstance(msg, protocol.RoleError):
            self.tracebacks[msg.role] = msg.traceback
            log.error("%s (pid %d) died of an exception:\n%s", msg.role, msg.pid, msg.traceback.rstrip())
            return
        row = t.take(msg)
        if row is not None:
            episodes.write(row)
        self._seen(role, now)
        if (
            isinstance(msg, protocol.LearnerStats)
            and msg.checkpoint_path
            and msg.checkpoint_path != self.last_checkpoint
        ):
            self.last_checkpoint = msg.checkpoint_path
            self._maybe_best(Path(msg.checkpoint_path))

    def _maybe_best(self, path: Path) -> None:
        """Keep best.pt: the checkpoint written when the 100-episode mean raw score was at its best."""
        record = self.tally.best_record(path.name)
        if record is None:
            return
        folder = path.parent
        try:
            checkpoint.copy(path, folder / checkpoint.BEST)
        except OSError as err:  # pruned meanwhile, or the disk is full: the periodic checkpoints stand
            log.warning("could not update %s: %s", folder / checkpoint.BEST, err)
            return
        self.tally.best_return = record["mean_return_100"]
        checkpoint.write_atomic(folder / "best.json", (json.dumps(record, indent=2) + "\n").encode())
        log.info(
            "best.pt: %s, mean return(100) %.2f over %d episodes",
            path.name,
            record["mean_return_100"],
            len(self.tally.returns),
        )

    def _final_report(self, code: int) -> None:
        latest = checkpoint.latest(self.run_dir / "checkpoints")  # the disk knows even if the last message was lost
        ckpt = str(latest) if latest else ""
        summary = self.tally.summary(code)
        log.info(summary)
        log.info("last checkpoint: %s", ckpt or "none")
        self._say(summary)
        self._say(f"last checkpoint: {ckpt or 'none'}")
        if ckpt and code != EXIT_OK:
            self._say(f"continue this run with: zrl-launch --resume {self.run_dir}")

    # -- output --------------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    def _say_line(self, text: str) -> None:
        if self.quiet or not text and not self.tty:
            return
        if self.tty:
            print("\r" + text.ljust(120)[:120], end="" if text else "\n", flush=True)
        else:
            print(text, flush=True)

    def _error(self, text: str) -> None:
        log.error(text)
        self._say_line("")
        print(f"zrl-launch: error: {text}", file=sys.stderr, flush=True)


def resolve_model_kind(cfg: Config, spec: envs.EnvSpec) -> Config:
    """The config with model.kind as this run builds it (auto resolved by the frames), so that the run folder's
    config.toml and the checkpoints name the network whatever a later zrl means by auto."""
    import dataclasses

    from zrl.models import model_kind

    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, kind=model_kind(cfg.model, spec.frame_shape)))


def launch(cfg: Config, quiet: bool = False, init_from: str | None = None, init_optimizer: bool = False) -> int:
    """Check, then run; ConfigError before anything is created if the config cannot work.
    ``init_from``: a new run that starts from a checkpoint's weights (and optimiser state if asked)."""
    spec = preflight(cfg)
    cfg = resolve_model_kind(cfg, spec)
    start = None
    if init_from is not None:
        state = _usable(Path(init_from), cfg, spec)
        theirs = state.get("config", {}).get("learner", {}).get("optimizer")
        if init_optimizer and theirs != cfg.learner.optimizer:
            raise ConfigError(
                f"--init-optimizer: {init_from} holds {theirs} state and this run uses "
                f"learner.optimizer = {cfg.learner.optimizer!r}; drop --init-optimizer or use {theirs}"
            )
        start = StartFrom(str(init_from), resume=False, optimizer=init_optimizer)
        del state
    return Launcher(cfg, spec, quiet, start=start).run()


def _usable(path: Path, cfg: Config, spec: envs.EnvSpec) -> dict:
    """A checkpoint that loads, verifies and fits this config's game and network, or ConfigError."""

    try:
        state = checkpoint.load(path)
        model = agents.get(cfg.algo).build_model(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)
        checkpoint.check_compatible(state, path, cfg.env.id, model)
    except checkpoint.CheckpointError as err:
        raise ConfigError(str(err)) from None
    return state


# Keys safe on resume that a deterministic run still cannot change: the worker's env count (the replayed
# actions are per env), and the thread counts and device (floating-point sums are split by them).
FIXED_WHEN_DETERMINISTIC = (
    "workers.envs_per_worker",
    "workers.torch_threads",
    "learner.torch_threads",
    "learner.device",
    "broker.torch_threads",
)


def find_run(ref: str, cfg: Config) -> Path:
    """The run folder ``ref`` names, or with ``auto`` the newest run of cfg's environment under its results_dir."""
    if ref != "auto":
        path = Path(ref)
        if not (path / "config.toml").is_file():
            raise ConfigError(f"--resume {ref}: not a zrl run folder (no config.toml in it)")
        return path
    base = Path(cfg.run.results_dir)
    runs = []
    for folder in base.glob(f"{cfg.env.id.replace('/', '-')}_*"):
        stamp = folder.name.rsplit("_", 1)[-1].split("-")[0]
        if (folder / "config.toml").is_file() and stamp.isdigit() and checkpoint.periodic(folder / "checkpoints"):
            runs.append((int(stamp), folder.stat().st_mtime, folder))
    if not runs:
        raise ConfigError(f"--resume auto: no run of {cfg.env.id} with a checkpoint under {base}/ to resume")
    return max(runs)[2]


def resume(ref: str, probe_cfg: Config, sets: list[str], options: dict, quiet: bool = False) -> int:
    """Continue a run in its own folder from its newest good checkpoint; only SAFE_ON_RESUME keys may change.
    The folder is locked first: a second launcher into it is refused, naming the one that holds it."""
    run_dir = find_run(ref, probe_cfg)
    lock = RunLock(run_dir)
    try:
        return _resume(run_dir, probe_cfg, sets, options, quiet, lock)
    finally:
        lock.release()


def _resume(run_dir: Path, probe_cfg: Config, sets: list[str], options: dict, quiet: bool, lock: RunLock) -> int:
    from zrl import config as config_mod

    stored = run_dir / "config.toml"
    base = config_mod.load(stored, stored=True)
    cfg = config_mod.load(stored, sets, options, stored=True)
    old, new = to_dict(base), to_dict(cfg)
    for section, values in new.items():
        if section in config_mod.TOP_KEYS:
            if values != old[section]:
                raise ConfigError(f"{section}: cannot change when resuming {run_dir} (it would not be the same run)")
            continue
        if section == "replay":
            if values != old["replay"]:
                raise ConfigError("replay: the replays cannot change on resume; start a new run (--init-from) instead")
            continue
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if value != old[section][key] and dotted not in SAFE_ON_RESUME:
                raise ConfigError(
                    f"{dotted}: cannot change when resuming {run_dir} (it would not be the same run); "
                    f"keys that may change: {', '.join(SAFE_ON_RESUME)}"
                )
            if value != old[section][key] and cfg.run.deterministic and dotted in FIXED_WHEN_DETERMINISTIC:
                raise ConfigError(
                    f"{dotted}: cannot change when resuming the deterministic run {run_dir}; it would "
                    f"change the results (keys fixed: {', '.join(FIXED_WHEN_DETERMINISTIC)})"
                )
    spec = preflight(cfg)
    folder = run_dir / "checkpoints"
    for partial in folder.glob(".*.tmp-*"):  # a write cut short by a crash: never a checkpoint
        partial.unlink(missing_ok=True)
    skipped = []
    for path, state, err in checkpoint.newest_good(folder):
        reason = str(err) if err is not None else None
        if reason is None:
            try:
                _usable(path, cfg, spec)
            except ConfigError as bad:
                reason = str(bad)
        if reason is not None and err is not None and checkpoint.is_corrupt(err):
            # damaged: set aside, kept for a look, so that it is never picked again
            skipped.append(reason + f" (set aside as {path.name}.bad)")
            path.rename(path.with_name(path.name + ".bad"))
            if checkpoint.hash_path(path).exists():
                checkpoint.hash_path(path).rename(path.with_name(path.name + ".bad" + checkpoint.HASH_SUFFIX))
            continue
        if reason is not None:
            skipped.append(reason)
            continue
        index = state.get("replay_index") or {}
        calls = tuple(int(c) for c in index["sample_calls"]) if "sample_calls" in index else ()
        launcher = Launcher(
            cfg,
            spec,
            quiet,
            run_dir=run_dir,
            start=StartFrom(str(path)),
            env_frames_start=int(state["env_frames"]),
            sample_calls=calls,
            lock=lock,
        )
        launcher.notes += [f"skipped a checkpoint that cannot be used: {reason}" for reason in skipped]
        return launcher.run()
    reasons = "; ".join(skipped) if skipped else "there is none"
    raise ConfigError(f"{run_dir / 'checkpoints'}: no usable checkpoint to resume from ({reasons})")
