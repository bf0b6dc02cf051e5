"""Rainbow-IQN Ape-X on zrl's pipeline (``algo = "apex_iqn"``): the same worker, broker and learner processes,
rings and sockets as V-trace; only the policy, the replay rule and the loss differ.

- A worker acts epsilon-greedily on its network copy's Q-values (IQN's, or C51's with ``apex.head = "c51"``;
  its epsilon from the Ape-X schedule; greedily on noisy Q-values when noisy nets are on), writes frames into
  its ring once, and keeps n-step transitions as frame numbers. Every ``apex.priority_batch`` transitions it
  computes their first priorities, its network copy standing in for online and target network, and sends
  them in one ``Transitions`` message.
- The broker keeps them in an :class:`ApexReplay` (a sum tree over the transitions), sends a
  ``TransitionBatch`` per learner credit, and applies the learner's ``PriorityUpdate`` messages, which come
  on their own PUSH/PULL channel (``priorities``, bound by the broker).
- The learner gathers both stacks of each transition from the rings, takes an importance-weighted IQN (or C51)
  step against n-step double-Q targets from its target network, sends the new priorities back, copies the
  online network into the target every ``apex.target_update`` steps and publishes weights like V-trace's.

``apex.replay_ratio`` R > 0 keeps about one learner step per R env steps (summed over workers and envs),
once learning has started: the broker holds batches back while the learner is ahead, and a worker that is
ahead waits for new weights (at most ``workers.max_weights_wait_s``), without polling loops that sleep.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import zmq

from shm.ring import Ring
from zrl import __version__, checkpoint, protocol, transport
from zrl.algos.apex import NStepBuilder, epsilon_greedy, first_priorities, worker_epsilons
from zrl.algos.iqn import NStep
from zrl.config import Config, apex_anneal_steps, learner_threads, to_dict
from zrl.gather import ActingStack, TransitionGatherer
from zrl.models import flat_parameters, load_flat
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
    next_batch,
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


# ---------------------------------------------------------------------------------------------- learner


def transition_misfit(batch: protocol.TransitionBatch, cfg: Config, rings: int, num_actions: int) -> str | None:
    """Why a well-formed TransitionBatch cannot be from this run's broker (forged or damaged), or None."""
    b = batch.size
    if not 1 <= b <= cfg.learner.batch_size:
        return f"{b} transitions, not 1..{cfg.learner.batch_size}"
    ranges = (
        (batch.worker_ids, rings, "worker id"),
        (batch.env_index, cfg.workers.envs_per_worker, "env index"),
        (batch.action, num_actions, "action"),
        (batch.slots, cfg.replay[0].capacity, "replay slot"),
    )
    for values, bound, what in ranges:
        if not (0 <= values.min() and values.max() < bound):
            return f"a {what} outside 0..{bound - 1}"
    if batch.frame.min() < 0 or batch.next_frame.min() < 0:
        return "a negative frame number"
    if not all(np.isfinite(a).all() for a in (batch.nstep_return, batch.bootstrap_discount, batch.weights)):
        return "non-finite returns, discounts or importance weights"
    return None


def run_learner(cfg: Config, wiring: RunWiring, run_dir: str, stop_event, start) -> None:
    from zrl.roles.learner import (
        apex_sgd_step,
        load_optimizer_state,
        make_optimizer,
        resolve_device,
        rng_state,
        set_rng_state,
    )

    if cfg.run.keep_freed_memory:
        keep_freed_memory()
    torch.set_num_threads(learner_threads(cfg))
    torch.manual_seed(cfg.run.seed)
    device = resolve_device(cfg.learner.device)
    lcfg, apex = cfg.learner, cfg.apex
    online = _model(cfg, wiring).to(device)
    target = copy.deepcopy(online).requires_grad_(False)
    online.train()
    target.train(apex.noisy)
    optimizer, scheduler = make_optimizer(online, lcfg, apex_anneal_steps(cfg, wiring.frames_per_step))
    rings = [Ring.attach(name, wiring.ring_spec) for name in wiring.ring_names]
    gatherer = TransitionGatherer(
        rings,
        cfg.env.frame_stack,
        lcfg.batch_size,
        wiring.frame_shape,
        wiring.frame_dtype,
        pin_memory=device.type == "cuda",
    )
    ckpt_dir = Path(run_dir) / "checkpoints"
    poll_ms = cfg.transport.poll_timeout_ms

    ctx = transport.context(cfg.transport)
    batches = transport.socket(ctx, zmq.PULL, hwm=cfg.broker.prefetch_batches, bind=wiring.endpoints.batches)
    credits = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.credits)
    priorities = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.priorities)
    one_credit = protocol.Credit(batches=1).encode()
    weights_pub = transport.socket(ctx, zmq.PUB, hwm=2, bind=wiring.endpoints.weights)
    weights_rep = transport.socket(ctx, zmq.ROUTER, hwm=256, bind=wiring.endpoints.weights_req)
    stats = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.stats)

    learner_step = policy_version = samples = dropped_torn = env_frames = 0
    decoded = Decoder()
    if start is not None:  # the launcher has verified the file and its fit
        state = checkpoint.load(start.path)
        online.load_state_dict(state["model"])
        target.load_state_dict(state.get("target") or state["model"])
        if start.optimizer and state.get("optimizer") is not None:
            load_optimizer_state(optimizer, state["optimizer"], keep_configured=not start.resume)
        if start.resume:
            scheduler.load_state_dict(state["scheduler"])
            learner_step, policy_version = state["learner_step"], state["policy_version"]
            samples, env_frames = state["samples"], state["env_frames"]
            set_rng_state(state["rng"], device)
        del state
    current = protocol.encode_weights(policy_version, learner_step, flat_parameters(online))
    last_ckpt = ""
    timing = {"step": 0.0, "gather": 0.0, "wait": 0.0, "publish": 0.0}
    last = SimpleNamespace(loss=0.0, grad_norm=0.0, lag=0.0, age_mean=0.0, age_max=0.0)
    saved_step = -1

    def save() -> str:
        nonlocal saved_step
        if learner_step == saved_step:
            return last_ckpt
        try:
            ckpt_dir.mkdir(exist_ok=True)
            path = checkpoint.save(
                ckpt_dir / checkpoint.PATTERN.format(step=learner_step),
                {
                    "zrl_version": __version__,
                    "model": online.state_dict(),
                    "target": target.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "learner_step": learner_step,
                    "env_frames": env_frames,
                    "env_frames_trained": samples * wiring.frames_per_step,
                    "samples": samples,
                    "policy_version": policy_version,
                    "config": to_dict(cfg),
                    "rng": rng_state(device),
                    "saved_at": time.time(),
                },
            )
            checkpoint.prune(ckpt_dir, cfg.run.keep_checkpoints)
        except OSError as err:
            print(
                f"zrl-learner: checkpoint at learner step {learner_step} failed ({err.strerror or err}); the "
                "previous checkpoints are untouched, training goes on",
                file=sys.stderr,
                flush=True,
            )
            return last_ckpt
        saved_step = learner_step
        return str(path)

    def report() -> None:
        transport.send_nowait(
            stats,
            protocol.LearnerStats(
                pid=os.getpid(),
                time=time.time(),
                learner_step=learner_step,
                policy_version=policy_version,
                samples=samples,
                env_frames_trained=samples * wiring.frames_per_step,
                units_dropped_torn=dropped_torn,
                total_loss=last.loss,
                pg_loss=0.0,
                baseline_loss=0.0,
                entropy_loss=0.0,
                learning_rate=scheduler.get_last_lr()[0],
                grad_norm=last.grad_norm,
                mean_rho=0.0,
                policy_cloning_loss=0.0,
                value_cloning_loss=0.0,
                laser_masked_fraction=0.0,
                policy_lag=last.lag,
                sample_age_mean=last.age_mean,
                sample_age_max=last.age_max,
                step_time_s=timing["step"],
                gather_time_s=timing["gather"],
                wait_time_s=timing["wait"],
                publish_time_s=timing["publish"],
                decode_errors=decoded.errors,
                checkpoint_path=last_ckpt,
            ).encode(),
        )

    try:
        weights_pub.send(current, copy=False)
        transport.send_nowait(credits, protocol.Credit(batches=cfg.broker.prefetch_batches).encode())
        every_s, last_save = cfg.run.checkpoint_every_minutes * 60.0, time.monotonic()
        report()
        heartbeat = Every(1.0)
        while not should_stop(stop_event, wiring.launcher_pid):
            if heartbeat.due():  # stats double as the heartbeat
                report()
            if (data := next_batch(batches, poll_ms, weights_rep, current, decoded, timing)) is None:
                continue
            t1 = time.perf_counter()
            if (batch := decoded(data, protocol.TransitionBatch)) is None:
                continue
            if transition_misfit(batch, cfg, len(rings), wiring.num_actions):
                decoded.refuse()
                continue
            transport.send_nowait(credits, one_credit)
            env_frames = max(env_frames, batch.env_frames)
            obs, next_obs, ok = gatherer.gather(batch)
            dropped_torn += int((~ok).sum())
            if not ok.any():
                continue
            keep = np.flatnonzero(ok)
            pick = torch.from_numpy(keep)
            ages = policy_version - batch.policy_version[keep]  # in weights versions; the newest is the lag
            last.lag, last.age_mean, last.age_max = float(ages.min()), float(ages.mean()), float(ages.max())

            def column(a: np.ndarray, keep: np.ndarray = keep) -> torch.Tensor:
                return torch.from_numpy(np.ascontiguousarray(a[keep])).to(device)

            if len(keep) < len(ok):  # a torn unit: train on the rest (indexing copies 2 x 3.6 MB, so only then)
                obs, next_obs = obs[pick], next_obs[pick]
            obs, next_obs = obs.to(device), next_obs.to(device)
            nstep = NStep(column(batch.nstep_return), column(batch.bootstrap_discount))
            t2 = time.perf_counter()
            timing["gather"] += t2 - t1
            step = apex_sgd_step(
                online,
                target,
                optimizer,
                obs,
                column(batch.action),
                nstep,
                next_obs,
                column(batch.weights),
                apex,
                lcfg.grad_norm_clip,
            )
            scheduler.step()
            transport.send_nowait(
                priorities,
                protocol.PriorityUpdate(
                    batch_id=batch.batch_id,
                    size=len(keep),
                    slots=batch.slots[keep],
                    stamps=batch.stamps[keep],
                    priorities=step.priorities.astype(np.float32),
                ).encode(),
            )
            learner_step += 1
            samples += len(keep)
            last.loss, last.grad_norm = step.loss, step.grad_norm
            if learner_step % apex.target_update == 0:
                target.load_state_dict(online.state_dict())
            t3 = time.perf_counter()
            timing["step"] += t3 - t2
            if learner_step % lcfg.publish_every == 0:
                policy_version += 1
                current = protocol.encode_weights(policy_version, learner_step, flat_parameters(online))
                weights_pub.send(current, copy=False)
                timing["publish"] += time.perf_counter() - t3
            by_steps = cfg.run.checkpoint_every_steps and learner_step % cfg.run.checkpoint_every_steps == 0
            if by_steps or (every_s and time.monotonic() - last_save >= every_s):
                last_ckpt = save()
                last_save = time.monotonic()
        last_ckpt = save()
        report()
    finally:
        for sock in (batches, credits, priorities, weights_pub, weights_rep, stats):
            sock.close()
        transport.term(ctx)
        for ring in rings:
            ring.close()
