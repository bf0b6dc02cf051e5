"""The learner: takes batch descriptors from the broker, gathers frames from the rings, takes a V-trace
step, publishes weights, answers workers that ask for the current weights, and writes checkpoints."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import zmq

from shm.ring import Ring
from zrl import __version__, checkpoint, protocol, transport
from zrl.algos.apex import transition_losses
from zrl.algos.iqn import NStep
from zrl.algos.losses import vtrace_loss
from zrl.config import ApexConfig, Config, LearnerConfig, VtraceConfig, learner_threads, lr_decay_steps, to_dict
from zrl.gather import Gatherer, stack_observations
from zrl.models import build_model, flat_parameters
from zrl.optim import TFRMSprop
from zrl.roles.common import (
    Decoder,
    Every,
    RunWiring,
    StartFrom,
    crash_report,
    keep_freed_memory,
    next_batch,
    should_stop,
    start_role,
)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def make_optimizer(model: torch.nn.Module, cfg: LearnerConfig, total_steps: int):
    """The optimiser and a polynomial decay of its learning rate to lr_end over total_steps."""
    if cfg.optimizer == "adam":
        # fused: one kernel for all parameters instead of a loop of small ops; the Ape-X IQN Pong update of 32
        # took 21.5 ms against 23.3 (Intel Xeon, 2 threads, perf/iqn_cost.py --adam-ab 5). The same Adam, to rounding.
        opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)
    elif cfg.optimizer == "rmsprop_tf":
        opt = TFRMSprop(
            model.parameters(),
            lr=cfg.learning_rate,
            alpha=cfg.rmsprop_alpha,
            eps=cfg.rmsprop_eps,
            momentum=cfg.rmsprop_momentum,
        )
    else:
        opt = torch.optim.RMSprop(
            model.parameters(),
            lr=cfg.learning_rate,
            alpha=cfg.rmsprop_alpha,
            eps=cfg.rmsprop_eps,
            momentum=cfg.rmsprop_momentum,
        )
    start, end, power = cfg.learning_rate, cfg.lr_end, cfg.lr_decay_power

    def factor(step: int) -> float:
        progress = min(step, total_steps) / total_steps
        return ((start - end) * (1.0 - progress) ** power + end) / start

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict, keep_configured: bool) -> None:
    """Load a checkpoint's optimiser state. ``keep_configured`` (a new run started from another's checkpoint
    with --init-optimizer) takes only its moments and keeps this config's hyperparameters: learning rate, eps,
    alpha, momentum. A resume takes everything."""
    configured = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    if keep_configured:
        for group, mine in zip(optimizer.param_groups, configured):
            group.update(mine)


class Step(NamedTuple):
    total: float = 0.0
    pg: float = 0.0
    baseline: float = 0.0
    entropy: float = 0.0
    mean_rho: float = 0.0
    policy_cloning: float = 0.0
    value_cloning: float = 0.0
    masked_fraction: float = 0.0
    grad_norm: float = 0.0


def sgd_step(
    model,
    optimizer,
    scheduler,
    obs: torch.Tensor,
    batch: dict[str, torch.Tensor],
    cfg: LearnerConfig,
    algo: VtraceConfig = VtraceConfig(),
) -> Step:
    """One V-trace update (with CLEAR cloning and the LASER mask as ``algo`` says) on batch-major
    observations ``[B, T+1, S, *shape]`` and time-major ``[T, B]`` batch arrays; returns the loss parts."""
    b, steps = obs.shape[:2]
    autocast = (
        torch.autocast(obs.device.type, dtype=torch.bfloat16) if cfg.precision == "bf16" else contextlib.nullcontext()
    )
    with autocast:
        out = model(obs.reshape(b * steps, *obs.shape[2:]))  # a view: no copy of the observations
    logits = out.logits.float().view(b, steps, -1).transpose(0, 1)
    values = out.values.float().view(b, steps).transpose(0, 1)
    loss = vtrace_loss(
        learner_logits=logits[:-1],
        behaviour_logits=batch["behaviour_logits"],
        actions=batch["actions"],
        values=values[:-1],
        bootstrap_value=values[-1],
        rewards=batch["rewards"] * cfg.reward_scale,
        discounts=batch["discounts"] * cfg.discount,
        baseline_cost=cfg.baseline_cost,
        entropy_cost=cfg.entropy_cost,
        clip_rho_threshold=algo.clip_rho or None,
        clip_c_threshold=algo.clip_c or None,
        clip_pg_rho_threshold=algo.clip_pg_rho or None,
        behaviour_values=batch["behaviour_values"],
        laser_kl_threshold=algo.laser_kl_threshold if algo.laser else None,
        clear_policy_weight=algo.clear_policy_weight,
        clear_value_weight=algo.clear_value_weight,
        clear_policy_kl=algo.clear_policy_kl,
        clear_value_loss=algo.clear_value_loss,
    )
    optimizer.zero_grad(set_to_none=True)
    loss.total.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_norm_clip or math.inf))
    optimizer.step()
    scheduler.step()
    parts = (
        loss.total,
        loss.pg,
        loss.baseline,
        loss.entropy,
        loss.mean_rho,
        loss.policy_cloning,
        loss.value_cloning,
        loss.masked_fraction,
    )
    return Step(*(float(x.detach()) for x in parts), grad_norm=grad_norm)


class ApexStep(NamedTuple):
    loss: float  # the importance-weighted mean of the per-transition losses
    grad_norm: float
    priorities: np.ndarray  # [B] float32: loss ** priority_exponent, the transitions' new priorities


def apex_sgd_step(
    online,
    target,
    optimizer,
    obs: torch.Tensor,
    actions: torch.Tensor,
    nstep: NStep,
    next_obs: torch.Tensor,
    weights: torch.Tensor,
    apex: ApexConfig,
    grad_norm_clip: float,
    generator: torch.Generator | None = None,
) -> ApexStep:
    """One Rainbow update on B transitions: the importance-weighted mean of their losses against n-step
    double-Q targets (IQN's quantile Huber or C51's cross-entropy, by ``apex.head``), and their new
    priorities."""
    losses = transition_losses(online, target, obs, actions, nstep, next_obs, apex, generator)
    loss = (weights * losses).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(online.parameters(), grad_norm_clip or math.inf))
    optimizer.step()
    priorities = losses.detach().float().clamp_min(0).pow(apex.priority_exponent).cpu().numpy()
    return ApexStep(float(loss.detach()), grad_norm, priorities)


def batch_misfit(batch: protocol.Batch, cfg: Config, rings: int, num_actions: int) -> str | None:
    """Why a well-formed batch message cannot be from this run's broker (a forged or damaged message), or None:
    the learner would index rings, envs or actions outside the run, or train on non-finite numbers."""
    b = len(batch.worker_ids)
    if batch.length != cfg.learner.unroll_length or not 1 <= b <= cfg.learner.batch_size:
        return f"{b} units x {batch.length} steps, not up to {cfg.learner.batch_size} x {cfg.learner.unroll_length}"
    if batch.behaviour_logits.shape[2] != num_actions or not (
        0 <= batch.actions.min() and batch.actions.max() < num_actions
    ):
        return f"actions outside the {num_actions} of this env"
    ranges = (
        (batch.worker_ids, rings, "worker id"),
        (batch.env_index, cfg.workers.envs_per_worker, "env index"),
        (batch.replay_index, len(cfg.replay), "replay index"),
    )
    for values, bound, what in ranges:
        if not (0 <= values.min() and values.max() < bound):
            return f"a {what} outside 0..{bound - 1}"
    if batch.first_frame.min() < 0 or batch.policy_versions.min() < 0:
        return "a negative frame number or policy version"
    if not all(
        np.isfinite(a).all() for a in (batch.rewards, batch.discounts, batch.behaviour_logits, batch.behaviour_values)
    ):
        return "non-finite rewards, discounts, logits or values"
    return None


def index_misfit(index: protocol.ReplayIndex, cfg: Config, rings: int) -> str | None:
    """Why a replay index cannot be this run's broker's (it goes into checkpoints, and a resume reads it)."""
    if len(index.sample_calls) != len(cfg.replay) or (index.sample_calls.size and index.sample_calls.min() < 0):
        return f"sample calls for {len(index.sample_calls)} replays, not {len(cfg.replay)}"
    n = len(index.replay)
    if n and not (
        0 <= index.replay.min()
        and index.replay.max() < len(cfg.replay)
        and 0 <= index.worker_ids.min()
        and index.worker_ids.max() < rings
        and 0 <= index.env_index.min()
        and index.env_index.max() < cfg.workers.envs_per_worker
        and index.first_frame.min() >= 0
        and index.counts.min() >= 0
    ):
        return "a replay, worker, env, frame or count outside the run"
    if index.feature_rows.size and not (0 <= index.feature_rows.min() and index.feature_rows.max() < n):
        return "feature rows outside the index"
    if index.features.size and not np.isfinite(index.features).all():
        return "non-finite features"
    return None


def batch_tensors(batch: protocol.Batch, ok: np.ndarray, device: torch.device) -> dict[str, torch.Tensor]:
    """The batch's per-step arrays for the units that gathered cleanly, time-major ``[T, B]``."""
    pick = np.flatnonzero(ok)

    def tm(a: np.ndarray, dtype=None) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(a[pick].swapaxes(0, 1)))
        return t.to(device=device, dtype=dtype)

    return {
        "actions": tm(batch.actions, torch.int64),
        "rewards": tm(batch.rewards),
        "discounts": tm(batch.discounts),
        "behaviour_logits": tm(batch.behaviour_logits),
        "behaviour_values": tm(batch.behaviour_values),
    }


class ActionLog:
    """A deterministic run's trained actions per env, in the order trained, for its checkpoints: a resumed
    run's worker plays them again to bring its environments to where they were. One int16 buffer per env
    that doubles when full, so that appending and checkpointing stay cheap as the run grows."""

    def __init__(self, envs: int) -> None:
        self._buf = np.zeros((envs, 1024), np.int16)
        self._len = np.zeros(envs, np.int64)

    def _room(self, env: int, n: int) -> None:
        need = int(self._len[env]) + n
        if need > self._buf.shape[1]:
            grown = np.zeros((len(self._buf), max(need, 2 * self._buf.shape[1])), np.int16)
            grown[:, : self._buf.shape[1]] = self._buf
            self._buf = grown

    def _put(self, env: int, row: np.ndarray) -> None:
        self._room(env, len(row))
        at = int(self._len[env])
        self._buf[env, at : at + len(row)] = row
        self._len[env] = at + len(row)

    def add(self, actions: np.ndarray) -> None:
        for env, row in enumerate(actions):
            self._put(env, row)

    def append(self, env_index: np.ndarray, actions: np.ndarray) -> None:
        for env, row in zip(env_index, actions):
            self._put(int(env), row)

    def array(self) -> np.ndarray:
        """``[envs, steps]``; every env has trained the same number of steps, since batches hold whole unrolls."""
        steps = int(self._len.min()) if len(self._len) else 0
        if (self._len != steps).any():
            raise RuntimeError(f"trained actions of unequal length per env: {self._len.tolist()}")
        return self._buf[:, :steps].copy()


INDEX_EVERY_S = 10.0  # how often the learner asks the broker for its replay index (for checkpoints)


def index_tensors(index: protocol.ReplayIndex | None) -> dict[str, torch.Tensor] | None:
    """The replay index as tensors, which a weights_only checkpoint can hold."""
    if index is None:
        return None
    return {name: torch.from_numpy(np.array(getattr(index, name))) for name in index.__dataclass_fields__}


class Ages(NamedTuple):
    """Ages of a batch's units in policy versions: of its fresh (queue) units, mean and max of all."""

    fresh: float = 0.0
    mean: float = 0.0
    max: float = 0.0


def sample_ages(policy_version: int, batch: protocol.Batch, ok: np.ndarray, queues: np.ndarray) -> Ages:
    ages = (policy_version - batch.policy_versions[ok]).astype(np.float64)
    fresh = ages[np.isin(batch.replay_index[ok], queues)] if len(queues) else ages
    return Ages(float(fresh.mean()) if len(fresh) else 0.0, float(ages.mean()), float(ages.max()))


def rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def run(cfg: Config, wiring: RunWiring, run_dir: str, stop_event, start: StartFrom | None = None) -> None:
    start_role("zrl-learner", wiring.launcher_pid)
    transport.configure(cfg.transport)  # before anything can fail: the crash report uses the keys too
    with crash_report("zrl-learner", wiring):
        if cfg.algo == "apex_iqn":
            from zrl.roles.apex import run_learner

            run_learner(cfg, wiring, run_dir, stop_event, start)
        else:
            _run(cfg, wiring, run_dir, stop_event, start)


def _run(cfg: Config, wiring: RunWiring, run_dir: str, stop_event, start: StartFrom | None) -> None:
    if cfg.run.keep_freed_memory:
        keep_freed_memory()
    torch.set_num_threads(learner_threads(cfg))
    deterministic = cfg.run.deterministic
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's condition for repeatable results
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(cfg.run.seed)
    device = resolve_device(cfg.learner.device)
    lcfg = cfg.learner
    stack = cfg.env.frame_stack
    model = build_model(cfg.model, wiring.frame_shape, wiring.frame_dtype, stack, wiring.num_actions).to(device)
    optimizer, scheduler = make_optimizer(model, lcfg, lr_decay_steps(cfg, wiring.frames_per_step))
    rings = [Ring.attach(name, wiring.ring_spec) for name in wiring.ring_names]
    gatherer = Gatherer(
        rings,
        stack,
        lcfg.unroll_length,
        lcfg.batch_size,
        wiring.frame_shape,
        wiring.frame_dtype,
        pin_memory=device.type == "cuda",
    )
    ckpt_dir = Path(run_dir) / "checkpoints"
    poll_ms = cfg.transport.poll_timeout_ms
    frames_per_unit = lcfg.unroll_length * wiring.frames_per_step
    queues = np.array([i for i, rep in enumerate(cfg.replay) if rep.type == "queue"], np.int32)

    ctx = transport.context(cfg.transport)
    batches = transport.socket(ctx, zmq.PULL, hwm=cfg.broker.prefetch_batches, bind=wiring.endpoints.batches)
    credits = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.credits)
    one_credit = protocol.Credit(batches=1).encode()
    weights_pub = transport.socket(ctx, zmq.PUB, hwm=2, bind=wiring.endpoints.weights)
    weights_rep = transport.socket(ctx, zmq.ROUTER, hwm=256, bind=wiring.endpoints.weights_req)
    stats = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.stats)

    learner_step = policy_version = samples = frames_trained = dropped_torn = env_frames = 0
    decoded = Decoder()
    trained_actions = ActionLog(cfg.workers.envs_per_worker)
    if start is not None:  # the launcher has verified the file and its fit
        state = checkpoint.load(start.path)
        model.load_state_dict(state["model"])
        if start.optimizer:
            load_optimizer_state(optimizer, state["optimizer"], keep_configured=not start.resume)
        if start.resume:
            scheduler.load_state_dict(state["scheduler"])
            learner_step, policy_version = state["learner_step"], state["policy_version"]
            samples, frames_trained = state["samples"], state["env_frames_trained"]
            env_frames = state["env_frames"]
            set_rng_state(state["rng"], device)
            if deterministic:
                trained_actions.add(state["trained_actions"].numpy())
        del state
    current = protocol.encode_weights(policy_version, learner_step, flat_parameters(model))
    last_ckpt = ""
    replay_index: protocol.ReplayIndex | None = None  # the broker's, as of its last answer
    timing = {"step": 0.0, "gather": 0.0, "wait": 0.0, "publish": 0.0}

    saved_step = -1

    def save() -> str:
        """Write a checkpoint (not twice for one step); a failed write (a full disk) is reported on stderr and
        leaves the previous checkpoints as they were, and training goes on."""
        nonlocal saved_step
        if learner_step == saved_step:
            return last_ckpt
        try:
            path = write_checkpoint()
        except OSError as err:
            print(
                f"zrl-learner: checkpoint at learner step {learner_step} failed ({err.strerror or err}); the "
                "previous checkpoints are untouched, training goes on",
                file=sys.stderr,
                flush=True,
            )
            return last_ckpt
        saved_step = learner_step
        return path

    def write_checkpoint() -> str:
        ckpt_dir.mkdir(exist_ok=True)
        path = checkpoint.save(
            ckpt_dir / checkpoint.PATTERN.format(step=learner_step),
            {
                "zrl_version": __version__,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "learner_step": learner_step,
                "env_frames": env_frames,
                "env_frames_trained": frames_trained,
                "samples": samples,
                "policy_version": policy_version,
                "config": to_dict(cfg),
                "rng": rng_state(device),
                "saved_at": time.time(),
                "replay_index": index_tensors(replay_index),
                "trained_actions": torch.from_numpy(trained_actions.array()) if deterministic else None,
            },
        )
        checkpoint.prune(ckpt_dir, cfg.run.keep_checkpoints)
        return str(path)

    def report(step: Step | None, ages: Ages) -> None:
        step = step or Step()
        transport.send_nowait(
            stats,
            protocol.LearnerStats(
                pid=os.getpid(),
                time=time.time(),
                learner_step=learner_step,
                policy_version=policy_version,
                samples=samples,
                env_frames_trained=frames_trained,
                units_dropped_torn=dropped_torn,
                total_loss=step.total,
                pg_loss=step.pg,
                baseline_loss=step.baseline,
                entropy_loss=step.entropy,
                learning_rate=scheduler.get_last_lr()[0],
                grad_norm=step.grad_norm,
                mean_rho=step.mean_rho,
                policy_cloning_loss=step.policy_cloning,
                value_cloning_loss=step.value_cloning,
                laser_masked_fraction=step.masked_fraction,
                policy_lag=ages.fresh,
                sample_age_mean=ages.mean,
                sample_age_max=ages.max,
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
        step, ages = None, Ages()
        every_s, last_save = cfg.run.checkpoint_every_minutes * 60.0, time.monotonic()
        last_index_request = -math.inf
        report(step, ages)
        heartbeat = Every(1.0)
        while not should_stop(stop_event, wiring.launcher_pid):
            if heartbeat.due():  # stats double as the heartbeat: send them even when idle
                report(step, ages)
            if time.monotonic() - last_index_request >= INDEX_EVERY_S:
                transport.send_nowait(credits, protocol.IndexRequest(learner_step=learner_step).encode())
                last_index_request = time.monotonic()
            if (data := next_batch(batches, poll_ms, weights_rep, current, decoded, timing)) is None:
                continue
            t1 = time.perf_counter()
            if (message := decoded(data, (protocol.Batch, protocol.ReplayIndex))) is None:
                continue
            if isinstance(message, protocol.ReplayIndex):
                if index_misfit(message, cfg, len(rings)):
                    decoded.refuse()
                else:
                    replay_index = message
                continue
            if batch_misfit(message, cfg, len(rings), wiring.num_actions):
                decoded.refuse()
                continue
            transport.send_nowait(credits, one_credit)
            batch = message
            if deterministic and frames_trained >= cfg.run.max_env_frames:
                continue  # the budget counts frames trained: not one step more
            env_frames = max(env_frames, batch.env_frames)
            frames, steps, ok = gatherer.gather(batch)
            dropped_torn += int((~ok).sum())
            if deterministic:
                if not ok.all():
                    raise RuntimeError(
                        f"run.deterministic: {int((~ok).sum())} units of batch {batch.batch_id} were "
                        "overwritten in their ring before the learner read them"
                    )
                trained_actions.append(batch.env_index, batch.actions)
            if not ok.any():
                continue
            if not ok.all():
                keep = torch.from_numpy(np.flatnonzero(ok))
                frames, steps = frames[keep], steps[keep]
            obs = stack_observations(frames.to(device, non_blocking=True), steps.to(device, non_blocking=True), stack)
            tensors = batch_tensors(batch, ok, device)
            t2 = time.perf_counter()
            timing["gather"] += t2 - t1
            model.train()
            step = sgd_step(model, optimizer, scheduler, obs, tensors, lcfg, cfg.vtrace)
            learner_step += 1
            samples += int(ok.sum()) * lcfg.unroll_length
            frames_trained += int(ok.sum()) * frames_per_unit
            ages = sample_ages(policy_version, batch, ok, queues)
            t3 = time.perf_counter()
            timing["step"] += t3 - t2
            if learner_step % lcfg.publish_every == 0:
                policy_version += 1
                current = protocol.encode_weights(policy_version, learner_step, flat_parameters(model))
                weights_pub.send(current, copy=False)  # zmq keeps the bytes alive until sent
                timing["publish"] += time.perf_counter() - t3
            by_steps = cfg.run.checkpoint_every_steps and learner_step % cfg.run.checkpoint_every_steps == 0
            by_time = every_s and time.monotonic() - last_save >= every_s
            if by_steps or by_time:
                last_ckpt = save()
                last_save = time.monotonic()
        last_ckpt = save()
        report(None, Ages())
    finally:
        for sock in (batches, credits, weights_pub, weights_rep, stats):
            sock.close()
        transport.term(ctx)
        for ring in rings:
            ring.close()
