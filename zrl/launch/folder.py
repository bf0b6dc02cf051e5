"""A run folder, ``results/<env>_<unix_ts>/``: made new or found again (``--resume``), locked for one launcher
at a time, checked for disk room, and while the launcher runs in it: ``config.toml`` (the resolved config),
``zrl.log`` (the launcher's log), ``starts.csv`` (a row per launcher start: its machine), ``episodes.csv``,
``metrics.csv`` and (eval.interval_frames) ``eval.csv`` open for writing, with TensorBoard events beside them
(run.tensorboard), ``checkpoints/`` (written by the learner; best.pt and best.json kept here), and no partial
checkpoint left at the end.

A folder to resume may come from someone else: none of its files is written through a symlink, and a FIFO or a
device is never opened as one of its files (``check_entries`` before the lock, ``checkpoint.open_regular`` at every
open for writing)."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import logging
import os
import shutil
import time
from pathlib import Path

from zrl import __version__, agents, checkpoint
from zrl.config import Config, ConfigError, dumps, usable_cores
from zrl.machine import cpu_description, ram_gib
from zrl.metrics.columns import EPISODE_COLUMNS, EVAL_COLUMNS, START_COLUMNS, metric_columns
from zrl.metrics.reading import number, read_csv
from zrl.metrics.tensorboard import TensorBoardLog, episode_steps, figure_roles
from zrl.metrics.writing import AppendHandler, CsvLog, drop_torn_tail, first_row, tell_stderr
from zrl.namespace import LOCK_NAME

log = logging.getLogger("zrl")


class RunLock:
    """One launcher's exclusive hold on a run folder: an flock on ``<run>/.zrl-launch.lock``, which holds the
    pid. The kernel drops the hold when the process dies, however it dies, so a stale file never blocks."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_NAME
        while True:
            try:
                fd = checkpoint.open_regular(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except checkpoint.UnsafeFile as err:  # a link would have the pid written over its target
                raise ConfigError(str(err)) from None
            except OSError as err:
                raise ConfigError(
                    f"{run_dir}: cannot write its lock file {LOCK_NAME} ({err.strerror}); a run folder "
                    "must be writable to train in it"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise ConfigError(
                    f"{run_dir}: in use by another zrl-launch (pid {holder}); stop that one first, "
                    "or resume another run"
                ) from None
            try:  # the holder before us may have unlinked the file between our open and our lock
                if os.lstat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


def make_run_dir(cfg: Config) -> Path:
    name = cfg.env.id.replace("/", "-")
    stamp = int(time.time())
    base = Path(cfg.run.results_dir)
    try:
        base.mkdir(parents=True, exist_ok=True)
        for suffix in [""] + [f"-{i}" for i in range(1, 100)]:
            path = base / f"{name}_{stamp}{suffix}"
            try:
                path.mkdir()
            except FileExistsError:
                continue
            (path / "checkpoints").mkdir()
            return path
    except OSError as err:
        raise ConfigError(
            f"run.results_dir: cannot make a run folder in {base} ({err.strerror or err}); give a "
            "folder you can write with --set run.results_dir=PATH"
        ) from None
    raise ConfigError(f"run.results_dir: could not make a new run folder under {base}")


WRITTEN_FOLDERS = ("checkpoints", "eval")
"""A run folder's folders that zrl writes in, at any depth (the rest of it only at its top)."""


def check_entries(run_dir: Path) -> None:
    """ConfigError naming the first symlink, FIFO, socket or device in the run folder ``run_dir`` (its top, and
    WRITTEN_FOLDERS at any depth), before a resume locks it or writes anything: a folder from someone else is data,
    and a link in it would send zrl's writes wherever its maker chose. zrl itself makes none of these there."""

    def entries(folder: Path, deep: bool):
        try:
            found = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:  # unreadable: the opens that follow say so
            return
        for entry in found:
            yield entry
            if entry.is_dir(follow_symlinks=False) and (deep or entry.name in WRITTEN_FOLDERS):
                yield from entries(Path(entry.path), True)

    for entry in entries(run_dir, False):
        if entry.is_symlink() or not (entry.is_file(follow_symlinks=False) or entry.is_dir(follow_symlinks=False)):
            mode = entry.stat(follow_symlinks=False).st_mode
            if why := checkpoint.refusal(entry.path, mode):
                raise ConfigError(f"--resume: {why}")


def find_run(ref: str, cfg: Config) -> Path:
    """The run folder ``ref`` names, or with ``auto`` the newest run of cfg's environment under its results_dir."""
    if ref != "auto":
        path = Path(ref)
        if not (path / "config.toml").is_file():
            raise ConfigError(f"--resume {ref}: not a zrl run folder (no config.toml in it)")
        return path
    base = Path(cfg.run.results_dir)
    runs = []
    for folder in base.glob(f"{cfg.env.id.replace('/', '-')}_*"):
        stamp = folder.name.rsplit("_", 1)[-1].split("-")[0]
        if (folder / "config.toml").is_file() and stamp.isdigit() and checkpoint.periodic(folder / "checkpoints"):
            runs.append((int(stamp), folder.stat().st_mtime, folder))
    if not runs:
        raise ConfigError(f"--resume auto: no run of {cfg.env.id} with a checkpoint under {base}/ to resume")
    return max(runs)[2]


def checkpoint_bytes(parameters: int) -> int:
    """About what one checkpoint of a network of ``parameters`` takes: the weights and two optimiser moments of
    each, plus a margin."""
    return int(parameters * 4 * 3 * 1.1) + 1_000_000


def check_room(folder: Path, need: int) -> None:
    """ConfigError when ``folder``'s disk has less than ``need`` bytes free (checked at start, so that a run does
    not train for hours toward a checkpoint that cannot be written)."""
    existing = next(p for p in (folder.resolve(), *folder.resolve().parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if free < need:
        raise ConfigError(
            f"run.results_dir: {folder} has {free / 1e6:.0f} MB free, and this run's checkpoints need "
            f"about {need / 1e6:.0f} MB; free some space or give another folder with "
            "--set run.results_dir=PATH"
        )


def _tell_and_log(text: str) -> None:
    """A CSV file's trouble: on stderr and in zrl.log (whose own trouble goes to stderr alone)."""
    tell_stderr(text)
    log.warning(text)


class RunFolder:
    """The folder while a launcher runs in it: the resolved config written to ``config.toml`` and the "zrl"
    logger writing to ``zrl.log`` from the start; ``open_csvs()`` opens ``episodes.csv``, ``metrics.csv`` and
    ``eval.csv`` (appended to on resume); ``close_files()`` closes them and removes partial checkpoints; ``close_log()``
    detaches the log, last."""

    def __init__(self, path: Path, cfg: Config) -> None:
        self.path, self.cfg = path, cfg
        try:
            self.write_file("config.toml", dumps(cfg))
            self._handler = AppendHandler(path / "zrl.log")  # a full disk: its lines wait, said once on stderr
        except checkpoint.UnsafeFile as err:  # made after check_entries: refused all the same
            raise ConfigError(str(err)) from None
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(self._handler)
        log.setLevel(logging.INFO)
        self.episodes: CsvLog | None = None
        self.metrics: CsvLog | None = None
        self.evaluations: CsvLog | None = None
        self.events: TensorBoardLog | None = None

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def write_file(self, name: str, text: str) -> None:
        """Write the run folder's file ``name`` whole (``checkpoint.write_atomic``: a link there is replaced, not
        written through)."""
        checkpoint.write_atomic(self.path / name, text.encode())

    def open_csvs(self) -> None:
        try:
            self.episodes = CsvLog(self.path / "episodes.csv", EPISODE_COLUMNS, _tell_and_log)
            columns = metric_columns(agents.get(self.cfg.algo))
            self.metrics = CsvLog(self.path / "metrics.csv", columns, _tell_and_log)
            if self.cfg.eval.interval_frames:
                self.evaluations = CsvLog(self.path / "eval.csv", EVAL_COLUMNS, _tell_and_log)
        except checkpoint.UnsafeFile as err:
            raise ConfigError(str(err)) from None

    def open_events(self, flush_s: float) -> str | None:
        """Write TensorBoard events beside the CSV files, a resumed run's after the steps its CSV files say were
        written; a note to say when the tensorboard package is missing. Before open_csvs."""
        metrics, _ = read_csv(self.path / "metrics.csv")
        episodes, _ = read_csv(self.path / "episodes.csv")
        metrics_after = max((int(number(r, "env_frames") or 0) for r in metrics), default=-1)
        episodes_after = (episode_steps(episodes) or [-1])[-1]
        try:
            roles = figure_roles(agents.get(self.cfg.algo))
            self.events = TensorBoardLog(self.path, metrics_after, episodes_after, flush_s, _tell_and_log, roles)
        except ImportError as err:
            return (
                f"run.tensorboard: no TensorBoard events ({err}); install the tensorboard package, or set "
                "run.tensorboard = false to silence this"
            )
        return None

    def record_start(self, env_frames: int) -> str:
        """A row of ``starts.csv`` for this start of the run, on the launcher's machine (a resumed run may move);
        the machine in words, for zrl.log. A file that cannot take it costs the row and a warning, not the run."""
        row = {"wall_time": f"{time.time():.3f}", "env_frames": env_frames, "cpu": cpu_description()}
        row |= {"cores": usable_cores(), "ram_gib": ram_gib(), "zrl": __version__}
        path = self.path / "starts.csv"
        try:
            fd = checkpoint.open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # never through a link
            with os.fdopen(fd, "ab") as fh:
                if note := drop_torn_tail(path):
                    _tell_and_log(note)
                header = first_row(path)  # the rows go under the header the file has
                text = io.StringIO()
                writer = csv.DictWriter(text, header or START_COLUMNS, restval="", extrasaction="ignore")
                if not header:
                    writer.writeheader()
                writer.writerow(row)
                fh.write(text.getvalue().encode())
        except (OSError, csv.Error) as err:
            _tell_and_log(f"cannot record this start in {path}: {err}")
        return f"{row['cpu']}, {row['cores']} usable cores, {row['ram_gib']:g} GiB"

    def write_metrics(self, row: dict) -> None:
        assert self.metrics is not None  # open_csvs opened it
        self.metrics.write(row)
        if self.events is not None:
            self.events.metrics(row)

    def write_episode(self, row: dict, mean_return_100: float) -> None:
        assert self.episodes is not None  # open_csvs opened it
        self.episodes.write(row)
        if self.events is not None:
            self.events.episode(row, mean_return_100)

    def write_evaluation(self, row: dict) -> None:
        assert self.evaluations is not None  # open_csvs opened it: the run evaluates
        self.evaluations.write(row)
        if self.events is not None:
            self.events.evaluation(row)

    def latest_checkpoint(self) -> Path | None:
        return checkpoint.latest(self.checkpoints)

    def keep_best(self, path: Path, record: dict) -> bool:
        """Make checkpoint ``path`` best.pt, and ``record`` best.json; False (and a warning) if the copy
        failed, when the periodic checkpoints stand."""
        folder = path.parent  # the learner's checkpoints/
        try:
            checkpoint.copy(path, folder / checkpoint.BEST)
        except OSError as err:  # pruned meanwhile, or the disk is full
            log.warning("could not update %s: %s", folder / checkpoint.BEST, err)
            return False
        try:
            checkpoint.write_atomic(folder / "best.json", (json.dumps(record, indent=2) + "\n").encode())
        except OSError as err:  # best.pt stands; a resume then judges the next best against none
            _tell_and_log(f"could not write {folder / 'best.json'}: {err}; best.pt is updated, its record is not")
        return True

    def close_files(self) -> None:
        checkpoint.remove_partials(self.checkpoints)  # a learner killed mid-write
        for log_file in (self.episodes, self.metrics, self.evaluations, self.events):
            if log_file is not None:
                log_file.close()

    def close_log(self) -> None:
        log.removeHandler(self._handler)
        self._handler.close()
