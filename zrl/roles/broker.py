"""The broker: receives unroll descriptors, keeps the replay index, and sends batches ahead of the
learner under credit-based flow control: the learner grants ``prefetch_batches`` credits and one more
per batch it takes, and the broker sends one batch per credit, made at that moment from the replays. So
at most ``prefetch_batches`` batches wait for the learner, wherever they wait (ZeroMQ's high-water marks
count messages, not the bytes in a unix socket's buffer).

Every unit goes into every ``[[replay]]``; a batch takes ``batch_size x sample_ratio`` units from each,
once every replay holds its fill. Elite and attentive replays rank candidates by features that the
broker recomputes with the latest weights it subscribes to, in batched forward passes over frames read
straight from the rings (:class:`FeatureScorer`). Otherwise the broker touches no frames, only the rings'
generation stamps, to drop units whose frames a ring has already overwritten.
"""

from __future__ import annotations

import contextlib
import os
import time
from types import SimpleNamespace

import numpy as np
import torch
import zmq

from shm.ring import Ring
from zrl import agents, protocol, transport
from zrl.config import Config, fill_target, lr_decay_steps, needs_features, queue_capacity, replay_share
from zrl.gather import Gatherer, stack_observations
from zrl.models import build_model, load_flat
from zrl.replay.queue import QueueReplay
from zrl.replay.sampled import FeatureReplay, Scorer, UniformReplay
from zrl.replay.store import Unit
from zrl.roles.common import (
    Decoder,
    Every,
    RunWiring,
    SeqGaps,
    crash_report,
    frames_past_ring,
    keep_freed_memory,
    should_stop,
    start_role,
    wait_for_weights,
)

SCORE_CHUNK = 64  # units per feature forward pass (bounds the broker's frame buffer)


def units_of(msg: protocol.Unroll) -> list[Unit]:
    """Split one worker message into its M per-env units."""
    return [
        Unit(
            msg.worker_id,
            i,
            msg.first_frame,
            msg.policy_version,
            msg.actions[i],
            msg.rewards[i],
            msg.discounts[i],
            msg.behaviour_logits[i],
            msg.behaviour_values[i],
        )
        for i in range(msg.num_envs)
    ]


def misfit(msg: protocol.Unroll, cfg: Config, num_actions: int) -> str | None:
    """Why a well-formed unroll message cannot be from this run's workers (a forged or damaged message), or None.
    The schema checks types and shapes; this checks them against the run."""
    if not 0 <= msg.worker_id < cfg.workers.count:
        return f"worker_id {msg.worker_id} is not one of the {cfg.workers.count} workers"
    m, t = cfg.workers.envs_per_worker, cfg.learner.unroll_length
    if (msg.num_envs, msg.length) != (m, t):
        return f"{msg.num_envs} envs x {msg.length} steps, not {m} x {t}"
    if msg.behaviour_logits.shape[2] != num_actions or not (0 <= msg.actions.min() and msg.actions.max() < num_actions):
        return f"actions outside the {num_actions} of this env"
    if bool(msg.features.size) != needs_features(cfg):
        return "features sent where no replay needs them, or missing where one does"
    if msg.features.size and msg.features.shape[2] != cfg.model.feature_size:
        return f"features of {msg.features.shape[2]}, not model.feature_size {cfg.model.feature_size}"
    if msg.first_frame < 0 or msg.policy_version < 0:
        return "a negative frame number or policy version"
    if not all(np.isfinite(a).all() for a in (msg.rewards, msg.behaviour_logits, msg.behaviour_values)):
        return "non-finite rewards, logits or values"
    return None


def make_batch(
    batch_id: int, units: list[Unit], replay_index: list[int] | None = None, env_frames: int = 0
) -> protocol.Batch:
    """Units sorted by worker, so that the learner gathers each ring's frames into one contiguous block."""
    source = np.zeros(len(units), np.int32) if replay_index is None else np.asarray(replay_index, np.int32)
    order = sorted(range(len(units)), key=lambda i: units[i].worker_id)
    units = [units[i] for i in order]
    return protocol.Batch(
        batch_id=batch_id,
        length=len(units[0].actions),
        env_frames=env_frames,
        worker_ids=np.array([u.worker_id for u in units], np.int32),
        env_index=np.array([u.env_index for u in units], np.int32),
        first_frame=np.array([u.first_frame for u in units], np.int64),
        policy_versions=np.array([u.policy_version for u in units], np.int64),
        actions=np.stack([u.actions for u in units]),
        rewards=np.stack([u.rewards for u in units]),
        discounts=np.stack([u.discounts for u in units]),
        behaviour_logits=np.stack([u.behaviour_logits for u in units]),
        behaviour_values=np.stack([u.behaviour_values for u in units]),
        replay_index=source[order],
    )


class FeatureScorer:
    """The current policy's features of stored units, recomputed from their frames in the rings."""

    def __init__(self, cfg: Config, wiring: RunWiring, rings: list[Ring]) -> None:
        self.stack = cfg.env.frame_stack
        self.model = build_model(cfg.model, wiring.frame_shape, wiring.frame_dtype, self.stack, wiring.num_actions)
        self.model.eval()
        self.gatherer = Gatherer(
            rings, self.stack, cfg.learner.unroll_length, SCORE_CHUNK, wiring.frame_shape, wiring.frame_dtype
        )
        self.bf16 = cfg.broker.precision == "bf16"
        self.version = -1
        self.time_s = 0.0

    def load(self, version: int, flat: np.ndarray) -> None:
        if version > self.version:
            load_flat(self.model, flat)
            self.version = version

    def __call__(
        self, worker_ids: np.ndarray, env_index: np.ndarray, first_frames: np.ndarray, at: np.ndarray
    ) -> tuple[torch.Tensor, np.ndarray]:
        t0 = time.perf_counter()
        n = len(worker_ids)
        order = np.argsort(worker_ids, kind="stable")  # the gatherer reads one ring block at a time
        out: list[torch.Tensor] = []
        ok = np.zeros(n, bool)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        for lo in range(0, n, SCORE_CHUNK):
            idx = order[lo : lo + SCORE_CHUNK]
            where = SimpleNamespace(worker_ids=worker_ids[idx], env_index=env_index[idx], first_frame=first_frames[idx])
            frames, steps, read_ok = self.gatherer.gather(where)
            obs = stack_observations(frames, steps, self.stack, at=at)  # [n, K, S, *shape]
            with torch.no_grad(), autocast:
                feats = self.model(obs.reshape(-1, *obs.shape[2:]), with_features=True).features
            out.append(feats.float().view(len(idx), len(at), -1))
            ok[idx] = read_ok
        in_order = torch.cat(out)
        features = torch.empty_like(in_order)
        features[torch.from_numpy(order)] = in_order  # back to the callers' order
        self.time_s += time.perf_counter() - t0
        return features, ok


def make_replays(cfg: Config, frames_per_step: int, scorer: Scorer | None, seed: int) -> list:
    replays: list = []
    for i, rep in enumerate(cfg.replay):
        share = replay_share(cfg, rep)
        rng = np.random.default_rng([seed, 7919, i])
        min_fill = fill_target(cfg, rep)
        if rep.type == "queue":
            replays.append(QueueReplay(queue_capacity(cfg, rep)))
        elif rep.type == "uniform":
            replays.append(UniformReplay(rep.capacity, share, min_fill, rng))
        else:
            if scorer is None:
                raise ValueError(f"replay[{i}] is {rep.type} and needs a feature scorer")
            replays.append(
                FeatureReplay(
                    rep.type,
                    rep.capacity,
                    share,
                    min_fill,
                    rng,
                    unroll_length=cfg.learner.unroll_length,
                    feature_size=cfg.model.feature_size,
                    scorer=scorer,
                    dist_function=rep.dist_function,
                    p=rep.p,
                    strategy=rep.strategy,
                    lambda_batch_multiplier=rep.lambda_batch_multiplier,
                    alfa_annealing_factor=rep.alfa_annealing_factor,
                    decay_steps=lr_decay_steps(cfg, frames_per_step),
                    feature_steps=rep.feature_steps,
                    elite_insertion=rep.elite_insertion,
                    elite_batch_size=rep.elite_batch_size,
                )
            )
    return replays


class Broker:
    """The broker's state and rules, separate from its sockets so a test can drive it directly."""

    def __init__(self, cfg: Config, rings: list[Ring], scorer: Scorer | None = None, frames_per_step: int = 1) -> None:
        self.batch_size = cfg.learner.batch_size
        self.history = cfg.env.frame_stack - 1
        self.shares = [replay_share(cfg, rep) for rep in cfg.replay]
        self.replays = make_replays(cfg, frames_per_step, scorer, cfg.run.seed)
        self.rings = rings
        self.gaps = SeqGaps()
        self.worker_frames: dict[int, int] = {}  # each worker's env frames, from its latest unroll
        self.unrolls_received = 0
        self.dropped_stale = 0
        self.prepare_time_s = 0.0
        self.batches_prepared = 0

    @property
    def seq_gaps(self) -> int:
        return self.gaps.count

    @property
    def dropped_full(self) -> int:
        return sum(r.dropped_full for r in self.replays if isinstance(r, QueueReplay))

    @property
    def stale_total(self) -> int:
        return self.dropped_stale + sum(getattr(r, "dropped_stale", 0) for r in self.replays)

    def sizes(self) -> np.ndarray:
        return np.array([len(r) for r in self.replays], np.int64)

    def ready(self) -> bool:
        """Every replay holds its fill: one batch's share for a queue, fill_fraction x capacity otherwise."""
        return all(len(r) >= s if isinstance(r, QueueReplay) else r.ready() for r, s in zip(self.replays, self.shares))

    def insert(self, msg: protocol.Unroll) -> None:
        self.gaps.see(msg.worker_id, msg.seq)
        self.worker_frames[msg.worker_id] = msg.env_frames
        self.unrolls_received += msg.num_envs
        units = units_of(msg)
        features = msg.features if msg.features.size else None
        for replay in self.replays:
            if isinstance(replay, QueueReplay):
                for unit in units:
                    replay.add(unit)
            else:
                replay.add(units, features)

    def is_fresh(self, worker_ids: np.ndarray, first_frames: np.ndarray) -> np.ndarray:
        """Which units still have every frame they need (their stacks' history included) in their ring."""
        oldest = np.maximum(np.asarray(first_frames, np.int64) - self.history, 0)
        ok = np.zeros(len(oldest), bool)
        for w in np.unique(worker_ids):
            sel = worker_ids == w
            ok[sel] = self.rings[int(w)].valid(oldest[sel])
        return ok

    def _from_queue(self, queue: QueueReplay, n: int) -> list[Unit] | None:
        units: list[Unit] = []
        while len(units) < n and len(queue):
            taken = queue.take(n - len(units))
            fresh = self.is_fresh(np.array([u.worker_id for u in taken]), np.array([u.first_frame for u in taken]))
            units += [u for u, ok in zip(taken, fresh) if ok]
            self.dropped_stale += int((~fresh).sum())
        if len(units) < n:
            queue.put_back(units)
            return None
        return units

    def next_units(self) -> tuple[list[Unit], list[int]] | None:
        """A batch's units and the replay each came from, or None while a replay cannot give its share.
        Units that cannot be sent go back with :meth:`put_back`."""
        if not self.ready():
            return None
        t0 = time.perf_counter()
        taken: list[tuple[int, list[Unit]]] = []
        for i, (replay, n) in enumerate(zip(self.replays, self.shares)):
            part = self._from_queue(replay, n) if isinstance(replay, QueueReplay) else replay.sample(self.is_fresh)
            if part is None:
                self.put_back(taken)
                return None
            taken.append((i, part))
        self.prepare_time_s += time.perf_counter() - t0
        self.batches_prepared += 1
        units = [u for _, part in taken for u in part]
        return units, [i for i, part in taken for _ in part]

    def put_back(self, taken: list[tuple[int, list[Unit]]] | tuple[list[Unit], list[int]]) -> None:
        """Give units taken for a batch that was not sent back to their queues (sampled replays keep theirs)."""
        if isinstance(taken, tuple):
            units, sources = taken
            taken = [(i, [u for u, s in zip(units, sources) if s == i]) for i in sorted(set(sources))]
        for i, part in taken:
            self.replays[i].put_back(part)

    def index(self) -> protocol.ReplayIndex:
        """What every replay holds, for the learner's checkpoint: units, sample counts, stored features
        (padded with NaN to the longest compared-steps count when feature replays differ)."""
        rows: list[tuple[int, Unit, int]] = []
        features: list[np.ndarray] = []
        feature_rows: list[int] = []
        for i, replay in enumerate(self.replays):
            if isinstance(replay, QueueReplay):
                rows += [(i, u, 0) for u in replay.units()]
                continue
            st = replay.store
            for slot in st.slots():
                if isinstance(replay, FeatureReplay):
                    feature_rows.append(len(rows))
                    features.append(st.features[slot])
                rows.append((i, st.units[slot], int(st.counts[slot])))
        if features:
            k = max(f.shape[0] for f in features)
            stacked = np.full((len(features), k, features[0].shape[1]), np.nan, np.float32)
            for j, f in enumerate(features):
                stacked[j, : f.shape[0]] = f
        else:
            stacked = np.zeros((0, 0, 0), np.float32)
        column = lambda values, dtype: np.array(values, dtype)  # noqa: E731
        return protocol.ReplayIndex(
            replay=column([r[0] for r in rows], np.int32),
            worker_ids=column([r[1].worker_id for r in rows], np.int32),
            env_index=column([r[1].env_index for r in rows], np.int32),
            first_frame=column([r[1].first_frame for r in rows], np.int64),
            policy_versions=column([r[1].policy_version for r in rows], np.int64),
            counts=column([r[2] for r in rows], np.int64),
            feature_rows=column(feature_rows, np.int32),
            features=stacked,
            sample_calls=column([getattr(r, "sample_calls", 0) for r in self.replays], np.int64),
        )

    def elite_stats(self) -> dict[str, float]:
        """Figures of the first elite or attentive replay's last scored pool (zeros when there is none)."""
        stats = dict.fromkeys(
            (
                "elite_lambda",
                "elite_distance_pool",
                "elite_distance_chosen",
                "elite_distance_min",
                "elite_distance_max",
            ),
            0.0,
        )
        replay = next((r for r in self.replays if isinstance(r, FeatureReplay)), None)
        if replay is not None:
            stats["elite_lambda"] = replay.lam
            d, c = replay.last_distances, replay.last_chosen
            if len(d):
                stats.update(
                    elite_distance_pool=float(d.mean()),
                    elite_distance_chosen=float(c.mean()),
                    elite_distance_min=float(d.min()),
                    elite_distance_max=float(d.max()),
                )
        return stats


def run(cfg: Config, wiring: RunWiring, stop_event) -> None:
    start_role("zrl-broker", wiring.launcher_pid)
    transport.configure(cfg.transport)  # before anything can fail: the crash report uses the keys too
    with crash_report("zrl-broker", wiring):
        agents.get(cfg.algo).broker_body()(cfg, wiring, stop_event)


def run_vtrace(cfg: Config, wiring: RunWiring, stop_event) -> None:
    if cfg.run.keep_freed_memory:
        keep_freed_memory()
    torch.set_num_threads(cfg.broker.torch_threads)
    rings = [Ring.attach(name, wiring.ring_spec) for name in wiring.ring_names]
    scorer = FeatureScorer(cfg, wiring, rings) if needs_features(cfg) else None
    broker = Broker(cfg, rings, scorer, wiring.frames_per_step)
    frames_per_slot = cfg.workers.envs_per_worker * wiring.frames_per_step
    for replay, calls in zip(broker.replays, wiring.sample_calls):  # a resumed run anneals on from where it was
        if isinstance(replay, FeatureReplay):
            replay.sample_calls = int(calls)
    poll_ms = cfg.transport.poll_timeout_ms
    prefetch = cfg.broker.prefetch_batches
    ctx = transport.context(cfg.transport)
    unrolls = transport.socket(ctx, zmq.PULL, hwm=cfg.transport.hwm, bind=wiring.endpoints.unrolls)
    batches = transport.socket(ctx, zmq.PUSH, hwm=prefetch, connect=wiring.endpoints.batches)
    credits_sock = transport.socket(ctx, zmq.PULL, hwm=1000, bind=wiring.endpoints.credits)
    stats = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.stats)
    weights = transport.socket(ctx, zmq.SUB, hwm=1, connect=wiring.endpoints.weights) if scorer else None
    poller = zmq.Poller()
    poller.register(unrolls, zmq.POLLIN)
    poller.register(credits_sock, zmq.POLLIN)
    batches_sent = credits = credits_granted = 0
    decoded = Decoder()
    insert_time = 0.0
    report = Every(1.0)

    def latest_weights() -> None:
        while weights is not None and scorer is not None and weights.poll(0, zmq.POLLIN):
            try:
                version, _, flat = protocol.decode_weights(weights.recv())
            except protocol.ProtocolError:
                continue
            scorer.load(version, flat)

    def send_stats() -> None:
        transport.send_nowait(
            stats,
            protocol.BrokerStats(
                pid=os.getpid(),
                time=time.time(),
                unrolls_received=broker.unrolls_received,
                unrolls_dropped_stale=broker.stale_total,
                unrolls_dropped_full=broker.dropped_full,
                seq_gaps=broker.seq_gaps,
                decode_errors=decoded.errors,
                batches_sent=batches_sent,
                replay_size=int(broker.sizes().max()),
                ready_batches=batches_sent - max(0, credits_granted - prefetch),
                replay_sizes=broker.sizes(),
                prepare_time_s=broker.prepare_time_s,
                feature_time_s=scorer.time_s if scorer else 0.0,
                insert_time_s=insert_time,
                **broker.elite_stats(),
            ).encode(),
        )

    try:
        if scorer is not None:
            first = wait_for_weights(ctx, wiring, -1, poll_ms, stop_event)
            if first is None:
                return
            scorer.load(first.version, first.flat)
        while not should_stop(stop_event, wiring.launcher_pid):
            poller.poll(poll_ms)
            while (data := transport.recv(credits_sock, 0)) is not None:
                msg = decoded(data, (protocol.Credit, protocol.IndexRequest))
                if isinstance(msg, protocol.IndexRequest):  # for the learner's next checkpoint
                    transport.send(batches, broker.index().encode(), poll_ms)
                elif msg is not None and msg.batches > 0:
                    credits += msg.batches
                    credits_granted += msg.batches
            t0 = time.perf_counter()
            for _ in range(1024):
                data = transport.recv(unrolls, 0)
                if data is None:
                    break
                if (msg := decoded(data, protocol.Unroll)) is None:
                    continue
                if misfit(msg, cfg, wiring.num_actions) is not None or frames_past_ring(
                    msg.worker_id, msg.env_frames, rings, frames_per_slot
                ):
                    decoded.refuse()
                    continue
                broker.insert(msg)
            insert_time += time.perf_counter() - t0
            while credits > 0:
                latest_weights()
                taken = broker.next_units()
                if taken is None:
                    break
                frames = wiring.env_frames_start + sum(broker.worker_frames.values())
                if not transport.send(
                    batches, make_batch(batches_sent + 1, *taken, env_frames=frames).encode(), poll_ms
                ):
                    broker.put_back(taken)  # the learner is not connected (yet, or any more)
                    break
                credits -= 1
                batches_sent += 1
                if report.due():  # making elite batches takes a while: keep the heartbeat going
                    send_stats()
            if report.due():
                send_stats()
    finally:
        for sock in (unrolls, batches, credits_sock, stats, weights):
            if sock is not None:
                sock.close()
        transport.term(ctx)
        for ring in rings:
            ring.close()
