"""Elite replay: the broker's time to prepare one batch against the learner's step, the selection's
fidelity when fewer steps (or bf16) are compared, and the learner's wait in a real Pong run.

    python perf/elite_batch.py --capacity 1000 --batch 32 --lambda 6 --repeats 10 --pipeline-seconds 180

1. A replay of ``capacity`` units of real Pong frames (random actions) in a real ring. The behaviour
   features of every unit are what a Nature CNN computed on its observations (F = model.feature_size),
   as a worker sends them. The current policy is that network after a few V-trace steps on the replay,
   so the stored and current features differ as they do in training.
2. The broker's batch preparation, ``Broker.next_units`` with a real FeatureScorer (pool of lambda x B
   units drawn, frames gathered from the ring, features recomputed in one batched pass, distances,
   strategy 3), timed for each ``feature_steps`` / precision setting, with the broker's 1 thread.
3. The learner's V-trace step on a B x T batch (fp32, the learner's threads), in the same process.
4. Fidelity on the same pools: the share of the units chosen by exact recomputation (all T steps, fp32,
   strategy 1) that each cheaper setting also chooses, and the Spearman rank correlation of the
   distances; a uniform draw would share lambda^-1 of them.
5. With ``--pipeline-seconds``: the real ``zrl-launch`` on Pong with queue 0.5 + elite 0.5 (strategy 3,
   lambda 6, alfa 2, capacity ``capacity``) and the learner's wait for batches from its metrics.csv.

Figures go to stdout and to perf/results/elite_batch.json with the machine's facts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "perf"))

from pipeline_vs_env import pipeline  # noqa: E402

from shm import segment_name  # noqa: E402
from shm.ring import Ring, RingSpec  # noqa: E402
from zrl import config as config_mod, protocol  # noqa: E402
from zrl.envs import make_vector_env, probe  # noqa: E402
from zrl.gather import ActingStack, Gatherer, stack_observations  # noqa: E402
from zrl.models import build_model, flat_parameters  # noqa: E402
from zrl.replay.elite import draw_pool, feature_distance, select  # noqa: E402
from zrl.replay.sampled import compared_steps  # noqa: E402
from zrl.roles.broker import Broker, FeatureScorer, make_batch  # noqa: E402
from zrl.roles.learner import batch_tensors, make_optimizer, sgd_step  # noqa: E402

M = 8  # envs in the one ring that holds the replay's frames


def fill_ring(cfg, spec, units: int) -> tuple[Ring, list[protocol.Unroll]]:
    """Play Pong with random actions into a ring; one Unroll (without features yet) per T steps."""
    t_len = cfg.learner.unroll_length
    messages = -(-units // M)
    ring_spec = RingSpec(messages * t_len + cfg.env.frame_stack + 8, {
        "frame": ((M, *spec.frame_shape), spec.frame_dtype), "episode_step": ((M,), "int32")})  # fmt: skip
    ring = Ring.create(segment_name("zrlperf", "elite", os.getpid(), "r0"), ring_spec)
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
        out.append(protocol.Unroll(
            worker_id=0, seq=seq, policy_version=0, first_frame=first, num_envs=M, length=t_len, env_frames=0,
            actions=actions, rewards=rewards, discounts=discounts,
            behaviour_logits=np.zeros((M, t_len, spec.num_actions), np.float32),
            behaviour_values=np.zeros((M, t_len), np.float32), features=np.zeros((0, 0, 0), np.float32)))  # fmt: skip
        first = last
    env.close()
    return ring, out


def behaviour_outputs(model, ring, cfg, spec, msg: protocol.Unroll) -> protocol.Unroll:
    """The message as a worker acting with ``model`` would have sent it: logits, values, features."""
    t_len, s = cfg.learner.unroll_length, cfg.env.frame_stack
    where = SimpleNamespace(worker_ids=np.zeros(M, np.int32), env_index=np.arange(M, dtype=np.int32),
                            first_frame=np.full(M, msg.first_frame, np.int64))  # fmt: skip
    frames, steps, ok = Gatherer([ring], s, t_len, M, spec.frame_shape, spec.frame_dtype).gather(where)
    assert ok.all()
    obs = stack_observations(frames, steps, s)[:, :t_len]
    with torch.no_grad():
        out = model(obs.reshape(-1, *obs.shape[2:]), with_features=True)
    return protocol.Unroll(**{**{f: getattr(msg, f) for f in msg.__dataclass_fields__},
        "behaviour_logits": out.logits.view(M, t_len, -1).numpy(), "behaviour_values": out.values.view(M, t_len).numpy(),
        "features": out.features.view(M, t_len, -1).numpy()})  # fmt: skip


def drifted(model, cfg, spec, ring, messages, steps: int):
    """The behaviour network after ``steps`` V-trace updates on uniform batches of the replay."""
    lcfg = cfg.learner
    opt, sched = make_optimizer(model, lcfg, 10**6)
    gatherer = Gatherer([ring], cfg.env.frame_stack, lcfg.unroll_length, lcfg.batch_size, spec.frame_shape,
                        spec.frame_dtype)  # fmt: skip
    rng = np.random.default_rng(1)
    units = [(m, i) for m in messages for i in range(M)]
    for _ in range(steps):
        pick = [units[k] for k in rng.choice(len(units), lcfg.batch_size, replace=False)]
        batch = make_batch(0, [_unit(m, i) for m, i in pick])
        frames, steps_, ok = gatherer.gather(batch)
        obs = stack_observations(frames, steps_, cfg.env.frame_stack)
        sgd_step(model, opt, sched, obs, batch_tensors(batch, ok, torch.device("cpu")), lcfg, cfg.algo)
    return model


def _unit(msg, i):
    from zrl.roles.broker import units_of

    return units_of(msg)[i]


def time_learner_step(model, cfg, spec, ring, messages, repeats: int) -> float:
    lcfg = cfg.learner
    opt, sched = make_optimizer(model, lcfg, 10**6)
    gatherer = Gatherer([ring], cfg.env.frame_stack, lcfg.unroll_length, lcfg.batch_size, spec.frame_shape,
                        spec.frame_dtype)  # fmt: skip
    batch = make_batch(0, [_unit(messages[k // M], k % M) for k in range(lcfg.batch_size)])
    frames, steps, ok = gatherer.gather(batch)
    obs = stack_observations(frames, steps, cfg.env.frame_stack)
    tensors = batch_tensors(batch, ok, torch.device("cpu"))
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        sgd_step(model, opt, sched, obs, tensors, lcfg, cfg.algo)
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32, help="B; the elite replay supplies all of it (n = B)")
    parser.add_argument("--unroll", type=int, default=20)
    parser.add_argument("--lambda", dest="lam", type=float, default=6.0)
    parser.add_argument("--feature-size", type=int, default=512)
    parser.add_argument("--drift-steps", type=int, default=10, help="V-trace steps between behaviour and current")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--learner-threads", type=int, default=2)
    parser.add_argument("--pipeline-seconds", type=float, default=0.0, help="also run zrl-launch this long")
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--json", default=str(REPO / "perf" / "results" / "elite_batch.json"))
    args = parser.parse_args()

    cfg = config_mod.load(None, [f"learner.batch_size={args.batch}", f"learner.unroll_length={args.unroll}",
                                 f"model.feature_size={args.feature_size}", "run.max_env_frames=10000000000"])  # fmt: skip
    spec = probe(cfg.env)
    torch.manual_seed(0)
    torch.set_num_threads(args.learner_threads)
    print(f"filling a replay of {args.capacity} units with Pong frames ...", flush=True)
    ring, raw = fill_ring(cfg, spec, args.capacity)
    try:
        behaviour = build_model(cfg.model, spec.frame_shape, spec.frame_dtype, cfg.env.frame_stack, spec.num_actions)
        messages = [behaviour_outputs(behaviour, ring, cfg, spec, msg) for msg in raw]
        print(f"current policy: {args.drift_steps} V-trace steps away from the behaviour policy ...", flush=True)
        current = drifted(behaviour, cfg, spec, ring, messages, args.drift_steps)
        learner_s = time_learner_step(current, cfg, spec, ring, messages, args.repeats)
        weights = flat_parameters(current)
        wiring = SimpleNamespace(frame_shape=spec.frame_shape, frame_dtype=spec.frame_dtype, num_actions=spec.num_actions)
        n = args.batch
        t_len = args.unroll
        settings = [(0, "fp32"), (10, "fp32"), (5, "fp32"), (5, "bf16"), (2, "fp32")]
        torch.set_num_threads(cfg.broker.torch_threads)
        rows = []
        exact_choice: dict[int, np.ndarray] = {}
        pools = [draw_pool(np.random.default_rng(100 + r), np.arange(len(messages) * M), round(args.lam * n))
                 for r in range(args.repeats)]  # fmt: skip
        stored_all = np.stack([m.features for m in messages]).reshape(len(messages) * M, t_len, -1)
        where = (np.zeros(len(stored_all), np.int32), np.tile(np.arange(M, dtype=np.int32), len(messages)),
                 np.repeat([m.first_frame for m in messages], M).astype(np.int64))  # fmt: skip
        for feature_steps, precision in settings:
            sets = [f"learner.batch_size={n}", f"learner.unroll_length={t_len}", f"model.feature_size={args.feature_size}",
                    f"broker.precision=\"{precision}\"", "run.max_env_frames=10000000000"]  # fmt: skip
            ecfg = config_mod.load(None, sets, {"replay": json.dumps([{
                "type": "elite", "capacity": args.capacity, "sample_ratio": 1.0, "strategy": 3,
                "lambda_batch_multiplier": args.lam, "alfa_annealing_factor": 1e9, "feature_steps": feature_steps,
                "fill_fraction": 1.0}])})  # fmt: skip
            scorer = FeatureScorer(ecfg, wiring, [ring])
            scorer.load(1, weights)
            broker = Broker(ecfg, [ring], scorer)
            for msg in messages:
                broker.insert(msg)
            broker.next_units()  # warm-up
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                assert broker.next_units() is not None
                times.append(time.perf_counter() - t0)
            steps = compared_steps(t_len, feature_steps)
            overlaps, rank_corr = [], []
            for r, pool in enumerate(pools):
                current_f, ok = scorer(where[0][pool], where[1][pool], where[2][pool], steps)
                d = feature_distance(torch.from_numpy(stored_all[pool][:, steps]), current_f, "ln_norm").numpy()
                chosen = pool[select(1, d, np.zeros(len(pool), np.int64), n)]
                if feature_steps == 0 and precision == "fp32":
                    exact_choice[r] = (chosen, d)
                exact, d_exact = exact_choice[r]
                overlaps.append(len(np.intersect1d(chosen, exact)) / n)
                ranks = lambda x: np.argsort(np.argsort(x))  # noqa: E731
                rank_corr.append(float(np.corrcoef(ranks(d), ranks(d_exact))[0, 1]))
            row = {"feature_steps": len(steps), "precision": precision,
                   "prepare_s_median": round(float(np.median(times)), 4),
                   "ratio_prepare_to_learner_step": round(float(np.median(times)) / learner_s, 3),
                   "chosen_overlap_with_exact": round(float(np.mean(overlaps)), 3),
                   "distance_rank_correlation_with_exact": round(float(np.mean(rank_corr)), 4)}  # fmt: skip
            rows.append(row)
            print(row, flush=True)
    finally:
        ring.close()
        ring.unlink()

    result = {
        "command": "python perf/elite_batch.py " + " ".join(sys.argv[1:]),
        "batch": n, "unroll_length": t_len, "lambda": args.lam, "pool": round(args.lam * n),
        "feature_size": args.feature_size, "capacity": args.capacity, "broker_threads": cfg.broker.torch_threads,
        "learner_threads": args.learner_threads, "learner_step_s_median": round(learner_s, 4),
        "uniform_overlap_expected": round(1 / args.lam, 3), "settings": rows,
    }  # fmt: skip
    if args.pipeline_seconds:
        mix = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                          {"type": "elite", "capacity": args.capacity, "sample_ratio": 0.5, "strategy": 3,
                           "lambda_batch_multiplier": args.lam, "alfa_annealing_factor": 2.0}])  # fmt: skip
        print(f"pipeline: zrl-launch Pong, queue 0.5 + elite 0.5, {args.warmup:g} s warm-up + "
              f"{args.pipeline_seconds:g} s ...", flush=True)
        pipe = pipeline(str(REPO / "config" / "pong.toml"), 2, 4, args.pipeline_seconds, args.warmup,
                        [f"replay={mix}"])  # fmt: skip
        result["pipeline"] = {"config": "config/pong.toml", "workers": 2, "envs_per_worker": 4, "replay": mix,
                              **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in pipe.items()}}  # fmt: skip
    result["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                         "python": platform.python_version(), "torch": torch.__version__,
                         "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    print(json.dumps(result, indent=2))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
