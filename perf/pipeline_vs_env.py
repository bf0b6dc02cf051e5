"""Pipeline frames/s against bare env stepping on the same cores, measured in one run.

    python perf/pipeline_vs_env.py --workers 2 --envs-per-worker 4 --seconds 60

1. env ceiling: N processes each step M envs with zrl's own Atari preprocessing (the same vector env
   the workers use) on random actions; no policy, no ring, no sockets, no learner.
2. pipeline: the real ``zrl-launch`` on the same config with N workers x M envs, learner running;
   frames/s taken from its metrics.csv after a warm-up, then stopped with SIGINT.
3. learner alone: V-trace steps/s on a preallocated batch of B x T in one process (the samples/s
   ceiling of the learner on this machine), next to the learner's samples/s inside the pipeline.

Figures go to stdout and to perf/results/pipeline_vs_env.json with the machine's facts.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zrl import config as config_mod  # noqa: E402


def _env_loop(cfg, worker_id: int, seconds: float, out) -> None:
    from zrl.envs import make_vector_env

    env = make_vector_env(cfg.env, cfg.workers.envs_per_worker, seed=worker_id)
    rng = np.random.default_rng(worker_id)
    env.reset()
    m, n = cfg.workers.envs_per_worker, env.num_actions
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(rng.integers(0, n, m))
        steps += m
    out.put((steps * env.frames_per_step, time.perf_counter() - start))
    env.close()


def env_ceiling(cfg, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_env_loop, args=(cfg, i, seconds, out)) for i in range(cfg.workers.count)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(frames / elapsed for frames, elapsed in results)


def pipeline(config_path: str, workers: int, envs: int, seconds: float, warmup: float, sets: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(REPO / "bin" / "zrl-launch"), "--config", config_path, "--workers", str(workers),
               "--envs-per-worker", str(envs), "--set", "run.log_interval_s=2.0", "--set",
               "run.max_env_frames=10000000000", "--set", "run.checkpoint_every_steps=0", "--quiet"]  # fmt: skip
        for item in sets:
            cmd += ["--set", item]
        proc = subprocess.Popen(cmd, cwd=tmp)
        try:
            time.sleep(warmup + seconds)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(120)
        rows = list(csv.DictReader(open(next(Path(tmp).glob("results/*/metrics.csv")))))
    rows = [r for r in rows if r["learner_step"] and float(r["elapsed_s"]) >= warmup]
    first, last = rows[0], rows[-2] if len(rows) > 2 else rows[-1]
    elapsed = float(last["elapsed_s"]) - float(first["elapsed_s"])
    frames = int(last["env_frames"]) - int(first["env_frames"])
    steps = int(last["learner_step"]) - int(first["learner_step"])
    def mean(column: str) -> float | None:
        values = [float(r[column]) for r in rows if r.get(column)]
        return float(np.mean(values)) if values else None

    return {"frames_per_s": frames / elapsed, "learner_steps_per_s": steps / elapsed,
            "mean_policy_lag": float(np.mean([float(r["policy_lag"]) for r in rows])), "window_s": elapsed,
            "learner_wait_fraction": mean("learner_wait_fraction"), "learner_step_s": mean("learner_step_s"),
            "broker_prepare_s": mean("broker_prepare_s"), "elite_lambda": mean("elite_lambda")}


def learner_alone(cfg, seconds: float) -> float:
    import torch

    from zrl.envs import probe
    from zrl.models import build_model
    from zrl.roles.learner import make_optimizer, sgd_step

    spec = probe(cfg.env)
    lcfg = cfg.learner
    t, b, s = lcfg.unroll_length, lcfg.batch_size, cfg.env.frame_stack
    model = build_model(cfg.model, spec.frame_shape, spec.frame_dtype, s, spec.num_actions)
    opt, sched = make_optimizer(model, lcfg, 10**9)
    obs = torch.randint(0, 256, (b, t + 1, s, *spec.frame_shape), dtype=torch.uint8)
    batch = {"actions": torch.randint(0, spec.num_actions, (t, b)), "rewards": torch.zeros(t, b),
             "discounts": torch.ones(t, b), "behaviour_logits": torch.zeros(t, b, spec.num_actions),
             "behaviour_values": torch.zeros(t, b)}  # fmt: skip
    sgd_step(model, opt, sched, obs, batch, lcfg)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        sgd_step(model, opt, sched, obs, batch, lcfg)
        steps += 1
    return steps * t * b / (time.perf_counter() - start)


def probe_frames_per_step(cfg) -> int:
    from zrl.envs import probe

    return probe(cfg.env).frames_per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "config" / "pong.toml"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--envs-per-worker", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="config override passed to zrl-launch (repeatable)")
    parser.add_argument("--json", default=str(REPO / "perf" / "results" / "pipeline_vs_env.json"))
    args = parser.parse_args()
    cfg = config_mod.load(args.config, args.sets,
                          {"workers.count": args.workers, "workers.envs_per_worker": args.envs_per_worker})

    print(f"env ceiling: {args.workers} processes x {args.envs_per_worker} envs, {args.seconds:g} s ...", flush=True)
    ceiling = env_ceiling(cfg, args.seconds)
    print(f"pipeline: zrl-launch {args.workers} x {args.envs_per_worker}, {args.warmup:g} s warm-up + {args.seconds:g} s ...", flush=True)
    pipe = pipeline(args.config, args.workers, args.envs_per_worker, args.seconds, args.warmup, args.sets)
    print(f"learner alone: batch {cfg.learner.batch_size} x T={cfg.learner.unroll_length}, {args.seconds / 2:g} s ...", flush=True)
    alone = learner_alone(cfg, args.seconds / 2)
    in_pipe = pipe["learner_steps_per_s"] * cfg.learner.batch_size * cfg.learner.unroll_length
    frames_per_sample = probe_frames_per_step(cfg)
    result = {
        "command": "python perf/pipeline_vs_env.py " + " ".join(sys.argv[1:]),
        "config": os.path.relpath(args.config, REPO), "workers": args.workers, "envs_per_worker": args.envs_per_worker,
        "env_ceiling_frames_per_s": round(ceiling, 1),
        "pipeline_frames_per_s": round(pipe["frames_per_s"], 1),
        "ratio_pipeline_to_env": round(pipe["frames_per_s"] / ceiling, 4),
        "pipeline_trained_frames_per_s": round(in_pipe * frames_per_sample, 1),
        "ratio_trained_to_env": round(in_pipe * frames_per_sample / ceiling, 4),
        "sets": args.sets,
        "pipeline_learner_samples_per_s": round(in_pipe, 1),
        "learner_alone_samples_per_s": round(alone, 1),
        "pipeline_mean_policy_lag": round(pipe["mean_policy_lag"], 2),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": __import__("torch").__version__,
                    "date": time.strftime("%Y-%m-%d %H:%M")},
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
