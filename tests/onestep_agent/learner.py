"""The test agent's learner part: n-step advantage actor-critic on each batch, once."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from onestep_agent.messages import StepBatch
from zrl.agents import Trained, finite_update
from zrl.agents.contracts import Gathered, LearnerPart
from zrl.gather import Gatherer, stack_observations
from zrl.models import build_model


class OnestepBatch(NamedTuple):
    batch: StepBatch
    ok: np.ndarray
    obs: torch.Tensor  # [B', K+1, S, *frame_shape] of the intact units


class OnestepLearner:
    batch_types = (StepBatch,)
    asks_replay_index = False
    replies = False

    def __init__(self, cfg, wiring, rings: list, device: torch.device) -> None:
        self.cfg, self.rings, self.k, self.stack = cfg, rings, cfg.onestep.steps, cfg.env.frame_stack
        self.model = build_model(cfg.model, wiring.frame_shape, wiring.frame_dtype, self.stack, wiring.num_actions)
        self.model = self.model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.learner.learning_rate)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: 1.0)
        self.gatherer = Gatherer(
            rings, self.stack, self.k, cfg.learner.batch_size, wiring.frame_shape, wiring.frame_dtype
        )
        self.frames_per_step, self.gamma = wiring.frames_per_step, cfg.learner.discount

    def load(self, state: dict, resume: bool, optimizer: bool) -> None:
        self.model.load_state_dict(state["model"])
        if optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
        if resume:
            self.scheduler.load_state_dict(state["scheduler"])

    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def misfit(self, message: StepBatch) -> str | None:
        if message.length != self.k or (message.worker_ids.size and message.worker_ids.max() >= len(self.rings)):
            return "a batch that does not fit this run"
        return None

    def take(self, message) -> bool:
        return False

    def gather(self, batch: StepBatch) -> Gathered[OnestepBatch]:
        frames, steps, ok = self.gatherer.gather(batch)
        torn = int((~ok).sum())
        if not ok.any():
            return Gathered(None, torn)
        keep = torch.from_numpy(np.flatnonzero(ok))
        obs = stack_observations(frames[keep], steps[keep], self.stack)
        return Gathered(OnestepBatch(batch, ok, obs), torn)

    def step(self, gathered: OnestepBatch, learner_step: int, policy_version: int) -> Trained:
        batch, ok, obs = gathered
        b = obs.shape[0]
        out = self.model(obs.flatten(0, 1))
        logits = out.logits.view(b, self.k + 1, -1)[:, :-1]
        values = out.values.view(b, self.k + 1)
        rewards = torch.from_numpy(batch.rewards[ok])
        discounts = torch.from_numpy(batch.discounts[ok]) * self.gamma
        returns = values[:, -1].detach()
        targets = torch.empty_like(rewards)
        for k in reversed(range(self.k)):
            returns = rewards[:, k] + discounts[:, k] * returns
            targets[:, k] = returns
        advantage = targets - values[:, :-1]
        log_probs = torch.log_softmax(logits, -1)
        taken = log_probs.gather(-1, torch.from_numpy(batch.actions[ok]).long()[..., None])[..., 0]
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
        loss = -(taken * advantage.detach()).mean() + 0.5 * advantage.pow(2).mean()
        loss = loss - self.cfg.onestep.entropy_cost * entropy
        self.optimizer.zero_grad()
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), 40.0))
        if finite_update(float(loss.detach()), grad_norm):  # else the loop skips the step: the weights stay
            self.optimizer.step()
            self.scheduler.step()
        ages = (policy_version - batch.policy_versions[ok]).astype(np.float64)
        metrics = {
            "total_loss": float(loss.detach()),
            "grad_norm": grad_norm,
            "onestep_advantage": float(advantage.detach().abs().mean()),
            "policy_lag": float(ages.mean()),
            "sample_age_mean": float(ages.mean()),
            "sample_age_max": float(ages.max()),
        }
        units = int(ok.sum())
        return Trained(samples=units * self.k, frames=units * self.k * self.frames_per_step, metrics=metrics)


_: type[LearnerPart[OnestepBatch]] = OnestepLearner
