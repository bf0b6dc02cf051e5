"""The worker: steps M environments with a CPU copy of the policy, writes frames into its ring once,
and sends one small Unroll message per T steps.

Ring slot n holds frame n of every env (``frame [M, *frame_shape]``) and each env's step within its
episode (``episode_step [M]``), from which the learner rebuilds frame stacks with episode starts blanked.
The observation at step t of an unroll is slot ``first_frame + t``, t = 0..T (T+1 frames: the last one
is the bootstrap observation and the first of the next unroll).
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import torch

from zrl import agents, protocol, transport
from zrl.config import Config, needs_features, unrolls_per_version
from zrl.gather import ActingStack
from zrl.models import build_model, load_flat
from zrl.roles.common import (
    EpisodeReporter,
    Every,
    RunWiring,
    Weights,
    WorkerLink,
    WorkerStart,
    crash_report,
    should_stop,
    start_role,
)


def run(worker_id: int, cfg: Config, wiring: RunWiring, stop_event, start: WorkerStart = WorkerStart()) -> None:
    start_role(f"zrl-worker-{worker_id}", wiring.launcher_pid)
    if cfg.workers.nice:  # below the learner and broker, which keep their share of the cores
        os.nice(cfg.workers.nice)
    transport.configure(cfg.transport)  # before anything can fail: the crash report uses the keys too
    with crash_report(f"zrl-worker-{worker_id}", wiring):
        agents.get(cfg.algo).role("worker")(worker_id, cfg, wiring, stop_event, start)


def run_vtrace(worker_id: int, cfg: Config, wiring: RunWiring, stop_event, start: WorkerStart) -> None:
    torch.set_num_threads(cfg.workers.torch_threads)
    m = cfg.workers.envs_per_worker
    t_len = cfg.learner.unroll_length
    stack_depth = cfg.env.frame_stack
    send_features = needs_features(cfg)
    poll_ms = cfg.transport.poll_timeout_ms

    # A resumed run (env_frames_start > 0) plays new episodes, not the first run's again; a deterministic
    # one plays the first run's again, up to where the checkpoint left off (replay_from).
    # A restarted worker (generation > 0) plays new episodes too.
    deterministic = cfg.run.deterministic
    offset = 0 if deterministic else wiring.env_frames_start + 7919 * start.generation
    model = build_model(cfg.model, wiring.frame_shape, wiring.frame_dtype, stack_depth, wiring.num_actions)
    model.eval()
    rng = np.random.default_rng([cfg.run.seed, worker_id, offset])
    trained = _trained_actions(wiring.replay_from, m, t_len) if wiring.replay_from else None

    link = WorkerLink(worker_id, cfg, wiring, stop_event, offset)
    env, ring, unrolls, stats, weights = link.env, link.ring, link.out, link.stats, link.weights
    try:
        first = weights.ask()
        if first is None:
            return
        policy_version, flat = first.version, first.flat
        load_flat(model, flat)

        stack = ActingStack(m, stack_depth, wiring.frame_shape, wiring.frame_dtype)
        obs = torch.from_numpy(stack.array)  # shares memory with the stack
        reporter = EpisodeReporter(stats, worker_id, m, wiring.frames_per_step)
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
        uniform = cfg.workers.policy == "uniform"
        frames_per_step = wiring.frames_per_step
        env_steps = start.env_frames // wiring.frames_per_step  # a restarted worker's counts go on
        seq = weight_updates = 0
        timing = {"step": 0.0, "inference": 0.0, "ring_write": 0.0, "send": 0.0, "weights_wait": 0.0}
        rate = unrolls_per_version(cfg)  # unrolls per weights version, on average (0: free running)
        max_ahead = int(rate)  # a deterministic run's exact count
        most = max(math.ceil(rate - 1e-9), 1)  # the most a worker sends on one version
        max_wait_s = cfg.workers.max_weights_wait_s
        budget = 1.0  # unrolls this worker may send before it waits for new weights
        played = 0  # unrolls played since the run began (a deterministic resume counts the replayed ones)
        report = Every(cfg.workers.stats_interval_s)

        def advance(action: np.ndarray, episodes: bool = True):
            """Step the envs, keep the episode tallies (sending finished games if ``episodes``), and write the
            new frames into the ring; the step and the new frames' slot."""
            nonlocal env_steps
            t1 = time.perf_counter()
            step = env.step(action)
            t2 = time.perf_counter()
            if episodes:
                env_steps += m
            reporter.step(step.raw_rewards, step.game_over, env_steps * frames_per_step, send=episodes)
            stack.push(step.frames, step.game_over)
            t3 = time.perf_counter()
            slot = ring.write(frame=step.frames, episode_step=stack.episode_step)
            timing["step"] += t2 - t1
            timing["ring_write"] += time.perf_counter() - t3
            return step, slot

        def send_stats() -> None:
            link.send_stats(env_steps, seq * m, policy_version, weight_updates, timing)

        def use_weights(got: Weights | None) -> None:
            nonlocal policy_version, weight_updates, budget
            if got is not None and got.version > policy_version:
                budget = min(budget + rate * (got.version - policy_version), most)
                policy_version = got.version
                load_flat(model, got.flat)
                weight_updates += 1

        def heartbeat() -> None:
            if report.due():
                send_stats()

        if trained is not None:
            # A deterministic resume: the same envs, seeded as before, play every trained action again (the
            # games they finish were counted by the first launch), so the next unroll starts where the
            # uninterrupted run's would.
            for k in range(trained.shape[1]):
                _, first_frame = advance(trained[:, k], episodes=False)
                if k % 1000 == 0 and report.due():
                    send_stats()  # the heartbeat, through a long replay
            played = trained.shape[1] // t_len

        while not should_stop(stop_event, wiring.launcher_pid):
            if deterministic:  # the actions of unroll n depend on nothing but the seed and n
                rng = np.random.default_rng([cfg.run.seed, worker_id, played])
            for t in range(t_len):
                t0 = time.perf_counter()
                if uniform:  # the behaviour logits stay 0: a uniform policy
                    action = rng.integers(0, num_actions, m)
                else:
                    with no_grad:
                        out = model(obs, with_features=send_features)
                    logits = out.logits.numpy()
                    action = np.argmax(logits - np.log(-np.log(rng.random(logits.shape))), axis=1)
                    logits_buf[:, t] = logits
                    values_buf[:, t] = out.values.numpy()
                    if send_features:
                        features_buf[:, t] = out.features.numpy()
                timing["inference"] += time.perf_counter() - t0
                step, last_frame = advance(action)
                actions[:, t] = action
                rewards[:, t] = step.rewards
                discounts[:, t] = ~step.done

            t5 = time.perf_counter()
            message = protocol.Unroll(
                worker_id=worker_id,
                seq=seq,
                policy_version=policy_version,
                first_frame=first_frame,
                num_envs=m,
                length=t_len,
                env_frames=env_steps * frames_per_step,
                actions=actions,
                rewards=rewards,
                discounts=discounts,
                behaviour_logits=logits_buf,
                behaviour_values=values_buf,
                features=features_buf,
            ).encode()
            while not transport.send(unrolls, message, poll_ms):
                if should_stop(stop_event, wiring.launcher_pid):
                    return
            seq += 1
            played += 1
            budget = max(budget - 1.0, 0.0)
            first_frame = last_frame
            t6 = time.perf_counter()
            timing["send"] += t6 - t5

            if deterministic:
                # Lockstep: unroll n is played with weights version n // max_ahead, no sooner and no later.
                if policy_version < played // max_ahead:
                    use_weights(weights.at_least(played // max_ahead, heartbeat))  # heartbeats while it trains
            else:
                # New weights between unrolls; a throttled worker whose budget is spent waits for them (each
                # new version adds `rate` unrolls, at most `most` banked). Under 1 every worker comes due on the
                # same versions, so they send in rounds. Until the first new version arrives the learner has not
                # started (its replays are filling), so the worker runs free.
                wait_ms = 0
                deadline = t6 + max_wait_s
                while True:
                    if rate and budget < 1.0 - 1e-9 and weight_updates:
                        wait_ms = max(0, min(poll_ms, int((deadline - time.perf_counter()) * 1000)))
                    use_weights(weights.newer(policy_version, wait_ms))
                    if wait_ms == 0 or budget >= 1.0 - 1e-9 or should_stop(stop_event, wiring.launcher_pid):
                        break
                    if time.perf_counter() >= deadline:
                        budget = 1.0  # waited long enough (a lost version): one more unroll, then wait again
                        break
            timing["weights_wait"] += time.perf_counter() - t6
            if report.due():
                send_stats()
    finally:
        link.close()


def _trained_actions(path: str, envs: int, unroll_length: int) -> np.ndarray:
    """The actions a deterministic run's checkpoint trained on, ``[envs, steps]``, to play again on resume."""
    from zrl import checkpoint

    state = checkpoint.load(path)
    actions = state.get("trained_actions")
    if actions is None or actions.shape[0] != envs or actions.shape[1] % unroll_length:
        shape = None if actions is None else tuple(actions.shape)
        raise RuntimeError(
            f"{path}: its trained actions ({shape}) do not fit {envs} envs of unrolls of "
            f"{unroll_length} steps; it was not written by this deterministic run"
        )
    return actions.numpy().astype(np.int64)
