"""V-trace's learner side: the update (``sgd_step``: V-trace with CLEAR's cloning losses and LASER's mask), the
checks a Batch must pass, and :class:`VtraceLearner`, the part the one learner loop (zrl/roles/learner.py) runs
for this agent: it gathers a Batch's unrolls from the rings, steps, and keeps the replay index and a deterministic
run's trained actions for the checkpoints."""

from __future__ import annotations

import contextlib
import math
import sys
from typing import Any, NamedTuple

import numpy as np
import torch

from zrl import protocol
from zrl.agents import Trained, finite_update
from zrl.agents.contracts import Gathered, LearnerPart
from zrl.agents.vtrace.config import VtraceConfig
from zrl.agents.vtrace.messages import Batch
from zrl.algos.losses import vtrace_loss
from zrl.config import Config, LearnerConfig, entropy_cost, lr_decay_steps
from zrl.gather import Gatherer, Unrolls
from zrl.models import build_model, pick_unroll_conv
from zrl.optim import load_optimizer_state, make_optimizer


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


def forward(model, unrolls: Unrolls, precision: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The network on the batch's unrolls: time-major ``[T+1, B, A]`` logits and ``[T+1, B]`` values in fp32
    (the forward pass under bf16 autocast when ``precision`` says so)."""
    frames = unrolls.frames
    b = frames.shape[0]
    autocast = (
        torch.autocast(frames.device.type, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    )
    with autocast:
        out = model.forward_unrolls(frames, unrolls.episode_steps)  # [B*(T+1)]
    logits = out.logits.float().view(b, -1, out.logits.shape[-1]).transpose(0, 1)
    values = out.values.float().view(b, -1).transpose(0, 1)
    return logits, values


def choose_unroll_conv(model, cfg: Config) -> dict:
    """Set the model's first-convolution path for training from learner.unroll_conv: auto times both, except in a
    deterministic run, which keeps to conv3d. What :func:`zrl.models.pick_unroll_conv` returns."""
    lcfg = cfg.learner
    choice = "conv3d" if lcfg.unroll_conv == "auto" and cfg.run.deterministic else lcfg.unroll_conv
    return pick_unroll_conv(model, choice, lcfg.batch_size, lcfg.unroll_length + cfg.env.frame_stack, lcfg.precision)


def apply(total: torch.Tensor, model, optimizer, scheduler, grad_norm_clip: float) -> float:
    """Backward, clip the global gradient norm (0: no clip), step the optimiser and the schedule; the norm
    before clipping. A loss or norm that is not finite steps neither (``finite_update``): the weights stay."""
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_norm_clip or math.inf))
    if finite_update(float(total.detach()), grad_norm):
        optimizer.step()
        scheduler.step()
    else:
        optimizer.zero_grad(set_to_none=True)
    return grad_norm


def loss_inputs(
    logits: torch.Tensor,
    values: torch.Tensor,
    batch: dict[str, torch.Tensor],
    cfg: LearnerConfig,
    algo: VtraceConfig,
    entropy_cost: float | None = None,
) -> dict:
    """What every V-trace-family loss takes: the network's outputs on the T steps and the bootstrap, the batch's
    arrays (rewards scaled, discounts times gamma), the losses' weights (the entropy's as given, cfg.entropy_cost
    without), whether the advantages are normalised, and V-trace's clips (0: none)."""
    return dict(
        learner_logits=logits[:-1],
        behaviour_logits=batch["behaviour_logits"],
        actions=batch["actions"],
        values=values[:-1],
        bootstrap_value=values[-1],
        rewards=batch["rewards"] * cfg.reward_scale,
        discounts=batch["discounts"] * cfg.discount,
        pg_cost=cfg.pg_cost,
        baseline_cost=cfg.baseline_cost,
        entropy_cost=cfg.entropy_cost if entropy_cost is None else entropy_cost,
        normalize_advantages=cfg.normalize_advantages,
        clip_rho_threshold=algo.clip_rho or None,
        clip_c_threshold=algo.clip_c or None,
        clip_pg_rho_threshold=algo.clip_pg_rho or None,
    )


def sgd_step(
    model,
    optimizer,
    scheduler,
    unrolls: Unrolls,
    batch: dict[str, torch.Tensor],
    cfg: LearnerConfig,
    algo: VtraceConfig = VtraceConfig(),
    entropy_cost: float | None = None,
) -> Step:
    """One V-trace update (with CLEAR cloning and the LASER mask as ``algo`` says) on the batch's unrolls (their
    T+1 stacked observations each) and time-major ``[T, B]`` batch arrays; returns the loss parts."""
    logits, values = forward(model, unrolls, cfg.precision)
    loss = vtrace_loss(
        **loss_inputs(logits, values, batch, cfg, algo, entropy_cost),
        behaviour_values=batch["behaviour_values"],
        laser_kl_threshold=algo.laser_kl_threshold if algo.laser else None,
        clear_policy_weight=algo.clear_policy_weight,
        clear_value_weight=algo.clear_value_weight,
        clear_policy_kl=algo.clear_policy_kl,
        clear_value_loss=algo.clear_value_loss,
    )
    grad_norm = apply(loss.total, model, optimizer, scheduler, cfg.grad_norm_clip)
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
    return Step._make([*(float(x.detach()) for x in parts), grad_norm])


def batch_misfit(batch: Batch, cfg: Config, rings: int, num_actions: int) -> str | None:
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


def batch_tensors(batch: Batch, ok: np.ndarray, device: torch.device) -> dict[str, torch.Tensor]:
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


def index_tensors(index: protocol.ReplayIndex | None) -> dict[str, torch.Tensor] | None:
    """The replay index as tensors, which a weights_only checkpoint can hold."""
    if index is None:
        return None
    return {name: torch.from_numpy(np.array(getattr(index, name))) for name in index.FIELDS}


class Ages(NamedTuple):
    """Ages of a batch's units in policy versions: of its fresh (queue) units, mean and max of all."""

    fresh: float = 0.0
    mean: float = 0.0
    max: float = 0.0


def sample_ages(policy_version: int, batch: Batch, ok: np.ndarray, queues: np.ndarray) -> Ages:
    ages = (policy_version - batch.policy_versions[ok]).astype(np.float64)
    fresh = ages[np.isin(batch.replay_index[ok], queues)] if len(queues) else ages
    return Ages(float(fresh.mean()) if len(fresh) else 0.0, float(ages.mean()), float(ages.max()))


class VtraceBatch(NamedTuple):
    """A batch as V-trace's learner part gathered it: the message, which of its units were intact ``[B]``, and
    those units' observations and tensors (``batch_tensors``) on the learner's device."""

    batch: Batch
    ok: np.ndarray
    unrolls: Unrolls
    tensors: dict[str, torch.Tensor]


class VtraceLearner:
    """V-trace's part of the learner: one network, its optimiser and schedule, the gatherer of unrolls, the
    broker's latest replay index and (run.deterministic) the trained actions, both for checkpoints."""

    batch_types = (Batch, protocol.ReplayIndex)  # what the broker sends on the batches socket
    asks_replay_index = True  # the loop asks the broker for its replay index (roles/learner.py, INDEX_EVERY_S)
    replies = False  # nothing goes back to the broker

    def __init__(self, cfg: Config, wiring, rings: list, device: torch.device) -> None:
        self.cfg, self.device, self.rings = cfg, device, rings
        lcfg = cfg.learner
        self.stack = cfg.env.frame_stack
        self.model = build_model(cfg.model, wiring.frame_shape, wiring.frame_dtype, self.stack, wiring.num_actions)
        self.model = self.model.to(device)
        picked = choose_unroll_conv(self.model, cfg)
        if "conv3d_s" in picked:
            print(
                f"zrl-learner: learner.unroll_conv auto took {picked['unroll_conv']}: a training pass took "
                f"{picked['conv3d_s'] * 1000:.0f} ms with conv3d, {picked['stacks_s'] * 1000:.0f} ms with stacks",
                file=sys.stderr,
                flush=True,
            )
        self.num_actions = wiring.num_actions
        self.optimizer, self.scheduler = make_optimizer(self.model, lcfg, lr_decay_steps(cfg, wiring.frames_per_step))
        self.gatherer = Gatherer(
            rings,
            self.stack,
            lcfg.unroll_length,
            lcfg.batch_size,
            wiring.frame_shape,
            wiring.frame_dtype,
            pin_memory=device.type == "cuda",
        )
        self.frames_per_step = wiring.frames_per_step
        self.frames_per_unit = lcfg.unroll_length * wiring.frames_per_step
        self.queues = np.array([i for i, rep in enumerate(cfg.replay) if rep.type == "queue"], np.int32)
        self.deterministic = cfg.run.deterministic
        self.trained_actions = ActionLog(cfg.workers.envs_per_worker)
        self.replay_index: protocol.ReplayIndex | None = None  # the broker's, as of its last answer

    def load(self, state: dict, resume: bool, optimizer: bool) -> None:
        """Take a checkpoint's network, and its optimiser state if ``optimizer``; ``resume`` (the same run) takes
        the schedule and trained actions too, and the optimiser's hyperparameters with its moments."""
        self.model.load_state_dict(state["model"])
        if optimizer:
            load_optimizer_state(self.optimizer, state["optimizer"], keep_configured=not resume)
        if resume:
            self.scheduler.load_state_dict(state["scheduler"])
            if self.deterministic:
                self.trained_actions.add(state["trained_actions"].numpy())

    def state(self) -> dict[str, Any]:
        """This agent's entries of a checkpoint."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "replay_index": index_tensors(self.replay_index),
            "trained_actions": torch.from_numpy(self.trained_actions.array()) if self.deterministic else None,
        }

    def misfit(self, message) -> str | None:
        if isinstance(message, protocol.ReplayIndex):
            return index_misfit(message, self.cfg, len(self.rings))
        return batch_misfit(message, self.cfg, len(self.rings), self.num_actions)

    def take(self, message) -> bool:
        """Keep a message that is not a batch (the replay index, for checkpoints); False for a batch."""
        if isinstance(message, protocol.ReplayIndex):
            self.replay_index = message
            return True
        return False

    def gather(self, batch: Batch) -> Gathered[VtraceBatch]:
        """The batch's observations and tensors for its units whose frames were intact (None if none were), and
        how many were torn. A deterministic run cannot lose a unit: a torn one ends it."""
        frames, steps, ok = self.gatherer.gather(batch)
        torn = int((~ok).sum())
        if self.deterministic:
            if torn:
                raise RuntimeError(
                    f"run.deterministic: {torn} units of batch {batch.batch_id} were "
                    "overwritten in their ring before the learner read them"
                )
            self.trained_actions.append(batch.env_index, batch.actions)
        if not ok.any():
            return Gathered(None, torn)
        if not ok.all():
            keep = torch.from_numpy(np.flatnonzero(ok))
            frames, steps = frames[keep], steps[keep]
        device = self.device
        # on the CPU, views of the gatherer's buffers: the step is taken before the next batch is gathered
        unrolls = Unrolls(frames.to(device, non_blocking=True), steps.to(device, non_blocking=True))
        return Gathered(VtraceBatch(batch, ok, unrolls, batch_tensors(batch, ok, device)), torn)

    def update(self, unrolls: Unrolls, tensors: dict[str, torch.Tensor], learner_step: int) -> dict[str, float]:
        """The agent's update on a gathered batch: its figures by their LearnerStats names."""
        entropy_cost = self.entropy_cost(learner_step)
        step = sgd_step(
            self.model,
            self.optimizer,
            self.scheduler,
            unrolls,
            tensors,
            self.cfg.learner,
            self.cfg.vtrace,
            entropy_cost,
        )
        return {
            "entropy_cost": entropy_cost,
            "total_loss": step.total,
            "pg_loss": step.pg,
            "baseline_loss": step.baseline,
            "entropy_loss": step.entropy,
            "grad_norm": step.grad_norm,
            "mean_rho": step.mean_rho,
            "policy_cloning_loss": step.policy_cloning,
            "value_cloning_loss": step.value_cloning,
            "laser_masked_fraction": step.masked_fraction,
        }

    def entropy_cost(self, learner_step: int) -> float:
        """The entropy weight at this step, on its schedule (``config.entropy_cost``)."""
        return entropy_cost(self.cfg, self.frames_per_step, learner_step)

    def step(self, gathered: VtraceBatch, learner_step: int, policy_version: int) -> Trained:
        """One update on a gathered batch (``learner_step`` is the step it takes, from 1)."""
        batch, ok, unrolls, tensors = gathered
        self.model.train()
        metrics = self.update(unrolls, tensors, learner_step)
        units = int(ok.sum())
        ages = sample_ages(policy_version, batch, ok, self.queues)
        metrics.update(policy_lag=ages.fresh, sample_age_mean=ages.mean, sample_age_max=ages.max)
        return Trained(
            samples=units * self.cfg.learner.unroll_length, frames=units * self.frames_per_unit, metrics=metrics
        )


_: type[LearnerPart[VtraceBatch]] = VtraceLearner  # the contract, checked by mypy
