"""The broker's side of Ape-X: worker Transitions in, TransitionBatch out, PriorityUpdate applied, on one
:class:`~zrl.replay.prioritized.PrioritizedReplay`."""

from __future__ import annotations

import numpy as np

from zrl.agents.apex_iqn import messages
from zrl.bounds import out_of_range, within_unit
from zrl.config import BrokerConfig
from zrl.replay.prioritized import PrioritizedReplay, Transitions
from zrl.replay.snapshot import prefixed, rng_state, scalar, section, set_rng_state
from zrl.replay.sumtree import annealed_beta


class ApexReplay:
    """The broker's side of Ape-X: worker ``Transitions`` messages in, ``TransitionBatch`` messages out,
    ``PriorityUpdate`` messages applied. Messages that cannot be from this run are refused (a reason is
    returned), never stored."""

    EVICT_EVERY = 16  # batches between eviction scans (O(capacity)); a stale row drawn meanwhile fails at gather

    def __init__(
        self,
        capacity: int,
        batch_size: int,
        learn_start: int,
        workers: int,
        envs_per_worker: int,
        num_actions: int,
        n_step: int,
        beta_start: float,
        beta_anneal_steps: int,
        seed: int,
        max_abs_reward: float = BrokerConfig.max_abs_reward,
        max_abs_value: float = BrokerConfig.max_abs_value,
    ) -> None:
        if beta_anneal_steps < 1:
            raise ValueError(
                f"beta_anneal_steps must be >= 1 (derive it from the budget first), got {beta_anneal_steps}"
            )
        self.replay = PrioritizedReplay(capacity)
        self.n_step = n_step
        # what a worker's transitions may carry (the broker's keys): an n-step return sums n rewards
        self.max_return, self.max_priority = n_step * max_abs_reward, max_abs_value
        self.batch_size, self.learn_start = batch_size, learn_start
        self.workers, self.envs_per_worker, self.num_actions = workers, envs_per_worker, num_actions
        self.beta_start, self.beta_anneal_steps = beta_start, beta_anneal_steps
        self.rng = np.random.default_rng([seed, 7])
        self.batches = 0

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

    def misfit(self, msg: messages.Transitions) -> str | None:
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

    def insert(self, msg: messages.Transitions) -> str | None:
        """Store a worker's transitions with their initial priorities; the reason if refused."""
        why = self.misfit(msg)
        if why is None and msg.count:
            n = msg.count
            self.replay.insert(
                Transitions(
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

    def next_batch(self, batch_id: int, env_frames: int, oldest_frame: np.ndarray) -> messages.TransitionBatch | None:
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
        t = Transitions(*(column[order] for column in sample.transitions))
        return messages.TransitionBatch(
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

    def update(self, msg: messages.PriorityUpdate) -> str | None:
        """Apply the learner's new priorities; the reason if refused."""
        if msg.size and not (0 <= msg.slots.min() and msg.slots.max() < self.replay.capacity):
            return "a slot outside the replay"
        if msg.size and (not np.isfinite(msg.priorities).all() or msg.priorities.min() < 0):
            return "non-finite or negative priorities"
        self.replay.update(msg.slots, msg.stamps, msg.priorities)
        return None
