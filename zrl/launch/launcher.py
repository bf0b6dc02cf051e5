"""The launcher: a run from start to end, put together from the launch package's parts. ``launch`` starts a new
run (from a checkpoint's weights with --init-from), ``resume`` continues one in its folder; both check
everything they can first (checks), then a Launcher takes the run folder (folder), creates the wiring (rings,
sockets, role processes: wiring), starts and watches the roles (supervise), counts what they report, prints the
live line and writes the CSV files (tally), and stops in order: a final checkpoint, nothing left behind."""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import os
import re
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from zrl import __version__, agents, bounds, envs, forkserver, protocol, transport
from zrl.config import Config, ConfigError, fill_target, queue_capacity, split_note
from zrl.envs.trust import check_env_import, env_module
from zrl.launch import network
from zrl.launch.checks import (
    check_resume_changes,
    check_shm_room,
    preflight,
    resolve_model_kind,
)
from zrl.launch.console import Console
from zrl.launch.folder import RunFolder, RunLock, check_entries, check_room, checkpoint_bytes, find_run, make_run_dir
from zrl.launch.network import Network
from zrl.launch.ray_workers import RayWorkers
from zrl.launch.ray_workers import check as check_ray
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
from zrl.launch.tally import Tally, progress_line
from zrl.launch.wiring import Wiring, sweep_stale
from zrl.metrics import EVAL_COLUMNS
from zrl.replay.snapshot import SnapshotMismatch
from zrl.replay_checkpoint import ManifestError, check_manifest, new_stream, newest, replay_folder, restore_frames
from zrl.roles.common import StartFrom, WorkerStart

if TYPE_CHECKING:
    from zrl.dashboard import Dashboard

log = logging.getLogger("zrl")

REMOTE_GENERATIONS = 1000  # a remote slot's joins per generation of the ingest, at most, before seeds repeat
CHECKPOINT_NAME = re.compile(r"ckpt_\d{9,}\.pt")  # checkpoint.PATTERN's names: the learner's periodic checkpoints
FINAL_EXIT_S = 15.0  # how long the final evaluator has to exit after its result (its stats socket lingers 5 s)
FRAMES_SEEN = 20_000  # the launcher's (time, frames) history kept for eval.csv: 2.8 hours of it
FRAMES_SEEN_EVERY_S = 0.5
DASHBOARD_LINGER_S = 2.5  # after the run, open pages have this long to show its end before the page server stops


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
        )
        self.resume_dir = run_dir
        self.start = start
        self.notes = [n for n in (split_note(cfg),) if n]  # said and logged once the run's log is open
        self.sample_calls = sample_calls
        self.lock = lock  # a resumed run's folder is locked before its checkpoints are looked at
        self.stop_reason = "budget reached"
        self.last_checkpoint = ""  # the last checkpoint the learner said it wrote
        self.final_result: protocol.EvalResult | None = None  # eval.final's, once it came
        self.solved: protocol.EvalResult | None = None  # the evaluation that reached eval.stop_at_score
        self.replay_stream = ""  # run.checkpoint_replay: this launch's rings' token in replay file names
        self.rings_hold = ""  # the replay checkpoint whose frames were put back into them
        # eval.interval_frames: (unix time, env frames) every FRAMES_SEEN_EVERY_S as the run went, to place an
        # evaluation at the frames when its weights were taken
        self.frames_seen: deque = deque(maxlen=FRAMES_SEEN)

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
                    self._serve_dashboard()
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
        if self.resume_dir is not None:
            self.tally.seed(run_dir)
            replays = (
                "the replays start from the newest replay checkpoint (run.checkpoint_replay)"
                if self.cfg.run.checkpoint_replay
                else "the replays refill before learning resumes (run.checkpoint_replay = true keeps them)"
            )
            text = (
                f"resuming {run_dir} from {self.start.path}: {self.tally.env_frames:,} env frames, "
                f"{self.tally.episodes} episodes so far; {replays}"
            )
            log.info(text)
            say(text)
        elif self.start is not None:
            text = (
                f"starting from the weights{' and optimiser state' if self.start.optimizer else ''} of "
                f"{self.start.path}"
            )
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

    def _serve_dashboard(self) -> None:
        """Serve the live page, and say where (even with --quiet: the address, and its token, are said once)."""
        self.dashboard.serve(self.folder.path)
        where = f"http://{self.dashboard.host}:{self.dashboard.port}/"
        log.info("dashboard at %s%s", where, " (with a token, said on the terminal)" if self.dashboard.token else "")
        print(f"dashboard: {self.dashboard.url}", flush=True)

    def _run(self) -> int:
        cfg, folder = self.cfg, self.folder
        wiring = self.wiring = Wiring(
            cfg,
            self.spec,
            env_frames_start=self.tally.frames_start,
            sample_calls=self.sample_calls,
            replay_from=self.start.path if self.resume_dir and cfg.run.deterministic else "",
        )
        self.stop = wiring.stop_flag()
        sup = self.supervisor = Supervisor(
            cfg,
            self.console,
            lambda i, start: wiring.worker(i, self.stop, start),
            lambda: wiring.evaluator(self.stop, str(self.folder.path)),
        )
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
                    self._replays_from_disk(start=True)
                except ConfigError as err:  # a replay checkpoint's manifest the broker did not write
                    self.console.error(str(err))
                    code = EXIT_USAGE
                    return code
            log.info(
                "%d rings of %d slots, %.1f MB each",
                len(wiring.rings),
                wiring.ring_spec.capacity,
                wiring.ring_spec.nbytes / 1e6,
            )
            log.info(
                "replays: %s; training starts once they hold %s units",
                ", ".join(
                    f"{r.type} of {queue_capacity(cfg, r) if r.type == 'queue' else r.capacity} x {r.sample_ratio:g}"
                    for r in cfg.replay
                ),
                " + ".join(str(fill_target(cfg, r)) for r in cfg.replay),
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
            sup.stop(self._drain)
            if code == EXIT_OK and cfg.eval.interval_frames and cfg.eval.final:
                code = self._final_evaluation()
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
        sup.stop_for_restart(self._drain)
        if (code := sup.signal_code()) is not None:  # asked to stop meanwhile: no new roles to stop at once
            return code
        try:
            path, state, skipped = forkserver.ask(network.newest_usable, self.folder.path, cfg, self.spec)
        except (OSError, RuntimeError) as err:  # the checkpoints folder cannot be read (or a damaged file set
            # aside), or the child of the fork server that reads them died
            self._died(name, f"{why}; the run's roles cannot be restarted: {err}")
            return EXIT_FAILED
        for reason in skipped:
            log.warning("skipped a checkpoint that cannot be used: %s", reason)
        start = StartFrom(str(path)) if path is not None else self.start
        sup.announce(
            name,
            f"{name} {why}; restarted the run's roles from "
            f"{path.name if path is not None else 'where this launch began (no checkpoint yet)'} (restart "
            f"{len(sup.run_restarts)} of {cfg.run.max_restarts} allowed within {cfg.run.restart_window_s:g} s)",
        )
        calls = state["sample_calls"] if state is not None else self.sample_calls
        self.wiring.roles = dataclasses.replace(self.wiring.roles, sample_calls=calls)
        if cfg.run.checkpoint_replay:  # the frames are still in the rings: the new broker takes the index
            self._replays_from_disk(start=False)
        self.stop = self.wiring.stop_flag()
        self.tally.restarted()
        self._start_roles(start, time.monotonic())
        return None

    def _replays_from_disk(self, start: bool) -> None:
        """run.checkpoint_replay: have the broker write replay checkpoints in the run folder and start with the
        newest one there whose frames the rings hold. At the launch's ``start`` (new rings) a resumed run's newest
        one has its frames put back into them first; one that does not fit (another ring layout) or cannot be read
        is said, and the replays refill. At a restart of the roles the rings go on: the newest one is used if
        these rings wrote it (its stream) or took its frames at the start. A manifest the broker did not write (a
        name outside the folder, a symlink, a key of the wrong type) is a ConfigError at the start, and at a
        restart the replays refill."""
        folder, roles = replay_folder(self.folder.path), self.wiring.roles
        if start:
            self.replay_stream, self.rings_hold = new_stream(), ""
        found, state, text = newest(folder), "", ""
        if found is not None and start:
            path, _ = found
            try:
                restored = restore_frames(path, self.wiring.rings, self.wiring.ring_spec)
            except ManifestError as err:
                raise ConfigError(
                    f"{err} (not a replay checkpoint zrl wrote); --set run.checkpoint_replay=false starts without "
                    "the saved replay"
                ) from None
            except SnapshotMismatch as err:
                text = f"the replays refill: {err}"
            else:
                state = self.rings_hold = str(path)
                text = f"the replays start from {path.name} ({restored:,} frames put back into the rings)"
        elif found is not None:
            path, manifest = found
            if manifest.get("stream") != self.replay_stream and str(path) != self.rings_hold:
                text = f"the replays refill: the frames of {path.name} are not in this launch's rings"
            else:
                try:
                    check_manifest(path, manifest)
                    state = str(path)
                except ManifestError as err:
                    text = f"the replays refill: {err}"
        if text:
            log.info(text)
            self.console.say(text)
        self.wiring.roles = dataclasses.replace(
            roles, replay_dir=str(folder), replay_state=state, replay_stream=self.replay_stream
        )

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
        fill = [fill_target(cfg, r) for r in cfg.replay]
        t.rates(start)
        interval = cfg.eval.interval_frames
        next_eval = (t.env_frames // interval + 1) * interval if interval else 0
        self.started_at = time.time() - (time.monotonic() - start)  # the launch's start, in unix time
        while True:
            self._drain(cfg.transport.poll_timeout_ms)
            self.stop.live_workers = cfg.workers.count + (t.ingest.remote_workers if t.ingest else 0)
            code = sup.signal_code()  # after the drain: a process-group SIGTERM may already have stopped children
            if code is not None:
                return code
            now = time.monotonic()
            lost = sup.check(now, self._drain, lambda wid: t.workers[wid].env_frames if wid in t.workers else 0)
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
            why = None
            if self.solved is not None:
                why = f"evaluation score {self.solved.mean:.2f} reached eval.stop_at_score"
            elif self._budget_reached():
                why = "budget reached"
            elif cfg.run.max_seconds and now - start >= cfg.run.max_seconds:
                why = "time limit reached"
            if why is not None:
                self.stop_reason = why
                self.folder.write_metrics(t.metrics_row(now - start, 0.0, 0.0))  # the counters as the run ends
                return EXIT_OK
            if interval:
                unix = time.time()
                if not self.frames_seen or unix - self.frames_seen[-1][0] >= FRAMES_SEEN_EVERY_S:
                    self.frames_seen.append((unix, t.env_frames))
                if t.env_frames >= next_eval:
                    self._ask_evaluation(t.env_frames // interval, t.env_frames)
                    next_eval = (t.env_frames // interval + 1) * interval
            if now >= next_report:
                fps, sps = t.rates(now)
                self.folder.write_metrics(t.metrics_row(now - start, fps, sps))
                line = progress_line(t, now - start, fps, fill)
                log.info(line)
                self.console.line(line)
                next_report = now + cfg.run.log_interval_s

    def _final_evaluation(self) -> int:
        """eval.final: once the run's roles are down (any left after their grace killed, Ray's actors let go), a
        fresh evaluator plays the learner's final checkpoint under the run's evaluation terms; wait for its result
        and its exit, saying how far it is. EXIT_OK also when it is skipped, fails or hangs (said: training ended
        well); a signal's exit code when one stops it."""
        cfg, sup, t = self.cfg, self.supervisor, self.tally
        path = Path(self.last_checkpoint) if self.last_checkpoint else self.folder.latest_checkpoint()
        skip = (
            "a signal came while the run stopped"
            if sup.signal_code() is not None
            else "the evaluator was given up on during the run"
            if sup.evaluator_lost
            else "the learner wrote no checkpoint"
            if path is None or not path.is_file()
            else ""
        )
        if skip:
            log.warning("no final evaluation: %s", skip)
            self.console.say(f"no final evaluation: {skip}")
            return EXIT_OK
        sup.kill()  # a role that outlived its grace: killed and reaped, not left beside the evaluator
        if self.ray_workers is not None:
            self.ray_workers.close()
        self._drain(200)  # the last words of the roles, before a new evaluator takes the name
        text = (
            f"final evaluation of {path.name} at {t.env_frames:,} env frames: {cfg.eval.episodes} episodes under "
            f"{envs.run_protocol(cfg)}, the run's roles stopped (Ctrl-C skips it)"
        )
        log.info(text)
        self.console.say(text)
        request = protocol.EvalRequest(
            index=t.env_frames // cfg.eval.interval_frames, env_frames=t.env_frames, checkpoint=str(path)
        )
        self.stop = self.wiring.stop_flag()
        began = time.monotonic()
        sup.start(EVALUATOR, self.wiring.evaluator(self.stop, str(self.folder.path), request), began)
        next_line = began + cfg.run.log_interval_s
        while self.final_result is None:
            self._drain(cfg.transport.poll_timeout_ms)
            if (code := sup.signal_code()) is not None:
                log.warning("the final evaluation was stopped by a signal")
                return code
            now = time.monotonic()
            why = sup.lost(EVALUATOR, now, self._drain) if self.final_result is None else None
            if why is not None and self.final_result is None:  # not when its result came in with its last words
                text = f"the final evaluation failed: {EVALUATOR} {why}" + sup.traceback_of(EVALUATOR)
                log.warning(text)
                self.console.say(text)
                return EXIT_OK
            if now >= next_line:
                self.console.line(f"final evaluation: {now - began:,.0f} s")
                next_line = now + cfg.run.log_interval_s
        self.stop.set()
        sup.stop(self._drain, grace=FINAL_EXIT_S)  # it exits once its result is out: not killed for it
        return EXIT_OK

    def _ask_evaluation(self, index: int, env_frames: int) -> None:
        """Ask the evaluator for evaluation ``index`` of the learner's latest weights (eval.interval_frames); none
        once it is lost for good."""
        if EVALUATOR not in self.supervisor.procs:
            return
        request = protocol.EvalRequest(index=index, env_frames=env_frames)
        if not transport.send_nowait(self.wiring.evaluations, request.encode()):
            # no evaluator connected (it is restarting) or its queue is full: this one is skipped
            log.warning(
                "evaluation %d at %s env frames skipped: the evaluator is not taking requests", index, env_frames
            )

    def _frames_at(self, when: float, asked: int) -> int:
        """The run's env frames at unix time ``when`` (from the recent history, sampled every FRAMES_SEEN_EVERY_S),
        and never fewer than ``asked``, the frames its request was sent at (the weights were taken after it)."""
        times = self.frames_seen
        i = bisect.bisect_right(times, (when, float("inf"))) - 1
        return max(asked, times[i][1]) if i >= 0 else asked

    def _evaluated(self, msg: protocol.EvalResult) -> None:
        """An evaluation's result: a row of eval.csv and TensorBoard's eval/* at the frames when its weights were
        taken, said and logged."""
        row = {
            "wall_time": f"{msg.weights_time:.3f}",
            "elapsed_s": round(msg.weights_time - self.started_at, 3),
            **{name: getattr(msg, name) for name in EVAL_COLUMNS[2:]},
            "env_frames": self._frames_at(msg.weights_time, msg.env_frames),
        }
        row = {k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        self.folder.write_evaluation(row)
        normalised = f", human-normalised {msg.human_normalised:.3f}" if math.isfinite(msg.human_normalised) else ""
        q = f", mean max-Q {msg.mean_max_q:.3f}" if math.isfinite(msg.mean_max_q) else ""
        text = (
            f"{'final ' if msg.final else ''}evaluation at {row['env_frames']:,} frames ({msg.protocol}, {msg.episodes} episodes, "
            f"{msg.seconds:.0f} s): mean {msg.mean:.2f} [{msg.ci95_low:.2f}, {msg.ci95_high:.2f}]{normalised}{q}"
            + ("; best.pt now holds these weights" if msg.best else "")
        )
        log.info(text)
        self.console.line("")
        self.console.say(text)

    def _budget_reached(self) -> bool:
        """Frames played reach run.max_env_frames; in a deterministic run, frames trained do."""
        if not self.cfg.run.deterministic:
            return self.tally.env_frames >= self.cfg.run.max_env_frames
        return self.tally.learner is not None and self.tally.learner.env_frames_trained >= self.cfg.run.max_env_frames

    def _died(self, name: str, what: str) -> None:
        """Say what died, why, its traceback when it sent one, and how to go on."""
        latest = self.folder.latest_checkpoint()
        hint = (
            f"the last checkpoint is {latest}; continue with: zrl-launch --resume {self.folder.path}"
            if latest
            else "no checkpoint was written yet"
        )
        self.console.error(f"{what}; the run stopped ({hint})" + self.supervisor.traceback_of(name))

    # -- the stats channel -------------------------------------------------------------------------------------
    def _drain(self, timeout_ms: int) -> None:
        """Take every message waiting on the stats channel, waiting up to ``timeout_ms`` for the first."""
        data = self.wiring.take_stats(timeout_ms)
        while data is not None:
            self._take(data)
            data = self.wiring.take_stats(0)
        if self.wiring.stats_forged > self.tally.stats_forged:  # counted with the malformed, said at first
            if not self.tally.stats_forged:
                log.warning("dropped a stats message without this run's token: not from one of its roles")
            self.tally.stats_errors += self.wiring.stats_forged - self.tally.stats_forged
            self.tally.stats_forged = self.wiring.stats_forged

    def _take(self, data: bytes) -> None:
        t = self.tally
        try:
            msg = protocol.decode(data)
            current = self.supervisor.heard(msg, time.monotonic())
            if why := self._misfit(msg):
                raise protocol.ProtocolError(why)
        except protocol.ProtocolError as err:
            t.stats_errors += 1
            if t.stats_errors <= 10:  # counted in metrics.csv; logged only at first
                log.warning("dropped a malformed stats message: %s", bounds.printable(str(err)))
            return
        if not current:  # late news from a worker that has been replaced
            return
        if isinstance(msg, protocol.EvalResult):
            self._evaluated(msg)
            if msg.final:
                self.final_result = msg
            elif msg.mean >= self.cfg.eval.stop_at_score and self.solved is None:
                self.solved = msg
            return
        row = t.take(msg)
        if row is not None:
            self.folder.write_episode(row, t.mean_return())
        if (
            isinstance(msg, protocol.LearnerStats)
            and msg.checkpoint_path
            and msg.checkpoint_path != self.last_checkpoint
        ):
            self.last_checkpoint = msg.checkpoint_path
            if self.cfg.run.best_by == "train":  # "eval": the evaluator keeps best.pt
                self._maybe_best(Path(msg.checkpoint_path))

    def _misfit(self, msg) -> str | None:
        """Why a stats message from a role cannot be right, or None: an episode out of range (an infinite return
        would hold best.pt for the rest of the run), a checkpoint that is not one of this run's (best.pt is copied
        from it)."""
        if isinstance(msg, protocol.Episode):
            return bounds.episode_misfit(msg, self.cfg.workers.envs_per_worker)
        if isinstance(msg, protocol.LearnerStats) and msg.checkpoint_path:
            path = Path(msg.checkpoint_path)
            own = self.folder.checkpoints.resolve()
            if not (CHECKPOINT_NAME.fullmatch(path.name) and path.parent.resolve() == own and not path.is_symlink()):
                return f"a checkpoint outside this run's {own}: {bounds.printable(msg.checkpoint_path)}"
        return None

    def _maybe_best(self, path: Path) -> None:
        """Keep best.pt: the checkpoint written when the 100-episode mean raw score was at its best."""
        record = self.tally.best_record(path.name)
        if record is not None and self.folder.keep_best(path, record):
            self.tally.best_return = record["mean_return_100"]
            log.info(
                "best.pt: %s, mean return(100) %.2f over %d episodes",
                path.name,
                record["mean_return_100"],
                len(self.tally.returns),
            )

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


def open_dashboard(where: tuple[str, int] | None) -> Dashboard | None:
    """The dashboard's socket for ``(host, port)``, bound before anything else is made (a port in use is a
    ConfigError that leaves nothing behind); None without --dashboard."""
    if where is None:
        return None
    from zrl.dashboard import Dashboard  # the page's package reads run folders as this package lays them out

    return Dashboard(*where)


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
    page = open_dashboard(dashboard)
    try:
        check_env_import(cfg.env.id, None, data_dirs=[cfg.run.results_dir])  # the user's id, unless its module is data
        spec, net = _checked(cfg, ray)
        cfg = resolve_model_kind(cfg, net.kind)
        start = None
        if init_from is not None:
            held = forkserver.ask(network.start_checkpoint, Path(init_from), cfg, spec)
            theirs = held["optimizer"]
            if init_optimizer and not held["has_optimizer"]:
                raise ConfigError(
                    f"--init-optimizer: {init_from} holds a network's weights only (best.pt kept by the evaluator "
                    "under run.best_by = eval); drop --init-optimizer, or start from one of the run's ckpt_*.pt"
                )
            if init_optimizer and theirs != cfg.learner.optimizer:
                raise ConfigError(
                    f"--init-optimizer: {init_from} holds {theirs} state and this run uses "
                    f"learner.optimizer = {cfg.learner.optimizer!r}; drop --init-optimizer or use {theirs}"
                )
            start = StartFrom(str(init_from), resume=False, optimizer=init_optimizer)
        return Launcher(cfg, spec, net, quiet, start=start, dashboard=page, ray=ray).run()
    finally:
        if page is not None:
            page.close()


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
    page = open_dashboard(dashboard)
    try:
        run_dir = find_run(ref, probe_cfg)
        check_entries(run_dir)  # no link or FIFO in it, before the lock or anything is written
        lock = RunLock(run_dir)
        try:
            trusted = (*trusted, env_module(probe_cfg.env.id))  # "" (no module) trusts nothing
            return _resume(run_dir, sets, options, quiet, lock, page, ray, trusted)
        finally:
            lock.release()
    finally:
        if page is not None:
            page.close()


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
    from zrl import config as config_mod

    stored = run_dir / "config.toml"
    base = config_mod.load(stored, stored=True)
    cfg = config_mod.load(stored, sets, options, stored=True)
    check_resume_changes(run_dir, base, cfg)
    check_env_import(cfg.env.id, str(stored), [t for t in trusted if t], [cfg.run.results_dir, run_dir])
    spec, net = _checked(cfg, ray)
    path, state, skipped = forkserver.ask(network.newest_usable, run_dir, cfg, spec)
    if path is None:
        reasons = "; ".join(skipped) if skipped else "there is none"
        raise ConfigError(f"{run_dir / 'checkpoints'}: no usable checkpoint to resume from ({reasons})")
    launcher = Launcher(
        cfg,
        spec,
        net,
        quiet,
        run_dir=run_dir,
        start=StartFrom(str(path)),
        env_frames_start=state["env_frames"],
        sample_calls=state["sample_calls"],
        lock=lock,
        dashboard=dashboard,
        ray=ray,
    )
    launcher.notes += [f"skipped a checkpoint that cannot be used: {reason}" for reason in skipped]
    return launcher.run()
