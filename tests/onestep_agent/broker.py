"""The test agent's broker part: a queue of units, oldest first, batches once it holds onestep.fill."""

from __future__ import annotations

import time
from collections import deque
from typing import NamedTuple

import numpy as np

from onestep_agent.messages import StepBatch, Steps
from zrl.agents.contracts import BrokerPart
from zrl.config import worker_slots


class Unit(NamedTuple):
    worker_id: int
    env_index: int
    first_frame: int
    policy_version: int
    actions: np.ndarray
    rewards: np.ndarray
    discounts: np.ndarray


class OnestepBroker:
    message_type = Steps
    inbox_per_turn = 64
    reply_type = None
    wants_weights = False

    def __init__(self, cfg, wiring, rings: list) -> None:
        self.cfg, self.rings, self.num_actions = cfg, rings, wiring.num_actions
        self.held: deque[Unit] = deque(maxlen=cfg.replay[0].capacity)
        self.history = cfg.env.frame_stack - 1
        self.stale = 0
        self.prepare_time_s = 0.0

    def units(self, msg: Steps) -> int:
        return msg.num_envs

    def insert(self, msg: Steps) -> str | None:
        cfg = self.cfg
        if not 0 <= msg.worker_id < worker_slots(cfg):
            return f"worker_id {msg.worker_id} is not one of this run's"
        if (msg.num_envs, msg.length) != (cfg.workers.envs_per_worker, cfg.onestep.steps):
            return f"{msg.num_envs} envs x {msg.length} steps do not fit this run"
        if msg.actions.size and not (0 <= msg.actions.min() and msg.actions.max() < self.num_actions):
            return "actions outside this env's"
        if not np.isfinite(msg.rewards).all():
            return "non-finite rewards"
        for i in range(msg.num_envs):
            unit = (msg.actions[i], msg.rewards[i], msg.discounts[i])
            self.held.append(Unit(msg.worker_id, i, msg.first_frame, msg.policy_version, *unit))
        return None

    def next_batch(self, batch_id: int, env_frames: int, env_steps: int):
        size = self.cfg.learner.batch_size
        if len(self.held) < max(self.cfg.onestep.fill, size):
            return None
        t0 = time.perf_counter()
        taken = [self.held.popleft() for _ in range(size)]
        fresh = [u for u in taken if self.rings[u.worker_id].valid(np.array([max(u.first_frame - self.history, 0)]))[0]]
        self.stale += len(taken) - len(fresh)
        if len(fresh) < size:
            self.held.extendleft(reversed(fresh))
            return None
        fresh.sort(key=lambda u: u.worker_id)
        batch = StepBatch(
            batch_id=batch_id,
            env_frames=env_frames,
            length=self.cfg.onestep.steps,
            worker_ids=np.array([u.worker_id for u in fresh], np.int32),
            env_index=np.array([u.env_index for u in fresh], np.int32),
            first_frame=np.array([u.first_frame for u in fresh], np.int64),
            policy_versions=np.array([u.policy_version for u in fresh], np.int64),
            actions=np.stack([u.actions for u in fresh]),
            rewards=np.stack([u.rewards for u in fresh]),
            discounts=np.stack([u.discounts for u in fresh]),
        )
        self.prepare_time_s += time.perf_counter() - t0
        return batch.encode(), fresh

    def put_back(self, taken: list[Unit]) -> None:
        self.held.extendleft(reversed(taken))

    def index(self) -> bytes | None:
        return None

    def snapshot(self) -> dict[str, np.ndarray]:
        return {}

    def restore(self, state: dict[str, np.ndarray]) -> int:
        return 0

    def oldest_frames(self) -> np.ndarray:
        oldest = np.array([ring.head for ring in self.rings], np.int64)
        for u in self.held:
            oldest[u.worker_id] = min(oldest[u.worker_id], max(u.first_frame - self.history, 0))
        return oldest

    def stats(self) -> dict:
        return {
            "unrolls_dropped_stale": self.stale,
            "unrolls_dropped_full": 0,
            "replay_size": len(self.held),
            "replay_sizes": np.array([len(self.held)], np.int64),
            "prepare_time_s": self.prepare_time_s,
            "feature_time_s": 0.0,
            "figures": {"onestep_held": float(len(self.held))},
        }


_: type[BrokerPart] = OnestepBroker
