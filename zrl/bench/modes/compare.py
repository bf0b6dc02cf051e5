"""The pipeline run two or three ways in turn, rounds times (compare_mode): with and without observers
(TensorBoard, the dashboard), a remote worker against a local one, replay checkpoints, evaluation during training."""

from __future__ import annotations

import csv
import dataclasses
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from zrl.bench.modes.harness import pipeline
from zrl.config import Config

OBSERVERS = ("none", "tensorboard", "dashboard")
"""What may watch a run: nothing, TensorBoard events (run.tensorboard), the live dashboard with a page open."""


def read_dashboard(results: Path, done: threading.Event) -> dict:
    """An open dashboard page, as a browser keeps one: find the address the run logs, then take its stream of
    updates until the run ends. How many updates came, and how many bytes."""
    import re
    import urllib.request

    address = None
    while address is None and not done.wait(0.2):
        for log in results.glob("*/zrl.log"):
            found = re.search(r"dashboard at (http://\S+/)", log.read_text(errors="replace"))
            address = found.group(1) if found else None
    events = size = 0
    if address is None:
        return {"events": 0, "bytes": 0}
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, never through a proxy
    while not done.is_set():  # as a browser does, it reconnects when the stream drops
        try:
            with direct.open(address + "api/stream", timeout=10) as stream:
                for line in stream:
                    size += len(line)
                    events += line.startswith(b"data: ")
                    if done.is_set():
                        break
        except Exception:  # the run ended and its page server with it, or the stream dropped
            done.wait(1.0)
    return {"events": events, "bytes": size}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of running the pipeline in a comparison: its local workers, more settings and options, and a
    watcher beside it (``pipeline``'s ``watch``)."""

    workers: int
    sets: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    watch: Callable[[Path, threading.Event], dict] | None = None


def compare_mode(
    config_path: str | None,
    sets: list[str],
    envs: int,
    seconds: float,
    warmup: float,
    rounds: int,
    progress,
    variants: dict[str, Variant],
    label: str,
) -> dict:
    """The real pipeline run each of ``variants``' ways in turn, ``rounds`` times, the order rotating from round to
    round (so that the machine's drift, and any cost of going first or last, falls on each alike): each one's
    learner steps/s and frames/s, and the mean of its per-round ratios to the first variant's beside it.
    ``label``: what the rows call a variant."""
    names, rows = list(variants), []
    for r in range(1, rounds + 1):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # each in each place of a round, in turn
            v = variants[name]
            progress(f"round {r}/{rounds}: {name}, {warmup:g} s warm-up + {seconds:g} s")
            result = pipeline(config_path, v.workers, envs, seconds, warmup, [*sets, *v.sets], v.args, v.watch)
            watched = result.get("watch", {})
            rows.append(
                {
                    "round": r,
                    label: name,
                    "learner_steps_per_s": result["learner_steps_per_s"],
                    "frames_per_s": result["frames_per_s"],
                    "learner_wait": round(result["seconds_per_second"]["learner_wait"], 3),
                    **{k: v for k, v in watched.items() if not isinstance(v, (dict, list))},
                }
            )
    summary = []
    for name in names:
        ratios: dict[str, list[float]] = {"learner_steps_per_s": [], "frames_per_s": []}
        for r in range(1, rounds + 1):
            this = next(x for x in rows if x["round"] == r and x[label] == name)
            base = next(x for x in rows if x["round"] == r and x[label] == names[0])
            for key in ratios:
                ratios[key].append(this[key] / base[key] if base[key] else float("nan"))
        mine = [x for x in rows if x[label] == name]
        summary.append(
            {
                label: name,
                "learner_steps_per_s": round(float(np.mean([x["learner_steps_per_s"] for x in mine])), 3),
                "frames_per_s": round(float(np.mean([x["frames_per_s"] for x in mine])), 1),
                "learner_ratio": round(float(np.mean(ratios["learner_steps_per_s"])), 3),
                "learner_ratio_range": [
                    round(min(ratios["learner_steps_per_s"]), 3),
                    round(max(ratios["learner_steps_per_s"]), 3),
                ],
                "frames_ratio": round(float(np.mean(ratios["frames_per_s"])), 3),
            }
        )
    return {"envs_per_worker": envs, "rounds": rounds, "label": label, "rows": rows, "summary": summary}


def observers_mode(
    config_path: str | None, sets: list[str], cfg: Config, seconds: float, warmup: float, rounds: int, progress
) -> dict:
    """The real pipeline with nothing watching it, with TensorBoard events, and with the dashboard and a page
    reading its stream, in turn (compare_mode)."""
    workers = cfg.workers.count
    variants = {
        observer: Variant(
            workers,
            (f"run.tensorboard={'true' if observer == 'tensorboard' else 'false'}",),
            ("--dashboard",) if observer == "dashboard" else (),
            read_dashboard if observer == "dashboard" else None,
        )
        for observer in OBSERVERS
    }
    result = compare_mode(
        config_path, sets, cfg.workers.envs_per_worker, seconds, warmup, rounds, progress, variants, "observer"
    )
    for row in result["rows"]:
        row["page_updates"] = row.pop("events", "")
        row.pop("bytes", None)
    return {"workers": workers, **result}


REPLAY_CHECKPOINT_EVERY = 25  # learner steps between checkpoints in both variants of replay_mode


def replay_watch(results: Path, done: threading.Event) -> dict:
    """At the run's end, its newest replay checkpoint: the observation frames its rings' files hold, its bytes on
    disk (the state and the frame files it needs) and bytes per million frames; and how many were written."""
    from zrl.replay_checkpoint import newest

    done.wait()
    folders = list(results.glob("*/checkpoints/replay"))
    found = newest(folders[0]) if folders else None
    if found is None:
        return {"replay_saves": 0}
    path, manifest = found
    rows = next(iter(folders[0].parent.parent.glob("metrics.csv")))
    with open(rows) as fh:
        last = list(csv.DictReader(fh))[-1]
    frames = manifest["observations_per_slot"] * sum(ring["head"] - ring["first"] for ring in manifest["rings"])
    files = [
        path.parent / manifest["state"],
        *(path.parent / "frames" / c for r in manifest["rings"] for c in r["chunks"]),
    ]
    size = sum(f.stat().st_size for f in files)
    return {
        "replay_saves": int(float(last.get("replay_saves") or 0)),
        "replay_save_s": float(last.get("replay_save_s") or 0),
        "replay_frames": frames,
        "replay_mb": round(size / 1e6, 2),
        "mb_per_million_frames": round(size / frames, 1) if frames else float("nan"),
    }


def replay_mode(
    config_path: str | None, sets: list[str], cfg: Config, seconds: float, warmup: float, rounds: int, progress
) -> dict:
    """The pipeline with a checkpoint every REPLAY_CHECKPOINT_EVERY learner steps, without and with the replays
    saved beside each (run.checkpoint_replay), in turn (compare_mode): what saving the replays costs the learner,
    and what they take on disk per million frames."""
    every = f"run.checkpoint_every_steps={REPLAY_CHECKPOINT_EVERY}"
    variants = {
        "off": Variant(cfg.workers.count, (every, "run.checkpoint_replay=false")),
        "on": Variant(cfg.workers.count, (every, "run.checkpoint_replay=true"), (), replay_watch),
    }
    result = compare_mode(
        config_path, sets, cfg.workers.envs_per_worker, seconds, warmup, rounds, progress, variants, "replay_checkpoint"
    )
    return {"workers": cfg.workers.count, **result}


# env frames between evaluations in evaluation_mode when the config sets none: fewer than any run makes while an
# evaluation plays, so that the next request always waits and the evaluator never idles (the worst case)
EVALUATION_EVERY = 5_000
EVALUATION_NICE_BESIDE = 5  # evaluation_mode also runs the evaluator at this priority, unless the config's is it


def evaluation_watch(results: Path, done: threading.Event) -> dict:
    """At the run's end, its eval.csv: the evaluations done, the seconds they took and the episodes they played;
    and how often its log says the evaluator was restarted (dead or taken for hung)."""
    done.wait()
    found = list(results.glob("*/eval.csv"))
    if not found:
        return {"evaluations": 0}
    with open(found[0]) as fh:
        rows = list(csv.DictReader(fh))
    log = found[0].with_name("zrl.log")
    lines = log.read_text().splitlines() if log.is_file() else []
    restarts = sum("zrl-evaluator" in line and "; restarted it" in line for line in lines)
    return {
        "evaluations": len(rows),
        "eval_seconds": round(sum(float(r["seconds"]) for r in rows), 1),
        "eval_episodes": sum(int(r["episodes"]) for r in rows),
        "evaluator_restarts": restarts,
    }


def evaluation_mode(
    config_path: str | None, sets: list[str], cfg: Config, seconds: float, warmup: float, rounds: int, progress
) -> dict:
    """The pipeline without and with evaluation during training (the config's eval.interval_frames, or an
    evaluation every EVALUATION_EVERY frames: the evaluator busy all the time), at the config's eval.nice and
    at EVALUATION_NICE_BESIDE, in turn (compare_mode): what the evaluator costs the learner and the workers, and
    how long its evaluations take."""
    every = cfg.eval.interval_frames or EVALUATION_EVERY
    on = f"eval.interval_frames={every}"
    variants = {
        "off": Variant(cfg.workers.count, ("eval.interval_frames=0", "run.best_by=train")),
        f"on, nice {cfg.eval.nice}": Variant(cfg.workers.count, (on,), (), evaluation_watch),
    }
    if cfg.eval.nice != EVALUATION_NICE_BESIDE:  # what a higher priority would buy and cost, beside it
        variants[f"on, nice {EVALUATION_NICE_BESIDE}"] = Variant(
            cfg.workers.count, (on, f"eval.nice={EVALUATION_NICE_BESIDE}"), (), evaluation_watch
        )
    result = compare_mode(
        config_path, sets, cfg.workers.envs_per_worker, seconds, warmup, rounds, progress, variants, "evaluation"
    )
    return {"workers": cfg.workers.count, "eval_interval_frames": every, **result}


WORKER = "import sys; sys.argv[0] = 'zrl-worker'; from zrl.cli.worker import worker_main; worker_main()"


def remote_worker(results: Path, done: threading.Event) -> dict:
    """A worker on this host over the remote path: once the run writes connect.txt, run its zrl-worker line (TCP
    loopback, zstd, no keys) until the run ends; whether it joined, and its last progress line."""
    line = None
    while line is None and not done.wait(0.2):
        found = list(results.glob("*/connect.txt"))
        line = found[0].read_text().split() if found else None
    if line is None:
        return {"joined": False}
    with subprocess.Popen([sys.executable, "-c", WORKER, *line[1:]], stderr=subprocess.PIPE, text=True) as proc:
        done.wait()
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    said = [x for x in err.splitlines() if "B per observation" in x]
    return {"joined": "joined run" in err, "worker_said": said[-1].removeprefix("zrl-worker: ") if said else ""}


def remote_mode(
    config_path: str | None, sets: list[str], cfg: Config, seconds: float, warmup: float, rounds: int, progress
) -> dict:
    """The pipeline with N + 1 local workers against N local and one remote worker on this host (zrl-worker over
    TCP loopback into the ingest), in turn (compare_mode): what the remote path costs the learner."""
    n = cfg.workers.count
    variants = {
        f"{n + 1} local": Variant(n + 1),
        f"{n} local + 1 remote": Variant(n, ("workers.remote=1",), (), remote_worker),
    }
    result = compare_mode(
        config_path, sets, cfg.workers.envs_per_worker, seconds, warmup, rounds, progress, variants, "workers"
    )
    return {"workers": n, **result}
