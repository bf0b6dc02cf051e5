"""zrl-eval: play episodes with a checkpoint's policy under a standard Atari protocol (deepmind, machado or saber:
zrl/roles/evaluator.py defines them, and plays them for evaluation during training too) and report the scores.

Episode i is played with seed S + i, on ``workers`` processes; the same seed gives the same results. A
policy trained on a game's minimal action set acts in the full set through that set's ALE action ids.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from zrl import checkpoint, scores
from zrl.config import Config, ConfigError, from_dict
from zrl.envs.trust import check_env_import
from zrl.roles.evaluator import (
    BOOTSTRAP_RESAMPLES,
    FRAMES_5_MIN,
    PROTOCOLS,
    Player,
    minimal_actions,
    protocol_env,
    summary,
)

__all__ = ["FRAMES_5_MIN", "PROTOCOLS", "compare", "evaluate", "minimal_actions", "protocol_env", "summary", "table"]


def find_checkpoint(ref: str) -> Path:
    """A checkpoint file, or a run folder's best.pt (else its newest periodic checkpoint)."""
    path = Path(ref)
    if path.is_dir():
        folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        best = folder / checkpoint.BEST
        found = best if best.is_file() else checkpoint.latest(folder)
        if found is None:
            raise ConfigError(f"{ref}: no checkpoint in {folder}")
        return found
    if not path.exists():
        raise ConfigError(f"{ref}: no such checkpoint file or run folder")
    return path


def run_folder(ckpt: Path) -> Path:
    """Where eval/ goes: the run folder a checkpoint belongs to, else the checkpoint's own folder."""
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent


@dataclasses.dataclass(frozen=True)
class Job:
    ckpt: str
    protocol: str
    greedy: bool
    seed: int
    episodes: tuple[int, ...]
    video: str | None = None  # record episode 0 here
    render: bool = False  # show episode 0 in a window
    trusted: tuple[str, ...] = ()  # the env modules --trust-env-module named


VIDEO_SCALE = 4  # the agent's 84x84 view, 336x336 on screen
VIDEO_FPS = 15  # 60 emulator frames per second at frame skip 4: real time


def check_video_path(path: str) -> None:
    if Path(path).suffix.lower() not in (".mp4", ".gif"):
        raise ConfigError(f"--video {path}: give a .mp4 or .gif file")
    if not Path(path).resolve().parent.is_dir():
        raise ConfigError(f"--video {path}: the folder {Path(path).resolve().parent} does not exist")


def check_display() -> None:
    """--render needs a display; say clearly when there is none."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise ConfigError(
            "--render: this machine has no display (DISPLAY and WAYLAND_DISPLAY are unset); "
            "record the first episode with --video out.mp4 instead"
        )


@contextlib.contextmanager
def _cwd_off_path():
    """Processes started meanwhile (spawn runs python -c) put no working folder first on sys.path before they take
    this process's path: a run folder as the working folder must not shadow a module they import."""
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = before


def _view(frame: np.ndarray) -> np.ndarray:
    """One preprocessed frame as an RGB image, scaled up."""
    big = np.repeat(np.repeat(frame, VIDEO_SCALE, axis=0), VIDEO_SCALE, axis=1)
    return np.stack([big] * 3, axis=-1) if big.ndim == 2 else big


def write_video(path: str, frames: list[np.ndarray]) -> None:
    import imageio.v2 as imageio

    images: list[ArrayLike] = [_view(f) for f in frames]  # imageio's stubs take a list of any array-like
    if path.lower().endswith(".gif"):
        imageio.mimsave(path, images, duration=1000 / VIDEO_FPS, loop=0)
    else:
        imageio.mimsave(path, images, fps=VIDEO_FPS, macro_block_size=16)


class _Window:
    """A plain Tk window that shows frames as they are played (standard library only)."""

    def __init__(self, title: str) -> None:
        import tkinter

        self.root = tkinter.Tk()
        self.root.title(title)
        self.label = tkinter.Label(self.root)
        self.label.pack()
        self._tk = tkinter

    def show(self, frame: np.ndarray) -> None:
        image = _view(frame)
        header = f"P6 {image.shape[1]} {image.shape[0]} 255 ".encode()
        self.photo = self._tk.PhotoImage(data=header + image.astype(np.uint8).tobytes(), format="PPM")
        self.label.configure(image=self.photo)
        self.root.update()

    def close(self) -> None:
        self.root.destroy()


def stored_config(state: dict[str, Any], ckpt: Path, trusted: tuple[str, ...]) -> Config:
    """A checkpoint's stored config, which is data: its env.id may import a module only one of ``trusted``, and
    none from the checkpoint's run folder."""
    cfg = from_dict(state["config"], str(ckpt))
    check_env_import(cfg.env.id, str(ckpt), trusted, [run_folder(ckpt), ckpt.parent, cfg.run.results_dir])
    return cfg


def _play(job: Job) -> list[dict[str, Any]]:
    """Play this worker's episodes; one result dict per episode."""
    import torch

    torch.set_num_threads(1)
    state = checkpoint.load(job.ckpt)
    cfg = stored_config(state, Path(job.ckpt), job.trusted)  # again: the file may have changed since the check
    player = Player(cfg, job.protocol, job.greedy)
    player.model.load_state_dict(state["model"])
    results = []
    for episode in job.episodes:
        watched = episode == 0 and (job.video or job.render) and len(player.frame_shape) == 2
        recorded: list[np.ndarray] = []
        window = _Window(f"zrl-eval {cfg.env.id} ({job.protocol})") if watched and job.render else None

        def watch(frame: np.ndarray, window=window, recorded=recorded) -> None:
            if job.video:
                recorded.append(frame.copy())
            if window is not None:
                window.show(frame)

        result = player.play(job.seed + episode, on_frame=watch if watched else None)
        assert result is not None  # play gives up only when its idle asks, and there is none
        if window is not None:
            window.close()
        if job.video and recorded:  # recorded only with a video to write
            write_video(job.video, recorded)
        results.append({"episode": episode, **result})
    return results


def evaluate(
    ref: str,
    episodes: int = 100,
    protocol: str = "deepmind",
    seed: int = 0,
    workers: int = 1,
    greedy: bool = False,
    out_dir: Path | None = None,
    progress=print,
    video: str | None = None,
    render: bool = False,
    trusted: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Play, summarise, write eval/<protocol>_<timestamp>.json and .csv; returns the report. ``trusted``: env
    modules the checkpoint's env.id may import (--trust-env-module)."""
    from zrl.envs import atari_rom

    if episodes < 1:
        raise ConfigError(f"--episodes: must be >= 1, got {episodes}")
    if workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {workers}")
    if video is not None:
        check_video_path(video)
    if render:
        check_display()
    ckpt = find_checkpoint(ref)
    try:
        state = checkpoint.load(ckpt)
    except checkpoint.CheckpointError as err:
        raise ConfigError(str(err)) from None
    cfg = stored_config(state, ckpt, trusted)
    protocol_env(cfg.env, protocol)  # a bad protocol name fails here, before any process starts
    rom = atari_rom(cfg.env.id)
    workers = min(workers, episodes)
    jobs = [
        Job(
            str(ckpt),
            protocol,
            greedy,
            seed,
            tuple(range(k, episodes, workers)),
            video if k == 0 else None,
            render and k == 0,
            tuple(trusted),
        )
        for k in range(workers)
    ]
    progress(
        f"zrl-eval: {episodes} episodes of {cfg.env.id} under {protocol} with {ckpt} "
        f"(learner step {state.get('learner_step', '?')}), {workers} processes, seed {seed}"
    )
    start = time.monotonic()
    if workers == 1:
        played = _play(jobs[0])
    else:
        with _cwd_off_path(), mp.get_context("spawn").Pool(workers) as pool:
            played = [r for part in pool.map(_play, jobs) for r in part]
    played.sort(key=lambda r: r["episode"])
    score = np.array([r["score"] for r in played], np.float64)
    report: dict[str, Any] = {
        "checkpoint": str(ckpt),
        "sha256": checkpoint.hash_path(ckpt).read_text().split()[0],
        "learner_step": state.get("learner_step"),
        "env_frames": state.get("env_frames"),
        "env_id": cfg.env.id,
        "protocol": protocol,
        "episodes": episodes,
        "seed": seed,
        "workers": workers,
        "action_rule": "greedy" if greedy else "sample",
        "seconds": round(time.monotonic() - start, 2),
        "score": summary(score, seed),
        "reference_scores": scores.SOURCE,
    }
    if rom is not None and rom in scores.SCORES:
        report["human_normalised_mean"] = scores.human_normalised(rom, report["score"]["mean"])
        report["reference"] = dict(zip(("random", "human", "record"), scores.SCORES[rom]))
    if protocol == "saber":
        report["score_5min"] = summary(np.array([r["score_5min"] for r in played]), seed)
        report["score_30min"] = summary(np.array([r["score_30min"] for r in played]), seed)
        if rom is not None:
            report["record_normalised_mean"] = scores.record_normalised(rom, report["score"]["mean"])
    report["per_episode"] = played
    if video is not None:
        report["video"] = str(Path(video).resolve())
    folder = (out_dir or run_folder(ckpt)) / "eval"
    try:  # a run folder may come from elsewhere: nothing is written through a link in it
        folder.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.make_folder(folder)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        stem = folder / f"{protocol}_{stamp}"
        for n in range(1, 1000):  # two evaluations in the same second keep both
            if not os.path.lexists(stem.with_suffix(".json")):
                break
            stem = folder / f"{protocol}_{stamp}-{n}"
        rows = io.StringIO()
        writer = csv.DictWriter(rows, fieldnames=list(played[0]))
        writer.writeheader()
        writer.writerows(played)
        checkpoint.write_atomic(stem.with_suffix(".json"), (json.dumps(report, indent=2) + "\n").encode())
        checkpoint.write_atomic(stem.with_suffix(".csv"), rows.getvalue().encode())
    except checkpoint.UnsafeFile as err:
        raise ConfigError(str(err)) from None
    report["files"] = [str(stem.with_suffix(".json")), str(stem.with_suffix(".csv"))]
    return report


def table(report: dict[str, Any]) -> str:
    """The report as a few aligned lines."""
    rows = [("score", report["score"])]
    if "score_5min" in report:
        rows += [("score at 5 min", report["score_5min"]), ("score at 30 min", report["score_30min"])]
    lines = [f"{'':16} {'mean':>10} {'95% CI':>23} {'median':>10} {'min':>10} {'max':>10} {'std':>10}"]
    for name, s in rows:
        ci = f"[{s['ci95_low']:.1f}, {s['ci95_high']:.1f}]"
        lines.append(
            f"{name:16} {s['mean']:>10.1f} {ci:>23} {s['median']:>10.1f} {s['min']:>10.1f} "
            f"{s['max']:>10.1f} {s['std']:>10.1f}"
        )
    if report.get("human_normalised_mean") is not None:
        lines.append(f"human-normalised mean: {report['human_normalised_mean']:.3f}")
    if report.get("record_normalised_mean") is not None:
        lines.append(f"world-record-normalised mean (SABER): {report['record_normalised_mean']:.4f}")
    ended: dict[str, int] = {}
    for r in report["per_episode"]:
        ended[r["ended_by"]] = ended.get(r["ended_by"], 0) + 1
    lines.append("episodes ended by: " + ", ".join(f"{k} {v}" for k, v in sorted(ended.items())))
    return "\n".join(lines)


def newest_eval(run: str, protocol: str) -> dict[str, Any]:
    found = sorted((Path(run) / "eval").glob(f"{protocol}_*.json"), key=lambda p: p.stat().st_mtime_ns)
    if not found:
        raise ConfigError(f"{run}: no {protocol} evaluation in {Path(run) / 'eval'}; run zrl-eval {run} first")
    return json.loads(found[-1].read_text())


def compare(run_a: str, run_b: str, protocol: str, seed: int = 0) -> dict[str, Any]:
    """Two runs' newest evaluations under a protocol, side by side, with the difference of means (B - A) and
    its 95% bootstrap interval (episodes resampled independently in each run)."""
    a, b = newest_eval(run_a, protocol), newest_eval(run_b, protocol)
    sa = np.array([r["score"] for r in a["per_episode"]])
    sb = np.array([r["score"] for r in b["per_episode"]])
    rng = np.random.default_rng(seed)
    diffs = rng.choice(sb, (BOOTSTRAP_RESAMPLES, len(sb))).mean(axis=1) - rng.choice(
        sa, (BOOTSTRAP_RESAMPLES, len(sa))
    ).mean(axis=1)
    return {
        "protocol": protocol,
        "a": {"run": run_a, **a["score"], "episodes": len(sa)},
        "b": {"run": run_b, **b["score"], "episodes": len(sb)},
        "difference_of_means": float(sb.mean() - sa.mean()),
        "ci95_low": float(np.percentile(diffs, 2.5)),
        "ci95_high": float(np.percentile(diffs, 97.5)),
        "significant": bool(np.percentile(diffs, 2.5) > 0 or np.percentile(diffs, 97.5) < 0),
    }
