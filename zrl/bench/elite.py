"""Elite and attentive replay: the broker's time to prepare one batch, against the learner's step on the same
batch shape, on a replay of real Pong frames in a real ring (zrl-bench elite; perf/elite_batch.py adds the
selection's fidelity and a pipeline run).

The replay holds ``capacity`` units of Pong played with random actions. Each unit's behaviour features are what
a Nature CNN computed on its observations, as a worker sends them; the current policy is that network after a
few V-trace steps on the replay, so that stored and current features differ as they do in training.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from types import SimpleNamespace

import msgspec
import numpy as np
import torch

from shm import segment_name
from shm.ring import Ring, RingSpec
from zrl import config as config_mod
from zrl.agents.vtrace.broker import FeatureScorer, VtraceBroker, make_batch, units_of
from zrl.agents.vtrace.learner import batch_tensors, choose_unroll_conv, sgd_step
from zrl.agents.vtrace.messages import Unroll
from zrl.envs import make_vector_env
from zrl.gather import ActingStack, Gatherer, Unrolls, stack_observations
from zrl.launch import shm_prefix
from zrl.models import build_model, flat_parameters, resolve_device
from zrl.optim import make_optimizer

M = 8  # envs in the one ring that holds the replay's frames


def fill_ring(cfg, spec, units: int) -> tuple[Ring, list[Unroll]]:
    """Play Pong with random actions into a ring; one Unroll (without features yet) per T steps."""
    t_len = cfg.learner.unroll_length
    messages = -(-units // M)
    ring_spec = RingSpec(
        messages * t_len + cfg.env.frame_stack + 8,
        {"frame": ((M, *spec.frame_shape), spec.frame_dtype), "episode_step": ((M,), "int32")},
    )
    ring = Ring.create(segment_name(shm_prefix(), f"bench{os.urandom(2).hex()}", os.getpid(), "elite"), ring_spec)
    try:  # a failure (Ctrl-C, an env error) must not leave the segment behind
        env = make_vector_env(cfg.env, M, seed=0)
        rng = np.random.default_rng(0)
        stack = ActingStack(M, cfg.env.frame_stack, spec.frame_shape, spec.frame_dtype)
        frames = env.reset()
        stack.reset(frames)
        first = ring.write(frame=frames, episode_step=stack.episode_step)
        out = []
        for seq in range(messages):
            actions = rng.integers(0, spec.num_actions, (M, t_len)).astype(np.int32)
            rewards = np.zeros((M, t_len), np.float32)
            discounts = np.ones((M, t_len), np.float32)
            for t in range(t_len):
                step = env.step(actions[:, t])
                rewards[:, t], discounts[:, t] = step.rewards, ~step.done
                stack.push(step.frames, step.game_over)
                last = ring.write(frame=step.frames, episode_step=stack.episode_step)
            out.append(
                Unroll(
                    worker_id=0,
                    seq=seq,
                    policy_version=0,
                    first_frame=first,
                    num_envs=M,
                    length=t_len,
                    env_frames=0,
                    actions=actions,
                    rewards=rewards,
                    discounts=discounts,
                    behaviour_logits=np.zeros((M, t_len, spec.num_actions), np.float32),
                    behaviour_values=np.zeros((M, t_len), np.float32),
                    features=np.zeros((0, 0, 0), np.float32),
                )
            )
            first = last
        env.close()
    except BaseException:
        ring.close()
        ring.unlink()
        raise
    return ring, out


def behaviour_outputs(model, ring, cfg, spec, msg: Unroll) -> Unroll:
    """The message as a worker acting with ``model`` would have sent it: logits, values, features."""
    t_len, s = cfg.learner.unroll_length, cfg.env.frame_stack
    where = SimpleNamespace(
        worker_ids=np.zeros(M, np.int32),
        env_index=np.arange(M, dtype=np.int32),
        first_frame=np.full(M, msg.first_frame, np.int64),
    )
    frames, steps, ok = Gatherer([ring], s, t_len, M, spec.frame_shape, spec.frame_dtype).gather(where)
    assert ok.all()
    obs = stack_observations(frames, steps, s)[:, :t_len]
    with torch.no_grad():
        out = model(obs.reshape(-1, *obs.shape[2:]), with_features=True)
    return msgspec.structs.replace(
        msg,
        behaviour_logits=out.logits.view(M, t_len, -1).numpy(),
        behaviour_values=out.values.view(M, t_len).numpy(),
        features=out.features.view(M, t_len, -1).numpy(),
    )


def drifted(model, cfg, spec, ring, messages, steps: int):
    """The behaviour network after ``steps`` V-trace updates on uniform batches of the replay."""
    lcfg = cfg.learner
    opt, sched = make_optimizer(model, lcfg, 10**6)
    gatherer = Gatherer(
        [ring], cfg.env.frame_stack, lcfg.unroll_length, lcfg.batch_size, spec.frame_shape, spec.frame_dtype
    )
    rng = np.random.default_rng(1)
    units = [(m, i) for m in messages for i in range(M)]
    for _ in range(steps):
        pick = [units[k] for k in rng.choice(len(units), lcfg.batch_size, replace=False)]
        batch = make_batch(0, [_unit(m, i) for m, i in pick])
        frames, steps_, ok = gatherer.gather(batch)
        sgd_step(
            model, opt, sched, Unrolls(frames, steps_), batch_tensors(batch, ok, torch.device("cpu")), lcfg, cfg.vtrace
        )
    return model


def _unit(msg, i):
    return units_of(msg)[i]


def time_learner_step(model, cfg, spec, ring, messages, repeats: int) -> float:
    """Median seconds of the learner's V-trace step on one batch of units spread over the replay, as a sampled
    batch is (units from its first message would all hold the run's start, whose blanked stacks are rare), on
    ``learner.device`` (there, on a copy of ``model``; on the CPU ``model`` itself takes the steps)."""
    lcfg = cfg.learner
    device = resolve_device(lcfg.device)
    if device.type != "cpu":
        model = copy.deepcopy(model).to(device)
    choose_unroll_conv(model, cfg)  # the learner role's first-convolution path
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    opt, sched = make_optimizer(model, lcfg, 10**6)
    gatherer = Gatherer(
        [ring], cfg.env.frame_stack, lcfg.unroll_length, lcfg.batch_size, spec.frame_shape, spec.frame_dtype
    )
    b = lcfg.batch_size
    batch = make_batch(0, [_unit(messages[k * len(messages) // b], k % M) for k in range(b)])
    frames, steps, ok = gatherer.gather(batch)
    unrolls = Unrolls(frames.to(device), steps.to(device))
    tensors = batch_tensors(batch, ok, device)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        sgd_step(model, opt, sched, unrolls, tensors, lcfg, cfg.vtrace)
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


class Replay:
    """A filled replay: its ring, the unroll messages with behaviour features, and the current policy."""

    def __init__(self, cfg, spec, capacity: int, drift_steps: int = 10, progress=print) -> None:
        self.cfg, self.spec = cfg, spec
        progress(f"filling a replay of {capacity} units with Pong frames")
        self.ring, raw = fill_ring(cfg, spec, capacity)
        try:
            behaviour = build_model(
                cfg.model, spec.frame_shape, spec.frame_dtype, cfg.env.frame_stack, spec.num_actions
            )
            self.messages = [behaviour_outputs(behaviour, self.ring, cfg, spec, msg) for msg in raw]
            progress(f"current policy: {drift_steps} V-trace steps away from the behaviour policy")
            self.model = drifted(behaviour, cfg, spec, self.ring, self.messages, drift_steps)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.ring.close()
        self.ring.unlink()

    def broker(self, kind: str, capacity: int, lam: float, feature_steps: int, precision: str, strategy: int = 3):
        """A broker with one ``kind`` replay holding every unit, its scorer loaded with the current policy."""
        cfg = self.cfg  # the user's config (model, stack, env...), with one replay of ``kind`` holding everything
        replay = config_mod.ReplayConfig(
            type=kind,
            capacity=capacity,
            sample_ratio=1.0,
            strategy=strategy,
            lambda_batch_multiplier=lam,
            alfa_annealing_factor=1e9,
            feature_steps=feature_steps,
            fill_fraction=1.0,
        )
        ecfg = dataclasses.replace(
            cfg,
            replay=(replay,),
            broker=dataclasses.replace(cfg.broker, precision=precision),
            run=dataclasses.replace(cfg.run, max_env_frames=10**10),
        )
        wiring = SimpleNamespace(
            frame_shape=self.spec.frame_shape,
            frame_dtype=self.spec.frame_dtype,
            num_actions=self.spec.num_actions,
            frames_per_step=1,
            sample_calls=(),
        )
        scorer = FeatureScorer(ecfg, wiring, [self.ring])
        scorer.load(1, flat_parameters(self.model))
        broker = VtraceBroker(ecfg, wiring, [self.ring], scorer)
        for msg in self.messages:
            broker.store(msg)
        return broker, scorer


def prepare_time(broker, repeats: int) -> float:
    """Median seconds of the broker's next_units (a whole batch) after one warm-up call."""
    broker.next_units()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        if broker.next_units() is None:
            raise RuntimeError("the replay gave no batch")
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
