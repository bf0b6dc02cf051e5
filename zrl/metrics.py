"""Append-only CSV files of a run (episodes.csv, metrics.csv), flushed row by row; reading them back, whole or as
they grow, with a torn last line left out; and what the time_* columns say: each role's time split and the
pipeline's bottleneck."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zrl import protocol
from zrl.checkpoint import open_regular

EPISODE_COLUMNS = (
    "episode",
    "raw_return",
    "score_5min",
    "score_30min",
    "length_frames",
    "length_env_steps",
    "env_frames",
    "wall_time",
    "worker_id",
    "env_index",
)

STATS_MESSAGES = (
    protocol.LearnerStats,
    protocol.WorkerStats,
    protocol.BrokerStats,
    protocol.IngestStats,
    protocol.EvaluatorStats,
)
"""The roles' reports whose fields marked ``protocol.Stat`` are columns of metrics.csv: the declaration gives each
column's name, how the launcher combines the workers' reports, and what it means (``METRIC_DOCS``)."""

METRIC_DOCS = {stat.column: stat.doc for message in STATS_MESSAGES for _, stat in message.STATS}
"""The columns every run's metrics.csv has, from the roles' reports, and what each means; an agent adds its own
(``agent_figures``)."""


def agent_figures(agent: Any) -> dict[str, str]:
    """The metrics.csv columns an agent adds, its learner's figures then its broker's, and what each means."""
    return {**agent.learner_figures, **agent.broker_figures}


def metric_columns(agent: Any) -> tuple[str, ...]:
    """metrics.csv's header for a run of ``agent`` (an ``zrl.agents.Agent``): the launcher's own figures, the roles'
    (their Stat fields, then the agent's figures; the time_* columns last: seconds each named section has taken
    since this launch began, summed over the workers) and the interval's time shares."""
    return (
        "wall_time",
        "elapsed_s",
        "env_frames",
        "frames_per_s",
        "samples_per_s",
        *(column for column in METRIC_DOCS if not column.startswith("time_")),
        *agent_figures(agent),
        "learner_wait_fraction",
        "learner_step_s",
        "broker_prepare_s",
        "broker_feature_s",
        "replay_ratio",
        "replay_ratio_target",
        "episodes",
        "mean_return_100",
        "worker_restarts",
        "role_restarts",
        "stats_decode_errors",
        *(column for column in METRIC_DOCS if column.startswith("time_")),
    )


# starts.csv: one row each time a launcher starts the run (resumes included), so that its wall times name their machine
START_COLUMNS = ("wall_time", "env_frames", "cpu", "cores", "ram_gib", "zrl")

EVAL_COLUMNS = (
    "wall_time",
    "elapsed_s",
    "env_frames",
    "index",
    "learner_step",
    "policy_version",
    "protocol",
    "episodes",
    "mean",
    "ci95_low",
    "ci95_high",
    "median",
    "min",
    "max",
    "human_normalised",
    "mean_max_q",
    "frames_played",
    "seconds",
    "best",
    "final",
)
"""eval.csv: one row per evaluation during training (eval.interval_frames): when the weights it played were taken
from the learner (wall_time, the launch's elapsed_s, and the run's env_frames then), which request it answered
(index: the multiple of eval.interval_frames passed), the weights (learner_step, policy_version), and its
scores: the mean raw score over its episodes with a 95% bootstrap interval, median, min, max, the human-normalised
mean (empty for a game without reference scores), the mean max-Q over the held-out states (value-based agents;
empty otherwise), the frames it played, its seconds, best (1: best.pt holds these weights) and final (1: the
evaluation of the learner's final checkpoint after the run's end, eval.final; its index is the last multiple passed)."""
EVAL_SCALARS = ("mean", "ci95_low", "ci95_high", "human_normalised", "mean_max_q")


TB_RETRY_S = 30.0  # how long after the disk refused TensorBoard's writer a new one is tried; doubled each time
TB_RETRY_MAX_S = 600.0
PENDING_LIMIT = 16 << 20  # bytes an AppendFile keeps in memory while its disk refuses them


def tell_stderr(text: str) -> None:
    print(f"zrl-launch: {text}", file=sys.stderr, flush=True)


class AppendFile:
    """A file that text is only appended to, each piece written at once (O_APPEND, no buffer of Python's). A write
    the disk refuses (full, or past a size limit) does not raise: the text is kept in memory and written before the
    next piece, so that nothing is lost or torn while the run goes on. ``tell(text)`` says so once per outage, and
    once more when writing works again. Past PENDING_LIMIT bytes waiting, new text is dropped, counted in
    ``dropped`` (bytes) and said at the recovery. A symlink or a FIFO at ``path`` is refused (checkpoint.UnsafeFile):
    a run folder may come from someone else."""

    def __init__(self, path: str | Path, tell: Callable[[str], None] = tell_stderr) -> None:
        self.path = Path(path)
        self.tell = tell
        self.dropped = 0
        self._pending = bytearray()
        self._failing = False
        self._fd: int | None = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def write(self, text: str) -> bool:
        """Append ``text`` (after whatever waits); whether everything is on disk now."""
        data = text.encode("utf-8", "backslashreplace")
        if len(self._pending) + len(data) > PENDING_LIMIT:
            self.dropped += len(data)
        else:
            self._pending += data
        return self.flush()

    def flush(self) -> bool:
        """Write what waits; whether all of it went."""
        while self._pending:
            try:
                written = os.write(self._fd, self._pending)
            except OSError as err:
                if not self._failing:
                    self._failing = True
                    self.tell(
                        f"cannot write {self.path} ({err.strerror or err}); the run goes on, and its lines wait in "
                        "memory until they can be written"
                    )
                return False
            del self._pending[:written]
        if self._failing:
            self._failing = False
            lost = f"; {self.dropped} bytes that did not fit in memory were dropped" if self.dropped else ""
            self.tell(f"{self.path} is written again{lost or ', nothing was lost'}")
            self.dropped = 0
        return True

    def close(self) -> None:
        """Write what waits, if the disk takes it now, and close the file; say what could not be written."""
        if self._fd is not None:
            if not self.flush():
                self.tell(f"{self.path}: {len(self._pending) + self.dropped} bytes could not be written before the end")
            os.close(self._fd)
            self._fd = None


TORN_SEARCH = 1 << 20  # how far back from a file's end a torn line's start is looked for: a row is far shorter


def first_row(path: Path) -> list[str] | None:
    """The fields of the first line of the regular file at ``path`` (a CSV file's header); None when the file is
    empty, [] when its first line is not ended."""
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as fh:
        first = fh.readline(1 << 16)
    if not first:
        return None
    return next(csv.reader([first.decode("utf-8", "replace")]), []) if first.endswith(b"\n") else []


def drop_torn_tail(path: Path) -> str | None:
    """Cut a torn last line (the start of a row with no newline: a kill or a full disk mid-write) off the file at
    ``path``, so that the next row starts a line of its own; a note of what was cut, None when the file ends whole.
    A file with no newline at all in its last TORN_SEARCH bytes is left as it is (not a zrl CSV file). A link or a
    FIFO is refused (checkpoint.UnsafeFile), never cut."""
    with os.fdopen(open_regular(path, os.O_RDWR), "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return None
        start = max(0, size - TORN_SEARCH)
        fh.seek(start)
        tail = fh.read()
        if tail.endswith(b"\n"):
            return None
        cut = tail.rfind(b"\n") + 1
        if cut == 0 and start > 0:
            return None
        fh.truncate(start + cut)
    torn = tail[cut:].decode("utf-8", "replace")
    shown = repr(torn[:60]) + ("..." if len(torn) > 60 else "")
    return f"{path}: dropped a torn last line ({len(tail) - cut} bytes with no newline: {shown})"


class CsvLog:
    """One CSV file with a fixed header; each row is written at once, through an AppendFile (a full disk delays
    rows rather than losing them or stopping the run). A resumed run's file that ends in a torn line has it cut
    off first, with a note (``tell``)."""

    def __init__(self, path: str | Path, columns: tuple[str, ...], tell: Callable[[str], None] = tell_stderr) -> None:
        self.path = Path(path)
        self._file = AppendFile(self.path, tell)  # first: it refuses a link or a FIFO, before they are read
        try:
            if note := drop_torn_tail(self.path):
                tell(note)
            header = first_row(self.path)
        except BaseException:
            self._file.close()
            raise
        new = header is None
        columns = tuple(header) if header else columns  # a resumed run's rows stay aligned under its header
        self.columns = columns
        self._text = io.StringIO()
        self._writer = csv.DictWriter(self._text, fieldnames=columns)
        if new:
            self._writer.writeheader()
            self._emit()

    def _emit(self) -> None:
        self._file.write(self._text.getvalue())
        self._text.seek(0)
        self._text.truncate()

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow({k: _fmt(row.get(k, "")) for k in self.columns})
        self._emit()

    def close(self) -> None:
        self._file.close()


class AppendHandler(logging.Handler):
    """A logging handler that appends each record to a file through an AppendFile: a full disk delays log lines
    rather than losing them or printing a logging error per record. ``tell`` must not log (to this handler)."""

    def __init__(self, path: str | Path, tell: Callable[[str], None] = tell_stderr) -> None:
        super().__init__()
        self.file = AppendFile(path, tell)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.file.write(self.format(record) + "\n")
        except Exception:  # as FileHandler does: a record that cannot be written never raises into the caller
            self.handleError(record)

    def close(self) -> None:
        self.file.close()
        super().close()


def _fmt(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


# -- TensorBoard ------------------------------------------------------------------------------------------------

_ROLE_OF = {
    stat.column: message.__name__.removesuffix("Stats").lower().replace("worker", "workers")
    for message in STATS_MESSAGES
    for _, stat in message.STATS
}
"""Each role's metrics.csv column and the role it comes from (learner, broker, workers): its TensorBoard group."""
_NOT_SCALARS = {"wall_time", "elapsed_s", "env_frames"}


def figure_roles(agent: Any) -> dict[str, str]:
    """Each metrics.csv column an agent adds and the role it comes from (learner, broker)."""
    return {**dict.fromkeys(agent.learner_figures, "learner"), **dict.fromkeys(agent.broker_figures, "broker")}


def tensorboard_tag(column: str, roles: dict[str, str] | None = None) -> str:
    """A metrics.csv column's TensorBoard tag: ``<role>/<column>`` for the roles' figures (an agent's: ``roles``,
    from ``figure_roles``), ``run/<column>`` for the launcher's own."""
    return f"{_ROLE_OF.get(column) or (roles or {}).get(column, 'run')}/{column}"


def _quiet_tensorboard_thread() -> None:
    """Keep TensorBoard's writer thread from printing a traceback when the disk refuses its write: TensorBoardLog
    says that once, in a line. Any other thread's exception is printed as before."""
    previous = threading.excepthook
    if getattr(previous, "zrl_quiet", False):
        return

    def hook(args) -> None:
        if not (isinstance(args.exc_value, OSError) and type(args.thread).__name__ == "_AsyncWriterThread"):
            previous(args)

    hook.zrl_quiet = True
    threading.excepthook = hook


class ScalarWriter:
    """Scalars into a new TensorBoard events file in ``log_dir``: TensorBoard's own writer, the one PyTorch's
    SummaryWriter wraps, with the events SummaryWriter.add_scalar makes. Without PyTorch: zrl-launch, which writes
    them, never imports torch. Its writes happen on the writer's thread, whose error comes back on the next call.
    The file's name ends in a random suffix: TensorBoard's own (time, host, pid) could be foretold, and a link
    placed under it followed."""

    def __init__(self, log_dir: str, flush_secs: int) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        # writes the file's version event first
        self._file = EventFileWriter(log_dir, flush_secs=flush_secs, filename_suffix=f".{secrets.token_hex(8)}")

    def add_scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
        self._file.add_event(
            Event(wall_time=time.time() if walltime is None else walltime, step=int(step), summary=summary)
        )

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardLog:
    """The run's figures as TensorBoard events in the run folder, at env-frame steps: every number of a
    metrics.csv row (its ``<role>/<column>`` tag; each section's seconds per second of run since the row before as
    ``time_share/<role>/<section>``; each replay table's size apart) and each episode's raw return, length and the
    100-episode mean then (``episodes/...``). Steps only move forward: a metrics row at or behind the last step
    written, as a resumed run's first rows may be, is left out, and an episode is placed one frame past the last
    one when workers' reports cross. A resumed run goes on after the last steps its files say were written:
    ``metrics_after``, the largest env frames of its metrics.csv, and ``episodes_after``, the last episode's step
    (``episode_steps`` over its episodes.csv).

    A write the disk refuses (full) does not stop the run: TensorBoard's writer is dropped, ``tell`` says so once,
    and a new one (a new events file beside the old) is tried after TB_RETRY_S, then twice as long each time up to
    TB_RETRY_MAX_S; the points in between are in the CSV files only."""

    def __init__(
        self,
        run_dir: str | Path,
        metrics_after: int = -1,
        episodes_after: int = -1,
        flush_s: float = 5.0,
        tell: Callable[[str], None] = tell_stderr,
        roles: dict[str, str] | None = None,
    ) -> None:
        _quiet_tensorboard_thread()
        self.roles = roles or {}  # the agent's columns and their roles (figure_roles)
        self._open = lambda: ScalarWriter(str(run_dir), max(1, round(flush_s)))
        self._writer = self._open()
        self._metrics_step, self._episode_step = metrics_after, episodes_after
        self._last_row: dict | None = None
        self.tell, self._retry_at, self._failing, self._backoff = tell, 0.0, False, TB_RETRY_S

    def _write(self, points: list[tuple[str, float, int, float | None]]) -> None:
        """Add (tag, value, step, wall time) points, or keep the run going when the disk refuses them."""
        now = time.monotonic()
        if self._writer is None and now < self._retry_at:
            return
        try:
            if self._writer is None:
                self._writer = self._open()  # its first event (the file's version) is written as it opens
            for tag, value, step, wall in points:
                self._writer.add_scalar(tag, value, step, walltime=wall)
            if self._failing:  # a new writer: it counts as working once what it got is on disk
                self._writer.flush()
                self._failing, self._backoff = False, TB_RETRY_S
                self.tell("TensorBoard events are written again, in a new events file")
        except Exception as err:  # the writer's thread raises its OSError on the next call; the writer is done
            if not self._failing:
                self._failing = True
                self.tell(
                    f"TensorBoard events cannot be written ({err}); the run goes on, metrics.csv and "
                    f"episodes.csv keep every point, and a new events file is tried in {TB_RETRY_S:g} s, then less often"
                )
            if self._writer is not None:
                with contextlib.suppress(Exception):
                    self._writer.close()
            self._writer, self._retry_at = None, now + self._backoff
            self._backoff = min(2 * self._backoff, TB_RETRY_MAX_S)  # each try leaves an events file behind

    def metrics(self, row: dict) -> None:
        step = int(number(row, "env_frames") or 0)
        last, self._last_row = self._last_row, row
        if step <= self._metrics_step:
            return
        self._metrics_step = step
        points, wall = [], number(row, "wall_time")
        for column, value in row.items():
            if column in _NOT_SCALARS:
                continue
            if column == "replay_sizes":
                for i, size in enumerate(str(value).split()):
                    points.append((f"broker/replay_size_{i}", int(size), step, wall))
                continue
            value = number(row, column)
            if value is not None and not column.startswith("time_"):
                points.append((tensorboard_tag(column, self.roles), value, step, wall))
        shares = time_shares(last, row) if last is not None else None
        for group, sections in SECTIONS.items() if shares else ():
            for section in sections:
                points.append((f"time_share/{group}/{section}", shares[section], step, wall))
        self._write(points)

    def episode(self, row: dict, mean_return_100: float) -> None:
        (step,) = episode_steps([row], self._episode_step)
        self._episode_step = step
        wall = number(row, "wall_time")
        self._write(
            [
                ("episodes/raw_return", float(row["raw_return"]), step, wall),
                ("episodes/mean_return_100", mean_return_100, step, wall),
                ("episodes/length_frames", int(row["length_frames"]), step, wall),
            ]
        )

    def evaluation(self, row: dict) -> None:
        """An eval.csv row's scores as ``eval/<column>`` at its env frames (a figure that does not apply is left
        out)."""
        step, wall = int(row["env_frames"]), number(row, "wall_time")
        self._write(
            [
                (f"eval/{column}", value, step, wall)
                for column in EVAL_SCALARS
                if (value := number(row, column)) is not None and math.isfinite(value)
            ]
        )

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):  # a disk that still refuses: the CSV files have every point
                self._writer.close()


# -- reading ------------------------------------------------------------------------------------------------


class LineFollower:
    """A file read as it grows: ``poll()`` returns the complete lines (bytes, newline included) written since the
    last call. A line not yet ended by a newline (being written, or torn by a crash) is left for a later call, in
    ``pending``. A file that shrank or was replaced is read again from its start, and ``reset`` is True once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.reset = False
        self.pending = b""
        self.from_start = True  # the last poll read the file from its start
        self._offset = 0
        self._inode: int | None = None

    def poll(self) -> bytes:
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_ino != self._inode or st.st_size < self._offset:
                    self.reset = self._inode is not None
                    self._inode, self._offset = st.st_ino, 0
                self.from_start = self._offset == 0
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return b""
        end = data.rfind(b"\n") + 1
        self.pending = data[end:]
        self._offset += end
        return data[:end]


class CsvFollower(LineFollower):
    """A run's CSV file read as it grows (``LineFollower``): ``poll()`` returns the rows completed since the last
    call. A line whose fields do not match the header, or that the csv module refuses (a field over its size
    limit), is skipped and counted in ``skipped``. After a reset (a replaced file) the header is read again and
    ``poll`` returns every row."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.header: list[str] | None = None
        self.skipped = 0

    def poll(self) -> list[dict[str, str]]:
        lines = super().poll()
        if self.from_start:  # a new file, or one replaced: its first line is the header
            self.header, self.skipped = None, 0
        rows: list[dict[str, str]] = []
        reader = csv.reader(io.StringIO(lines.decode("utf-8", errors="replace")))
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error:  # a field past the csv module's limit: that line is malformed, the next is read
                self.skipped += 1
                continue
            if self.header is None:
                self.header = fields
            elif len(fields) == len(self.header):
                rows.append(dict(zip(self.header, fields)))
            elif fields:
                self.skipped += 1
        return rows


def read_csv(path: str | Path) -> tuple[list[dict[str, str]], list[str]]:
    """Every complete row of a run's CSV file, and a note for each thing left out: a torn last line (no newline:
    cut short mid-write), lines whose fields do not match the header. ([], [a note]) for a missing file."""
    path = Path(path)
    if not path.is_file():
        return [], [f"{path}: no such file"]
    follower = CsvFollower(path)
    rows = follower.poll()
    notes = []
    if follower.pending.strip():
        notes.append(f"{path}: skipped a torn last line ({len(follower.pending)} bytes with no newline)")
    if follower.skipped:
        n = follower.skipped
        notes.append(
            f"{path}: skipped {n} malformed line{'s' if n > 1 else ''} (fields not matching the header, or a field "
            "too long to read)"
        )
    return rows, notes


def number(row: dict, key: str) -> float | None:
    """A row's cell (a CSV string, or a number as the launcher's rows hold it) as a float; None where it is empty,
    missing, not a number, nan or infinite. A zero is a zero."""
    value = row.get(key)
    if value is None or value == "":
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def episode_steps(rows: list[dict], last: int = -1) -> list[int]:
    """The TensorBoard step of each episodes.csv row in order: its env frames, or one frame past the step before
    where the workers' reports crossed, so that steps only go forward (``TensorBoardLog.episode``'s rule)."""
    steps = []
    for row in rows:
        last = max(int(number(row, "env_frames") or 0), last + 1)
        steps.append(last)
    return steps


# -- time split -----------------------------------------------------------------------------------------------

SECTIONS = {
    "workers": ("env_step", "inference", "ring_write", "send", "weights_wait"),
    "broker": ("broker_insert", "broker_sample"),
    "learner": ("learner_wait", "learner_gather", "learner_step", "learner_publish"),
}
"""Each role's named timed sections: metrics.csv's ``time_<section>_s`` columns (the workers' summed)."""
IDLE = {"weights_wait", "learner_wait"}  # waiting, not working
SECTION_LABELS = {
    "env_step": "env step",
    "inference": "inference",
    "ring_write": "ring write",
    "send": "send",
    "weights_wait": "waiting for weights",
    "broker_insert": "insert",
    "broker_sample": "sample",
    "learner_wait": "waiting for batches",
    "learner_gather": "gather",
    "learner_step": "forward/backward",
    "learner_publish": "publish",
}


def time_shares(first: dict, last: dict) -> dict[str, float] | None:
    """Seconds each section took per second of run between two metrics.csv rows (workers summed); None where the
    rows span no time or lack the columns."""
    start, end = number(first, "elapsed_s"), number(last, "elapsed_s")
    if start is None or end is None or end <= start:
        return None
    out = {}
    for group in SECTIONS.values():
        for s in group:
            a, b = number(first, f"time_{s}_s"), number(last, f"time_{s}_s")
            if a is None or b is None:
                return None
            out[s] = round(max(0.0, b - a) / (end - start), 4)
    return out


def learner_wait_share(shares: dict[str, float]) -> float:
    """The share of the learner's time it spent waiting for batches."""
    busy = sum(shares[s] for s in SECTIONS["learner"] if s not in IDLE)
    return shares["learner_wait"] / max(1e-9, busy + shares["learner_wait"])


def bottleneck(shares: dict[str, float], workers: int) -> tuple[str, str]:
    """Which role limits the pipeline, and its busiest section, from each role's share of its time: the learner
    when it waits under a tenth of its time, the broker when it is busy over 0.8 of a core, the workers else."""
    broker_busy = sum(shares[s] for s in SECTIONS["broker"])
    if learner_wait_share(shares) < 0.10:
        return "learner", max((s for s in SECTIONS["learner"] if s not in IDLE), key=shares.get)
    if broker_busy > 0.8:
        return "broker", max(SECTIONS["broker"], key=shares.get)
    section = max((s for s in SECTIONS["workers"] if s not in IDLE), key=shares.get)
    return f"workers ({workers})", section
