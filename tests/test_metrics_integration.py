"""metrics.csv, zrl.log and TensorBoard's events on a disk that refuses writes, each in a process of its own that
lowers its file-size limit (which fails writes as a full disk does): told once, and nothing lost."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
from conftest import tensorboard_scalars

pytestmark = pytest.mark.integration


_REFUSED_WRITES = """
import logging, resource, sys
from zrl.metrics.writing import AppendHandler, CsvLog

# Python ignores SIGXFSZ: a write past the limit fails with EFBIG, as a full disk's does with ENOSPC
folder, told = sys.argv[1], []
rows = CsvLog(folder + "/metrics.csv", ("step", "text"), told.append)
log = logging.getLogger("refused")
log.addHandler(AppendHandler(folder + "/zrl.log", told.append))
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, hard))  # from here, no file may grow past 100 bytes
for step in range(40):
    rows.write({"step": step, "text": "x" * 9})
    log.warning("line %d", step)
print(len(told), flush=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
rows.write({"step": 40, "text": "x" * 9})
log.warning("line 40")
rows.close()
print("\\n".join(told))
"""


def test_writes_the_disk_refuses_wait_in_memory_are_told_once_and_lose_nothing(tmp_path):
    """metrics.csv and zrl.log on a disk that refuses writes (a file-size limit, which fails writes as a full disk
    does): no exception, one message per file when the writes start failing, one when they work again, and every
    row and line on disk afterwards, whole and in order."""
    done = subprocess.run(
        [sys.executable, "-c", _REFUSED_WRITES, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    during, *told = done.stdout.strip().split("\n")
    assert during == "2", done.stdout  # one message per file while they fail, not one per write
    assert len(told) == 4 and sum("cannot write" in t for t in told) == 2, told
    assert sum("written again, nothing was lost" in t for t in told) == 2, told
    with open(tmp_path / "metrics.csv", newline="") as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh)] == list(range(41))
    lines = (tmp_path / "zrl.log").read_text().splitlines()
    assert lines == [f"line {i}" for i in range(41)]


_REFUSED_EVENTS = """
import resource, sys, time
import zrl.metrics.tensorboard
from zrl.metrics.tensorboard import TensorBoardLog

zrl.metrics.tensorboard.TB_RETRY_S = 0.0  # try a new writer at once
told = []
events = TensorBoardLog(sys.argv[1], tell=told.append)
row = lambda step: {"env_frames": step, "wall_time": 1.0, "learner_step": step}
events.metrics(row(1))
events._writer.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))  # no file may grow
for step in range(2, 12):
    events.metrics(row(step))
    time.sleep(0.05)
print(len(told), flush=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
for step in range(12, 15):
    events.metrics(row(step))
events.close()
print("\\n".join(told))
"""


def test_tensorboard_events_the_disk_refuses_are_told_once_and_a_new_file_takes_over(tmp_path):
    """TensorBoard's writer on a disk that refuses writes: no exception and no thread traceback, one message while
    it fails, one when a new events file works; the points after the outage are in it."""
    done = subprocess.run(
        [sys.executable, "-c", _REFUSED_EVENTS, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    during, *told = done.stdout.strip().split("\n")
    assert during == "1" and len(told) == 2, done.stdout
    assert "cannot be written" in told[0] and "written again, in a new events file" in told[1], told
    steps = [step for step, _ in tensorboard_scalars(tmp_path)["learner/learner_step"]]
    assert steps[0] == 1 and steps[-3:] == [12, 13, 14], steps
