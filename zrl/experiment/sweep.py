"""zrl-sweep: runs of one or more configs over seeds, each ``zrl-launch`` in its own run folder, with an index
that always says where every run stands.

Each run goes into ``OUT/<label>/seed<N>/``, where zrl-launch makes its run folder and ``launch.log`` keeps its
output; ``OUT/index.json`` says where each run stands (the sweep file and the index: ``zrl.experiment.sweep_plan``).
``OUT/sweep.toml`` is the sweep file as given, which ``--resume OUT`` reads again: done and failed runs stay as they
are, a stopped run continues from its newest checkpoint (``zrl-launch --resume``) and a pending one starts.
``--retry-failed`` starts the failed ones again, each in a new run folder beside its old one.

Ctrl-C (or SIGTERM) hands each running zrl-launch one SIGINT, which stops it in order with a checkpoint; a
second one stops them at once. Every zrl-launch gets SIGTERM from the kernel if the sweep itself dies.
"""

from __future__ import annotations

import fcntl
import fnmatch
import os
import signal
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from zrl import checkpoint
from zrl import config as config_mod
from zrl.bench.learning import launch_command, launcher, metrics_rows
from zrl.config import ConfigError
from zrl.envs.trust import check_env_import
from zrl.experiment.sweep_plan import INDEX, LOG, SWEEP_COPY, Run, Sweep, load, read_index, restore, write_index
from zrl.forkserver import die_with_parent
from zrl.launch.supervise import stop_signals

TAIL_LINES = 15
LOCK = ".lock"


def _die_with(sweep_pid: int):
    """In the child before exec: SIGTERM when the sweep dies (zrl-launch stops in order on it), and no start at
    all if it died before the signal was set."""

    def prepare() -> None:
        die_with_parent(signal.SIGTERM)
        if os.getppid() != sweep_pid:
            os._exit(143)

    return prepare


def _command(run: Run, seed_dir: Path, trusted: tuple[str, ...] = ()) -> list[str]:
    """A run's zrl-launch command: a stopped run resumed (its config.toml is data: its env module is imported only
    if ``trusted``, from zrl-sweep's own --trust-env-module, names it), any other started from its run file."""
    if run.status == "stopped" and run.folder and checkpoint.periodic(Path(run.folder) / "checkpoints"):
        return [*launcher(), "--resume", run.folder, *(f"--trust-env-module={name}" for name in trusted)]
    return launch_command(run.config, run.sets, None, None, run.seed, None, None, seed_dir)


def _tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            return fh.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def _frames(folder: str | None) -> int | None:
    """The env frames in a run folder's last metrics row (None before it has one)."""
    rows = metrics_rows(Path(folder) / "metrics.csv") if folder else []
    try:
        return int(float(rows[-1]["env_frames"]))
    except (IndexError, KeyError, TypeError, ValueError):
        return None


def _selected(sweep: Sweep, only: list[str] | None) -> list[Run]:
    """The runs whose labels, or label/seedN keys, match one of the ``--only`` patterns (all when none is given)."""
    return [
        r for r in sweep.runs if not only or any(fnmatch.fnmatch(r.label, p) or fnmatch.fnmatch(r.key, p) for p in only)
    ]


class _Stop:
    """SIGINT/SIGTERM/SIGHUP: how many times the sweep was asked to stop."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum, frame) -> None:
        self.count += 1


def run(
    sweep: Sweep,
    out: Path,
    progress,
    only: list[str] | None = None,
    report_every_s: float = 60.0,
    trusted: tuple[str, ...] = (),
) -> int:
    """Run the sweep's pending and stopped runs in ``out``, ``sweep.parallel`` at a time. Returns 0 when every
    selected run is done, 1 when one failed, 130 when stopped. ``trusted``: env modules a resumed run may import."""
    selected = _selected(sweep, only)
    todo = [r for r in selected if r.status in ("pending", "stopped")]
    progress(
        f"zrl-sweep: {len(selected)} runs in {out} ({len(todo)} to run, {sweep.parallel} at a time); "
        f"index: {out / INDEX}"
    )
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in stop_signals()}
    active: dict[str, tuple[Run, subprocess.Popen, Any]] = {}
    forwarded = 0
    last_report = time.monotonic()
    try:
        while todo or active:
            while todo and len(active) < sweep.parallel and not stop.count:
                run_ = todo.pop(0)
                active[run_.key] = _start(run_, sweep, out, progress, trusted)
                write_index(out, sweep)
            if stop.count > forwarded:
                forwarded = stop.count
                progress(
                    f"zrl-sweep: stopping {len(active)} running run(s) "
                    + ("in order (Ctrl-C again: at once)" if forwarded == 1 else "at once")
                )
                for _, proc, _ in active.values():
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGINT)
            for key, (run_, proc, log) in list(active.items()):
                code = proc.poll()
                if code is None:
                    continue
                log.close()
                del active[key]
                _finish(run_, code, out, progress)
                write_index(out, sweep)
            if stop.count and not active:
                break
            if active and time.monotonic() - last_report >= report_every_s:
                last_report = time.monotonic()
                for run_, _, _ in active.values():
                    frames = _frames(run_.folder)
                    shown = f"{frames:,}" if frames is not None else "starting"
                    progress(f"  {run_.key}: {shown} / {run_.max_env_frames:,} env frames")
            time.sleep(0.2)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    failed = [r for r in selected if r.status == "failed"]
    done = sum(r.status == "done" for r in selected)
    progress(f"zrl-sweep: {done} of {len(selected)} runs done, {len(failed)} failed; index: {out / INDEX}")
    if stop.count:
        return 130
    return 1 if failed else 0


def _start(run_: Run, sweep: Sweep, out: Path, progress, trusted=()) -> tuple[Run, subprocess.Popen, Any]:
    seed_dir = out / run_.label / f"seed{run_.seed}"
    seed_dir.mkdir(parents=True, exist_ok=True)
    cmd = _command(run_, seed_dir, trusted)
    resumed = "--resume" in cmd
    log = open(seed_dir / LOG, "a")
    log.write(f"$ zrl-launch {' '.join(cmd[3:])}\n")
    log.flush()
    before = {p for p in seed_dir.iterdir() if p.is_dir()}
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with(os.getpid())
    )
    run_.status, run_.exit_code, run_.log_tail = "running", None, []
    run_.started, run_.ended = time.time(), None
    progress(f"zrl-sweep: {run_.key}: {'resumed' if resumed else 'started'} (log: {seed_dir / LOG})")
    write_index(out, sweep)
    if not resumed:
        run_.folder = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:  # zrl-launch makes its folder at once
            made = [p for p in seed_dir.iterdir() if p.is_dir()] if seed_dir.is_dir() else []
            new = sorted(set(made) - before)
            if new:
                run_.folder = str(new[0])
                break
            time.sleep(0.1)
    return run_, proc, log


def _finish(run_: Run, code: int, out: Path, progress) -> None:
    seed_dir = out / run_.label / f"seed{run_.seed}"
    if run_.folder is None:
        made = sorted((p for p in seed_dir.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        run_.folder = str(made[-1]) if made else None
    run_.exit_code, run_.ended = code, time.time()
    minutes = (run_.ended - (run_.started or run_.ended)) / 60
    if code == 0:
        run_.status = "done"
        progress(f"zrl-sweep: {run_.key}: done in {minutes:.1f} min ({run_.folder})")
    elif code in (129, 130, 143, -signal.SIGHUP, -signal.SIGINT, -signal.SIGTERM):
        run_.status = "stopped"
        progress(f"zrl-sweep: {run_.key}: stopped after {minutes:.1f} min; --resume continues it")
    else:
        run_.status = "failed"
        run_.log_tail = _tail(seed_dir / LOG)
        progress(f"zrl-sweep: {run_.key}: FAILED with exit code {code}; its log ends:")
        for line in run_.log_tail:
            progress(f"    {line}")


def _retry(sweep: Sweep, only: list[str] | None, progress) -> None:
    """The selected failed runs, pending again: each starts afresh in a new run folder (the old one stays)."""
    for run_ in _selected(sweep, only):
        if run_.status == "failed":
            progress(f"zrl-sweep: {run_.key}: failed with exit code {run_.exit_code}; starting it again")
            run_.status, run_.exit_code, run_.folder, run_.log_tail = "pending", None, None, []
            run_.started = run_.ended = None


def start(
    sweep_path: str | None,
    out: str | None,
    resume: str | None,
    only: list[str],
    progress,
    retry: bool = False,
    trusted: tuple[str, ...] = (),
) -> int:
    """zrl-sweep's work: a new sweep from ``sweep_path`` in ``out`` (default results/sweeps/<name>_<stamp>), or
    the sweep in folder ``resume`` continued (``retry``: its failed runs too). Paths in the index are absolute, so
    it resumes from anywhere. ``trusted``: zrl-sweep's --trust-env-module, passed to each resumed zrl-launch."""
    if resume:
        folder = Path(resume).resolve()
        read_index(folder)  # a clear error for a folder that is not a sweep
        with _locked(folder):
            sweep = load(folder / SWEEP_COPY)
            restore(folder, sweep)
            if retry:
                _retry(sweep, only, progress)
            for run_ in _selected(sweep, only):  # the copy is data: its env ids import only what the user trusts
                if run_.status != "done":
                    cfg = config_mod.load(run_.config, run_.sets)
                    check_env_import(cfg.env.id, str(folder / SWEEP_COPY), trusted, [cfg.run.results_dir, folder])
            return run(sweep, folder, progress, only, trusted=trusted)
    if sweep_path is None:
        raise ConfigError("give a sweep file (zrl-sweep SWEEP.toml) or --resume SWEEP_FOLDER")
    sweep = load(sweep_path)  # every mistake before anything is made
    stamp = time.strftime("%Y%m%d_%H%M%S")
    folder = (Path(out) if out else Path("results") / "sweeps" / f"{Path(sweep_path).stem}_{stamp}").resolve()
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"--out {folder}: not an empty folder; give a new one, or --resume {folder} to continue it")
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        # the copy names its run files by absolute path, so --resume finds them from the sweep's folder
        (folder / SWEEP_COPY).write_text(_rebased(Path(sweep_path).read_text(), Path(sweep_path)))
        sweep = load(folder / SWEEP_COPY)
        write_index(folder, sweep)
        return run(sweep, folder, progress, only)


class _locked:
    """Holds OUT/.lock for the sweep's life, so that a second zrl-sweep on the same folder is refused."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __enter__(self) -> None:
        self.fh = open(self.folder / LOCK, "w")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            raise ConfigError(f"{self.folder}: another zrl-sweep is running this sweep") from None

    def __exit__(self, *exc) -> None:
        self.fh.close()


def _rebased(text: str, original: Path) -> str:
    """The sweep file's text with its run-file paths made absolute (the copy lives in another folder)."""
    data = tomllib.loads(text)
    head = data.get("sweep", {})
    if isinstance(head, dict) and isinstance(head.get("config"), str) and head["config"]:
        head["config"] = str((original.parent / head["config"]).resolve())
    for variant in data.get("variant", []) if isinstance(data.get("variant"), list) else []:
        if isinstance(variant, dict) and isinstance(variant.get("config"), str) and variant["config"]:
            variant["config"] = str((original.parent / variant["config"]).resolve())
    return f"# zrl-sweep's copy of {original.resolve()}\n" + tomli_w.dumps(data)
