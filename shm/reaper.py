"""The reaper: an owner's segments and folders removed the moment the owner is gone, however it went.

Run as a file (``python -I shm/reaper.py PID PREFIX RUN [FOLDER ...]``, standard library only, so that it starts in
milliseconds and holds a few MB), with its standard input the read end of a pipe whose write end only the owner
holds. When that end closes (the owner closed it, exited, or was killed: SIGKILL and the OOM killer included) the
read returns, and the reaper unlinks every ``PREFIX_RUN_PID_<label>`` segment in /dev/shm, removes the folders, and
exits. Its owner starts it in a session of its own, so that a signal to the owner's process
group (a terminal's Ctrl-C, ``kill -- -PGID``) does not reach it.

Unlinking under processes that still have a segment mapped is safe: their mappings stay valid until they unmap, and
an owner that is gone no longer needs the names.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

SHM_DIR = "/dev/shm"


def remove(pid: int, prefix: str, run: str, folders: list[str]) -> tuple[list[str], list[str]]:
    """Unlink owner ``pid``'s segments of ``run`` named with ``prefix`` and remove ``folders``; what was removed."""
    segments, removed = [], []
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        names = []
    for name in names:
        parts = name.split("_", 3)
        if len(parts) == 4 and parts[:3] == [prefix, run, str(pid)]:
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                segments.append(name)
            except OSError:  # gone already, or something else squats on the name: leave it
                pass
    for path in folders:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return segments, removed


def main(argv: list[str]) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe's end ends it
    pid, prefix, run, folders = int(argv[0]), argv[1], argv[2], argv[3:]
    while sys.stdin.buffer.read(65536):
        pass
    remove(pid, prefix, run, folders)


if __name__ == "__main__":
    main(sys.argv[1:])
