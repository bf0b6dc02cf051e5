"""Evaluation during training as the launcher runs it (eval.interval_frames): when the evaluator is asked, the env
frames at which each result's weights were taken, each result's row in eval.csv and its line, the score that ends
the run (eval.stop_at_score), and eval.final's evaluation of the final checkpoint once the run's roles are down.
The evaluator itself is zrl/roles/evaluator.py; the launcher hands this part its run folder and supervisor."""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from zrl import envs, protocol, transport
from zrl.config import Config
from zrl.launch.console import Console
from zrl.metrics.columns import EVAL_COLUMNS
from zrl.roles.run_wiring import StopFlag

log = logging.getLogger("zrl")

FINAL_EXIT_S = 15.0  # how long the final evaluator has to exit after its result (its stats socket lingers 5 s)
FRAMES_SEEN = 20_000  # the launcher's (time, frames) history kept for eval.csv: 2.8 hours of it
FRAMES_SEEN_EVERY_S = 0.5


class Evaluations:
    """A run's evaluations: ``folder`` is its RunFolder (eval.csv), ``sup`` its Supervisor, and ``role`` the
    evaluator's name among the supervisor's processes."""

    def __init__(self, cfg: Config, console: Console, folder, sup, role: str) -> None:
        self.cfg, self.console, self.folder, self.sup, self.role = cfg, console, folder, sup, role
        self.final_result: protocol.EvalResult | None = None  # eval.final's, once it came
        self.solved: protocol.EvalResult | None = None  # the evaluation that reached eval.stop_at_score
        # eval.interval_frames: (unix time, env frames) every FRAMES_SEEN_EVERY_S as the run went, to place an
        # evaluation at the frames when its weights were taken
        self.frames_seen: deque = deque(maxlen=FRAMES_SEEN)
        self.started_at = 0.0  # the launch's start, in unix time
        self.next_eval = 0  # the env frames at which the next evaluation is asked for

    def begin(self, env_frames: int, started_at: float) -> None:
        """The launch watches its roles from ``env_frames`` (a resumed run's go on) and unix time ``started_at``."""
        interval = self.cfg.eval.interval_frames
        self.next_eval = (env_frames // interval + 1) * interval if interval else 0
        self.started_at = started_at

    def watch(self, env_frames: int, requests) -> None:
        """A turn of the launcher's watch at ``env_frames``: note the frames, and ask for an evaluation when one
        is due, on ``requests`` (the wiring's PUSH to the evaluator)."""
        interval = self.cfg.eval.interval_frames
        if not interval:
            return
        unix = time.time()
        if not self.frames_seen or unix - self.frames_seen[-1][0] >= FRAMES_SEEN_EVERY_S:
            self.frames_seen.append((unix, env_frames))
        if env_frames >= self.next_eval:
            self.ask(env_frames // interval, env_frames, requests)
            self.next_eval = (env_frames // interval + 1) * interval

    def ask(self, index: int, env_frames: int, requests) -> None:
        """Ask the evaluator for evaluation ``index`` of the learner's latest weights (eval.interval_frames); none
        once it is lost for good."""
        if self.role not in self.sup.procs:
            return
        request = protocol.EvalRequest(index=index, env_frames=env_frames)
        if not transport.send_nowait(requests, request.encode()):
            # no evaluator connected (it is restarting) or its queue is full: this one is skipped
            log.warning(
                "evaluation %d at %s env frames skipped: the evaluator is not taking requests", index, env_frames
            )

    def frames_at(self, when: float, asked: int) -> int:
        """The run's env frames at unix time ``when`` (from the recent history, sampled every FRAMES_SEEN_EVERY_S),
        and never fewer than ``asked``, the frames its request was sent at (the weights were taken after it)."""
        times = self.frames_seen
        i = bisect.bisect_right(times, (when, float("inf"))) - 1
        return max(asked, times[i][1]) if i >= 0 else asked

    def took(self, msg: protocol.EvalResult) -> None:
        """An evaluation's result: kept when it is eval.final's or the first to reach eval.stop_at_score."""
        self._evaluated(msg)
        if msg.final:
            self.final_result = msg
        elif msg.mean >= self.cfg.eval.stop_at_score and self.solved is None:
            self.solved = msg

    def _evaluated(self, msg: protocol.EvalResult) -> None:
        """An evaluation's result: a row of eval.csv and TensorBoard's eval/* at the frames when its weights were
        taken, said and logged."""
        row = {
            "wall_time": f"{msg.weights_time:.3f}",
            "elapsed_s": round(msg.weights_time - self.started_at, 3),
            **{name: getattr(msg, name) for name in EVAL_COLUMNS[2:]},
            "env_frames": self.frames_at(msg.weights_time, msg.env_frames),
        }
        row = {k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        self.folder.write_evaluation(row)
        normalised = f", human-normalised {msg.human_normalised:.3f}" if math.isfinite(msg.human_normalised) else ""
        q = f", mean max-Q {msg.mean_max_q:.3f}" if math.isfinite(msg.mean_max_q) else ""
        text = (
            f"{'final ' if msg.final else ''}evaluation at {row['env_frames']:,} frames ({msg.protocol}, {msg.episodes} episodes, "
            f"{msg.seconds:.0f} s): mean {msg.mean:.2f} [{msg.ci95_low:.2f}, {msg.ci95_high:.2f}]{normalised}{q}"
            + ("; best.pt now holds these weights" if msg.best else "")
        )
        log.info(text)
        self.console.line("")
        self.console.say(text)

    def final(
        self,
        path: Path | None,
        env_frames: int,
        ray_workers,
        drain: Callable[[int], None],
        start: Callable[[protocol.EvalRequest, float], StopFlag],
    ) -> int | None:
        """eval.final: once the run's roles are down (any left after their grace killed, Ray's actors let go), a
        fresh evaluator plays the learner's final checkpoint under the run's evaluation terms; wait for its result
        and its exit, saying how far it is. None also when it is skipped, fails or hangs (said: training ended
        well); a signal's exit code when one stops it. ``path``: the final checkpoint; ``ray_workers``: the run's
        RayWorkers or None; ``drain(timeout_ms)``: takes the stats channel's messages; ``start(request, now)``:
        starts the evaluator on ``request`` under a stop flag of its own, and gives that flag."""
        cfg, sup = self.cfg, self.sup
        skip = (
            "a signal came while the run stopped"
            if sup.signal_code() is not None
            else "the evaluator was given up on during the run"
            if sup.evaluator_lost
            else "the learner wrote no checkpoint"
            if path is None or not path.is_file()
            else ""
        )
        if skip:
            log.warning("no final evaluation: %s", skip)
            self.console.say(f"no final evaluation: {skip}")
            return None
        assert path is not None  # skipped above otherwise
        sup.kill()  # a role that outlived its grace: killed and reaped, not left beside the evaluator
        if ray_workers is not None:
            ray_workers.close()
        drain(200)  # the last words of the roles, before a new evaluator takes the name
        text = (
            f"final evaluation of {path.name} at {env_frames:,} env frames: {cfg.eval.episodes} episodes under "
            f"{envs.run_protocol(cfg)}, the run's roles stopped (Ctrl-C skips it)"
        )
        log.info(text)
        self.console.say(text)
        request = protocol.EvalRequest(
            index=env_frames // cfg.eval.interval_frames, env_frames=env_frames, checkpoint=str(path)
        )
        began = time.monotonic()
        stop = start(request, began)
        next_line = began + cfg.run.log_interval_s
        while self.final_result is None:
            drain(cfg.transport.poll_timeout_ms)
            if (code := sup.signal_code()) is not None:
                log.warning("the final evaluation was stopped by a signal")
                return code
            now = time.monotonic()
            why = sup.lost(self.role, now, drain) if self.final_result is None else None
            if why is not None and self.final_result is None:  # not when its result came in with its last words
                text = f"the final evaluation failed: {self.role} {why}" + sup.traceback_of(self.role)
                log.warning(text)
                self.console.say(text)
                return None
            if now >= next_line:
                self.console.line(f"final evaluation: {now - began:,.0f} s")
                next_line = now + cfg.run.log_interval_s
        stop.set()
        sup.stop(drain, grace=FINAL_EXIT_S)  # it exits once its result is out: not killed for it
        return None
