"""The run's figures as TensorBoard events: metrics.csv's columns under their roles' tags, the episodes and the
evaluations, written at env-frame steps that only go forward, without PyTorch."""

from __future__ import annotations

import contextlib
import math
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zrl.metrics.columns import EVAL_SCALARS, STATS_MESSAGES
from zrl.metrics.reading import number
from zrl.metrics.time_split import SECTIONS, time_shares
from zrl.metrics.writing import tell_stderr

TB_RETRY_S = 30.0  # how long after the disk refused TensorBoard's writer a new one is tried; doubled each time
TB_RETRY_MAX_S = 600.0

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


class _QuietHook:
    """A ``threading.excepthook`` that leaves out the OSError of TensorBoard's writer thread and hands any other
    thread's exception to the hook before it."""

    zrl_quiet = True  # installed once

    def __init__(self, previous: Callable[[threading.ExceptHookArgs], Any]) -> None:
        self.previous = previous

    def __call__(self, args: threading.ExceptHookArgs) -> None:
        if not (isinstance(args.exc_value, OSError) and type(args.thread).__name__ == "_AsyncWriterThread"):
            self.previous(args)


def _quiet_tensorboard_thread() -> None:
    """Keep TensorBoard's writer thread from printing a traceback when the disk refuses its write: TensorBoardLog
    says that once, in a line. Any other thread's exception is printed as before."""
    previous = threading.excepthook
    if getattr(previous, "zrl_quiet", False):
        return
    threading.excepthook = _QuietHook(previous)


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
        self._writer: ScalarWriter | None = self._open()
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
        points: list[tuple[str, float, int, float | None]] = []
        wall = number(row, "wall_time")
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
        if shares:
            for group, sections in SECTIONS.items():
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


def episode_steps(rows: list[dict], last: int = -1) -> list[int]:
    """The TensorBoard step of each episodes.csv row in order: its env frames, or one frame past the step before
    where the workers' reports crossed, so that steps only go forward (``TensorBoardLog.episode``'s rule)."""
    steps = []
    for row in rows:
        last = max(int(number(row, "env_frames") or 0), last + 1)
        steps.append(last)
    return steps
