"""Ape-X's broker side: the part the one broker loop (zrl/roles/broker.py) runs for this agent. It keeps the
workers' transitions in an :class:`ApexReplay` (a sum tree over them), makes a TransitionBatch per learner credit
once the replay holds ``apex.learn_start`` transitions, and applies the learner's PriorityUpdate replies.

``apex.replay_ratio`` R > 0 keeps about one learner step per R env steps (summed over workers and envs): the
broker holds batches back while the learner is ahead of the workers (the workers hold themselves back too, see
the actor), so that workers that ran ahead while the replay filled let the learner catch up.
"""

from __future__ import annotations

import time

import numpy as np

from shm.ring import Ring
from zrl.agents.apex_iqn import anneal_steps as apex_anneal_steps
from zrl.agents.apex_iqn.messages import PriorityUpdate, Transitions
from zrl.agents.apex_iqn.replay import ApexReplay
from zrl.agents.contracts import ReplyingBroker
from zrl.config import Config, worker_slots


class ApexBroker:
    message_type = Transitions
    inbox_per_turn = 64
    reply_type = PriorityUpdate  # the learner's new priorities, on the priorities socket
    wants_weights = False

    def __init__(self, cfg: Config, wiring, rings: list[Ring]) -> None:
        apex = cfg.apex
        self.apex, self.rings = apex, rings
        self.replay = ApexReplay(
            cfg.replay[0].capacity,
            cfg.learner.batch_size,
            apex.learn_start,
            worker_slots(cfg),
            cfg.workers.envs_per_worker,
            wiring.num_actions,
            apex.n_step,
            apex.importance_beta,
            apex_anneal_steps(cfg, wiring.frames_per_step),
            cfg.run.seed,
            max_abs_reward=cfg.broker.max_abs_reward,
            max_abs_value=cfg.broker.max_abs_value,
        )
        self.reach_back = cfg.env.frame_stack - 1  # a transition's stack reads this many frames before its own
        self.pace_from = apex.learn_start  # env steps of this launch before the learner's share counts
        self.prepare_time_s = 0.0

    def units(self, msg: Transitions) -> int:
        return msg.count

    def insert(self, msg: Transitions) -> str | None:
        return self.replay.insert(msg)

    def reply(self, msg: PriorityUpdate) -> str | None:
        return self.replay.update(msg)

    def next_batch(self, batch_id: int, env_frames: int, env_steps: int):
        """A TransitionBatch's message (and nothing to give back: the replay keeps what it samples), or None while
        the learner is ahead of the workers' share or the replay is filling."""
        apex = self.apex
        # The learner's share of the env steps past learn_start, the same count the workers pace themselves by.
        if apex.replay_ratio and batch_id - 1 >= 1 + (env_steps - self.pace_from) / apex.replay_ratio:
            return None  # the learner is ahead of the workers: wait for their transitions
        t0 = time.perf_counter()
        oldest = np.array([ring.head - ring.capacity + self.reach_back for ring in self.rings], np.int64)
        batch = self.replay.next_batch(batch_id, env_frames, oldest)
        self.prepare_time_s += time.perf_counter() - t0
        return None if batch is None else (batch.encode(), None)

    def put_back(self, taken) -> None:
        pass  # the sample is simply not used

    def index(self) -> bytes | None:
        return None  # the prioritized replay is saved whole instead, with run.checkpoint_replay

    def snapshot(self) -> dict[str, np.ndarray]:
        """The replay's content, as arrays (run.checkpoint_replay: zrl/replay_checkpoint.py)."""
        return self.replay.state()

    def restore(self, state: dict[str, np.ndarray]) -> int:
        """Hold what ``snapshot`` saved; the transitions that can still be drawn."""
        self.replay.load_state(state)
        r = self.replay.replay
        live = np.flatnonzero(r.tree.priorities > 0)
        workers, frame, following = (r.columns[c][live] for c in ("worker_id", "frame", "next_frame"))
        whole = np.ones(len(live), bool)
        for i, ring in enumerate(self.rings):  # frames saved as missing: never drawn (gather would drop them)
            mine = workers == i
            if mine.any():
                oldest = np.maximum(frame[mine] - self.reach_back, 0)
                whole[mine] = ring.valid(oldest) & ring.valid(frame[mine]) & ring.valid(following[mine])
        r.tree.update(live[~whole], np.zeros(int((~whole).sum())))
        r.evicted += int((~whole).sum())
        held = int(whole.sum())
        if held >= self.apex.learn_start:  # the learner goes on at once, at its share of the new env steps
            self.pace_from = 0
        return held

    def oldest_frames(self) -> np.ndarray:
        """Each ring's oldest frame a live transition reads (its stack's history included); the ring's head when
        none does."""
        r = self.replay.replay
        live = np.flatnonzero(r.tree.priorities > 0)
        oldest = np.array([ring.head for ring in self.rings], np.int64)
        workers = r.columns["worker_id"][live].astype(np.int64)
        np.minimum.at(oldest, workers, np.maximum(r.columns["frame"][live] - self.reach_back, 0))
        return oldest

    def stats(self) -> dict:
        size = len(self.replay.replay)
        return {
            "unrolls_dropped_stale": self.replay.replay.evicted,
            "unrolls_dropped_full": 0,
            "replay_size": size,
            "replay_sizes": np.array([size], np.int64),
            "prepare_time_s": self.prepare_time_s,
            "feature_time_s": 0.0,
        }


_: type[ReplyingBroker] = ApexBroker  # the contract, checked by mypy
