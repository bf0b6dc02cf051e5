"""The stats channel as the launcher takes it: every report its roles send (stats, heartbeats, episodes,
checkpoints, evaluation results), decoded and checked, then counted in the tally, written to the run folder
(episodes.csv, best.pt) or handed to the evaluations. The launcher hands this part the wiring, tally, supervisor,
run folder and evaluations it reads into."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

from zrl import bounds, protocol
from zrl.config import Config

log = logging.getLogger("zrl")

CHECKPOINT_NAME = re.compile(r"ckpt_\d{9,}\.pt")  # checkpoint.PATTERN's names: the learner's periodic checkpoints


class Reports:
    """The run's stats channel: ``drain`` takes what waits on it."""

    def __init__(self, cfg: Config, wiring, tally, sup, folder, evaluations) -> None:
        self.cfg, self.wiring, self.tally, self.sup = cfg, wiring, tally, sup
        self.folder, self.evaluations = folder, evaluations
        self.last_checkpoint = ""  # the last checkpoint the learner said it wrote

    def drain(self, timeout_ms: int) -> None:
        """Take every message waiting on the stats channel, waiting up to ``timeout_ms`` for the first."""
        data = self.wiring.take_stats(timeout_ms)
        while data is not None:
            self._take(data)
            data = self.wiring.take_stats(0)
        if self.wiring.stats_forged > self.tally.stats_forged:  # counted with the malformed, said at first
            if not self.tally.stats_forged:
                log.warning("dropped a stats message without this run's token: not from one of its roles")
            self.tally.stats_errors += self.wiring.stats_forged - self.tally.stats_forged
            self.tally.stats_forged = self.wiring.stats_forged

    def _take(self, data: bytes) -> None:
        t = self.tally
        try:
            msg = protocol.decode(data)
            current = self.sup.heard(msg, time.monotonic())
            if why := self._misfit(msg):
                raise protocol.ProtocolError(why)
        except protocol.ProtocolError as err:
            t.stats_errors += 1
            if t.stats_errors <= 10:  # counted in metrics.csv; logged only at first
                log.warning("dropped a malformed stats message: %s", bounds.printable(str(err)))
            return
        if not current:  # late news from a worker that has been replaced
            return
        if isinstance(msg, protocol.EvalResult):
            self.evaluations.took(msg)
            return
        row = t.take(msg)
        if row is not None:
            self.folder.write_episode(row, t.mean_return())
        if (
            isinstance(msg, protocol.LearnerStats)
            and msg.checkpoint_path
            and msg.checkpoint_path != self.last_checkpoint
        ):
            self.last_checkpoint = msg.checkpoint_path
            if self.cfg.run.best_by == "train":  # "eval": the evaluator keeps best.pt
                self._maybe_best(Path(msg.checkpoint_path))

    def _misfit(self, msg) -> str | None:
        """Why a stats message from a role cannot be right, or None: an episode out of range (an infinite return
        would hold best.pt for the rest of the run), a checkpoint that is not one of this run's (best.pt is copied
        from it)."""
        if isinstance(msg, protocol.Episode):
            return bounds.episode_misfit(msg, self.cfg.workers.envs_per_worker)
        if isinstance(msg, protocol.LearnerStats) and msg.checkpoint_path:
            path = Path(msg.checkpoint_path)
            own = self.folder.checkpoints.resolve()
            if not (CHECKPOINT_NAME.fullmatch(path.name) and path.parent.resolve() == own and not path.is_symlink()):
                return f"a checkpoint outside this run's {own}: {bounds.printable(msg.checkpoint_path)}"
        return None

    def _maybe_best(self, path: Path) -> None:
        """Keep best.pt: the checkpoint written when the 100-episode mean raw score was at its best."""
        record = self.tally.best_record(path.name)
        if record is not None and self.folder.keep_best(path, record):
            self.tally.best_return = record["mean_return_100"]
            log.info(
                "best.pt: %s, mean return(100) %.2f over %d episodes",
                path.name,
                record["mean_return_100"],
                len(self.tally.returns),
            )
