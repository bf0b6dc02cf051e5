"""Rainbow-IQN Ape-X's learner side: the update (``apex_sgd_step``: importance-weighted IQN or C51 losses against
n-step double-Q targets), the checks a TransitionBatch must pass, and :class:`ApexLearner`, the part the one
learner loop (zrl/roles/learner.py) runs for this agent: it gathers both stacks of each transition, steps, sends
the new priorities back to the broker, and copies the online network into the target every
``apex.target_update`` steps."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch

from zrl.agents import Trained, finite_update
from zrl.agents.apex_iqn import anneal_steps as apex_anneal_steps
from zrl.agents.apex_iqn.config import ApexConfig
from zrl.agents.apex_iqn.messages import PriorityUpdate, TransitionBatch
from zrl.agents.contracts import Gathered, LearnerPart
from zrl.algos.apex import transition_losses
from zrl.algos.iqn import NStep
from zrl.config import Config
from zrl.gather import TransitionGatherer
from zrl.models.iqn import build_apex_model
from zrl.models.target import TargetNetwork
from zrl.optim import load_optimizer_state, make_optimizer


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
    if finite_update(float(loss.detach()), grad_norm):
        optimizer.step()
    else:  # the weights stay; the learner skips the step (Trained.applied)
        optimizer.zero_grad(set_to_none=True)
    priorities = losses.detach().float().clamp_min(0).pow(apex.priority_exponent).cpu().numpy()
    return ApexStep(float(loss.detach()), grad_norm, priorities)


def transition_misfit(batch: TransitionBatch, cfg: Config, rings: int, num_actions: int) -> str | None:
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


class ApexBatch(NamedTuple):
    """A batch as Ape-X's learner part gathered it: the message, the rows of its intact transitions ``[K]``, and
    theirs on the learner's device: both stacks ``[K, S, *frame_shape]``, actions, n-step returns and discounts,
    and importance weights ``[K]``."""

    batch: TransitionBatch
    keep: np.ndarray
    obs: torch.Tensor
    action: torch.Tensor
    nstep: NStep
    next_obs: torch.Tensor
    weights: torch.Tensor


class ApexLearner:
    """Ape-X's part of the learner: the online and target networks, the optimiser and schedule, and the gatherer
    of transitions."""

    batch_types = (TransitionBatch,)
    asks_replay_index = False
    replies = True  # each step's new priorities go back to the broker

    def __init__(self, cfg: Config, wiring, rings: list, device: torch.device) -> None:
        self.cfg, self.device, self.rings, self.apex = cfg, device, rings, cfg.apex
        self.num_actions = wiring.num_actions
        model = build_apex_model(
            cfg.model, cfg.apex, wiring.frame_shape, wiring.frame_dtype, cfg.env.frame_stack, wiring.num_actions
        )
        self.model = model.to(device)
        self.model.train()
        self.target = TargetNetwork(self.model, self.apex.target_update, train=self.apex.noisy)
        self.optimizer, self.scheduler = make_optimizer(
            self.model, cfg.learner, apex_anneal_steps(cfg, wiring.frames_per_step)
        )
        self.gatherer = TransitionGatherer(
            rings,
            cfg.env.frame_stack,
            cfg.learner.batch_size,
            wiring.frame_shape,
            wiring.frame_dtype,
            pin_memory=device.type == "cuda",
        )
        self.frames_per_step = wiring.frames_per_step

    def load(self, state: dict, resume: bool, optimizer: bool) -> None:
        self.model.load_state_dict(state["model"])
        self.target.load(state)
        if optimizer and state.get("optimizer") is not None:
            load_optimizer_state(self.optimizer, state["optimizer"], keep_configured=not resume)
        if resume:
            self.scheduler.load_state_dict(state["scheduler"])

    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            **self.target.state(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def misfit(self, batch: TransitionBatch) -> str | None:
        return transition_misfit(batch, self.cfg, len(self.rings), self.num_actions)

    def take(self, message) -> bool:
        return False

    def gather(self, batch: TransitionBatch) -> Gathered[ApexBatch]:
        """Both stacks of the transitions whose frames were intact, and their columns (None if none were); how many
        were torn."""
        obs, next_obs, ok = self.gatherer.gather(batch)
        torn = int((~ok).sum())
        if not ok.any():
            return Gathered(None, torn)
        keep = np.flatnonzero(ok)
        device = self.device

        def column(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a[keep])).to(device)

        if len(keep) < len(ok):  # a torn unit: train on the rest (indexing copies 2 x 3.6 MB, so only then)
            pick = torch.from_numpy(keep)
            obs, next_obs = obs[pick], next_obs[pick]
        obs, next_obs = obs.to(device), next_obs.to(device)
        nstep = NStep(column(batch.nstep_return), column(batch.bootstrap_discount))
        return Gathered(ApexBatch(batch, keep, obs, column(batch.action), nstep, next_obs, column(batch.weights)), torn)

    def step(self, gathered: ApexBatch, learner_step: int, policy_version: int) -> Trained:
        """One importance-weighted update; the new priorities as the reply to the broker; the target network
        takes the online one's weights every ``apex.target_update`` steps."""
        batch, keep, obs, action, nstep, next_obs, weights = gathered
        ages = policy_version - batch.policy_version[keep]  # in weights versions; the newest is the lag
        step = apex_sgd_step(
            self.model,
            self.target.net,
            self.optimizer,
            obs,
            action,
            nstep,
            next_obs,
            weights,
            self.apex,
            self.cfg.learner.grad_norm_clip,
        )
        if not finite_update(step.loss, step.grad_norm):  # skipped: no new priorities, no schedule step
            metrics = {"total_loss": step.loss, "grad_norm": step.grad_norm}
            return Trained(samples=0, frames=0, metrics=metrics)
        self.scheduler.step()
        reply = PriorityUpdate(
            batch_id=batch.batch_id,
            size=len(keep),
            slots=batch.slots[keep],
            stamps=batch.stamps[keep],
            priorities=step.priorities.astype(np.float32),
        ).encode()
        self.target.follow(self.model, learner_step)
        metrics = {
            "total_loss": step.loss,
            "grad_norm": step.grad_norm,
            "policy_lag": float(ages.min()),
            "sample_age_mean": float(ages.mean()),
            "sample_age_max": float(ages.max()),
        }
        return Trained(samples=len(keep), frames=len(keep) * self.frames_per_step, metrics=metrics, reply=reply)


_: type[LearnerPart[ApexBatch]] = ApexLearner  # the contract, checked by mypy
