"""The tally: what the launcher knows of the run from the roles' stats messages, and what it makes of them: the
live progress line, a metrics.csv row, an episodes.csv row per episode, best.json's record and the closing
summary. A resumed run continues its counters from its folder's files."""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from zrl import protocol
from zrl.config import Config
from zrl.metrics.reading import number, read_csv


def _first(*values: float | None) -> float:
    """The first of ``values`` that is not None."""
    return next(v for v in values if v is not None)


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


_COMBINE: dict[str, Callable[[list[Any]], Any]] = {
    "value": lambda values: values[-1],
    "sum": sum,
    "min": min,
    "max": max,
}


RETURNS_KEPT = 100  # the episodes mean_return_100 is over
RATIO_ROWS = 12  # rows of metrics.csv the replay ratio achieved is measured over


def stat_columns(reports: list, figures: tuple[str, ...] = ()) -> dict:
    """The metrics.csv columns of the latest reports of one kind of role (every worker's, or the broker's, or
    the learner's), as their message's ``protocol.Stat`` fields declare them; an array is written as its
    numbers, space-separated. And of the agent's own ``figures`` (its declared names: nothing else a report
    carries becomes a column), those in the last report (the broker's and the learner's: there is one)."""
    out: dict = {}
    for name, stat in type(reports[0]).STATS if reports else ():
        value = _COMBINE[stat.combine]([getattr(r, name) for r in reports])
        out[stat.column] = " ".join(str(int(n)) for n in value) if isinstance(value, np.ndarray) else value
    carried = getattr(reports[-1], "figures", {}) if reports else {}
    out.update({name: carried[name] for name in figures if name in carried})
    return out


@dataclass
class Tally:
    """What the launcher knows of the run, from the stats messages."""

    workers: dict[int, protocol.WorkerStats] = field(default_factory=dict)
    broker: protocol.BrokerStats | None = None
    learner: protocol.LearnerStats | None = None
    ingest: protocol.IngestStats | None = None  # a run with remote workers
    _evaluator_life: protocol.EvaluatorStats | None = None  # the current evaluator's own last report
    _evaluator_before: tuple[int, ...] = (0, 0, 0)  # the counts of this launch's evaluators before it
    returns: deque = field(default_factory=lambda: deque(maxlen=RETURNS_KEPT))  # the last 100 episodes' raw scores
    scores_5min: deque = field(default_factory=lambda: deque(maxlen=100))  # and SABER-style, capped at 5 minutes
    scores_30min: deque = field(default_factory=lambda: deque(maxlen=100))  # and at 30 minutes
    episodes: int = 0
    frames_start: int = 0  # env frames of the run before this launch (resume)
    best_return: float = float("-inf")  # the 100-episode mean of best.pt
    worker_restarts: int = 0
    role_restarts: int = 0  # restarts of the run's roles (run.restart_policy)
    stats_errors: int = 0  # stats-channel messages dropped as malformed or not from this run's roles
    stats_forged: int = 0  # of those, the ones without the run's stats token (Wiring.take_stats counts them)
    # a worker whose stats stopped this long ago (dead, replaced, a remote one that left) counts in no worker
    # figure of a metrics row (its frames still count): a departed remote worker's last weights version held
    # worker_policy_version_min back after each SIGKILL of it in the chaos soak (perf/README.md)
    live_window_s: float = 5.0
    heard: dict[int, float] = field(default_factory=dict)  # each worker's last stats, monotonic time
    replay_ratio_target: float = 0.0  # samples trained per fresh sample the run asks for (the agent's)
    figures: tuple[
        str, ...
    ] = ()  # the agent's own columns (zrl.metrics.columns.agent_figures), from its roles' reports
    _last_interval: dict | None = None
    _ratio_marks: deque = field(default_factory=lambda: deque(maxlen=RATIO_ROWS))  # (frames played, trained)
    # the learner step of the first learner report since the start or a restart: that report (sent before any
    # batch) carries a checkpoint's counts or 0, not the broker's count of frames played since, so it is no mark
    _ratio_from_step: int | None = None
    _last_rates: tuple | None = None  # (env frames, time, learner samples) at the last rates()

    @property
    def env_frames(self) -> int:
        return self.frames_start + sum(w.env_frames for w in self.workers.values())

    def frames_at(self, worker_id: int, own_frames: int) -> int:
        """The run's env frames when worker ``worker_id`` had played ``own_frames``: its own count, which an
        episode carries, and the others' latest reports (its stats may not have come yet)."""
        others = sum(w.env_frames for wid, w in self.workers.items() if wid != worker_id)
        return self.frames_start + others + own_frames

    def take(self, msg) -> dict | None:
        """Count one stats message of this run's roles (an Episode or a role's stats); an Episode's row of
        episodes.csv, None for the others."""
        if isinstance(msg, protocol.Episode):
            self.episodes += 1
            self.returns.append(msg.raw_return)
            self.scores_5min.append(msg.score_5min)
            self.scores_30min.append(msg.score_30min)
            return {
                "episode": self.episodes,
                "raw_return": msg.raw_return,
                "score_5min": msg.score_5min,
                "score_30min": msg.score_30min,
                "length_frames": msg.length_frames,
                "length_env_steps": msg.length_env_steps,
                "env_frames": self.frames_at(msg.worker_id, msg.env_frames),
                "wall_time": f"{msg.wall_time:.3f}",
                "worker_id": msg.worker_id,
                "env_index": msg.env_index,
            }
        if isinstance(msg, protocol.WorkerStats):
            self.workers[msg.worker_id] = msg
            self.heard[msg.worker_id] = time.monotonic()
        elif isinstance(msg, protocol.BrokerStats):
            self.broker = msg
        elif isinstance(msg, protocol.LearnerStats):
            self.learner = msg
        elif isinstance(msg, protocol.IngestStats):
            self.ingest = msg
        elif isinstance(msg, protocol.EvaluatorStats):
            life = self._evaluator_life
            if life is not None and msg.pid != life.pid:  # a new evaluator, counting from 0: keep the last one's
                self._evaluator_before = tuple(
                    n + m for n, m in zip(self._evaluator_before, (life.evaluations, life.episodes, life.skipped))
                )
            self._evaluator_life = msg
        return None

    @property
    def evaluator(self) -> protocol.EvaluatorStats | None:
        """The evaluator's last report with this launch's counts: a restarted one's go on from those before it."""
        life = self._evaluator_life
        if life is None:
            return None
        evaluations, episodes, skipped = self._evaluator_before
        return msgspec.structs.replace(
            life,
            evaluations=evaluations + life.evaluations,
            episodes=episodes + life.episodes,
            skipped=skipped + life.skipped,
        )

    def rates(self, now: float) -> tuple[float, float]:
        """Env frames and learner samples per second since the last call (the first: since this launch's start,
        ``now`` then marking it, with both rates 0)."""
        frames = self.env_frames
        samples = self.learner.samples if self.learner else None
        last, self._last_rates = self._last_rates, (frames, now, samples)
        if last is None or now <= last[1]:
            return 0.0, 0.0
        fps = (frames - last[0]) / (now - last[1])
        sps = (samples - last[2]) / (now - last[1]) if None not in (samples, last[2]) else 0.0
        return fps, sps

    def restarted(self) -> None:
        """The run's roles were restarted: their reports start again from a checkpoint's counts or from 0, so the
        old ones are no baseline for rates and time shares (the workers' frame counts go on, and stay)."""
        self.learner = self.broker = self.ingest = None
        self._last_interval = None
        self._ratio_marks.clear()
        self._ratio_from_step = None
        if self._last_rates is not None:
            self._last_rates = (*self._last_rates[:2], None)

    def interval_figures(self) -> dict[str, float]:
        """Figures since the last call: the learner's wait for batches as a fraction of its loop time, its
        seconds per step, the broker's seconds per batch made (feature passes included), and the replay ratio
        achieved: env frames trained on (a sample counts each time) per env frame the workers had played by the
        batches trained on."""
        ls, b = self.learner, self.broker
        now = {
            "wait": ls.wait_time_s if ls else 0.0,
            "busy": (ls.step_time_s + ls.gather_time_s + ls.publish_time_s) if ls else 0.0,
            "steps": ls.learner_step if ls else 0,
            "prepare": b.prepare_time_s if b else 0.0,
            "features": b.feature_time_s if b else 0.0,
            "batches": b.batches_sent if b else 0,
        }
        last, self._last_interval = self._last_interval or dict.fromkeys(now, 0), now
        d = {k: now[k] - last[k] for k in now}
        out: dict[str, float] = {}
        if d["wait"] + d["busy"] > 0:
            out["learner_wait_fraction"] = d["wait"] / (d["wait"] + d["busy"])
        if d["steps"] > 0:
            out["learner_step_s"] = d["busy"] / d["steps"]
        if ls is not None and self._ratio_from_step is None:
            self._ratio_from_step = ls.learner_step
        elif ls is not None and self._ratio_from_step is not None and ls.learner_step > self._ratio_from_step:
            # over the last RATIO_ROWS rows, both counts from the learner's one report
            self._ratio_marks.append((ls.env_frames, ls.env_frames_trained))
            (played, trained), (played_now, trained_now) = self._ratio_marks[0], self._ratio_marks[-1]
            if played_now > played:
                out["replay_ratio"] = (trained_now - trained) / (played_now - played)
        if d["batches"] > 0:
            out["broker_prepare_s"] = d["prepare"] / d["batches"]
            out["broker_feature_s"] = d["features"] / d["batches"]
        return out

    def live_workers(self) -> list[protocol.WorkerStats]:
        """The latest stats of the workers heard from within ``live_window_s`` (every worker's when none is)."""
        now = time.monotonic()
        live = [w for wid, w in self.workers.items() if now - self.heard.get(wid, now) <= self.live_window_s]
        return live or list(self.workers.values())

    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")

    def metrics_row(self, elapsed: float, fps: float, sps: float) -> dict:
        """One row of metrics.csv: the run's counts, the roles' latest figures and the interval's time shares."""
        row: dict = {
            "wall_time": f"{time.time():.3f}",
            "elapsed_s": round(elapsed, 3),
            "env_frames": self.env_frames,
            "frames_per_s": fps,
            "samples_per_s": sps,
            "episodes": self.episodes,
            "mean_return_100": self.mean_return(),
            "worker_restarts": self.worker_restarts,
            "role_restarts": self.role_restarts,
            "stats_decode_errors": self.stats_errors,
        }
        for reports in (self.live_workers(), [self.broker], [self.learner], [self.ingest], [self.evaluator]):
            row.update(stat_columns([r for r in reports if r is not None], self.figures))
        row.update(self.interval_figures())
        row["replay_ratio_target"] = self.replay_ratio_target
        return row

    def best_record(self, checkpoint_name: str) -> dict | None:
        """best.json's record for the checkpoint just written, when the mean raw score over the full last 100
        episodes beats best.pt's; None otherwise. The caller sets ``best_return`` once best.pt is written."""
        mean = self.mean_return()
        if len(self.returns) < RETURNS_KEPT or not mean > self.best_return or not math.isfinite(mean):
            return None
        return {
            "mean_return_100": mean,
            "mean_score_5min_100": _mean(self.scores_5min),
            "mean_score_30min_100": _mean(self.scores_30min),
            "episodes": self.episodes,
            "checkpoint": checkpoint_name,
            "env_frames": self.env_frames,
        }

    def seed(self, run_dir: Path) -> None:
        """Continue the counters of a resumed run from its files: episodes, the last 100 returns, best.pt's score."""
        # read_csv leaves out a torn last line (a kill or a full disk mid-write) and any malformed line
        rows = [r for r in read_csv(run_dir / "episodes.csv")[0] if r.get("episode", "").isdigit()]
        rows = [r for r in rows if number(r, "raw_return") is not None]
        self.episodes = max((int(r["episode"]) for r in rows), default=0)
        self.returns.extend(number(r, "raw_return") for r in rows[-100:])
        for scores, column in ((self.scores_5min, "score_5min"), (self.scores_30min, "score_30min")):
            # older runs have no capped scores: their uncapped return stands in
            scores.extend(_first(number(r, column), number(r, "raw_return")) for r in rows[-100:])
        # frames the workers made after the checkpoint's last batch were counted too: never count backwards
        for name in ("metrics.csv", "episodes.csv"):
            frames = [r["env_frames"] for r in read_csv(run_dir / name)[0] if r.get("env_frames", "").isdigit()]
            self.frames_start = max([self.frames_start, *map(int, frames[-1:])])
        best = run_dir / "checkpoints" / "best.json"
        try:
            best_return = float(json.loads(best.read_text())["mean_return_100"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if math.isfinite(best_return):  # an infinite best would freeze best.pt for the rest of the run
            self.best_return = best_return

    def summary(self, code: int) -> str:
        """The closing line: the exit code and the run's counts."""
        versions = [w.policy_version for w in self.workers.values()]
        return (
            f"exit {code}: {self.env_frames:,} env frames, {self.learner.learner_step if self.learner else 0:,} "
            f"learner steps, {self.episodes} episodes, mean return(100) {self.mean_return():.2f}, "
            f"worker weights version {max(versions) if versions else 0}"
        )


def progress_line(t: Tally, elapsed: float, fps: float, fill: list[int]) -> str:
    """The live line: frames and their rate, the replays' fill before the first learner step, learner steps,
    policy lag, the 100-episode mean return and the run's time."""
    ls = t.learner
    h, rem = divmod(int(elapsed), 3600)
    filling = ""
    if (not ls or ls.learner_step == 0) and t.broker is not None and len(t.broker.replay_sizes) == len(fill):
        held = sum(min(int(n), target) for n, target in zip(t.broker.replay_sizes, fill))
        filling = f" | filling replays {held:,}/{sum(fill):,} units"
    return (
        f"frames {t.env_frames:,} | {fps:,.0f} f/s{filling} | learner {ls.learner_step if ls else 0:,} steps"
        f" | lag {ls.policy_lag if ls else 0:.1f} | return(100) {t.mean_return():.1f} ({t.episodes} eps)"
        f" | {h}:{rem // 60:02d}:{rem % 60:02d}"
    )


def stop_reason(cfg: Config, t: Tally, solved: protocol.EvalResult | None, elapsed: float) -> str | None:
    """Why the run stops now, or None: an evaluation reached eval.stop_at_score, the budget of frames is played
    (in a deterministic run, trained), the last 100 training episodes reached run.stop_at_return, or the
    wall-clock budget is spent."""
    run = cfg.run
    trained = t.learner.env_frames_trained if t.learner is not None else 0
    if solved is not None:
        return f"evaluation score {solved.mean:.2f} reached eval.stop_at_score"
    if (trained if run.deterministic else t.env_frames) >= run.max_env_frames:
        return "budget reached"
    if len(t.returns) >= RETURNS_KEPT and t.mean_return() >= run.stop_at_return:
        return f"the last {RETURNS_KEPT} episodes' mean return {t.mean_return():.2f} reached run.stop_at_return"
    if run.max_seconds and elapsed >= run.max_seconds:
        return "time limit reached"
    return None
