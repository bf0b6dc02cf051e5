"""A target network: a frozen copy of a learner's network that takes its weights every ``period`` learner steps
(Ape-X's double-Q targets, IMPACT's anchor for the surrogate and the importance weights), kept in checkpoints as
``"target"``."""

from __future__ import annotations

import copy

import torch


class TargetNetwork:
    def __init__(self, model: torch.nn.Module, period: int, train: bool = False) -> None:
        self.net = copy.deepcopy(model).requires_grad_(False)
        self.net.train(train)  # Ape-X's noisy layers keep drawing noise in the target, as in the online network
        self.period = period

    def follow(self, model: torch.nn.Module, learner_step: int) -> None:
        """After learner step ``learner_step`` (from 1): take ``model``'s weights on every period-th step."""
        if learner_step % self.period == 0:
            self.net.load_state_dict(model.state_dict())

    def load(self, state: dict) -> None:
        """A checkpoint's target network, or its network where it has none (one written without a target)."""
        self.net.load_state_dict(state.get("target") or state["model"])

    def state(self) -> dict:
        return {"target": self.net.state_dict()}
