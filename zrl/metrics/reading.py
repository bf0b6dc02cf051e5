"""Reading a run's CSV files back, whole or as they grow, with a torn last line left out; a cell as a number."""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path


class _Growing:
    """What the two followers share: a file's complete lines since the last read (``_lines``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.reset = False
        self.pending = b""
        self.from_start = True  # the last poll read the file from its start
        self._offset = 0
        self._inode: int | None = None

    def _lines(self) -> bytes:
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


class LineFollower(_Growing):
    """A file read as it grows: ``poll()`` returns the complete lines (bytes, newline included) written since the
    last call. A line not yet ended by a newline (being written, or torn by a crash) is left for a later call, in
    ``pending``. A file that shrank or was replaced is read again from its start, and ``reset`` is True once."""

    def poll(self) -> bytes:
        return self._lines()


class CsvFollower(_Growing):
    """A run's CSV file read as it grows (``LineFollower``): ``poll()`` returns the rows completed since the last
    call. A line whose fields do not match the header, or that the csv module refuses (a field over its size
    limit), is skipped and counted in ``skipped``. After a reset (a replaced file) the header is read again and
    ``poll`` returns every row."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.header: list[str] | None = None
        self.skipped = 0

    def poll(self) -> list[dict[str, str]]:
        lines = self._lines()
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


def number(row: dict, key: str | int) -> float | None:
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
