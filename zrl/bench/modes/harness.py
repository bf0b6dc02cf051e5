"""What every mode shares: the targets its figures are checked against, a scratch folder that a later launch
sweeps, config edits, and the real zrl-launch run for a measured number of seconds (``pipeline``)."""

from __future__ import annotations

import csv
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from zrl.config import Config
from zrl.launch import EXIT_SIGINT, private_prefix
from zrl.metrics import time_split

Progress = Callable[[str], None]

TARGETS = {
    "sampling_ratio_to_ceiling": 0.90,  # sampling at 2 workers x 4 envs, against the env ceiling on the same cores
    "ring_gb_per_s": 1.0,  # ring write+read of 84x84 frames
    "index_messages_per_s": 50_000.0,
    "queue_slower_than_ring": 10.0,  # a pickled multiprocessing.Queue for the same frames
    "learner_ratio_to_bare": 0.90,  # the learner fed by the broker, against a bare PyTorch loop
    "elite_prepare_to_learner_step": 1.0,  # an elite batch is prepared faster than the learner consumes one
    "pipeline_ratio_to_limit": 0.80,  # trained env steps/s end to end, against the limit the unit costs allow
    "learner_ratio_to_matmul": 0.50,  # the learner's GFLOP/s while it steps, against a plain fp32 matmul's
}


def _workdir() -> tempfile.TemporaryDirectory:
    """A scratch folder named as a launcher's private folder (``zrl-<pid>-...``), so that if this process is
    killed the next zrl-launch or zrl-bench sweeps it with the rest of what a dead process left."""
    return tempfile.TemporaryDirectory(prefix=f"{private_prefix()}{os.getpid()}-bench-")


def _with(cfg: Config, **sections) -> Config:
    """cfg with some keys of some sections replaced: _with(cfg, workers={"count": 2})."""
    return dataclasses.replace(cfg, **{s: dataclasses.replace(getattr(cfg, s), **kv) for s, kv in sections.items()})


def check(value: float, target: str, lower_is_better: bool = False) -> dict:
    want = TARGETS[target]
    met = value <= want if lower_is_better else value >= want
    return {
        "target": target,
        "value": round(value, 4),
        "want": f"{'<=' if lower_is_better else '>='} {want:g}",
        "met": bool(met),
    }


# -- the real zrl-launch, run for a measured window ---------------------------------------------------------

LAUNCH = "import sys; sys.argv[0] = 'zrl-launch'; from zrl.cli.launch import launch_main; launch_main()"


def _reported_rows(tmp: str) -> list[dict]:
    """The metrics.csv rows of the run in ``tmp`` since its workers first reported (none before it wrote any)."""
    found = list(Path(tmp).glob("results/*/metrics.csv"))
    if not found:
        return []
    with open(found[0]) as fh:
        return [r for r in csv.DictReader(fh) if r.get("time_env_step_s")]


def _run_until(cmd: list[str], tmp: str, seconds: float, timeout: float) -> tuple[int, str]:
    """Run ``cmd`` in ``tmp`` until ``seconds`` have passed by its metrics.csv since its workers first reported,
    then stop it with SIGINT as Ctrl-C would; its exit code and stderr. RuntimeError if it is still there after
    ``timeout`` seconds (it is stopped first)."""
    deadline = time.monotonic() + timeout
    with open(Path(tmp) / "launch.err", "w+") as err:
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                rows = _reported_rows(tmp)
                if rows and float(rows[-1]["elapsed_s"]) >= float(rows[0]["elapsed_s"]) + seconds:
                    proc.send_signal(signal.SIGINT)
                    break
                time.sleep(0.25)
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            raise RuntimeError(f"zrl-launch did not stop within {timeout:g} s") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        return proc.returncode, err.read()


def pipeline(
    config_path: str | None,
    workers: int,
    envs: int,
    seconds: float,
    warmup: float,
    sets: list[str],
    args: tuple[str, ...] = (),
    watch: Callable[[Path, threading.Event], dict] | None = None,
) -> dict:
    """The real zrl-launch, stopped with SIGINT once warm-up + seconds have passed since its workers first
    reported (its start-up, seconds on a slow machine, counts toward neither); figures from its metrics.csv after
    the warm-up. ``args``: more options for zrl-launch; ``watch(results, done)``: runs in a thread beside it, from
    its start until ``done`` is set at its end, and returns figures for the result's ``watch`` entry."""
    with _workdir() as tmp:
        cmd = [
            sys.executable,
            "-c",
            LAUNCH,
            "--workers",
            str(workers),
            "--envs-per-worker",
            str(envs),
            "--set",
            "run.log_interval_s=1.0",
            "--set",
            "run.max_env_frames=1000000000000",
            "--set",
            "run.checkpoint_every_steps=0",
            "--set",
            "eval.final=false",  # the measured run ends at its seconds: no evaluation after it
            "--quiet",
            *args,
        ]
        if config_path:
            cmd += ["--config", str(Path(config_path).resolve())]
        for item in sets:
            cmd += ["--set", item]
        cmd += ["--set", f'run.results_dir="{Path(tmp) / "results"}"']  # last: it wins over the config's
        finished, watched, watcher = threading.Event(), {}, None
        if watch is not None:
            watcher = threading.Thread(
                target=lambda: watched.update(watch(Path(tmp) / "results", finished)),
                name="zrl-bench-watch",
                daemon=True,
            )
            watcher.start()
        try:
            code, stderr = _run_until(cmd, tmp, warmup + seconds, timeout=warmup + seconds + 300)
        finally:
            finished.set()
            if watcher is not None:
                watcher.join(30)
        if code not in (0, EXIT_SIGINT):
            raise RuntimeError(f"zrl-launch exited with {code}: {stderr.strip()[-2000:]}")
        rows = _reported_rows(tmp)
    if len(rows) < 2 or float(rows[-1]["elapsed_s"]) < float(rows[0]["elapsed_s"]) + warmup:
        raise RuntimeError("the run gave too few metrics rows after its start-up; give more --seconds or --warmup")
    begin = float(rows[0]["elapsed_s"]) + warmup
    first = max(
        (r for r in rows[:-1] if float(r["elapsed_s"]) <= begin), key=lambda r: float(r["elapsed_s"]), default=rows[0]
    )
    last = rows[-1]
    window = float(last["elapsed_s"]) - float(first["elapsed_s"])
    delta = lambda col: float(last[col] or 0) - float(first[col] or 0)  # noqa: E731
    times = time_split.time_shares(first, last)
    steps = delta("learner_step")
    return {
        **({"watch": watched} if watch is not None else {}),
        "workers": workers,
        "envs_per_worker": envs,
        "window_s": round(window, 1),
        "frames_per_s": round(delta("env_frames") / window, 1),
        "learner_steps_per_s": round(steps / window, 3),
        "policy_lag": float(last["policy_lag"] or 0),
        "seconds_per_second": times,
    }
