"""The launcher: a run from start to end, put together from the launch package's parts. ``launch`` starts a new
run (from a checkpoint's weights with --init-from), ``resume`` continues one in its folder (resuming); both check
everything they can first (checks), then a Launcher takes the run folder (folder), creates the wiring (rings,
sockets, role processes: wiring), starts and watches the roles (supervise), counts what they report, prints the
live line and writes the CSV files (reports, tally), asks for evaluations (evaluations), and stops in order: a
final checkpoint, nothing left behind."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from zrl import __version__, agents, envs, forkserver, protocol
from zrl.config import Config, ConfigError, game_note, queue_capacity, split_note
from zrl.envs.trust import check_env_import, env_module
from zrl.launch import network
from zrl.launch.checks import check_resume_changes, check_shm_room, preflight, resolve_model_kind
from zrl.launch.console import Console
from zrl.launch.evaluations import Evaluations
from zrl.launch.folder import RunFolder, RunLock, check_entries, check_room, checkpoint_bytes, find_run, make_run_dir
from zrl.launch.network import Network
from zrl.launch.page import DASHBOARD_LINGER_S, bound_dashboard, serve
from zrl.launch.ray_workers import RayWorkers
from zrl.launch.ray_workers import check as check_ray
from zrl.launch.reports import Reports
from zrl.launch.resuming import (
    SavedReplays,
    continue_hint,
    init_start,
    restart_point,
    resume_point,
    start_text,
    stored_config,
)
from zrl.launch.run_keys import run_keys
from zrl.launch.supervise import (
    EVALUATOR,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SIGHUP,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_USAGE,
    Supervisor,
    exit_code,
)
from zrl.launch.tally import Tally, progress_line, stop_reason
from zrl.launch.wiring import Wiring, sweep_stale
from zrl.metrics.columns import agent_figures
from zrl.roles.run_wiring import StartFrom, StopFlag, WorkerStart

if TYPE_CHECKING:
    from zrl.dashboard import Dashboard

log = logging.getLogger("zrl")

REMOTE_GENERATIONS = 1000  # a remote slot's joins per generation of the ingest, at most, before seeds repeat


class Launcher:
    """One launch of a run: ``run()`` returns its exit code. ``run_dir``, ``env_frames_start``, ``sample_calls``
    and ``lock``: a resumed run's folder, counts and lock; ``start``: the checkpoint the learner starts from."""

    def __init__(
        self,
        cfg: Config,
        spec: envs.EnvSpec,
        net: Network,
        quiet: bool = False,
        run_dir: Path | None = None,
        start: StartFrom | None = None,
        env_frames_start: int = 0,
        sample_calls: tuple[int, ...] = (),
        lock: RunLock | None = None,
        dashboard: Dashboard | None = None,
        ray: tuple[str, str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.ray = ray  # --ray (address, client key folder): the remote workers as Ray actors
        self.local_keys = ""  # RUN/keys/clients/local where the run made its own keys: this host's remote workers
        self.ray_workers: RayWorkers | None = None
        self.dashboard = dashboard  # bound already; it serves once the run folder exists
        self.spec = spec
        self.net = net
        self.console = Console(quiet)
        # a worker silent for a few of its stats intervals counts in no worker figure (its frames still count)
        self.tally = Tally(
            frames_start=env_frames_start,
            live_window_s=max(5.0, 5 * cfg.workers.stats_interval_s),
            replay_ratio_target=agents.get(cfg.algo).replay_ratio(cfg),
            figures=tuple(agent_figures(agents.get(cfg.algo))),
        )
        self.resume_dir = run_dir
        self.start = start
        self.notes = [n for n in (split_note(cfg),) if n]  # said and logged once the run's log is open
        self.sample_calls = sample_calls
        self.lock = lock  # a resumed run's folder is locked before its checkpoints are looked at
        self.stop_reason = "budget reached"
        self.replays = SavedReplays(self.console)  # run.checkpoint_replay

    def run(self) -> int:
        cfg = self.cfg
        swept = sweep_stale()
        # the periodic checkpoints kept, best.pt and one being written
        need = checkpoint_bytes(self.net.parameters) * (cfg.run.keep_checkpoints + 2)
        check_room(self.resume_dir or Path(cfg.run.results_dir), need)
        check_shm_room(cfg, self.spec)  # before the run folder: a run that cannot start leaves none behind
        run_dir = self.resume_dir or make_run_dir(cfg)
        lock = self.lock or RunLock(run_dir)
        try:
            # TCP sockets take any local user's connection: the run's own keys, unless the user gave keys or opted out
            self.cfg, self.local_keys, warning = run_keys(cfg, run_dir)
            self.notes += [warning] if warning else []
            self.folder = RunFolder(run_dir, cfg)  # config.toml: the user's settings, not the keys' path
            try:
                self._introduce(*swept)
                if self.dashboard is not None:
                    serve(self.dashboard, self.folder.path)
                return self._run()
            finally:
                try:
                    if self.dashboard is not None:  # closed already unless the run failed to start
                        self.dashboard.close()
                finally:
                    self.folder.close_log()
        finally:
            lock.release()

    def _introduce(self, segments: list[str], folders: list[str], skipped: list[str]) -> None:
        """The run's first lines: notes, where it starts from, what the sweep removed, its folder."""
        run_dir, say = self.folder.path, self.console.say
        log.info("zrl %s run %s, pid %d, config %s", __version__, run_dir, os.getpid(), run_dir / "config.toml")
        for note in self.notes:
            log.warning(note)
            say(note)
        if self.resume_dir is None and (text := game_note(self.cfg)):
            log.info(text)
            say(text)
        if self.resume_dir is not None:
            self.tally.seed(run_dir)  # the run's counts, and episodes.csv's rows, go on
        t = self.tally
        if text := start_text(self.start, self.resume_dir, t.env_frames, t.episodes, self.cfg.run.checkpoint_replay):
            log.info(text)
            say(text)
        log.info("machine: %s", self.folder.record_start(self.tally.env_frames))
        for name in segments + folders:
            log.info("removed %s left by a launcher that is no longer running", name)
        if segments or folders:
            say(f"removed {len(segments)} stale shared-memory segments and {len(folders)} socket folders")
        for note in skipped:
            log.warning("left %s", note)
        if skipped:
            say(f"left {len(skipped)} stray entries the stale sweep cannot judge (named in zrl.log)")
        say(f"run folder {run_dir}")

    def _run(self) -> int:
        cfg, folder = self.cfg, self.folder
        wiring = self.wiring = Wiring(
            cfg,
            self.spec,
            env_frames_start=self.tally.frames_start,
            sample_calls=self.sample_calls,
            replay_from=self.start.path if self.start is not None and self.resume_dir and cfg.run.deterministic else "",
        )
        self.stop = wiring.stop_flag()
        sup = self.supervisor = Supervisor(
            cfg,
            self.console,
            lambda i, start: wiring.worker(i, self.stop, start),
            lambda: wiring.evaluator(self.stop, str(self.folder.path)),
        )
        self.evaluations = Evaluations(cfg, self.console, folder, sup, EVALUATOR)
        self.reports = Reports(cfg, wiring, self.tally, sup, folder, self.evaluations)
        sup.catch_signals()
        code = EXIT_OK
        try:
            note = folder.open_events(cfg.run.log_interval_s) if cfg.run.tensorboard else None
            try:
                folder.open_csvs()
            except ConfigError as err:  # a link or a FIFO made in the folder after check_entries
                self.console.error(str(err))
                code = EXIT_USAGE
                return code
            if note:
                log.warning(note)
                self.console.say(note)
            if self.ray is not None:
                address, keys = self.ray
                self.ray_workers = RayWorkers(cfg, address, keys or self.local_keys, folder.path.name, self.console.say)
                try:
                    self.ray_workers.join()
                except ConfigError as err:
                    self.console.error(str(err))
                    code = EXIT_USAGE
                    return code
            try:
                wiring.open()
            except OSError as err:  # no room in /dev/shm for the rings
                self.console.error(str(err))
                code = EXIT_USAGE
                return code
            if cfg.run.checkpoint_replay:
                try:
                    wiring.roles = self.replays.roles(folder.path, wiring, start=True)
                except ConfigError as err:  # a replay checkpoint's manifest the broker did not write
                    self.console.error(str(err))
                    code = EXIT_USAGE
                    return code
            ring_spec = wiring.ring_spec
            assert ring_spec is not None  # the wiring is open
            log.info(
                "%d rings of %d slots, %.1f MB each", len(wiring.rings), ring_spec.capacity, ring_spec.nbytes / 1e6
            )
            log.info(
                "replays: %s; training starts once they hold %s units",
                ", ".join(
                    f"{r.type} of {queue_capacity(cfg, r) if r.type == 'queue' else r.capacity} x {r.sample_ratio:g}"
                    for r in cfg.replay
                ),
                " + ".join(str(agents.get(cfg.algo).replay_fill(cfg, r)) for r in cfg.replay),
            )
            if cfg.workers.remote:
                self._admit_remote()
            start = time.monotonic()
            self._start_roles(self.start, start)
            if self.ray_workers is not None:
                self.ray_workers.place(int(wiring.endpoints.gate.rsplit(":", 1)[1]))
            code = self._watch(start)
            self.console.line("")
            reason = (
                self.stop_reason
                if code == EXIT_OK
                else "interrupted"
                if code in (EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM)
                else "error"
            )
            log.info("stopping (%s)", reason)
            self.console.say(f"stopping ({reason}); waiting for the final checkpoint")
            self.stop.set()
            sup.stop(self.reports.drain)
            if code == EXIT_OK and cfg.eval.interval_frames and cfg.eval.final:
                last = self.reports.last_checkpoint
                path = Path(last) if last else folder.latest_checkpoint()
                final = self.evaluations.final(
                    path, self.tally.env_frames, self.ray_workers, self.reports.drain, self._evaluator
                )
                code = final if final is not None else EXIT_OK
        except KeyboardInterrupt:
            code = exit_code(sup.signals[0]) if sup.signals else EXIT_SIGINT
            log.warning("second signal: stopping at once")
        finally:
            sup.ignore_signals()  # cleanup below must not be cut short by more signals
            self.stop.set()
            if self.ray_workers is not None:
                self.ray_workers.close()
            sup.kill()
            wiring.close()
            folder.close_files()
            self._final_report(code)
            if self.dashboard is not None:  # open pages get the run's end first (signals are ignored still)
                self.dashboard.close(linger_s=DASHBOARD_LINGER_S)
            sup.restore_signals()
        return code

    def _start_roles(self, start: StartFrom | None, now: float) -> None:
        """Start a broker, a learner from ``start``, every local worker (one generation on, its frame count going on)
        and, with remote slots, the ingest, all under ``self.stop``."""
        cfg, wiring, stop, sup = self.cfg, self.wiring, self.stop, self.supervisor
        frames = self.tally.workers
        procs = {
            "zrl-broker": wiring.broker(stop),
            "zrl-learner": wiring.learner(stop, str(self.folder.path), start),
            **{
                f"zrl-worker-{i}": wiring.worker(i, stop, sup.next_start(i, frames[i].env_frames if i in frames else 0))
                for i in range(cfg.workers.count)
            },
        }
        if cfg.eval.interval_frames and not sup.evaluator_lost:
            procs[EVALUATOR] = wiring.evaluator(stop, str(self.folder.path))
        if cfg.workers.remote:
            # a restarted ingest numbers its slots' joins on from a generation of their own (seeds apart), and
            # their frame counts go on
            base = REMOTE_GENERATIONS * sup.role_restarts
            slots = tuple(WorkerStart(base, frames[i].env_frames if i in frames else 0) for i in sup.remote)
            procs["zrl-ingest"] = wiring.ingest(stop, self.folder.path.name, slots)
        stop.live_workers = cfg.workers.count
        for name, proc in procs.items():
            sup.start(name, proc, now)

    def _restart_roles(self, name: str, why: str) -> int | None:
        """run.restart_policy = "resume": ``name`` is lost (``why``), so stop the run's roles (the lost one killed
        first, so that a hung one cannot hold the others up; a live learner writes its final checkpoint) and start
        them again in the same rings and folder, the learner from the newest good checkpoint (or from where this
        launch began, when there is none yet). The tally's counts go on; the replays refill, or start from the
        newest replay checkpoint (run.checkpoint_replay). An exit code when the run must stop instead: a signal came
        meanwhile, or the checkpoints cannot be read."""
        cfg, sup = self.cfg, self.supervisor
        sup.kill_role(name)
        self.stop.set()
        sup.stop_for_restart(self.reports.drain)
        if (code := sup.signal_code()) is not None:  # asked to stop meanwhile: no new roles to stop at once
            return code
        try:
            newest = forkserver.ask(network.newest_usable, self.folder.path, cfg, self.spec)
        except (OSError, RuntimeError) as err:  # the checkpoints folder cannot be read (or a damaged file set
            # aside), or the child of the fork server that reads them died
            self._died(name, f"{why}; the run's roles cannot be restarted: {err}")
            return EXIT_FAILED
        start, calls, where = restart_point(newest, self.start, self.sample_calls)
        sup.announce(
            name,
            f"{name} {why}; restarted the run's roles from {where} (restart "
            f"{len(sup.run_restarts)} of {cfg.run.max_restarts} allowed within {cfg.run.restart_window_s:g} s)",
        )
        assert self.wiring.roles is not None  # the wiring is open
        self.wiring.roles = dataclasses.replace(self.wiring.roles, sample_calls=calls)
        if cfg.run.checkpoint_replay:  # the frames are still in the rings: the new broker takes the index
            self.wiring.roles = self.replays.roles(self.folder.path, self.wiring, start=False)
        self.stop = self.wiring.stop_flag()
        self.tally.restarted()
        self._start_roles(start, time.monotonic())
        return None

    def _admit_remote(self) -> None:
        """Say, and write to connect.txt, the line a remote host runs to work for this run."""
        cfg, line = self.cfg, self.wiring.connect_line(self.folder.path.name, self.local_keys)
        self.folder.write_file("connect.txt", line + "\n")  # a link there is replaced, not written through
        log.info("%d remote worker slots; a remote host joins with: %s", cfg.workers.remote, line)
        keys = " (ZRL_KEYS: its folder from zrl-keys --client NAME)" if cfg.transport.curve_keys else ""
        if self.local_keys:
            keys = f" (this host's; another host takes a copy of {self.local_keys}, or its own from zrl-keys)"
        self.console.say(
            f"{cfg.workers.remote} remote worker slots; on each remote host{keys} run "
            f"(also in {self.folder.path / 'connect.txt'}):\n  {line}"
        )

    def _watch(self, start: float) -> int:
        """Take the roles' reports, keep them alive, write metrics.csv and the live line every
        run.log_interval_s, until the budget or the time limit is reached, a signal comes or a role is lost."""
        cfg, sup, t = self.cfg, self.supervisor, self.tally
        next_report = start + cfg.run.log_interval_s
        fill = [agents.get(cfg.algo).replay_fill(cfg, r) for r in cfg.replay]
        t.rates(start)
        self.evaluations.begin(t.env_frames, time.time() - (time.monotonic() - start))
        while True:
            self.reports.drain(cfg.transport.poll_timeout_ms)
            self.stop.live_workers = cfg.workers.count + (t.ingest.remote_workers if t.ingest else 0)
            code = sup.signal_code()  # after the drain: a process-group SIGTERM may already have stopped children
            if code is not None:
                return code
            now = time.monotonic()
            lost = sup.check(now, self.reports.drain, lambda wid: t.workers[wid].env_frames if wid in t.workers else 0)
            t.worker_restarts, t.role_restarts = sup.worker_restarts, sup.role_restarts
            if self.ray_workers is not None:
                self.ray_workers.check()
                t.worker_restarts += self.ray_workers.restarts
            if lost is not None:
                name, what, restart = lost
                if not restart:
                    self._died(name, what)
                    return EXIT_FAILED
                if (code := self._restart_roles(name, what)) is not None:
                    return code
            if (why := stop_reason(cfg, t, self.evaluations.solved, now - start)) is not None:
                self.stop_reason = why
                self.folder.write_metrics(t.metrics_row(now - start, 0.0, 0.0))  # the counters as the run ends
                return EXIT_OK
            self.evaluations.watch(t.env_frames, self.wiring.evaluations)
            if now >= next_report:
                fps, sps = t.rates(now)
                self.folder.write_metrics(t.metrics_row(now - start, fps, sps))
                line = progress_line(t, now - start, fps, fill)
                log.info(line)
                self.console.line(line)
                next_report = now + cfg.run.log_interval_s

    def _evaluator(self, request: protocol.EvalRequest, now: float) -> StopFlag:
        """eval.final's evaluator on ``request``, started under a stop flag of its own (the roles' one is set)."""
        self.stop = self.wiring.stop_flag()
        self.supervisor.start(EVALUATOR, self.wiring.evaluator(self.stop, str(self.folder.path), request), now)
        return self.stop

    def _died(self, name: str, what: str) -> None:
        """Say what died, why, its traceback when it sent one, and how to go on."""
        hint = continue_hint(self.folder.path, self.folder.latest_checkpoint())
        self.console.error(f"{what}; the run stopped ({hint})" + self.supervisor.traceback_of(name))

    def _final_report(self, code: int) -> None:
        latest = self.folder.latest_checkpoint()  # the disk knows even if the last message was lost
        ckpt = str(latest) if latest else ""
        summary = self.tally.summary(code)
        log.info(summary)
        log.info("last checkpoint: %s", ckpt or "none")
        self.console.say(summary)
        self.console.say(f"last checkpoint: {ckpt or 'none'}")
        if ckpt and code not in (EXIT_OK, EXIT_USAGE):  # a usage error would meet the same error again
            self.console.say(f"continue this run with: zrl-launch --resume {self.folder.path}")


def _checked(cfg: Config, ray: tuple[str, str] | None) -> tuple[envs.EnvSpec, Network]:
    """What every launch checks before it creates anything: the config and the machine (preflight), the network
    (a fork server's child builds it: the launcher never imports torch) and, with --ray, what Ray needs."""
    spec = preflight(cfg)
    net = forkserver.ask(network.describe, cfg, spec)
    if ray is not None:
        check_ray(cfg, ray[1])
    return spec, net


def launch(
    cfg: Config,
    quiet: bool = False,
    init_from: str | None = None,
    init_optimizer: bool = False,
    dashboard: tuple[str, int] | None = None,
    ray: tuple[str, str] | None = None,
) -> int:
    """Check, then run; ConfigError before anything is created if the config cannot work.
    ``init_from``: a new run that starts from a checkpoint's weights (and optimiser state if asked);
    ``dashboard``: (host, port) of the live page, bound first."""
    with bound_dashboard(dashboard) as page:
        check_env_import(cfg.env.id, None, data_dirs=[cfg.run.results_dir])  # the user's id, unless its module is data
        spec, net = _checked(cfg, ray)
        cfg = resolve_model_kind(cfg, net.kind)
        start = None
        if init_from is not None:
            held = forkserver.ask(network.start_checkpoint, Path(init_from), cfg, spec)
            start = init_start(init_from, init_optimizer, held, cfg)
        return Launcher(cfg, spec, net, quiet, start=start, dashboard=page, ray=ray).run()


def resume(
    ref: str,
    probe_cfg: Config,
    sets: list[str],
    options: dict,
    quiet: bool = False,
    dashboard: tuple[str, int] | None = None,
    ray: tuple[str, str] | None = None,
    trusted: tuple[str, ...] = (),
) -> int:
    """Continue a run in its own folder from its newest good checkpoint; only SAFE_ON_RESUME keys may change.
    The folder is locked first: a second launcher into it is refused, naming the one that holds it. ``trusted``:
    the env modules --trust-env-module named; the user's own config or --set naming the run's env.id trusts it too."""
    with bound_dashboard(dashboard) as page:
        run_dir = find_run(ref, probe_cfg)
        check_entries(run_dir)  # no link or FIFO in it, before the lock or anything is written
        lock = RunLock(run_dir)
        try:
            trusted = (*trusted, env_module(probe_cfg.env.id))  # "" (no module) trusts nothing
            return _resume(run_dir, sets, options, quiet, lock, page, ray, trusted)
        finally:
            lock.release()


def _resume(
    run_dir: Path,
    sets: list[str],
    options: dict,
    quiet: bool,
    lock: RunLock,
    dashboard: Dashboard | None,
    ray: tuple[str, str] | None = None,
    trusted: tuple[str, ...] = (),
) -> int:
    stored, base, cfg = stored_config(run_dir, sets, options)
    check_resume_changes(run_dir, base, cfg)
    check_env_import(cfg.env.id, str(stored), [t for t in trusted if t], [cfg.run.results_dir, run_dir])
    spec, net = _checked(cfg, ray)
    point = resume_point(run_dir, forkserver.ask(network.newest_usable, run_dir, cfg, spec))
    launcher = Launcher(
        cfg,
        spec,
        net,
        quiet,
        run_dir=run_dir,
        start=point.start,
        env_frames_start=point.env_frames,
        sample_calls=point.sample_calls,
        lock=lock,
        dashboard=dashboard,
        ray=ray,
    )
    launcher.notes += [f"skipped a checkpoint that cannot be used: {reason}" for reason in point.skipped]
    return launcher.run()
