"""Rainbow-IQN Ape-X's worker and broker bodies (``algo = "apex_iqn"``): the same processes,
rings and sockets as V-trace; only the policy, the replay rule and the loss differ.

- A worker acts epsilon-greedily on its network copy's Q-values (IQN's, or C51's with ``apex.head = "c51"``;
  its epsilon from the Ape-X schedule; greedily on noisy Q-values when noisy nets are on), writes frames into
  its ring once, and keeps n-step transitions as frame numbers. Every ``apex.priority_batch`` transitions it
  computes their first priorities, its network copy standing in for online and target network, and sends
  them in one ``Transitions`` message.
- The broker keeps them in an :class:`ApexReplay` (a sum tree over the transitions), sends a
  ``TransitionBatch`` per learner credit, and applies the learner's ``PriorityUpdate`` messages, which come
  on their own PUSH/PULL channel (``priorities``, bound by the broker).
- The learner is the one learner loop (zrl/roles/learner.py) with Ape-X's part (zrl/agents/apex_iqn/learner.py):
  it gathers both stacks of each transition from the rings, takes an importance-weighted IQN (or C51) step
  against n-step double-Q targets from its target network, sends the new priorities back, copies the online
  network into the target every ``apex.target_update`` steps and publishes weights as for every agent.

``apex.replay_ratio`` R > 0 keeps about one learner step per R env steps (summed over workers and envs),
once learning has started: the broker holds batches back while the learner is ahead, and a worker that is
ahead waits for new weights (at most ``workers.max_weights_wait_s``), without polling loops that sleep.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import numpy as np
import torch
import zmq

from shm.ring import Ring
from zrl import protocol, transport
from zrl.algos.apex import NStepBuilder, epsilon_greedy, first_priorities, worker_epsilons
from zrl.algos.iqn import NStep
from zrl.config import Config, apex_anneal_steps
from zrl.gather import ActingStack, TransitionGatherer
from zrl.models import load_flat
from zrl.models.iqn import build_apex_model
from zrl.replay.prioritized import ApexReplay
from zrl.roles.common import (
    Decoder,
    EpisodeReporter,
    Every,
    RunWiring,
    SeqGaps,
    WorkerLink,
    WorkerStart,
    frames_past_ring,
    keep_freed_memory,
    should_stop,
)

PRIORITY_CHUNK = 256  # transitions per forward pass when a worker computes first priorities


def _model(cfg: Config, wiring: RunWiring) -> torch.nn.Module:
    return build_apex_model(
        cfg.model, cfg.apex, wiring.frame_shape, wiring.frame_dtype, cfg.env.frame_stack, wiring.num_actions
    )


def env_steps_per_version(cfg: Config) -> float:
    """Env steps (all workers and envs) that one weights version covers under ``apex.replay_ratio``."""
    return cfg.apex.replay_ratio * cfg.learner.publish_every


# ----------------------------------------------------------------------------------------------- worker


def run_worker(worker_id: int, cfg: Config, wiring: RunWiring, stop_event, start: WorkerStart) -> None:
    torch.set_num_threads(cfg.workers.torch_threads)
    apex, m, n_workers = cfg.apex, cfg.workers.envs_per_worker, cfg.workers.count
    poll_ms = cfg.transport.poll_timeout_ms
    frames_per_step = wiring.frames_per_step
    offset = wiring.env_frames_start + 7919 * start.generation  # a restarted or resumed worker plays new games
    model = _model(cfg, wiring)
    model.train(apex.noisy)  # noisy layers draw new noise on every forward pass: that is the exploration
    epsilon = 0.0 if apex.noisy else float(worker_epsilons(n_workers, apex.epsilon, apex.epsilon_alpha)[worker_id])
    rng = np.random.default_rng([cfg.run.seed, worker_id, offset])
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
    gamma, scale = cfg.learner.discount, cfg.learner.reward_scale

    link = WorkerLink(worker_id, cfg, wiring, stop_event, offset)
    env, ring, out, stats, weights = link.env, link.ring, link.out, link.stats, link.weights
    gatherer = TransitionGatherer([ring], cfg.env.frame_stack, PRIORITY_CHUNK, wiring.frame_shape, wiring.frame_dtype)
    try:
        first = weights.ask()
        if first is None:
            return
        policy_version, learner_step = first.version, first.learner_step
        load_flat(model, first.flat)
        stack = ActingStack(m, cfg.env.frame_stack, wiring.frame_shape, wiring.frame_dtype)
        obs = torch.from_numpy(stack.array)
        reporter = EpisodeReporter(stats, worker_id, m, frames_per_step)
        frames = env.reset()
        stack.reset(frames)
        frame = ring.write(frame=frames, episode_step=stack.episode_step)
        builder = NStepBuilder(m, apex.n_step)
        pending: list[dict[str, np.ndarray]] = []
        held = 0
        env_steps = start.env_frames // frames_per_step
        seq = sent = weight_updates = 0
        timing = {"step": 0.0, "inference": 0.0, "ring_write": 0.0, "send": 0.0, "weights_wait": 0.0}
        report = Every(cfg.workers.stats_interval_s)
        no_grad = torch.no_grad()

        def use(got) -> None:
            nonlocal policy_version, learner_step, weight_updates
            if got is not None and got.version > policy_version:
                policy_version = got.version
                load_flat(model, got.flat)
                weight_updates += 1
                learner_step = got.learner_step

        def send_stats() -> None:
            link.send_stats(env_steps, sent, policy_version, weight_updates, timing)

        def flush() -> bool:
            """Send the held transitions with their first priorities; False if the run stops meanwhile."""
            nonlocal pending, held, seq, sent
            t0 = time.perf_counter()
            cols = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
            priority = np.full(held, -1.0, np.float32)  # unknown: the replay gives them its largest
            if apex.worker_priorities:
                priority = _first_priorities(model, gatherer, cols, apex, generator)
                timing["inference"] += time.perf_counter() - t0  # forward passes, not sending
                t0 = time.perf_counter()
            message = protocol.Transitions(
                worker_id=worker_id,
                seq=seq,
                policy_version=policy_version,
                env_frames=env_steps * frames_per_step,
                count=held,
                env_index=cols["env_index"],
                frame=cols["frame"],
                action=cols["action"],
                nstep_return=cols["nstep_return"],
                bootstrap_discount=cols["bootstrap_discount"],
                next_frame=cols["next_frame"],
                priority=priority,
            ).encode()
            pending, held = [], 0
            while not transport.send(out, message, poll_ms):
                if should_stop(stop_event, wiring.launcher_pid):
                    return False
            seq += 1
            sent += len(cols["frame"])
            timing["send"] += time.perf_counter() - t0
            return True

        per_version = env_steps_per_version(cfg)
        while not should_stop(stop_event, wiring.launcher_pid):
            t0 = time.perf_counter()
            with no_grad:
                q = model.q_values(obs, apex.acting_quantiles, generator).numpy()
            action = epsilon_greedy(q, epsilon, rng)
            t1 = time.perf_counter()
            step = env.step(action)
            t2 = time.perf_counter()
            env_steps += m
            reporter.step(step.raw_rewards, step.game_over, env_steps * frames_per_step)
            stack.push(step.frames, step.game_over)
            next_frame = ring.write(frame=step.frames, episode_step=stack.episode_step)
            t3 = time.perf_counter()
            done = builder.step(
                np.full(m, frame),
                action,
                step.rewards * scale,
                gamma * (~step.done),
                step.game_over,
                np.full(m, next_frame),
            )
            frame = next_frame
            if len(done["frame"]):
                pending.append(done)
                held += len(done["frame"])
            timing["inference"] += t1 - t0
            timing["step"] += t2 - t1
            timing["ring_write"] += time.perf_counter() - t3
            if held >= apex.priority_batch and not flush():
                return
            use(weights.newer(policy_version, 0))
            if per_version:
                # Ahead of the learner: this worker's share of the env steps the learner's latest weights
                # (and one version more) account for, past the transitions the replay waits for to start.
                allowed = (
                    apex.learn_start + (learner_step + cfg.learner.publish_every) * apex.replay_ratio
                ) / cfg.workers.count
                t4 = time.perf_counter()
                deadline = t4 + cfg.workers.max_weights_wait_s
                while env_steps > allowed + apex.priority_batch and time.perf_counter() < deadline:
                    if should_stop(stop_event, wiring.launcher_pid):
                        return
                    got = weights.newer(policy_version, min(poll_ms, int((deadline - time.perf_counter()) * 1000) + 1))
                    use(got)
                    allowed = (
                        apex.learn_start + (learner_step + cfg.learner.publish_every) * apex.replay_ratio
                    ) / cfg.workers.count
                    if report.due():
                        send_stats()
                timing["weights_wait"] += time.perf_counter() - t4
            if report.due():
                send_stats()
    finally:
        link.close()


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


# ----------------------------------------------------------------------------------------------- broker


def run_broker(cfg: Config, wiring: RunWiring, stop_event) -> None:
    if cfg.run.keep_freed_memory:
        keep_freed_memory()
    apex = cfg.apex
    rings = [Ring.attach(name, wiring.ring_spec) for name in wiring.ring_names]
    capacity = cfg.replay[0].capacity
    replay = ApexReplay(
        capacity,
        cfg.learner.batch_size,
        apex.learn_start,
        cfg.workers.count,
        cfg.workers.envs_per_worker,
        wiring.num_actions,
        apex.n_step,
        apex.importance_beta,
        apex_anneal_steps(cfg, wiring.frames_per_step),
        cfg.run.seed,
    )
    reach_back = cfg.env.frame_stack - 1  # a transition's stack reads this many frames before its own
    frames_per_slot = cfg.workers.envs_per_worker * wiring.frames_per_step
    poll_ms = cfg.transport.poll_timeout_ms
    prefetch = cfg.broker.prefetch_batches
    ctx = transport.context(cfg.transport)
    inbox = transport.socket(ctx, zmq.PULL, hwm=cfg.transport.hwm, bind=wiring.endpoints.unrolls)
    batches = transport.socket(ctx, zmq.PUSH, hwm=prefetch, connect=wiring.endpoints.batches)
    credits_sock = transport.socket(ctx, zmq.PULL, hwm=1000, bind=wiring.endpoints.credits)
    priorities = transport.socket(ctx, zmq.PULL, hwm=1000, bind=wiring.endpoints.priorities)
    stats = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.stats)
    poller = zmq.Poller()
    for sock in (inbox, credits_sock, priorities):
        poller.register(sock, zmq.POLLIN)
    worker_frames: dict[int, int] = {}
    gaps = SeqGaps()
    received = batches_sent = credits = credits_granted = 0
    decoded = Decoder()
    insert_time = prepare_time = 0.0
    report = Every(1.0)

    def env_steps() -> int:
        return sum(worker_frames.values()) // wiring.frames_per_step

    def send_stats() -> None:
        transport.send_nowait(
            stats,
            protocol.BrokerStats(
                pid=os.getpid(),
                time=time.time(),
                unrolls_received=received,
                unrolls_dropped_stale=replay.replay.evicted,
                unrolls_dropped_full=0,
                seq_gaps=gaps.count,
                decode_errors=decoded.errors,
                batches_sent=batches_sent,
                replay_size=len(replay.replay),
                ready_batches=batches_sent - max(0, credits_granted - prefetch),
                replay_sizes=np.array([len(replay.replay)], np.int64),
                prepare_time_s=prepare_time,
                feature_time_s=0.0,
                insert_time_s=insert_time,
                elite_lambda=0.0,
                elite_distance_pool=0.0,
                elite_distance_chosen=0.0,
                elite_distance_min=0.0,
                elite_distance_max=0.0,
            ).encode(),
        )

    try:
        while not should_stop(stop_event, wiring.launcher_pid):
            poller.poll(poll_ms)
            while (data := transport.recv(credits_sock, 0)) is not None:
                msg = decoded(data, (protocol.Credit, protocol.IndexRequest))
                if isinstance(msg, protocol.Credit) and msg.batches > 0:
                    credits += msg.batches
                    credits_granted += msg.batches
            while (data := transport.recv(priorities, 0)) is not None:
                msg = decoded(data, protocol.PriorityUpdate)
                if msg is not None and replay.update(msg) is not None:
                    decoded.refuse()
            t0 = time.perf_counter()
            for _ in range(64):
                if (data := transport.recv(inbox, 0)) is None:
                    break
                if (msg := decoded(data, protocol.Transitions)) is None:
                    continue
                if (
                    frames_past_ring(msg.worker_id, msg.env_frames, rings, frames_per_slot)
                    or replay.insert(msg) is not None
                ):
                    decoded.refuse()
                    continue
                gaps.see(msg.worker_id, msg.seq)
                received += msg.count
                worker_frames[msg.worker_id] = max(worker_frames.get(msg.worker_id, 0), msg.env_frames)
            insert_time += time.perf_counter() - t0
            while credits > 0:
                # The learner's share of the env steps past learn_start, the same count the workers pace
                # themselves by: workers that ran ahead while the replay filled let the learner catch up.
                if apex.replay_ratio and batches_sent >= 1 + (env_steps() - apex.learn_start) / apex.replay_ratio:
                    break  # the learner is ahead of the workers: wait for their transitions
                t1 = time.perf_counter()
                oldest = np.array([ring.head - ring.capacity + reach_back for ring in rings], np.int64)
                frames = wiring.env_frames_start + sum(worker_frames.values())
                batch = replay.next_batch(batches_sent + 1, frames, oldest)
                prepare_time += time.perf_counter() - t1
                if batch is None:
                    break
                if not transport.send(batches, batch.encode(), poll_ms):
                    break  # the learner is not connected (yet, or any more); the sample is simply not used
                credits -= 1
                batches_sent += 1
            if report.due():
                send_stats()
    finally:
        for sock in (inbox, batches, credits_sock, priorities, stats):
            sock.close()
        transport.term(ctx)
        for ring in rings:
            ring.close()
