"""Ape-X's actor: what the one worker loop (zrl/roles/worker.py) runs for this agent. It acts epsilon-greedily on
its network copy's Q-values (IQN's, or C51's with ``apex.head = "c51"``; its epsilon from the Ape-X schedule;
greedily on noisy Q-values when noisy nets are on), keeps n-step transitions as frame numbers, and every
``apex.priority_batch`` transitions computes their first priorities (its network copy standing in for online and
target network) and hands the loop one Transitions message. It paces the worker by ``apex.replay_ratio``: a
worker ahead of the learner's share waits for new weights."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import torch

from zrl.agents import Outgoing
from zrl.agents.apex_iqn.messages import Transitions
from zrl.agents.contracts import Actor
from zrl.algos.apex import NStepBuilder, epsilon_greedy, first_priorities, worker_epsilons
from zrl.algos.iqn import NStep
from zrl.config import Config, worker_slots
from zrl.gather import TransitionGatherer
from zrl.models.iqn import build_apex_model

PRIORITY_CHUNK = 256  # transitions per forward pass when a worker computes first priorities


def env_steps_per_version(cfg: Config) -> float:
    """Env steps (all workers and envs) that one weights version covers under ``apex.replay_ratio``."""
    return cfg.apex.replay_ratio * cfg.learner.publish_every


class ApexActor:
    paces_every_step = True
    lockstep = False

    def __init__(self, worker_id: int, cfg: Config, wiring, offset: int, ring) -> None:
        apex, m = cfg.apex, cfg.workers.envs_per_worker
        self.worker_id, self.cfg, self.apex, self.m = worker_id, cfg, apex, m
        self.model = build_apex_model(
            cfg.model, apex, wiring.frame_shape, wiring.frame_dtype, cfg.env.frame_stack, wiring.num_actions
        )
        self.model.train(apex.noisy)  # noisy layers draw new noise on every forward pass: that is the exploration
        epsilons = worker_epsilons(worker_slots(cfg), apex.epsilon, apex.epsilon_alpha)
        self.epsilon = 0.0 if apex.noisy else float(epsilons[worker_id])
        self.rng = np.random.default_rng([cfg.run.seed, worker_id, offset])
        self.generator = torch.Generator().manual_seed(int(self.rng.integers(2**62)))
        self.gamma, self.scale = cfg.learner.discount, cfg.learner.reward_scale
        self.gatherer = TransitionGatherer(
            [ring], cfg.env.frame_stack, PRIORITY_CHUNK, wiring.frame_shape, wiring.frame_dtype
        )
        self.builder = NStepBuilder(m, apex.n_step)
        self.pending: list[dict[str, np.ndarray]] = []
        self.held = 0
        self.frame = 0  # the slot of the observation acted on
        self.no_grad = torch.no_grad()
        self.per_version = env_steps_per_version(cfg)

    def begin(self, worker, slot: int) -> None:
        self.frame = slot

    def act(self, obs: torch.Tensor) -> np.ndarray:
        with self.no_grad:
            q = self.model.q_values(obs, self.apex.acting_quantiles, self.generator).numpy()
        return epsilon_greedy(q, self.epsilon, self.rng)

    def record(self, worker, action: np.ndarray, step, slot: int) -> Outgoing | None:
        m = self.m
        done = self.builder.step(
            np.full(m, self.frame),
            action,
            step.rewards * self.scale,
            self.gamma * (~step.done),
            step.game_over,
            np.full(m, slot),
        )
        self.frame = slot
        if len(done["frame"]):
            self.pending.append(done)
            self.held += len(done["frame"])
        if self.held < self.apex.priority_batch:
            return None
        return self._flush(worker)

    def _flush(self, worker) -> Outgoing:
        """The held transitions with their first priorities, as one message."""
        cols = {k: np.concatenate([p[k] for p in self.pending]) for k in self.pending[0]}
        priority = np.full(self.held, -1.0, np.float32)  # unknown: the replay gives them its largest
        inference_s = 0.0
        if self.apex.worker_priorities:
            t0 = time.perf_counter()
            priority = _first_priorities(self.model, self.gatherer, cols, self.apex, self.generator)
            inference_s = time.perf_counter() - t0  # forward passes, not sending
        message = Transitions(
            worker_id=self.worker_id,
            seq=worker.seq,
            policy_version=worker.policy_version,
            env_frames=worker.env_frames,
            count=self.held,
            env_index=cols["env_index"],
            frame=cols["frame"],
            action=cols["action"],
            nstep_return=cols["nstep_return"],
            bootstrap_discount=cols["bootstrap_discount"],
            next_frame=cols["next_frame"],
            priority=priority,
        ).encode()
        self.pending, self.held = [], 0
        return Outgoing(message, units=len(cols["frame"]), inference_s=inference_s)

    def weights_taken(self, versions: int) -> None:
        pass

    def _allowed(self, learner_step: int, workers: int) -> float:
        """The env steps this worker may have taken while the learner is at ``learner_step``: its share of the
        transitions the replay waits for and of those the learner's weights and one version more account for,
        plus a block awaiting its priorities; ``workers``: how many share them now (the live ones)."""
        apex, cfg = self.apex, self.cfg
        share = (apex.learn_start + (learner_step + cfg.learner.publish_every) * apex.replay_ratio) / workers
        return share + apex.priority_batch

    def due_version(self, worker) -> int:
        """After every step: ahead of the learner (this worker's share of the env steps the learner's latest
        weights, and one version more, account for, past the transitions the replay waits for to start), the
        worker waits for newer weights."""
        if self.per_version and worker.env_steps > self._allowed(worker.learner_step, worker.live_workers):
            return worker.policy_version + 1
        return 0


def _first_priorities(model, gatherer: TransitionGatherer, cols: dict[str, np.ndarray], apex, generator) -> np.ndarray:
    """``loss ** omega`` of a worker's transitions by its own network copy, in chunks; -1 (unknown) for any
    whose frames its ring has already overwritten."""
    n = len(cols["frame"])
    priority = np.full(n, -1.0, np.float32)
    for lo in range(0, n, PRIORITY_CHUNK):
        hi = min(n, lo + PRIORITY_CHUNK)
        view = SimpleNamespace(
            worker_ids=np.zeros(hi - lo, np.int32),
            env_index=cols["env_index"][lo:hi],
            frame=cols["frame"][lo:hi],
            next_frame=cols["next_frame"][lo:hi],
            bootstrap_discount=cols["bootstrap_discount"][lo:hi],
        )
        obs, next_obs, ok = gatherer.gather(view)
        nstep = NStep(
            torch.from_numpy(cols["nstep_return"][lo:hi]), torch.from_numpy(cols["bootstrap_discount"][lo:hi])
        )
        p = first_priorities(
            model, obs, torch.from_numpy(cols["action"][lo:hi]), nstep, next_obs, apex, generator
        ).numpy()
        priority[lo:hi] = np.where(ok, p, -1.0)
    return priority


_: type[Actor] = ApexActor  # the contract, checked by mypy
