"""Issue 38, item 5: a run folder is data; what a kill, a full disk or another hand left in it cannot break a resume,
and no link in it sends a write elsewhere.

One tiny CartPole run is made per module; each e2e test resumes a copy of it, changed as its case says. The unit
tests put a link or a FIFO where each open for writing looks (made after any check: a race)."""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest
from conftest import REPO, csv_rows, run_command

from zrl import checkpoint, config
from zrl.config import ConfigError
from zrl.launch.folder import RunFolder, RunLock
from zrl.metrics.reading import read_csv
from zrl.metrics.writing import AppendFile, CsvLog
from zrl.namespace import LOCK_NAME

CARTPOLE = REPO / "config" / "cartpole.toml"
FRAMES = 12_000  # about 400 episodes of an untrained CartPole: past the 100 that best.pt needs


@pytest.fixture(scope="module")
def made_run(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("made")
    result = run_command(
        "zrl-launch", "--config", CARTPOLE, "--set", f"run.max_env_frames={FRAMES}",
        "--set", "run.checkpoint_every_steps=10", "--quiet", cwd=cwd, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (cwd / "results").iterdir()
    return run_dir


def _resume(run_dir: Path, cwd: Path):
    return run_command(
        "zrl-launch", "--resume", run_dir, "--set", f"run.max_env_frames={2 * FRAMES}", cwd=cwd, timeout=180
    )


@pytest.mark.e2e
def test_a_torn_last_line_in_the_csv_files_is_cut_off_on_resume_with_a_note(made_run, tmp_path, no_leaks):
    run_dir = Path(shutil.copytree(made_run, tmp_path / made_run.name))
    episodes_before, metrics_before = csv_rows(run_dir / "episodes.csv"), csv_rows(run_dir / "metrics.csv")
    with open(run_dir / "episodes.csv", "a") as fh:
        fh.write("57")  # a kill during a write: the start of a row, no newline
    with open(run_dir / "metrics.csv", "a") as fh:
        fh.write("1796000000.5,12")
    result = _resume(run_dir, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "episodes.csv: dropped a torn last line (2 bytes with no newline: '57')" in result.stderr
    assert "metrics.csv: dropped a torn last line (15 bytes with no newline: '1796000000.5,12')" in result.stderr
    for name, before in (("episodes.csv", episodes_before), ("metrics.csv", metrics_before)):
        rows, notes = read_csv(run_dir / name)
        assert not notes and rows[: len(before)] == before and len(rows) > len(before), (name, notes)
    episodes = [int(r["episode"]) for r in csv_rows(run_dir / "episodes.csv")]
    assert episodes == list(range(1, len(episodes) + 1))  # the counts ran on from the whole rows


@pytest.mark.e2e
def test_a_best_json_that_cannot_be_written_is_a_warning_and_best_pt_still_moves(made_run, tmp_path, no_leaks):
    run_dir = Path(shutil.copytree(made_run, tmp_path / made_run.name))
    best_json = run_dir / "checkpoints" / "best.json"
    best_json.unlink()
    best_json.mkdir()  # where the record would go there is a folder: the write fails
    best_before = (run_dir / "checkpoints" / "best.pt").read_bytes()
    result = _resume(run_dir, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"could not write {best_json}" in result.stderr and "best.pt is updated, its record is not" in result.stderr
    assert (run_dir / "checkpoints" / "best.pt").read_bytes() != best_before


def _outside(tmp_path: Path) -> Path:
    """A folder outside the run with a file of the user's own, which no link may have zrl write."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_bytes(b"a user's own file, not zrl's\n")
    return outside


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (through a link too) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.e2e
def test_symlinks_in_a_resumed_folder_are_refused_before_anything_is_written(made_run, tmp_path, no_leaks):
    """A lock file, a log and a checkpoint's record made links to files outside: the resume stops with one line
    naming the first link and what to do, and writes nothing, through the links or beside them."""
    run_dir = Path(shutil.copytree(made_run, tmp_path / made_run.name))
    outside = _outside(tmp_path)
    shutil.move(run_dir / "zrl.log", outside / "zrl.log")  # its maker kept the log elsewhere
    shutil.move(run_dir / "checkpoints" / "best.json", outside / "best.json")
    (run_dir / LOCK_NAME).symlink_to(outside / "precious.txt")
    (run_dir / "zrl.log").symlink_to(outside / "zrl.log")
    (run_dir / "checkpoints" / "best.json").symlink_to(outside / "best.json")
    before, run_before = _contents(outside), _contents(run_dir)
    result = _resume(run_dir, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        f"zrl-launch: error: --resume: {run_dir / LOCK_NAME} is a symlink; zrl writes nothing in a run folder "
        "through a link: copy the file it points to in place of the link (or remove the link), then try again"
    ], result.stderr
    assert _contents(outside) == before
    assert _contents(run_dir) == run_before and (run_dir / LOCK_NAME).is_symlink()


@pytest.mark.e2e
def test_a_fifo_in_a_resumed_folder_is_refused_not_waited_on(made_run, tmp_path, no_leaks):
    """A FIFO named zrl.log (nothing reads it): opening it to write would wait for a reader for ever."""
    run_dir = Path(shutil.copytree(made_run, tmp_path / made_run.name))
    (run_dir / "zrl.log").unlink()
    os.mkfifo(run_dir / "zrl.log")
    result = run_command(
        "zrl-launch", "--resume", run_dir, "--set", f"run.max_env_frames={2 * FRAMES}", cwd=tmp_path, timeout=60
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        f"zrl-launch: error: --resume: {run_dir / 'zrl.log'} is a FIFO, not a regular file; zrl writes only "
        "regular files in a run folder: remove it"
    ], result.stderr


def _reader(fifo: Path):
    """A reader of ``fifo`` kept open for the test (without it, an open for writing waits)."""
    return os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["symlink", "fifo", "fifo with a reader"])
@pytest.mark.parametrize("opener", ["AppendFile", "CsvLog"])
def test_a_run_file_opened_to_append_is_never_a_link_or_a_fifo(tmp_path, kind, opener):
    outside = _outside(tmp_path)
    path, reader = tmp_path / "zrl.log", None
    if kind == "symlink":
        path.symlink_to(outside / "precious.txt")
    else:
        os.mkfifo(path)
        reader = _reader(path) if kind == "fifo with a reader" else None
    opened: list = []
    make = (lambda: AppendFile(path)) if opener == "AppendFile" else (lambda: CsvLog(path, ("a",)))
    # an open that blocks (a FIFO) fails the test rather than hanging it
    thread = threading.Thread(target=lambda: opened.append(_try(make)), daemon=True)
    thread.start()
    thread.join(10)
    try:
        assert opened, "the open waited for a reader of the FIFO"
        (err,) = opened
        assert isinstance(err, OSError), f"opened {path}, a {kind}, to write to it"
        assert isinstance(err, checkpoint.UnsafeFile), err
        assert str(err).startswith(f"{path} is a {'symlink' if kind == 'symlink' else 'FIFO'}"), err
        assert _contents(outside) == {"precious.txt": b"a user's own file, not zrl's\n"}
    finally:
        if reader is not None:
            os.close(reader)


def _try(make):
    """What ``make()`` raised, or what it made (closed)."""
    try:
        made = make()
    except Exception as err:
        return err
    made.close()
    return made


@pytest.mark.unit
def test_write_atomic_replaces_a_link_and_never_writes_through_its_temp_file(tmp_path):
    """Links where the checkpoint's temp file would be (its old name was the pid: foretold) and where the file
    goes: the outside files stay as they were, and the name holds a regular file of the new bytes."""
    outside = _outside(tmp_path)
    (outside / "other.txt").write_bytes(b"another file of the user's\n")
    target = tmp_path / "best.json"
    target.symlink_to(outside / "other.txt")
    planted = tmp_path / f".best.json.tmp-{os.getpid()}"
    planted.symlink_to(outside / "precious.txt")
    checkpoint.write_atomic(target, b"{}\n")
    assert not target.is_symlink() and target.read_bytes() == b"{}\n"
    assert _contents(outside) == {
        "other.txt": b"another file of the user's\n",
        "precious.txt": b"a user's own file, not zrl's\n",
    }
    assert [p for p in tmp_path.iterdir() if ".tmp-" in p.name] == [planted]  # no temp file of its own is left


@pytest.mark.unit
def test_the_run_lock_refuses_a_link_and_leaves_what_it_points_to_alone(tmp_path):
    outside = _outside(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).symlink_to(outside / "precious.txt")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(run_dir / LOCK_NAME))} is a symlink; zrl writes nothing"):
        RunLock(run_dir)
    assert _contents(outside) == {"precious.txt": b"a user's own file, not zrl's\n"}


@pytest.mark.unit
def test_the_run_folders_own_files_replace_links_or_refuse_them(tmp_path, capsys):
    """config.toml and connect.txt are written whole (a link there is replaced), starts.csv and checkpoints/ are
    refused as links (a warning; the learner's checkpoint fails and training goes on), zrl.log stops the start."""
    outside = _outside(tmp_path)
    (outside / "folder").mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("config.toml", "connect.txt", "starts.csv"):
        (run_dir / name).symlink_to(outside / "precious.txt")
    (run_dir / "checkpoints").symlink_to(outside / "folder")
    folder = RunFolder(run_dir, config.load(REPO / "config" / "smoke.toml"))
    try:
        folder.record_start(0)
        assert _contents(outside) == {"precious.txt": b"a user's own file, not zrl's\n"}
        assert not (run_dir / "config.toml").is_symlink() and "[env]" in (run_dir / "config.toml").read_text()
        assert f"cannot record this start in {run_dir / 'starts.csv'}: {run_dir / 'starts.csv'} is a symlink" in (
            capsys.readouterr().err
        )
        folder.write_file("connect.txt", "zrl-worker --connect tcp://127.0.0.1:5555\n")
        assert not (run_dir / "connect.txt").is_symlink()
    finally:
        folder.close_log()
    with pytest.raises(checkpoint.UnsafeFile, match="checkpoints is a symlink"):
        checkpoint.make_folder(run_dir / "checkpoints")  # the learner's, before each checkpoint
    assert _contents(outside) == {"precious.txt": b"a user's own file, not zrl's\n"}
    (run_dir / "zrl.log").unlink()
    (run_dir / "zrl.log").symlink_to(outside / "precious.txt")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(run_dir / 'zrl.log'))} is a symlink"):
        RunFolder(run_dir, config.load(REPO / "config" / "smoke.toml"))
    assert _contents(outside) == {"precious.txt": b"a user's own file, not zrl's\n"}
