"""The worker: steps M environments with a CPU copy of the policy, writes frames into its ring once,
and sends one small Unroll message per T steps.

Ring slot n holds frame n of every env (``frame [M, *frame_shape]``) and each env's step within its
episode (``episode_step [M]``), from which the learner rebuilds frame stacks with episode starts blanked.
The observation at step t of an unroll is slot ``first_frame + t``, t = 0..T (T+1 frames: the last one
is the bootstrap observation and the first of the next unroll).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
import zmq

from shm.ring import Ring

from zrl import protocol, transport
from zrl.config import Config, needs_features, unrolls_per_version
from zrl.envs import make_vector_env
from zrl.gather import ActingStack
from zrl.models import build_model, load_flat
from zrl.roles.common import Every, RunWiring, should_stop, start_role, wait_for_weights


def run(worker_id: int, cfg: Config, wiring: RunWiring, stop_event) -> None:
    start_role(f"zrl-worker-{worker_id}", wiring.launcher_pid)
    torch.set_num_threads(cfg.workers.torch_threads)
    m = cfg.workers.envs_per_worker
    t_len = cfg.learner.unroll_length
    stack_depth = cfg.env.frame_stack
    send_features = needs_features(cfg)
    poll_ms = cfg.transport.poll_timeout_ms

    # A resumed run (env_frames_start > 0) plays new episodes, not the first run's again.
    env = make_vector_env(cfg.env, m, seed=(cfg.run.seed * 100_003 + worker_id * m + wiring.env_frames_start) % 2**31)
    ring = Ring.attach(wiring.ring_names[worker_id], wiring.ring_spec)
    model = build_model(cfg.model, wiring.frame_shape, wiring.frame_dtype, stack_depth, wiring.num_actions)
    model.eval()
    rng = np.random.default_rng([cfg.run.seed, worker_id, wiring.env_frames_start])

    ctx = zmq.Context()
    unrolls = transport.socket(ctx, zmq.PUSH, hwm=cfg.transport.hwm, connect=wiring.endpoints.unrolls)
    stats = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.stats)
    weights = transport.socket(ctx, zmq.SUB, hwm=1, connect=wiring.endpoints.weights)
    try:
        first = wait_for_weights(ctx, wiring, worker_id, poll_ms, stop_event)
        if first is None:
            return
        policy_version, flat = first
        load_flat(model, flat)

        stack = ActingStack(m, stack_depth, wiring.frame_shape, wiring.frame_dtype)
        obs = torch.from_numpy(stack.array)  # shares memory with the stack
        episode_return = np.zeros(m, np.float64)
        episode_steps = np.zeros(m, np.int64)
        frames = env.reset()
        stack.reset(frames)
        first_frame = ring.write(frame=frames, episode_step=stack.episode_step)

        num_actions = wiring.num_actions
        actions = np.zeros((m, t_len), np.int32)
        rewards = np.zeros((m, t_len), np.float32)
        discounts = np.zeros((m, t_len), np.float32)
        logits_buf = np.zeros((m, t_len, num_actions), np.float32)
        values_buf = np.zeros((m, t_len), np.float32)
        features_buf = np.zeros((m, t_len, cfg.model.feature_size) if send_features else (0, 0, 0), np.float32)
        no_grad = torch.no_grad()
        frames_per_step = wiring.frames_per_step
        env_steps = seq = weight_updates = 0
        timing = {"step": 0.0, "inference": 0.0, "ring_write": 0.0, "send": 0.0, "weights_wait": 0.0}
        max_ahead = unrolls_per_version(cfg)
        max_wait_s = cfg.workers.max_weights_wait_s
        ahead = 0  # unrolls sent since the last new weights
        report = Every(cfg.workers.stats_interval_s)

        while not should_stop(stop_event, wiring.launcher_pid):
            for t in range(t_len):
                t0 = time.perf_counter()
                with no_grad:
                    out = model(obs, with_features=send_features)
                logits = out.logits.numpy()
                action = np.argmax(logits - np.log(-np.log(rng.random(logits.shape))), axis=1)
                logits_buf[:, t] = logits
                values_buf[:, t] = out.values.numpy()
                if send_features:
                    features_buf[:, t] = out.features.numpy()
                t1 = time.perf_counter()
                step = env.step(action)
                t2 = time.perf_counter()
                actions[:, t] = action
                rewards[:, t] = step.rewards
                discounts[:, t] = ~step.done
                episode_return += step.raw_rewards
                episode_steps += 1
                env_steps += m
                if step.game_over.any():
                    for i in np.flatnonzero(step.game_over):
                        transport.send_nowait(stats, protocol.Episode(
                            worker_id=worker_id, env_index=int(i), raw_return=float(episode_return[i]),
                            length_frames=int(episode_steps[i]) * frames_per_step,
                            length_env_steps=int(episode_steps[i]), env_frames=env_steps * frames_per_step,
                            wall_time=time.time(),
                        ).encode())  # fmt: skip
                    episode_return[step.game_over] = 0.0
                    episode_steps[step.game_over] = 0
                stack.push(step.frames, step.game_over)
                t3 = time.perf_counter()
                last_frame = ring.write(frame=step.frames, episode_step=stack.episode_step)
                t4 = time.perf_counter()
                timing["inference"] += t1 - t0
                timing["step"] += t2 - t1
                timing["ring_write"] += t4 - t3

            t5 = time.perf_counter()
            message = protocol.Unroll(
                worker_id=worker_id, seq=seq, policy_version=policy_version, first_frame=first_frame,
                num_envs=m, length=t_len, env_frames=env_steps * frames_per_step, actions=actions,
                rewards=rewards, discounts=discounts, behaviour_logits=logits_buf, behaviour_values=values_buf,
                features=features_buf,
            ).encode()  # fmt: skip
            while not transport.send(unrolls, message, poll_ms):
                if should_stop(stop_event, wiring.launcher_pid):
                    return
            seq += 1
            ahead += 1
            first_frame = last_frame
            t6 = time.perf_counter()
            timing["send"] += t6 - t5

            # New weights between unrolls; a throttled worker that is max_ahead unrolls ahead waits for them.
            # Until the first new version arrives the learner has not started (its replays are filling), so
            # the worker runs free.
            wait_ms = 0
            deadline = t6 + max_wait_s
            while True:
                if max_ahead and ahead >= max_ahead and weight_updates:
                    wait_ms = max(0, min(poll_ms, int((deadline - time.perf_counter()) * 1000)))
                if weights.poll(wait_ms, zmq.POLLIN):
                    version, _, flat = protocol.decode_weights(weights.recv())
                    if version > policy_version:  # a broadcast queued before the start request may be older
                        policy_version = version
                        load_flat(model, flat)
                        weight_updates += 1
                        ahead = 0
                if wait_ms == 0 or ahead == 0 or should_stop(stop_event, wiring.launcher_pid):
                    break
                if time.perf_counter() >= deadline:
                    ahead = max_ahead - 1  # waited long enough: one more unroll, then wait again
                    break
            timing["weights_wait"] += time.perf_counter() - t6
            if report.due():
                transport.send_nowait(stats, protocol.WorkerStats(
                    worker_id=worker_id, pid=os.getpid(), time=time.time(), env_frames=env_steps * frames_per_step,
                    env_steps=env_steps, unrolls_sent=seq * m, policy_version=policy_version,
                    weight_updates=weight_updates, step_time_s=timing["step"], inference_time_s=timing["inference"],
                    ring_write_time_s=timing["ring_write"], send_time_s=timing["send"],
                    weights_wait_time_s=timing["weights_wait"],
                ).encode())  # fmt: skip
    finally:
        unrolls.close()
        stats.close()
        weights.close()
        ctx.term()
        ring.close()
        env.close()
