"""IMPACT's learner side: V-trace's learner part (gather, checks, checkpoints) with IMPACT's update, and a target
network that the update measures the policy against, refreshed every ``impact.target_update_steps`` steps."""

from __future__ import annotations

from typing import Any

import torch

from zrl.agents.contracts import LearnerPart
from zrl.agents.vtrace.learner import VtraceBatch, VtraceLearner, apply, forward, loss_inputs
from zrl.algos.impact import impact_loss
from zrl.config import Config
from zrl.gather import Unrolls
from zrl.models.target import TargetNetwork


class ImpactLearner(VtraceLearner):
    def __init__(self, cfg: Config, wiring, rings: list, device: torch.device) -> None:
        super().__init__(cfg, wiring, rings, device)
        self.target = TargetNetwork(self.model, cfg.impact.target_update_steps)

    def load(self, state: dict, resume: bool, optimizer: bool) -> None:
        """V-trace's, and the target network where the checkpoint has one (else a copy of the network)."""
        super().load(state, resume, optimizer)
        self.target.load(state)

    def state(self) -> dict[str, Any]:
        return {**super().state(), **self.target.state()}

    def update(self, unrolls: Unrolls, tensors: dict[str, torch.Tensor], learner_step: int) -> dict[str, float]:
        lcfg = self.cfg.learner
        entropy_cost = self.entropy_cost(learner_step)
        logits, values = forward(self.model, unrolls, lcfg.precision)
        with torch.no_grad():
            target_logits, _ = forward(self.target.net, unrolls, lcfg.precision)
        loss = impact_loss(
            **loss_inputs(logits, values, tensors, lcfg, self.cfg.vtrace, entropy_cost),
            target_logits=target_logits[:-1],
            clip=self.cfg.impact.clip,
        )
        grad_norm = apply(loss.total, self.model, self.optimizer, self.scheduler, lcfg.grad_norm_clip)
        self.target.follow(self.model, learner_step)
        figures = {
            "total_loss": loss.total,
            "pg_loss": loss.pg,
            "baseline_loss": loss.baseline,
            "entropy_loss": loss.entropy,
            "mean_rho": loss.mean_rho,
            "clip_fraction": loss.clip_fraction,
            "target_kl": loss.target_kl,
        }
        return {
            "grad_norm": grad_norm,
            "entropy_cost": entropy_cost,
            **{name: float(value.detach()) for name, value in figures.items()},
        }


_: type[LearnerPart[VtraceBatch]] = ImpactLearner  # the contract, checked by mypy
