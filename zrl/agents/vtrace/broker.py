"""V-trace's broker side: every unit goes into every ``[[replay]]``; a batch takes ``batch_size x sample_ratio``
units from each, once every replay holds its fill. Elite and attentive replays rank candidates by features that
the broker recomputes with the latest weights it subscribes to, in batched forward passes over frames read
straight from the rings (:class:`FeatureScorer`). Otherwise the broker touches no frames, only the rings'
generation stamps, to drop units whose frames a ring has already overwritten.

:class:`VtraceBroker` is the part the one broker loop (zrl/roles/broker.py) runs for this agent.
"""

from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace

import numpy as np
import torch

from shm.ring import Ring
from zrl import agents, protocol
from zrl.agents.contracts import BrokerPart
from zrl.agents.vtrace.messages import Batch, Unroll
from zrl.bounds import out_of_range, within_unit
from zrl.config import (
    Config,
    lr_decay_steps,
    needs_features,
    queue_capacity,
    queue_uses,
    replay_share,
    worker_slots,
)
from zrl.gather import Gatherer
from zrl.models import build_model, load_flat, resolve_device
from zrl.replay.queue import QueueReplay
from zrl.replay.sampled import FeatureReplay, Scorer, UniformReplay
from zrl.replay.snapshot import SnapshotMismatch, prefixed, section
from zrl.replay.store import Unit

SCORE_CHUNK = 64  # units per feature forward pass (bounds the broker's frame buffer)


def units_of(msg: Unroll) -> list[Unit]:
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


def misfit(msg: Unroll, cfg: Config, num_actions: int) -> str | None:
    """Why a well-formed unroll message cannot be from this run's workers (a forged or damaged message), or None.
    The schema checks types and shapes; this checks them against the run."""
    if not 0 <= msg.worker_id < worker_slots(cfg):
        return f"worker_id {msg.worker_id} is not one of the {worker_slots(cfg)} workers"
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
    bcfg = cfg.broker
    return (
        out_of_range("rewards", msg.rewards, bcfg.max_abs_reward, "broker.max_abs_reward")
        or out_of_range("behaviour logits", msg.behaviour_logits, bcfg.max_abs_logit, "broker.max_abs_logit")
        or out_of_range("behaviour values", msg.behaviour_values, bcfg.max_abs_value, "broker.max_abs_value")
        or within_unit("discounts", msg.discounts)
        or (msg.features.size and out_of_range("features", msg.features, bcfg.max_abs_value, "broker.max_abs_value"))
        or None
    )


def make_batch(batch_id: int, units: list[Unit], replay_index: list[int] | None = None, env_frames: int = 0) -> Batch:
    """Units sorted by worker, so that the learner gathers each ring's frames into one contiguous block."""
    source = np.zeros(len(units), np.int32) if replay_index is None else np.asarray(replay_index, np.int32)
    order = sorted(range(len(units)), key=lambda i: units[i].worker_id)
    units = [units[i] for i in order]
    return Batch(
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
    """The current policy's features of stored units, recomputed from their frames in the rings, on
    ``broker.device`` (the frames are read on the CPU; the features come back to it)."""

    def __init__(self, cfg: Config, wiring, rings: list[Ring]) -> None:
        self.stack = cfg.env.frame_stack
        self.device = resolve_device(cfg.broker.device)
        self.model = build_model(cfg.model, wiring.frame_shape, wiring.frame_dtype, self.stack, wiring.num_actions)
        self.model.to(self.device).eval()
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
        device = self.device
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        for lo in range(0, n, SCORE_CHUNK):
            idx = order[lo : lo + SCORE_CHUNK]
            where = SimpleNamespace(worker_ids=worker_ids[idx], env_index=env_index[idx], first_frame=first_frames[idx])
            frames, steps, read_ok = self.gatherer.gather(where)
            with torch.no_grad(), autocast:
                feats = self.model.forward_unrolls(frames.to(device), steps.to(device), at=at, with_features=True)
            assert feats.features is not None  # with_features
            out.append(feats.features.float().cpu().view(len(idx), len(at), -1))
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
        min_fill = agents.get(cfg.algo).replay_fill(cfg, rep)  # the run's agent's rule (V-trace's: fill_target)
        if rep.type == "queue":
            replays.append(QueueReplay(queue_capacity(cfg, rep), rep.discard, queue_uses(cfg, rep)))
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


class VtraceBroker:
    """V-trace's part of the broker, which the one broker loop (zrl/roles/broker.py) runs: the replays, the feature
    scorer elite and attentive replays need, and their rules, apart from any socket so that a test can drive them
    directly (``store`` takes a unit without the run's checks, ``insert`` with them)."""

    message_type = Unroll
    inbox_per_turn = 1024  # messages taken per turn of the loop
    reply_type = None  # the learner sends nothing back

    def __init__(self, cfg: Config, wiring, rings: list[Ring], scorer: FeatureScorer | None = None) -> None:
        """``wiring``: the run's (``RunWiring``), or any object with num_actions, frames_per_step and sample_calls
        (each replay's sample calls so far, which a resumed run anneals on from; empty: none)."""
        self.cfg, self.num_actions = cfg, wiring.num_actions
        if scorer is None and needs_features(cfg):
            scorer = FeatureScorer(cfg, wiring, rings)
        self.scorer = scorer
        self.wants_weights = scorer is not None
        self.batch_size = cfg.learner.batch_size
        self.history = cfg.env.frame_stack - 1
        self.shares = [replay_share(cfg, rep) for rep in cfg.replay]
        self.replays = make_replays(cfg, wiring.frames_per_step, scorer, cfg.run.seed)
        self.rings = rings
        self.dropped_stale = 0
        self.prepare_time_s = 0.0
        self.batches_prepared = 0
        for replay, calls in zip(self.replays, wiring.sample_calls):  # a resumed run anneals on from there
            if isinstance(replay, FeatureReplay):
                replay.resume(int(calls))

    def load_weights(self, version: int, flat: np.ndarray) -> None:
        assert self.scorer is not None  # the loop sends weights only to a part that wants_weights
        self.scorer.load(version, flat)

    def units(self, msg: Unroll) -> int:
        return msg.num_envs

    def insert(self, msg: Unroll) -> str | None:
        """Store a worker's unroll, or say why it cannot be from this run's workers (``misfit``)."""
        why = misfit(msg, self.cfg, self.num_actions)
        if why is None:
            self.store(msg)
        return why

    def next_batch(self, batch_id: int, env_frames: int, env_steps: int):
        """A batch's message and what to give back should it not be sent, or None while a replay cannot give its
        share."""
        taken = self.next_units()
        if taken is None:
            return None
        return make_batch(batch_id, *taken, env_frames=env_frames).encode(), taken

    def index(self) -> bytes | None:
        return self.replay_index().encode()

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

    def store(self, msg: Unroll) -> None:
        """Every unit of the message into every replay, unchecked (``insert`` checks that it fits the run)."""
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
            if not fresh.all():
                queue.drop([u for u, ok in zip(taken, fresh) if not ok])
                self.dropped_stale += int((~fresh).sum())
        if len(units) < n:
            queue.put_back(units)
            return None
        return units

    def next_units(self) -> tuple[list[Unit], list[int]] | None:
        """A batch's units and the replay each came from, or None while a replay cannot give its share.
        Units that cannot be sent go back with :meth:`put_back`."""
        for replay in self.replays:  # the last batch has gone (one that could not go was put back)
            if isinstance(replay, QueueReplay):
                replay.settle()
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

    def replay_index(self) -> protocol.ReplayIndex:
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

    def snapshot(self) -> dict[str, np.ndarray]:
        """Every replay's content, as arrays (run.checkpoint_replay: zrl/replay_checkpoint.py)."""
        out = {"types": np.array([rep.type for rep in self.cfg.replay])}
        for i, replay in enumerate(self.replays):
            out.update(prefixed(f"replay{i}", replay.state()))
        return out

    def restore(self, state: dict[str, np.ndarray]) -> int:
        """Hold what ``snapshot`` saved (units of workers beyond this run's rings left out); the units held."""
        saved = [str(t) for t in state.get("types", ())]
        if saved != [rep.type for rep in self.cfg.replay]:
            raise SnapshotMismatch(f"replays {saved} saved, this run has {[rep.type for rep in self.cfg.replay]}")
        rings = len(self.rings)
        for i, replay in enumerate(self.replays):
            replay.load_state(section(f"replay{i}", state))
            if isinstance(replay, QueueReplay):
                replay.retain(lambda u: u.worker_id < rings)
            else:
                slots = replay.store.slots()
                replay.store.remove(slots[replay.store.worker_id[slots] >= rings])
        return int(self.sizes().sum())

    def oldest_frames(self) -> np.ndarray:
        """Each ring's oldest frame that a unit held reads (its stack's history included); the ring's head when
        no unit reads it."""
        oldest = np.array([ring.head for ring in self.rings], np.int64)
        for replay in self.replays:
            if isinstance(replay, QueueReplay):
                units = replay.units()
                workers = np.array([u.worker_id for u in units], np.int64)
                firsts = np.array([u.first_frame for u in units], np.int64)
            else:
                slots = replay.store.slots()
                workers, firsts = replay.store.worker_id[slots].astype(np.int64), replay.store.first_frame[slots]
            np.minimum.at(oldest, workers, np.maximum(firsts - self.history, 0))
        return oldest

    def stats(self) -> dict:
        sizes = self.sizes()
        return {
            "unrolls_dropped_stale": self.stale_total,
            "unrolls_dropped_full": self.dropped_full,
            "replay_size": int(sizes.max()),
            "replay_sizes": sizes,
            "prepare_time_s": self.prepare_time_s,
            "feature_time_s": self.scorer.time_s if self.scorer else 0.0,
            "figures": self.elite_stats(),
        }


_: type[BrokerPart] = VtraceBroker  # the contract, checked by mypy
