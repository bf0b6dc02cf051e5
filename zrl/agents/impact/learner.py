"""IMPACT's learner side: V-trace's learner part (gather, checks, checkpoints) with IMPACT's update, and a target
network that the update measures the policy against, refreshed every ``impact.target_update_steps`` steps."""

from __future__ import annotations

import copy
from typing import Any

import torch

from zrl.agents.vtrace.learner import VtraceLearner, apply, forward
from zrl.algos.impact import impact_loss
from zrl.config import Config
from zrl.gather import Unrolls


class ImpactLearner(VtraceLearner):
    def __init__(self, cfg: Config, wiring, rings: list, device: torch.device) -> None:
        super().__init__(cfg, wiring, rings, device)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        self.target.eval()

    def load(self, state: dict, resume: bool, optimizer: bool) -> None:
        """V-trace's, and the target network where the checkpoint has one (else a copy of the network)."""
        super().load(state, resume, optimizer)
        self.target.load_state_dict(state.get("target_model") or self.model.state_dict())

    def state(self) -> dict[str, Any]:
        return {**super().state(), "target_model": self.target.state_dict()}

    def update(self, unrolls: Unrolls, tensors: dict[str, torch.Tensor], learner_step: int) -> dict[str, float]:
        lcfg, vcfg = self.cfg.learner, self.cfg.vtrace
        logits, values = forward(self.model, unrolls, lcfg.precision)
        with torch.no_grad():
            target_logits, _ = forward(self.target, unrolls, lcfg.precision)
        loss = impact_loss(
            learner_logits=logits[:-1],
            target_logits=target_logits[:-1],
            behaviour_logits=tensors["behaviour_logits"],
            actions=tensors["actions"],
            values=values[:-1],
            bootstrap_value=values[-1],
            rewards=tensors["rewards"] * lcfg.reward_scale,
            discounts=tensors["discounts"] * lcfg.discount,
            clip=self.cfg.impact.clip,
            pg_cost=lcfg.pg_cost,
            baseline_cost=lcfg.baseline_cost,
            entropy_cost=lcfg.entropy_cost,
            clip_rho_threshold=vcfg.clip_rho or None,
            clip_c_threshold=vcfg.clip_c or None,
            clip_pg_rho_threshold=vcfg.clip_pg_rho or None,
        )
        grad_norm = apply(loss.total, self.model, self.optimizer, self.scheduler, lcfg.grad_norm_clip)
        if learner_step % self.cfg.impact.target_update_steps == 0:
            self.target.load_state_dict(self.model.state_dict())
        figures = {
            "total_loss": loss.total,
            "pg_loss": loss.pg,
            "baseline_loss": loss.baseline,
            "entropy_loss": loss.entropy,
            "mean_rho": loss.mean_rho,
            "clip_fraction": loss.clip_fraction,
            "target_kl": loss.target_kl,
        }
        return {"grad_norm": grad_norm, **{name: float(value.detach()) for name, value in figures.items()}}
