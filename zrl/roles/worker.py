"""The worker: one loop for every agent. It steps M environments, writes each step's frames into its ring once,
and runs the agent's actor (zrl/agents/<name>/actor.py): the actor picks the actions with its CPU copy of the
policy, turns the steps into the agent's messages (V-trace's unrolls, Ape-X's transitions), which the loop
sends, and paces the worker against the learner. The loop owns the env, the ring, the sockets, the weights feed,
the counts and the timings, and reports them (its heartbeat).

Ring slot n holds frame n of every env (``frame [M, *frame_shape]``) and each env's step within its
episode (``episode_step [M]``), from which the learner rebuilds frame stacks with episode starts blanked.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from zrl import agents, transport
from zrl.config import Config, worker_slots
from zrl.gather import ActingStack
from zrl.models import load_flat
from zrl.roles.lifecycle import Every, should_stop, start_role
from zrl.roles.reporting import EpisodeReporter, crash_report
from zrl.roles.run_wiring import RunWiring, WorkerStart
from zrl.roles.weights_feed import Weights
from zrl.roles.worker_link import WorkerLink


def run(worker_id: int, cfg: Config, wiring: RunWiring, stop_event, start: WorkerStart = WorkerStart()) -> None:
    start_role(f"zrl-worker-{worker_id}", wiring.launcher_pid)
    if cfg.workers.nice:  # below the learner and broker, which keep their share of the cores
        os.nice(cfg.workers.nice)
    transport.configure(cfg.transport)  # before anything can fail: the crash report uses the keys too
    with crash_report(f"zrl-worker-{worker_id}", wiring):
        torch.set_num_threads(cfg.workers.torch_threads)
        worker = Worker(worker_id, cfg, wiring, stop_event, start)
        try:
            worker.run()
        finally:
            worker.link.close()


class Worker:
    """A worker's env, ring, sockets and counts, and the agent's actor, which sees it as a
    ``zrl.agents.contracts.WorkerView``. The loop owns the weights and the pacing: it asks the actor only which
    weights version it must act with before it goes on."""

    def __init__(
        self, worker_id: int, cfg: Config, wiring: RunWiring, stop_event, start: WorkerStart, make_link=WorkerLink
    ) -> None:
        # A resumed run (env_frames_start > 0) plays new episodes, not the first run's again; a deterministic
        # one plays the first run's again, up to where the checkpoint left off (replay_from). A restarted worker
        # (generation > 0) plays new episodes too.
        offset = 0 if cfg.run.deterministic else wiring.env_frames_start + 7919 * start.generation
        self.worker_id, self.cfg, self.wiring, self.stop_event = worker_id, cfg, wiring, stop_event
        self.m, self.frames_per_step = cfg.workers.envs_per_worker, wiring.frames_per_step
        self.poll_ms, self.max_weights_wait_s = cfg.transport.poll_timeout_ms, cfg.workers.max_weights_wait_s
        # the env, the ring and the sockets: WorkerLink's shm ring, or a remote worker's (zrl/roles/remote.py)
        self.link = make_link(worker_id, cfg, wiring, stop_event, offset)
        self.env, self.ring, self.weights = self.link.env, self.link.ring, self.link.weights
        try:
            actor = agents.get(cfg.algo).actor_part()
            self.actor = actor(worker_id, cfg, wiring, offset, self.ring)
        except BaseException:
            self.link.close()
            raise
        self.env_steps = start.env_frames // wiring.frames_per_step  # a restarted worker's counts go on
        self.seq = self.sent = self.weight_updates = 0
        self.policy_version = self.learner_step = 0
        self.timing = {"step": 0.0, "inference": 0.0, "ring_write": 0.0, "send": 0.0, "weights_wait": 0.0}
        self.report = Every(cfg.workers.stats_interval_s)

    @property
    def live_workers(self) -> int:
        """How many workers share the learner's appetite now (the stop flag says; every slot if it does not)."""
        return getattr(self.stop_event, "live_workers", 0) or worker_slots(self.cfg)

    @property
    def env_frames(self) -> int:
        return self.env_steps * self.frames_per_step

    def stopping(self) -> bool:
        return should_stop(self.stop_event)

    def heartbeat(self) -> None:
        if self.report.due():
            self.send_stats()

    def send_stats(self) -> None:
        self.link.send_stats(self.env_steps, self.sent, self.policy_version, self.weight_updates, self.timing)

    def use(self, got: Weights | None) -> None:
        """Take weights newer than the ones acted with (None, or older ones, change nothing)."""
        if got is not None and got.version > self.policy_version:
            self.actor.weights_taken(got.version - self.policy_version)
            self.policy_version, self.learner_step = got.version, got.learner_step
            load_flat(self.actor.model, got.flat)
            self.weight_updates += 1

    def pace(self) -> bool:
        """Take new weights, and wait for them while the actor is ahead of the learner (``Actor.due_version``): at
        most workers.max_weights_wait_s (then one more message, and it waits again), or in lockstep for as long as
        the learner takes, with heartbeats. False if the run stops meanwhile."""
        actor = self.actor
        if actor.lockstep:  # exactly the version due, never a newer one
            due = actor.due_version(self)
            if self.policy_version < due:
                self.use(self.weights.at_least(due, self.heartbeat))
            return True
        self.use(self.weights.newer(self.policy_version, 0))
        if actor.due_version(self) <= self.policy_version:
            return True  # the common case: not ahead, and no clock read
        deadline = time.perf_counter() + self.max_weights_wait_s
        while actor.due_version(self) > self.policy_version:
            if self.stopping():
                return False
            left_ms = int((deadline - time.perf_counter()) * 1000)
            if left_ms <= 0:
                break  # waited long enough (a lost version): one more message, then it waits again
            self.use(self.weights.newer(self.policy_version, min(self.poll_ms, left_ms)))
            self.heartbeat()
        return True

    def advance(self, action: np.ndarray, episodes: bool = True):
        """Step the envs, keep the episode tallies (sending finished games if ``episodes``), and write the new
        frames into the ring; the step and the new frames' slot."""
        t1 = time.perf_counter()
        step = self.env.step(action)
        t2 = time.perf_counter()
        if episodes:
            self.env_steps += self.m
        self.reporter.step(step.raw_rewards, step.game_over, self.env_frames, send=episodes)
        self.stack.push(step.frames, step.game_over)
        t3 = time.perf_counter()
        slot = self.ring.write(frame=step.frames, episode_step=self.stack.episode_step)
        self.timing["step"] += t2 - t1
        self.timing["ring_write"] += time.perf_counter() - t3
        return step, slot

    def run(self) -> None:
        first = self.weights.ask()
        if first is None:
            return
        self.policy_version, self.learner_step = first.version, first.learner_step
        load_flat(self.actor.model, first.flat)
        cfg, wiring, actor, timing = self.cfg, self.wiring, self.actor, self.timing
        self.stack = ActingStack(self.m, cfg.env.frame_stack, wiring.frame_shape, wiring.frame_dtype)
        obs = torch.from_numpy(self.stack.array)  # shares memory with the stack
        self.reporter = EpisodeReporter(self.link.stats, self.worker_id, self.m, self.frames_per_step)
        frames = self.env.reset()
        self.stack.reset(frames)
        actor.begin(self, self.ring.write(frame=frames, episode_step=self.stack.episode_step))
        paces_every_step = actor.paces_every_step
        while not self.stopping():
            t0 = time.perf_counter()
            action = actor.act(obs)
            timing["inference"] += time.perf_counter() - t0
            step, slot = self.advance(action)
            t4 = time.perf_counter()
            out = actor.record(self, action, step, slot)
            if out is not None:
                timing["inference"] += out.inference_s
                while not self.link.send(out.message, self.poll_ms):
                    if self.stopping():
                        return
                self.seq += 1
                self.sent += out.units
                t5 = time.perf_counter()
                timing["send"] += t5 - t4 - out.inference_s
            if out is not None or paces_every_step:
                if out is None:
                    t5 = time.perf_counter()
                if not self.pace():
                    return
                timing["weights_wait"] += time.perf_counter() - t5
            self.heartbeat()
