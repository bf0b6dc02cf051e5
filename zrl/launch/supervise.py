"""Supervision of the role processes: start them (Ctrl-C left to the launcher), know which process is which role,
watch their heartbeats (any stats message counts), replace a dead or hung worker within its restart budget,
allow a restart of the run's roles when a broker, learner or ingest is lost (run.restart_policy, within its
crash-loop limit; the launcher does the restart), say what died and why, turn SIGINT/SIGTERM/SIGHUP into a stop
request (a second one into an immediate stop), and stop them in order: the stop flag, a grace period for the
learner's final checkpoint, then SIGKILL."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from collections.abc import Callable

from zrl import protocol
from zrl.bounds import printable
from zrl.config import Config
from zrl.launch.console import Console
from zrl.roles.run_wiring import WorkerStart

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM = 0, 1, 2, 129, 130, 143
TRACEBACK_CHARS = 20_000  # of a role's last traceback, as logged and shown
NOTICE_CHARS = 2_000  # of a role's notice, as logged and said
# The signals that ask for an orderly stop: Ctrl-C, kill or a batch scheduler's SIGTERM, and SIGHUP, which a dropped
# ssh session or a closed terminal sends to the whole process group
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_S = 60.0  # how long an orderly stop waits for the learner's final checkpoint
RESTART_STOP_GRACE_S = 5.0  # how long the other roles have to stop for a restart, once the learner has stopped
EVALUATOR = "zrl-evaluator"  # the role's name (zrl/roles/evaluator.py's NAME; roles are not imported here)
STARTUP_GRACE_S = 60.0  # the least time a role has for its first report (imports, env creation, first weights)

log = logging.getLogger("zrl")


def stop_signals() -> tuple[int, ...]:
    """The stop signals this process takes: SIGHUP only where it was not ignored when the program started (nohup
    ignores it, so that a run outlives the terminal it was started from; that wish stands)."""
    ignored = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    return tuple(s for s in STOP_SIGNALS if not (s == signal.SIGHUP and ignored))


def exit_code(signum: int) -> int:
    """The exit status of a run a stop signal ended, as a shell reports a process that signal killed: 128 + signum."""
    codes: dict[int, int] = {signal.SIGHUP: EXIT_SIGHUP, signal.SIGINT: EXIT_SIGINT}
    return codes.get(signum, EXIT_SIGTERM)


def stop_in_order(
    procs: dict[str, mp.process.BaseProcess], grace: float, drain: Callable[[int], None] | None = None
) -> list[str]:
    """Wait up to ``grace`` seconds for ``procs`` to exit after their stop flag was set, taking their messages
    meanwhile with ``drain(timeout_ms)`` when given; the names of those still running."""
    deadline = time.monotonic() + grace
    if drain is None:
        for proc in procs.values():
            if proc.pid is not None:
                proc.join(max(0.1, deadline - time.monotonic()))
    else:
        while time.monotonic() < deadline and any(p.is_alive() for p in procs.values()):
            drain(50)
        drain(0)
    return [name for name, proc in procs.items() if proc.is_alive()]


def kill_all(procs: dict[str, mp.process.BaseProcess]) -> list[str]:
    """SIGKILL every process still running and reap them all; the names of those killed."""
    killed = [name for name, proc in procs.items() if proc.is_alive()]
    for name in killed:
        procs[name].kill()
    for proc in procs.values():
        if proc.pid is not None:
            proc.join(5)
    return killed


def count_recent(times: deque, now: float, window_s: float) -> int:
    """Note a restart at ``now`` in ``times`` and forget those older than ``window_s``; how many are left."""
    times.append(now)
    while now - times[0] > window_s:
        times.popleft()
    return len(times)


def _sender(msg) -> str | None:
    """The role a stats-channel message says it is from; None for a message that has no business there."""
    if isinstance(msg, (protocol.Episode, protocol.WorkerStats)):
        return f"zrl-worker-{msg.worker_id}"
    if isinstance(msg, protocol.BrokerStats):
        return "zrl-broker"
    if isinstance(msg, protocol.LearnerStats):
        return "zrl-learner"
    if isinstance(msg, protocol.IngestStats):
        return "zrl-ingest"
    if isinstance(msg, (protocol.EvaluatorStats, protocol.EvalResult)):
        return EVALUATOR
    if isinstance(msg, (protocol.RoleError, protocol.Notice)):
        return msg.role
    return None


class Supervisor:
    """The role processes of one launch and what the launcher knows of each: ``procs`` by name, their pids (and
    those of replaced workers), when each was last heard from, its restarts and its last traceback.
    ``new_worker(i, start)`` makes worker i's process (not started), ``new_evaluator()`` the evaluator's."""

    def __init__(
        self,
        cfg: Config,
        console: Console,
        new_worker: Callable[[int, WorkerStart], mp.process.BaseProcess],
        new_evaluator: Callable[[], mp.process.BaseProcess] | None = None,
    ) -> None:
        self.cfg = cfg
        self.console = console
        self.new_worker = new_worker
        self.new_evaluator = new_evaluator
        self.procs: dict[str, mp.process.BaseProcess] = {}
        self.signals: list[int] = []
        self.restarts: dict[int, deque] = {}  # each worker's restart times within the window
        self.generations: dict[int, int] = {}
        self.reported: set[str] = set()  # roles that have sent something since they (re)started
        self.tracebacks: dict[str, str] = {}  # the last traceback each role sent as it died
        self.pids: dict[str, int] = {}  # each role's current process
        self.retired: set[int] = set()  # the processes of replaced workers
        self.last_seen: dict[str, float] = {}  # when each role last sent something
        self.worker_restarts = 0
        self.run_restarts: deque = deque()  # the times the run's roles were restarted, within run.restart_window_s
        self.role_restarts = 0  # restarts of the run's roles in this launch
        self.remote = range(cfg.workers.count, cfg.workers.count + cfg.workers.remote)  # their reports: the ingest's
        self.evaluator_lost = False  # given up past its restarts: a restart of the run's roles leaves it out too
        self._old_handlers: dict = {}

    # -- signals ---------------------------------------------------------------------------------------------
    def _on_signal(self, signum, _frame) -> None:
        self.signals.append(signum)
        if len(self.signals) == 2:
            # A second signal: no more waiting. Children are killed; the launcher's finally block cleans up.
            raise KeyboardInterrupt

    def catch_signals(self) -> None:
        """SIGINT, SIGTERM and SIGHUP (unless nohup ignores it) from now on ask for an orderly stop (a second one: at
        once)."""
        self._old_handlers = {s: signal.signal(s, self._on_signal) for s in stop_signals()}

    def ignore_signals(self) -> None:
        """For the clean-up: no more signals may cut it short."""
        for s in self._old_handlers:
            signal.signal(s, signal.SIG_IGN)

    def restore_signals(self) -> None:
        for s, h in self._old_handlers.items():
            signal.signal(s, h)

    def signal_code(self) -> int | None:
        """The exit code a caught signal asks for (the first one's), None while none came."""
        return exit_code(self.signals[0]) if self.signals else None

    # -- starting and hearing from roles -----------------------------------------------------------------------
    def start(self, name: str, proc: mp.process.BaseProcess, now: float) -> None:
        self.procs[name] = proc
        # Children start with the stop signals ignored (as their fork server does: zrl/launch/wiring.py), so a
        # Ctrl-C before they set their own is the launcher's alone.
        proc.start()
        assert proc.pid is not None  # started
        self.last_seen[name] = now
        self.reported.discard(name)
        self.tracebacks.pop(name, None)  # an earlier process's, told already
        if name in self.pids:
            self.retired.add(self.pids[name])
        self.pids[name] = proc.pid
        log.info("started %s, pid %d", name, proc.pid)

    def heard(self, msg, now: float) -> bool:
        """Whether ``msg`` is news from a role of this launch (its heartbeat is noted, and a RoleError's
        traceback kept and logged); False for late news from a worker that has been replaced (a traceback is
        still kept); ProtocolError for a message that has no business on the stats channel or that comes from a
        process this launcher did not start."""
        role = _sender(msg)
        if role is None:
            raise protocol.ProtocolError(f"{type(msg).__name__}: not a stats message")
        if isinstance(msg, (protocol.Episode, protocol.WorkerStats)) and msg.worker_id in self.remote:
            # a remote worker's report, which the ingest passes on in its own name; no heartbeat is kept: the run
            # goes on without remote workers, and the ingest frees the slot of one that went silent
            if msg.pid != self.pids.get("zrl-ingest"):
                if msg.pid in self.retired:  # late news through an ingest that has been replaced
                    return False
                raise protocol.ProtocolError(f"{type(msg).__name__}: pid {msg.pid} is not zrl-ingest of this run")
            return True
        current = self.pids.get(role) == msg.pid  # only the processes this launcher started report
        if not current and msg.pid not in self.retired:
            raise protocol.ProtocolError(f"{type(msg).__name__}: pid {msg.pid} is not {role} of this run")
        if isinstance(msg, protocol.RoleError):
            self.tracebacks[msg.role] = text = printable(msg.traceback, TRACEBACK_CHARS, newlines=True)
            log.error("%s (pid %d) died of an exception:\n%s", msg.role, msg.pid, text.rstrip())
        elif isinstance(msg, protocol.Notice):
            text = printable(msg.text, NOTICE_CHARS)  # a remote worker's words may be in it: nothing raw is shown
            log.info("%s: %s", msg.role, text)
            self.console.line("")
            self.console.say(text)
        elif current:
            self.last_seen[role] = now
            self.reported.add(role)
        return current

    # -- heartbeats and restarts -------------------------------------------------------------------------------
    def check(
        self, now: float, drain: Callable[[int], None], worker_frames: Callable[[int], int]
    ) -> tuple[str, str, bool] | None:
        """Look at every role: a worker that died or went silent is replaced within its restart budget. A lost
        role the run cannot do without gives (its name, what happened to it, whether the run's roles may be
        restarted for it: run.restart_policy and its crash-loop limit); None while all are well.
        ``drain(timeout_ms)`` takes the stats channel's messages; ``worker_frames(i)`` is worker i's last count of
        env frames."""
        for name in list(self.procs):
            why = self.lost(name, now, drain)
            if why is None:
                continue
            if name.startswith("zrl-worker") or name == EVALUATOR:
                if self._restart(name, why, now, worker_frames):
                    continue
                if name == EVALUATOR:  # training goes on without evaluations
                    self._give_up_evaluator(why)
                    continue
            elif self._may_restart_run(now):
                return name, why, True
            return name, self._why_dead(name, why), False
        return None

    def lost(self, name: str, now: float, drain: Callable[[int], None]) -> str | None:
        """What happened to role ``name`` if it exited or went silent past its heartbeat timeout (the start's grace
        before its first report), after taking its last words from the stats channel and, for a hung one, its
        stacks on stderr (SIGUSR1: faulthandler, registered by start_role); None while it is well."""
        proc, timeout = self.procs[name], self.cfg.run.heartbeat_timeout_s
        silent = now - self.last_seen[name]
        if name not in self.reported:
            timeout = max(timeout, STARTUP_GRACE_S)
        if proc.exitcode is None and silent <= timeout:
            return None
        drain(200)  # its last words (a RoleError) may still be on the way
        if proc.exitcode is None:  # hung: where it is stuck goes to stderr before it is killed
            assert proc.pid is not None  # started
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(0.5)
        return (
            f"exited with code {proc.exitcode}"
            if proc.exitcode is not None
            else f"sent nothing for {silent:.0f} s (hung)"
        )

    def _may_restart_run(self, now: float) -> bool:
        """Whether the run's roles may be restarted now (counted if so): run.restart_policy = "resume", not a
        deterministic run, and no more than run.max_restarts restarts within run.restart_window_s."""
        run = self.cfg.run
        if run.restart_policy != "resume" or run.deterministic:
            return False
        if count_recent(self.run_restarts, now, run.restart_window_s) > run.max_restarts:
            return False
        self.role_restarts += 1
        return True

    def next_start(self, wid: int, env_frames: int) -> WorkerStart:
        """Worker ``wid``'s place for its next process: one generation on (0 for its first), its frames so far."""
        generation = self.generations[wid] = self.generations.get(wid, -1) + 1
        return WorkerStart(generation, env_frames)

    def kill_role(self, name: str) -> None:
        """SIGKILL one role now (a hung one, before the others are asked to stop) and reap it."""
        proc = self.procs[name]
        if proc.exitcode is None:
            proc.kill()
            proc.join(10)

    def _restart(self, name: str, why: str, now: float, worker_frames: Callable[[int], int]) -> bool:
        """Replace a dead or hung worker with a new one on the same ring (or the evaluator with a new one: the
        run trains on without it meanwhile), unless it has needed more than workers.max_restarts restarts within
        workers.restart_window_s (or it is a worker of a deterministic run, which a restart would break); False
        then."""
        cfg = self.cfg
        wid = -1 if name == EVALUATOR else int(name.rsplit("-", 1)[1])
        recent = count_recent(self.restarts.setdefault(wid, deque()), now, cfg.workers.restart_window_s)
        if (cfg.run.deterministic and wid >= 0) or recent > cfg.workers.max_restarts:
            return False
        self.kill_role(name)  # hung: it goes first
        self.announce(
            name,
            f"{name} {why}; restarted it{' with the current weights' if wid >= 0 else ''} (restart {recent} of "
            f"{cfg.workers.max_restarts} allowed within {cfg.workers.restart_window_s:g} s)",
        )
        if wid < 0:
            assert self.new_evaluator is not None  # a run with an evaluator says how to make one
            self.start(name, self.new_evaluator(), now)
            return True
        self.start(name, self.new_worker(wid, self.next_start(wid, worker_frames(wid))), now)
        self.worker_restarts += 1
        return True

    def _give_up_evaluator(self, why: str) -> None:
        """The evaluator is lost past its restarts: reaped and left out, said once; the run trains on without
        evaluations (the launcher asks for none once it is gone from ``procs``)."""
        self.kill_role(EVALUATOR)
        del self.procs[EVALUATOR]
        self.evaluator_lost = True
        self.announce(
            EVALUATOR,
            f"{EVALUATOR} {why}; that is more than workers.max_restarts = {self.cfg.workers.max_restarts} restarts "
            f"within workers.restart_window_s = {self.cfg.workers.restart_window_s:g} s: the run goes on without "
            "evaluations",
        )

    def announce(self, name: str, text: str) -> None:
        """Say and log a restart for lost role ``name``, and log the traceback it sent as it died."""
        log.warning(text)
        if name in self.tracebacks:
            log.warning("%s's traceback:\n%s", name, self.tracebacks.pop(name))
        self.console.line("")
        self.console.say(text)

    def _why_dead(self, name: str, why: str) -> str:
        """What died and why, with the restart rule a worker ran out of."""
        cfg = self.cfg
        if name.startswith("zrl-worker"):
            if cfg.run.deterministic:
                why += "; a deterministic run does not restart workers"
            else:
                why += (
                    f"; that is more than workers.max_restarts = {cfg.workers.max_restarts} restarts within "
                    f"workers.restart_window_s = {cfg.workers.restart_window_s:g} s"
                )
        elif cfg.run.restart_policy == "resume":
            if cfg.run.deterministic:
                why += "; a deterministic run does not restart its roles"
            else:
                why += (
                    f"; that is more than run.max_restarts = {cfg.run.max_restarts} restarts of the run's roles "
                    f"within run.restart_window_s = {cfg.run.restart_window_s:g} s"
                )
        return f"{name} {why}"

    def traceback_of(self, name: str) -> str:
        """``name``'s traceback as the launcher reports it, or "" if it sent none."""
        tb = self.tracebacks.get(name)
        return f"\n{name}'s traceback:\n{tb.rstrip()}" if tb else ""

    # -- stopping ----------------------------------------------------------------------------------------------
    def stop(self, drain: Callable[[int], None], grace: float = STOP_GRACE_S) -> None:
        """After the stop flag is set: wait for every role to exit, taking their last messages."""
        for name in stop_in_order(self.procs, grace, drain):
            log.warning("%s did not stop within %.0f s", name, grace)

    def stop_for_restart(self, drain: Callable[[int], None]) -> None:
        """After the stop flag is set, for a restart of the run's roles: the learner has STOP_GRACE_S for its final
        checkpoint, the others RESTART_STOP_GRACE_S more (a hung one must not hold the restart up for a minute),
        then whatever still runs is killed."""
        stop_in_order({n: p for n, p in self.procs.items() if n == "zrl-learner"}, STOP_GRACE_S, drain)
        stop_in_order(self.procs, RESTART_STOP_GRACE_S, drain)
        self.kill()
        drain(200)  # their last words (the learner's final checkpoint) before their pids are retired

    def kill(self) -> None:
        """Kill whatever still runs (an interrupted stop, a role that ignored it) and reap every process."""
        for name in kill_all(self.procs):
            log.warning("killed %s", name)
