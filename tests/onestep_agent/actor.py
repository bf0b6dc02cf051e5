"""The test agent's actor: samples the policy's actions, and every onestep.steps steps hands the loop a Steps
message. It may run onestep.ahead messages ahead of the weights it acts with."""

from __future__ import annotations

import numpy as np
import torch

from onestep_agent.messages import Steps
from zrl.agents import Outgoing
from zrl.agents.contracts import Actor
from zrl.models import build_model


class OnestepActor:
    paces_every_step = False
    lockstep = False

    def __init__(self, worker_id: int, cfg, wiring, offset: int, ring) -> None:
        self.worker_id, self.m, self.k, self.ahead = (
            worker_id,
            cfg.workers.envs_per_worker,
            cfg.onestep.steps,
            cfg.onestep.ahead,
        )
        self.model = build_model(
            cfg.model, wiring.frame_shape, wiring.frame_dtype, cfg.env.frame_stack, wiring.num_actions
        )
        self.model.eval()
        self.rng = np.random.default_rng([cfg.run.seed, worker_id, offset])
        self.actions = np.zeros((self.m, self.k), np.int32)
        self.rewards = np.zeros((self.m, self.k), np.float32)
        self.discounts = np.zeros((self.m, self.k), np.float32)
        self.t = self.first_frame = self.sent_on_version = 0

    def begin(self, worker, slot: int) -> None:
        self.first_frame = slot

    def act(self, obs: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            logits = self.model(obs).logits.numpy()
        return np.argmax(logits - np.log(-np.log(self.rng.random(logits.shape))), axis=1)

    def record(self, worker, action: np.ndarray, step, slot: int) -> Outgoing | None:
        t = self.t
        self.actions[:, t], self.rewards[:, t], self.discounts[:, t] = action, step.rewards, ~step.done
        self.t = t + 1
        if self.t < self.k:
            return None
        message = Steps(
            worker_id=self.worker_id,
            seq=worker.seq,
            policy_version=worker.policy_version,
            first_frame=self.first_frame,
            env_frames=worker.env_frames,
            num_envs=self.m,
            length=self.k,
            actions=self.actions,
            rewards=self.rewards,
            discounts=self.discounts,
        ).encode()
        self.t, self.first_frame = 0, slot
        self.sent_on_version += 1
        return Outgoing(message, units=self.m)

    def weights_taken(self, versions: int) -> None:
        self.sent_on_version = 0

    def due_version(self, worker) -> int:
        if worker.weight_updates and self.sent_on_version >= self.ahead:
            return worker.policy_version + 1
        return 0


_: type[Actor] = OnestepActor
