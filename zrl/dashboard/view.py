"""What the dashboard shows of a run, read from its folder as it grows: ``RunView.state()`` is the page's whole
content as one JSON-ready dict. The CSV files are followed (only new complete rows are read at each call; a
half-written last line waits for its newline), ``zrl.log`` is tailed for warnings and restarts, and the processes
are those of the launcher whose pid the folder's lock file holds, measured with psutil. The same view serves a
live run and a finished one."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
import tomllib
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil

from zrl import agents
from zrl.metrics.columns import agent_figures, metric_columns
from zrl.metrics.reading import CsvFollower, LineFollower, number
from zrl.metrics.time_split import SECTION_LABELS, SECTIONS, bottleneck, learner_wait_share, time_shares
from zrl.namespace import LOCK_NAME

WINDOW = 100  # episodes in the moving mean
MAX_POINTS = 600  # points per curve sent to the page; older ones are thinned
RATE_WINDOW_S = 10.0  # learner steps/s is taken over about this many seconds of metrics rows
SPLIT_WINDOW_S = 30.0  # the time split and the rates are taken over about this many seconds of metrics rows
LOG_LINES = 12  # warnings and restarts kept from zrl.log
GPU_EVERY_S = 2.0

_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING|ERROR) (.*)$")
_EXIT = re.compile(r"^exit (\d+): ")
_START = re.compile(r"^zrl \S+ run ")
_DROPS = ("unrolls_dropped_stale", "unrolls_dropped_full", "units_dropped_torn", "seq_gaps", "decode_errors")
_LATEST = (
    "env_frames",
    "frames_per_s",
    "samples_per_s",
    "learner_step",
    "policy_version",
    "policy_lag",
    "sample_age_mean",
    "sample_age_max",
    "replay_size",
    "ready_batches",
    "unrolls_received",
    "learner_wait_fraction",
    "replay_ratio",
    "replay_ratio_target",
    "total_loss",
    "grad_norm",
    "learning_rate",
    "worker_restarts",
    "episodes",
    "mean_return_100",
    "elapsed_s",
    "remote_workers",
    "remote_joins",
    "remote_bytes",
    "remote_raw_bytes",
    "remote_refused",
    "remote_auth_refused",
    *_DROPS,
)

_NO_AGENT = SimpleNamespace(learner_figures={}, broker_figures={})
_CORE = {*metric_columns(_NO_AGENT), "learner_steps_per_s"}  # every run's columns: the rest are its agent's


def is_run(folder: Path) -> bool:
    return (folder / "config.toml").is_file()


def _figure_docs(algo) -> dict[str, str]:
    """The figures the run's agent adds to metrics.csv and what each means; none for an agent not registered here."""
    try:
        return agent_figures(agents.get(str(algo)))
    except Exception:  # not registered here, or its package fails to import: its figures show without meaning
        return {}


class _Curve:
    """A growing series thinned to at most MAX_POINTS: when full, every second point is dropped, and from then
    on only every ``stride``-th new point is kept (the last one is always shown apart)."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.points: list[tuple] = []
        self.stride = 1
        self.seen = 0
        self.last: tuple | None = None

    def add(self, point: tuple) -> None:
        self.last = point
        if self.seen % self.stride == 0:
            self.points.append(point)
            if len(self.points) > MAX_POINTS:
                self.points = self.points[::2]
                self.stride *= 2
        self.seen += 1

    def columns(self) -> dict[str, list]:
        points = self.points + ([self.last] if self.last is not None and self.last is not self.points[-1] else [])
        return {k: [p[i] for p in points] for i, k in enumerate(self.keys)}


def _why(role: str, section: str, shares: dict[str, float]) -> str:
    """One sentence on how ``metrics.bottleneck`` named ``role``."""
    waits = learner_wait_share(shares)
    if role == "learner":
        return (
            f"The learner waits for batches {waits:.0%} of its time (under 10%): it trains as fast as it can; "
            f"its {SECTION_LABELS[section]} takes the most."
        )
    if role == "broker":
        return "The broker is busy over 0.8 of a core making batches, and the learner waits for them."
    return (
        f"The learner waits for batches {waits:.0%} of its time: the workers do not make experience fast "
        f"enough; their {SECTION_LABELS[section]} takes the most."
    )


def _elapsed(row: dict) -> float:
    """A kept metrics row's elapsed seconds: a row without them is not kept."""
    elapsed = number(row, "elapsed_s")
    assert elapsed is not None
    return elapsed


class RunView:
    """One run folder, read incrementally; ``state()`` at most every ``min_interval_s`` does any reading."""

    def __init__(self, run_dir: str | Path, min_interval_s: float = 0.5) -> None:
        self.path = Path(run_dir)
        self.min_interval_s = min_interval_s
        self._metrics = CsvFollower(self.path / "metrics.csv")
        self._episodes = CsvFollower(self.path / "episodes.csv")
        self._evals = CsvFollower(self.path / "eval.csv")
        self._log = LineFollower(self.path / "zrl.log")
        self._config: dict = {}
        self._fresh()
        self._procs: dict[int, psutil.Process] = {}
        self._gpu: tuple[float, list] = (0.0, [])
        self._state: dict | None = None
        self._at = 0.0
        self._lock = threading.Lock()

    def _fresh(self) -> None:
        """Forget what was read (the files were replaced: read them again from their start)."""
        self._rows: deque[dict] = deque()  # the metrics rows of the last SPLIT_WINDOW_S
        self._last_row: dict = {}
        self._rates_row: dict = {}  # the last row with rates (a run's final row has none)
        self._start_wall: float | None = None
        self._returns: deque[float] = deque(maxlen=WINDOW)
        self._frames = 0
        self._curve = _Curve(("frames", "minutes", "mean_return_100", "raw_return"))
        self._eval_curve = _Curve(("frames", "minutes", "mean", "ci95_low", "ci95_high"))
        self._last_eval: dict | None = None
        self._series = _Curve(
            ("minutes", "frames_per_s", "learner_steps_per_s", "policy_lag", "sample_age_mean", "replay_size")
        )
        self._recent: deque[tuple[float, float | None]] = deque()  # (elapsed, learner step) of the last rows
        self._warnings: deque[str] = deque(maxlen=LOG_LINES)
        self._restarts: deque[str] = deque(maxlen=LOG_LINES)
        self._ended: str | None = None
        self.notes: list[str] = []

    # -- reading ------------------------------------------------------------------------------------------------
    def _read_metrics(self) -> None:
        rows: list[dict[str, Any]] = self._metrics.poll()  # each row gets its learner_steps_per_s, a float
        if self._metrics.reset:
            self._metrics.reset = False
            self._episodes = CsvFollower(self.path / "episodes.csv")
            self._evals = CsvFollower(self.path / "eval.csv")
            self._fresh()
        for row in rows:
            wall, elapsed = number(row, "wall_time"), number(row, "elapsed_s")
            if wall is None or elapsed is None:
                continue
            if self._start_wall is None:
                self._start_wall = wall - elapsed
            # Learner steps/s over the last RATE_WINDOW_S: the learner reports on its own clock, so between two
            # rows a few seconds apart its count moves by one report or by two, and a row-to-row rate jumps.
            steps = number(row, "learner_step")
            recent = self._recent
            if recent and elapsed < recent[-1][0]:  # a resumed run starts its clock again
                recent.clear()
            recent.append((elapsed, steps))
            while len(recent) > 2 and elapsed - recent[1][0] >= RATE_WINDOW_S:
                recent.popleft()
            (e0, s0), steps_per_s = recent[0], None
            if elapsed > e0 and steps is not None and s0 is not None and steps >= s0:
                steps_per_s = round((steps - s0) / (elapsed - e0), 3)
            row["learner_steps_per_s"] = steps_per_s
            self._last_row = row
            if (number(row, "frames_per_s") or 0) > 0:  # the final row of a run has no rates
                self._rates_row = row
                self._series.add(
                    (
                        round((wall - self._start_wall) / 60.0, 3),
                        number(row, "frames_per_s"),
                        steps_per_s,
                        number(row, "policy_lag"),
                        number(row, "sample_age_mean"),
                        number(row, "replay_size"),
                    )
                )
            self._rows.append(row)
            while len(self._rows) > 2 and elapsed - _elapsed(self._rows[1]) >= SPLIT_WINDOW_S:
                self._rows.popleft()
            if self._rows and _elapsed(self._rows[0]) > elapsed:  # a resumed run starts its clock again
                self._rows = deque([row])

    def _read_episodes(self) -> None:
        for row in self._episodes.poll():
            ret = number(row, "raw_return")
            wall = number(row, "wall_time")
            if ret is None or wall is None:
                continue
            self._returns.append(ret)
            self._frames = max(self._frames, int(number(row, "env_frames") or 0))
            start = self._start_wall if self._start_wall is not None else wall
            self._curve.add(
                (
                    self._frames,
                    round((wall - start) / 60.0, 3),
                    round(sum(self._returns) / len(self._returns), 3),
                    ret,
                )
            )

    def _read_evals(self) -> None:
        """eval.csv's rows (evaluations during training, eval.interval_frames): each a point at the frames and the
        time its weights were taken, with its 95% interval; the last one's figures for the page's line."""
        for row in self._evals.poll():
            wall, mean, frames = number(row, "wall_time"), number(row, "mean"), number(row, "env_frames")
            if wall is None or mean is None or frames is None:
                continue
            start = self._start_wall if self._start_wall is not None else wall
            low, high = number(row, "ci95_low"), number(row, "ci95_high")
            self._eval_curve.add((int(frames), round((wall - start) / 60.0, 3), mean, low, high))
            self._last_eval = {
                "env_frames": int(frames),
                "protocol": row.get("protocol") or "?",
                "episodes": number(row, "episodes"),
                "mean": mean,
                "ci95_low": low,
                "ci95_high": high,
                "human_normalised": number(row, "human_normalised"),
                "mean_max_q": number(row, "mean_max_q"),
                "best": number(row, "best") == 1,
                "final": number(row, "final") == 1,
            }

    def _read_log(self) -> None:
        data = self._log.poll()
        if self._log.reset:
            self._log.reset = False
            self._warnings.clear()
            self._restarts.clear()
            self._ended = None
        for line in data.decode("utf-8", errors="replace").splitlines():
            match = _LOG_LINE.match(line)
            if not match:
                continue
            level, text = match.groups()
            if _START.match(text):
                self._ended = None
            elif level == "INFO" and _EXIT.match(text):
                self._ended = text
            if level != "INFO":
                short = line[:19] + " " + level + " " + text
                self._warnings.append(short[:400])
                if "restarted it" in text:
                    self._restarts.append(short[:400])

    def _read_config(self) -> None:
        if self._config:
            return
        try:
            self._config = tomllib.loads((self.path / "config.toml").read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            self._config = {}

    # -- processes -------------------------------------------------------------------------------------------
    def launcher_pid(self) -> int | None:
        """The pid of the launcher that holds the run folder's lock, None when no launcher runs in it."""
        try:
            pid = int((self.path / LOCK_NAME).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if psutil.pid_exists(pid) else None

    def processes(self, launcher: int | None) -> list[dict]:
        """CPU (percent of one core, since the last call) and memory of the launcher and its descendants."""
        if launcher is None:
            self._procs.clear()
            return []
        try:
            root = self._procs.get(launcher) or psutil.Process(launcher)
            found = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        out, alive = [], {}
        for p in found:
            p = self._procs.get(p.pid, p)
            try:
                with p.oneshot():
                    name = (p.cmdline() or [p.name()])[0].split(" (")[0]
                    if p.pid == launcher:
                        name = "zrl-launch"
                    elif not name.startswith("zrl-"):
                        continue  # the fork server and helpers the roles start
                    first = p.pid not in self._procs
                    cpu = p.cpu_percent(None)
                    out.append(
                        {
                            "name": name,
                            "pid": p.pid,
                            "cpu_percent": None if first else round(cpu, 1),
                            "rss_mb": round(p.memory_info().rss / 2**20, 1),
                            "threads": p.num_threads(),
                        }
                    )
                    alive[p.pid] = p
            except psutil.Error:
                continue
        self._procs = alive
        return sorted(out, key=lambda r: (r["name"] != "zrl-launch", r["name"]))

    def gpus(self) -> list[dict]:
        """Each GPU's use and memory from nvidia-smi, at most every GPU_EVERY_S; [] where there is none."""
        at, last = self._gpu
        if time.monotonic() - at < GPU_EVERY_S:
            return last
        found: list[dict] = []
        smi = shutil.which("nvidia-smi")
        if smi:
            query = "--query-gpu=name,utilization.gpu,memory.used,memory.total"
            try:
                done = subprocess.run(
                    [smi, query, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=2
                )
                for line in done.stdout.strip().splitlines():
                    name, use, used, total = (s.strip() for s in line.split(","))
                    found.append(
                        {"name": name, "util_percent": float(use), "mem_mb": float(used), "total_mb": float(total)}
                    )
            except (OSError, subprocess.SubprocessError, ValueError):
                found = []
        self._gpu = (time.monotonic(), found)
        return found

    # -- the state -------------------------------------------------------------------------------------------
    def _split(self) -> dict | None:
        if len(self._rows) < 2:
            return None
        first, last = self._rows[0], self._rows[-1]
        shares = time_shares(first, last)
        if shares is None:
            return None
        workers = int(self._config.get("workers", {}).get("count", 1))
        role, section = bottleneck(shares, workers)
        return {
            "window_s": round(_elapsed(last) - _elapsed(first), 1),
            "roles": {group: {s: shares[s] for s in sections} for group, sections in SECTIONS.items()},
            "labels": SECTION_LABELS,
            "bottleneck": {
                "role": role,
                "section": section,
                "label": SECTION_LABELS[section],
                "why": _why(role, section, shares),
            },
        }

    def _status(self, launcher: int | None) -> tuple[str, str]:
        """Ended once the log has the launch's closing line (its launcher may still be finishing), else running
        while a launcher holds the folder."""
        if self._ended:
            match = _EXIT.match(self._ended)
            assert match is not None  # _ended is only ever a line that _EXIT matched
            code = match.group(1)
            return "ended", f"ended with exit code {code}: {self._ended.split(': ', 1)[1]}"
        if launcher is not None:
            return "running", f"running (launcher pid {launcher})"
        return "stopped", "not running (no launcher holds the folder, and its log has no closing line)"

    def state(self) -> dict:
        """The page's content; one reader at a time (the server's threads share the view)."""
        with self._lock:
            now = time.monotonic()
            if self._state is None or now - self._at >= self.min_interval_s:
                self._state = self._read_state()
                self._at = now
            return self._state

    def _read_state(self) -> dict:
        self._read_config()
        self._read_metrics()
        self._read_episodes()
        self._read_evals()
        self._read_log()
        launcher = self.launcher_pid()
        status, text = self._status(launcher)
        last = self._last_row
        latest: dict[str, Any] = {k: number(last, k) for k in _LATEST}
        for key in ("frames_per_s", "samples_per_s"):
            latest[key] = number(self._rates_row, key)
        latest["learner_steps_per_s"] = self._rates_row.get("learner_steps_per_s")
        latest["wall_time"] = number(last, "wall_time")
        latest["replay_sizes"] = [int(n) for n in str(last.get("replay_sizes") or "").split() if n.isdigit()]
        if self._returns:
            latest["mean_return_100"] = round(sum(self._returns) / len(self._returns), 3)
            latest["episodes_in_mean"] = len(self._returns)
        cfg = self._config
        workers = cfg.get("workers", {})
        docs = _figure_docs(cfg.get("algo"))
        replays = " + ".join(
            f"{r.get('type', '?')} x {r.get('sample_ratio', 0):g}" for r in cfg.get("replay", []) if isinstance(r, dict)
        )
        return {
            "run": {
                "folder": self.path.name,
                "path": str(self.path.resolve()),
                "env": cfg.get("env", {}).get("id", "?"),
                "algo": cfg.get("algo", "?"),
                "workers": workers.get("count"),
                "envs_per_worker": workers.get("envs_per_worker"),
                "replays": replays,
                "status": status,
                "status_text": text,
                "log_interval_s": number(cfg.get("run", {}), "log_interval_s"),
                "max_env_frames": number(cfg.get("run", {}), "max_env_frames"),
            },
            "updated": time.time(),
            "latest": latest,
            # the agent's own columns of metrics.csv (Agent.learner_figures and broker_figures), as its last row has
            # them: a run of an agent this process does not know still shows its figures, without their meaning
            "agent_figures": [
                {"name": k, "doc": docs.get(k, ""), "value": number(last, k)} for k in last if k not in _CORE
            ],
            "curve": self._curve.columns(),
            "evaluations": self._eval_curve.columns(),
            "last_evaluation": self._last_eval,
            "series": self._series.columns(),
            "time_split": self._split(),
            "processes": self.processes(launcher),
            "gpus": self.gpus(),
            "warnings": list(self._warnings),
            "restarts": list(self._restarts),
            "notes": [
                f"{name}: {f.skipped} malformed lines skipped"
                for name, f in (
                    ("metrics.csv", self._metrics),
                    ("episodes.csv", self._episodes),
                    ("eval.csv", self._evals),
                )
                if f.skipped
            ],
        }
