"""Rainbow-IQN Ape-X's broker body (``algo = "apex_iqn"``): the same processes,
rings and sockets as V-trace; only the policy, the replay rule and the loss differ.

- A worker is the one worker loop (zrl/roles/worker.py) with Ape-X's actor (zrl/agents/apex_iqn/actor.py): it
  acts epsilon-greedily on its network copy's Q-values, keeps n-step transitions as frame numbers, and every
  ``apex.priority_batch`` transitions sends them with their first priorities in one ``Transitions`` message.
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

import numpy as np
import zmq

from shm.ring import Ring
from zrl import protocol, transport
from zrl.config import Config, apex_anneal_steps
from zrl.replay.prioritized import ApexReplay
from zrl.roles.common import (
    Decoder,
    Every,
    RunWiring,
    SeqGaps,
    frames_past_ring,
    keep_freed_memory,
    should_stop,
)

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
