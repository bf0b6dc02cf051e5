"""Ape-X's broker side: the part the one broker loop (zrl/roles/broker.py) runs for this agent. It keeps the
workers' transitions in a prioritized replay (a sum tree over them), makes a TransitionBatch per learner credit
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
from zrl.agents.apex_iqn.messages import PriorityUpdate, TransitionBatch, Transitions
from zrl.agents.contracts import ReplyingBroker
from zrl.bounds import out_of_range, within_unit
from zrl.config import Config, worker_slots
from zrl.replay.prioritized import PrioritizedReplay
from zrl.replay.prioritized import Transitions as Columns
from zrl.replay.snapshot import prefixed, rng_state, scalar, section, set_rng_state
from zrl.replay.sumtree import annealed_beta


class ApexBroker:
    """Ape-X's part of the broker: the workers' transitions in one prioritized replay (first in, first out, drawn
    by priority), TransitionBatch messages out, the learner's PriorityUpdate replies applied. Messages that cannot
    be from this run are refused (a reason is returned), never stored."""

    EVICT_EVERY = 16  # batches between eviction scans (O(capacity)); a stale row drawn meanwhile fails at gather
    message_type = Transitions
    inbox_per_turn = 64
    reply_type = PriorityUpdate  # the learner's new priorities, on the priorities socket
    wants_weights = False

    def __init__(self, cfg: Config, wiring, rings: list[Ring]) -> None:
        """``wiring``: the run's (``RunWiring``), or any object with num_actions and frames_per_step."""
        apex = cfg.apex
        self.apex, self.rings = apex, rings
        beta_anneal_steps = apex_anneal_steps(cfg, wiring.frames_per_step)
        self.replay = PrioritizedReplay(cfg.replay[0].capacity)
        self.n_step = apex.n_step
        # what a worker's transitions may carry (the broker's keys): an n-step return sums n rewards
        self.max_return, self.max_priority = apex.n_step * cfg.broker.max_abs_reward, cfg.broker.max_abs_value
        self.batch_size, self.learn_start = cfg.learner.batch_size, apex.learn_start
        self.workers, self.envs_per_worker = worker_slots(cfg), cfg.workers.envs_per_worker
        self.num_actions = wiring.num_actions
        self.beta_start, self.beta_anneal_steps = apex.importance_beta, beta_anneal_steps
        self.rng = np.random.default_rng([cfg.run.seed, 7])
        self.batches = 0
        self.reach_back = cfg.env.frame_stack - 1  # a transition's stack reads this many frames before its own
        self.pace_from = apex.learn_start  # env steps of this launch before the learner's share counts
        self.prepare_time_s = 0.0

    def units(self, msg: Transitions) -> int:
        return msg.count

    def next_batch(self, batch_id: int, env_frames: int, env_steps: int):
        """A TransitionBatch's message (and nothing to give back: the replay keeps what it samples), or None while
        the learner is ahead of the workers' share or the replay is filling."""
        apex = self.apex
        # The learner's share of the env steps past learn_start, the same count the workers pace themselves by.
        if apex.replay_ratio and batch_id - 1 >= 1 + (env_steps - self.pace_from) / apex.replay_ratio:
            return None  # the learner is ahead of the workers: wait for their transitions
        t0 = time.perf_counter()
        oldest = np.array([ring.head - ring.capacity + self.reach_back for ring in self.rings], np.int64)
        batch = self.sample_batch(batch_id, env_frames, oldest)
        self.prepare_time_s += time.perf_counter() - t0
        return None if batch is None else (batch.encode(), None)

    def put_back(self, taken) -> None:
        pass  # the sample is simply not used

    def index(self) -> bytes | None:
        return None  # the prioritized replay is saved whole instead, with run.checkpoint_replay

    def snapshot(self) -> dict[str, np.ndarray]:
        """The replay's content, as arrays (run.checkpoint_replay: zrl/replay_checkpoint.py)."""
        return self.state()

    def restore(self, state: dict[str, np.ndarray]) -> int:
        """Hold what ``snapshot`` saved; the transitions that can still be drawn."""
        self.load_state(state)
        r = self.replay
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
        r = self.replay
        live = np.flatnonzero(r.tree.priorities > 0)
        oldest = np.array([ring.head for ring in self.rings], np.int64)
        workers = r.columns["worker_id"][live].astype(np.int64)
        np.minimum.at(oldest, workers, np.maximum(r.columns["frame"][live] - self.reach_back, 0))
        return oldest

    def stats(self) -> dict:
        size = len(self.replay)
        return {
            "unrolls_dropped_stale": self.replay.evicted,
            "unrolls_dropped_full": 0,
            "replay_size": size,
            "replay_sizes": np.array([size], np.int64),
            "prepare_time_s": self.prepare_time_s,
            "feature_time_s": 0.0,
        }

    def state(self) -> dict[str, np.ndarray]:
        """The replay, the batch count (beta's annealing) and the generator, as arrays."""
        return {
            **prefixed("replay", self.replay.state()),
            "batches": np.array(self.batches),
            "rng": rng_state(self.rng),
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.replay.load_state(section("replay", state))
        self.batches = int(scalar(state, "batches"))
        set_rng_state(self.rng, state["rng"])
        beyond = np.flatnonzero(self.replay.columns["worker_id"] >= self.workers)  # a run resumed with fewer workers
        self.replay.tree.update(beyond, np.zeros(beyond.size))

    def misfit(self, msg: Transitions) -> str | None:
        """Why a well-formed Transitions message cannot be from this run's workers, or None."""
        if not 0 <= msg.worker_id < self.workers:
            return f"worker_id {msg.worker_id} is not one of the {self.workers} workers"
        if msg.count == 0:
            return None
        if msg.count > self.replay.capacity:
            return f"{msg.count} transitions do not fit a replay of {self.replay.capacity}"
        if not (0 <= msg.env_index.min() and msg.env_index.max() < self.envs_per_worker):
            return f"an env index outside 0..{self.envs_per_worker - 1}"
        if not (0 <= msg.action.min() and msg.action.max() < self.num_actions):
            return f"actions outside the {self.num_actions} of this env"
        ahead = msg.next_frame - msg.frame
        if msg.frame.min() < 0 or ahead.min() < 0 or ahead.max() > self.n_step:
            return f"a negative frame number, or s_(t+n) not within {self.n_step} frames after s_t"
        if msg.priority.min() < -1:  # -1: unknown, the replay gives it its largest
            return "a negative priority other than -1 (unknown)"
        return (
            out_of_range("n-step returns", msg.nstep_return, self.max_return, f"{self.n_step} x broker.max_abs_reward")
            or out_of_range("priorities", msg.priority, self.max_priority, "broker.max_abs_value")
            or within_unit("bootstrap discounts", msg.bootstrap_discount)
        )

    def insert(self, msg: Transitions) -> str | None:
        """Store a worker's transitions with their initial priorities; the reason if refused (``misfit``)."""
        why = self.misfit(msg)
        if why is None and msg.count:
            n = msg.count
            self.replay.insert(
                Columns(
                    np.full(n, msg.worker_id, np.int32),
                    msg.env_index,
                    msg.frame,
                    msg.action,
                    msg.nstep_return,
                    msg.bootstrap_discount,
                    msg.next_frame,
                    np.full(n, msg.policy_version, np.int64),
                ),
                msg.priority,
            )
        return why

    def sample_batch(self, batch_id: int, env_frames: int, oldest_frame: np.ndarray) -> TransitionBatch | None:
        """A TransitionBatch once the replay holds ``learn_start`` transitions (transitions whose frames are
        older than ``oldest_frame[worker]``, ``[workers]`` integers, are evicted first), or None. Its columns
        are ``[batch_size]``, of ``COLUMNS``' dtypes and ``Sample``'s."""
        if len(self.replay) < self.learn_start:
            return None
        if self.batches % self.EVICT_EVERY == 0:
            self.replay.evict(oldest_frame)
        sample = self.replay.sample(
            self.batch_size, annealed_beta(self.batches, self.beta_start, self.beta_anneal_steps), self.rng
        )
        if sample is None:
            return None
        self.batches += 1
        order = np.argsort(sample.transitions.worker_id, kind="stable")  # one block per ring at gather
        t = Columns(*(column[order] for column in sample.transitions))
        return TransitionBatch(
            batch_id=batch_id,
            env_frames=env_frames,
            size=self.batch_size,
            worker_ids=t.worker_id,
            env_index=t.env_index,
            frame=t.frame,
            action=t.action,
            nstep_return=t.nstep_return,
            bootstrap_discount=t.bootstrap_discount,
            next_frame=t.next_frame,
            slots=sample.slots[order],
            stamps=sample.stamps[order],
            weights=sample.weights[order],
            policy_version=t.policy_version,
        )

    def reply(self, msg: PriorityUpdate) -> str | None:
        """Apply the learner's new priorities; the reason if refused."""
        if msg.size and not (0 <= msg.slots.min() and msg.slots.max() < self.replay.capacity):
            return "a slot outside the replay"
        if msg.size and (not np.isfinite(msg.priorities).all() or msg.priorities.min() < 0):
            return "non-finite or negative priorities"
        self.replay.update(msg.slots, msg.stamps, msg.priorities)
        return None


_: type[ReplyingBroker] = ApexBroker  # the contract, checked by mypy
