"""Append-only files of a run (episodes.csv, metrics.csv, zrl.log), flushed row by row, that a full disk delays
rather than stops; a resumed file's torn last line cut off before it is appended to."""

from __future__ import annotations

import csv
import io
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zrl.checkpoint import open_regular

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
            if self._fd is None:
                raise ValueError(f"{self.path}: written after close")  # as a closed Python file says
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
