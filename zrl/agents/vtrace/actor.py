"""V-trace's actor: what the one worker loop (zrl/roles/worker.py) runs for this agent. It samples actions from
the policy's logits (or uniformly, ``workers.policy = "uniform"``), keeps each step's logits, values and, where a
replay needs them, features, and every T steps hands the loop one Unroll message. Between unrolls it paces the
worker: ``workers.produce_ratio`` unrolls per weights version (a budget), or, in a deterministic run, lockstep
with the learner's versions.

Ring slot n holds frame n of every env; the observation at step t of an unroll is slot ``first_frame + t``,
t = 0..T (T+1 frames: the last one is the bootstrap observation and the first of the next unroll).
"""

from __future__ import annotations

import numpy as np
import torch

from zrl.agents import Outgoing
from zrl.agents.contracts import Actor
from zrl.agents.vtrace.messages import Unroll
from zrl.config import Config, needs_features, unrolls_banked, unrolls_per_version
from zrl.models import build_model


class VtraceActor:
    def __init__(self, worker_id: int, cfg: Config, wiring, offset: int, ring) -> None:
        m, t_len = cfg.workers.envs_per_worker, cfg.learner.unroll_length
        self.worker_id, self.cfg, self.m, self.t_len = worker_id, cfg, m, t_len
        self.model = build_model(
            cfg.model, wiring.frame_shape, wiring.frame_dtype, cfg.env.frame_stack, wiring.num_actions
        )
        self.model.eval()
        self.rng = np.random.default_rng([cfg.run.seed, worker_id, offset])
        self.deterministic = cfg.run.deterministic
        self.trained = _trained_actions(wiring.replay_from, m, t_len) if wiring.replay_from else None
        self.send_features = needs_features(cfg)
        self.uniform = cfg.workers.policy == "uniform"
        self.num_actions = wiring.num_actions
        self.actions = np.zeros((m, t_len), np.int32)
        self.rewards = np.zeros((m, t_len), np.float32)
        self.discounts = np.zeros((m, t_len), np.float32)
        self.logits = np.zeros((m, t_len, self.num_actions), np.float32)
        self.values = np.zeros((m, t_len), np.float32)
        features = (m, t_len, cfg.model.feature_size) if self.send_features else (0, 0, 0)
        self.features = np.zeros(features, np.float32)
        self.no_grad = torch.no_grad()
        self.t = 0  # the step within the unroll being played
        self.first_frame = 0  # the slot of the unroll's first observation
        self.played = 0  # unrolls played since the run began (a deterministic resume counts the replayed ones)
        self.rate = unrolls_per_version(cfg)  # unrolls per weights version, on average (0: free running)
        self.max_ahead = int(self.rate)  # a deterministic run's exact count
        self.most = unrolls_banked(cfg)  # the most unrolls a worker banks
        self.budget = 1.0  # unrolls this worker may send before it waits for new weights
        self.lockstep = self.deterministic  # unroll n is played with weights version n // max_ahead, exactly

    paces_every_step = False  # only between unrolls

    def begin(self, worker, slot: int) -> None:
        """The envs were reset and their frames written into ``slot``. A deterministic resume first plays every
        trained action again (the games they finish were counted by the first launch), so that the next unroll
        starts where the uninterrupted run's would."""
        self.first_frame = slot
        if self.trained is None:
            return
        for k in range(self.trained.shape[1]):
            _, self.first_frame = worker.advance(self.trained[:, k], episodes=False)
            if k % 1000 == 0:
                worker.heartbeat()  # through a long replay
        self.played = self.trained.shape[1] // self.t_len

    def act(self, obs: torch.Tensor) -> np.ndarray:
        t = self.t
        if t == 0 and self.deterministic:  # the actions of unroll n depend on nothing but the seed and n
            self.rng = np.random.default_rng([self.cfg.run.seed, self.worker_id, self.played])
        if self.uniform:  # the behaviour logits stay 0: a uniform policy
            return self.rng.integers(0, self.num_actions, self.m)
        with self.no_grad:
            out = self.model(obs, with_features=self.send_features)
        logits = out.logits.numpy()
        self.logits[:, t] = logits
        self.values[:, t] = out.values.numpy()
        if self.send_features:
            self.features[:, t] = out.features.numpy()
        return np.argmax(logits - np.log(-np.log(self.rng.random(logits.shape))), axis=1)

    def record(self, worker, action: np.ndarray, step, slot: int) -> Outgoing | None:
        t = self.t
        self.actions[:, t] = action
        self.rewards[:, t] = step.rewards
        self.discounts[:, t] = ~step.done
        self.t = t + 1
        if self.t < self.t_len:
            return None
        message = Unroll(
            worker_id=self.worker_id,
            seq=worker.seq,
            policy_version=worker.policy_version,
            first_frame=self.first_frame,
            num_envs=self.m,
            length=self.t_len,
            env_frames=worker.env_frames,
            actions=self.actions,
            rewards=self.rewards,
            discounts=self.discounts,
            behaviour_logits=self.logits,
            behaviour_values=self.values,
            features=self.features,
        ).encode()
        self.t = 0
        self.first_frame = slot
        self.played += 1
        self.budget = max(self.budget - 1.0, 0.0)
        if self.rate and not self.deterministic:  # shared among the workers live now (remote ones come and go)
            self.rate = unrolls_per_version(self.cfg, worker.live_workers)
            self.most = unrolls_banked(self.cfg, worker.live_workers)
        return Outgoing(message, units=self.m)

    def weights_taken(self, versions: int) -> None:
        """New weights, ``versions`` past the ones before: each adds ``rate`` unrolls, at most ``most`` banked."""
        self.budget = min(self.budget + self.rate * versions, self.most)

    def due_version(self, worker) -> int:
        """Lockstep: the version unroll ``played`` is due to be played with. Otherwise a throttled worker whose
        budget is spent waits for the next version (under 1 unroll per version every worker comes due on the same
        versions, so they send in rounds); until the first new version arrives the learner has not started (its
        replays are filling), and the worker runs free."""
        if self.lockstep:
            return self.played // self.max_ahead
        if self.rate and self.budget < 1.0 - 1e-9 and worker.weight_updates:
            return worker.policy_version + 1
        return 0


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


_: type[Actor] = VtraceActor  # the contract, checked by mypy
