"""Elite replay: the broker's time to prepare one batch against the learner's step, the selection's
fidelity when fewer steps (or bf16) are compared, and the learner's wait in a real Pong run.

    python perf/elite_batch.py --capacity 1000 --lambda 6 --repeats 30 --pipeline-seconds 180 \
        --settings 0:fp32,0:bf16,15:bf16,10:bf16,10:fp32,5:fp32 --pipeline-settings 5:fp32,10:bf16

1. A replay of ``capacity`` units of real Pong frames (random actions) in a real ring. The behaviour
   features of every unit are what a Nature CNN computed on its observations (F = model.feature_size),
   as a worker sends them. The current policy is that network after a few V-trace steps on the replay,
   so the stored and current features differ as they do in training.
2. The broker's batch preparation, ``VtraceBroker.next_units`` with a real FeatureScorer (pool of lambda x B
   units drawn, frames gathered from the ring, features recomputed in one batched pass, distances,
   strategy 3), timed for each ``feature_steps`` / precision setting, with the broker's 1 thread.
3. The learner's V-trace step on a B x T batch (fp32, the learner's threads), in the same process.
4. Fidelity on the same pools: the share of the units chosen by exact recomputation (all T steps, fp32,
   strategy 1) that each cheaper setting also chooses, and the Spearman rank correlation of the
   distances; a uniform draw would share lambda^-1 of them.
5. With ``--pipeline-seconds``: the real ``zrl-launch`` on Pong as the defaults leave it (its workers, batch and
   learner) with queue 0.5 + uniform 0.5, then queue 0.5 + elite 0.5 (strategy 3, lambda ``--lambda``, alfa 2,
   capacity ``capacity``) for each of ``--pipeline-settings``, and the learner's wait for batches from each
   run's metrics.csv: the uniform run's wait is what the workers alone cost, the rest is elite's.

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

from zrl import config as config_mod  # noqa: E402
from zrl.agents.vtrace.broker import FeatureScorer, VtraceBroker  # noqa: E402
from zrl.bench.elite import M, behaviour_outputs, drifted, fill_ring, time_learner_step  # noqa: E402
from zrl.bench.modes.harness import pipeline  # noqa: E402
from zrl.envs import probe  # noqa: E402
from zrl.models import build_model, flat_parameters, resolve_device  # noqa: E402
from zrl.replay.elite import draw_pool, feature_distance, select  # noqa: E402
from zrl.replay.sampled import compared_steps  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=1000)
    parser.add_argument(
        "--batch", type=int, default=None, help="B (default: the config's); the elite replay supplies all of it (n = B)"
    )
    parser.add_argument("--unroll", type=int, default=20)
    parser.add_argument("--lambda", dest="lam", type=float, default=6.0)
    parser.add_argument("--feature-size", type=int, default=None, help="F (default: the config's)")
    parser.add_argument(
        "--settings",
        default="0:fp32,10:fp32,5:fp32,5:bf16,2:fp32",
        help="feature_steps:precision pairs to time and compare with the exact choice (the first must be 0:fp32)",
    )
    parser.add_argument(
        "--pipeline-settings",
        default="5:fp32",
        help="the elite settings of the pipeline runs (feature_steps:precision, comma-separated); a uniform replay "
        "at the same ratio runs first, the baseline of the learner's wait",
    )
    parser.add_argument("--drift-steps", type=int, default=10, help="V-trace steps between behaviour and current")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--learner-threads", type=int, default=2)
    parser.add_argument("--pipeline-seconds", type=float, default=0.0, help="also run zrl-launch this long")
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--json", default=str(REPO / "perf" / "results" / "elite_batch.json"))
    args = parser.parse_args()

    defaults = config_mod.load(None, ["run.game_settings=false"])
    args.batch = args.batch or defaults.learner.batch_size
    args.feature_size = args.feature_size or defaults.model.feature_size
    settings = [(int(a), b) for a, b in (item.split(":") for item in args.settings.split(","))]
    if settings[0] != (0, "fp32"):
        raise SystemExit("--settings: the first must be 0:fp32, the exact choice the others are compared with")
    cfg = config_mod.load(
        None,
        [
            f"learner.batch_size={args.batch}",
            f"learner.unroll_length={args.unroll}",
            f"model.feature_size={args.feature_size}",
            "run.max_env_frames=10000000000",
            "run.game_settings=false",  # the Atari defaults, as elite_batch.json was measured
        ],
    )
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
        wiring = SimpleNamespace(
            frame_shape=spec.frame_shape, frame_dtype=spec.frame_dtype, num_actions=spec.num_actions
        )
        n = args.batch
        t_len = args.unroll
        torch.set_num_threads(cfg.broker.torch_threads)
        rows = []
        exact_choice: dict[int, np.ndarray] = {}
        pools = [
            draw_pool(np.random.default_rng(100 + r), np.arange(len(messages) * M), round(args.lam * n))
            for r in range(args.repeats)
        ]
        stored_all = np.stack([m.features for m in messages]).reshape(len(messages) * M, t_len, -1)
        where = (
            np.zeros(len(stored_all), np.int32),
            np.tile(np.arange(M, dtype=np.int32), len(messages)),
            np.repeat([m.first_frame for m in messages], M).astype(np.int64),
        )
        for feature_steps, precision in settings:
            sets = [
                f"learner.batch_size={n}",
                f"learner.unroll_length={t_len}",
                f"model.feature_size={args.feature_size}",
                f'broker.precision="{precision}"',
                "run.max_env_frames=10000000000",
            ]
            ecfg = config_mod.load(
                None,
                sets,
                {
                    "replay": json.dumps(
                        [
                            {
                                "type": "elite",
                                "capacity": args.capacity,
                                "sample_ratio": 1.0,
                                "strategy": 3,
                                "lambda_batch_multiplier": args.lam,
                                "alfa_annealing_factor": 1e9,
                                "feature_steps": feature_steps,
                                "fill_fraction": 1.0,
                            }
                        ]
                    )
                },
            )
            scorer = FeatureScorer(ecfg, wiring, [ring])
            scorer.load(1, weights)
            broker = VtraceBroker(
                ecfg, SimpleNamespace(**vars(wiring), frames_per_step=1, sample_calls=()), [ring], scorer
            )
            for msg in messages:
                broker.store(msg)
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
            row = {
                "feature_steps": len(steps),
                "precision": precision,
                "prepare_s_median": round(float(np.median(times)), 4),
                "ratio_prepare_to_learner_step": round(float(np.median(times)) / learner_s, 3),
                "chosen_overlap_with_exact": round(float(np.mean(overlaps)), 3),
                "distance_rank_correlation_with_exact": round(float(np.mean(rank_corr)), 4),
            }
            rows.append(row)
            print(row, flush=True)
    finally:
        ring.close()
        ring.unlink()

    result = {
        "command": "python perf/elite_batch.py " + " ".join(sys.argv[1:]),
        "batch": n,
        "unroll_length": t_len,
        "lambda": args.lam,
        "pool": round(args.lam * n),
        "feature_size": args.feature_size,
        "capacity": args.capacity,
        "broker_threads": cfg.broker.torch_threads,
        "broker_device": str(resolve_device(cfg.broker.device)),
        "learner_device": str(resolve_device(cfg.learner.device)),
        "learner_threads": args.learner_threads,
        "learner_step_s_median": round(learner_s, 4),
        "uniform_overlap_expected": round(1 / args.lam, 3),
        "settings": rows,
    }
    if args.pipeline_seconds:
        # the learner as the defaults leave it (config/pong.toml, its workers and batch), half of each batch fresh
        runs = [("uniform", None, None)] + [
            ("elite", int(a), b) for a, b in (item.split(":") for item in args.pipeline_settings.split(","))
        ]
        result["pipeline"] = []
        for kind, feature_steps, precision in runs:
            replay = {"type": kind, "capacity": args.capacity, "sample_ratio": 0.5}
            sets = []
            if kind == "elite":
                replay |= {
                    "strategy": 3,
                    "lambda_batch_multiplier": args.lam,
                    "alfa_annealing_factor": 2.0,
                    "feature_steps": feature_steps,
                }
                sets.append(f'broker.precision="{precision}"')
            mix = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, replay])
            print(
                f"pipeline: zrl-launch Pong (defaults), queue 0.5 + {kind} 0.5"
                + (f" ({feature_steps} steps, {precision})" if kind == "elite" else "")
                + f", {args.warmup:g} s warm-up + {args.pipeline_seconds:g} s ...",
                flush=True,
            )
            pipe = pipeline(
                str(REPO / "config" / "pong.toml"),
                defaults.workers.count,
                defaults.workers.envs_per_worker,
                args.pipeline_seconds,
                args.warmup,
                [*sets, f"replay={mix}"],
            )
            row = {
                "config": "config/pong.toml",
                "workers": defaults.workers.count,
                "envs_per_worker": defaults.workers.envs_per_worker,
                "replay": mix,
                "feature_steps": feature_steps,
                "precision": precision,
                **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in pipe.items()},
            }
            result["pipeline"].append(row)
            print({k: row.get(k) for k in ("frames_per_s", "learner_steps_per_s", "learner_wait_fraction")}, flush=True)
    result["machine"] = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(result, indent=2))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
