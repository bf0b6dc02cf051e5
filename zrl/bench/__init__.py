"""zrl-bench: every hop of the pipeline measured against the machine's own ceiling, in the same run.

``run`` takes a mode and its options and returns the figures (what ``--json`` writes, with the machine's
facts); ``render`` turns them into the tables the command prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODES = ("env", "sampling", "transport", "learner", "elite", "pipeline", "learning")


@dataclass
class Options:
    config_path: str | None = None
    sets: list[str] = field(default_factory=list)
    workers: list[int] = field(default_factory=list)  # empty: the config's
    envs_per_worker: list[int] = field(default_factory=list)
    seconds: float = 5.0
    warmup: float | None = None  # None: the mode's own
    policy: str = "uniform"
    ceiling: bool = True
    peers: bool = True
    capacity: int = 1000
    lam: float = 6.0
    feature_steps: int | None = None  # None: the config's first feature replay's, else the default (0: all)
    precision: str = "fp32"
    repeats: int = 5
    observers: bool = False  # pipeline: with and without TensorBoard and the dashboard, in turn
    remote: bool = False  # transport: the remote path too; pipeline: a remote worker against a local one
    replay_checkpoint: bool = False  # pipeline: checkpoints without and with the replays saved beside them
    evaluation: bool = False  # pipeline: without and with evaluation during training
    rounds: int = 2


def run(mode: str, opt: Options, progress) -> dict:
    from zrl import config as config_mod
    from zrl.bench.modes import compare, data_path, learner, pipeline
    from zrl.envs import probe

    one = {}
    if len(opt.workers) == 1:
        one["workers.count"] = opt.workers[0]
    if len(opt.envs_per_worker) == 1:
        one["workers.envs_per_worker"] = opt.envs_per_worker[0]
    cfg = config_mod.load(opt.config_path, list(opt.sets), one)
    workers = opt.workers or [cfg.workers.count]
    envs = opt.envs_per_worker or [cfg.workers.envs_per_worker]
    spec = probe(cfg.env)  # a ConfigError for a bad env id before anything starts
    if mode == "pipeline" or mode == "suggest":
        warmup = 15.0 if opt.warmup is None else opt.warmup
        if mode == "suggest":
            return pipeline.suggest(
                opt.config_path, list(opt.sets), opt.seconds, warmup, progress, opt.workers, opt.envs_per_worker
            )
        if opt.remote:
            return compare.remote_mode(opt.config_path, list(opt.sets), cfg, opt.seconds, warmup, opt.rounds, progress)
        if opt.replay_checkpoint:
            return compare.replay_mode(opt.config_path, list(opt.sets), cfg, opt.seconds, warmup, opt.rounds, progress)
        if opt.evaluation:
            return compare.evaluation_mode(
                opt.config_path, list(opt.sets), cfg, opt.seconds, warmup, opt.rounds, progress
            )
        if opt.observers:
            return compare.observers_mode(
                opt.config_path, list(opt.sets), cfg, opt.seconds, warmup, opt.rounds, progress
            )
        return pipeline.pipeline_mode(
            cfg, spec, opt.config_path, list(opt.sets), opt.seconds, warmup, progress, limit=opt.ceiling
        )
    if mode == "env":
        return data_path.env_mode(cfg, workers[0], envs[0], opt.seconds, progress, peers=opt.peers)
    if mode == "sampling":
        warmup = 2.0 if opt.warmup is None else opt.warmup
        grid = [(w, m) for w in workers for m in envs]
        return data_path.sampling_mode(cfg, spec, grid, opt.seconds, warmup, opt.policy, opt.ceiling, progress)
    if mode == "transport":
        return data_path.transport_mode(cfg, spec, opt.seconds, progress, remote=opt.remote)
    if mode == "learner":
        return learner.learner_mode(cfg, spec, opt.seconds, opt.capacity, progress)
    if mode == "elite":
        steps = opt.feature_steps
        if steps is None:
            feature_replays = (r.feature_steps for r in cfg.replay if r.type in ("elite", "attentive"))
            steps = next(feature_replays, config_mod.ReplayConfig().feature_steps)
        return learner.elite_mode(cfg, spec, opt.capacity, opt.lam, steps, opt.precision, opt.repeats, progress)
    raise ValueError(f"unknown mode {mode!r}")


def _table(rows: list[dict], columns: list[str]) -> str:
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _targets(result: dict) -> list[str]:
    return [
        f"target {t['target']} {t['want']}: {t['value']:g} ({'met' if t['met'] else 'NOT met'})"
        for t in result.get("targets", [])
    ]


def render(mode: str, result: dict) -> str:
    out: list[str] = []
    if mode == "env":
        c = result["ceiling"]
        out.append(
            _table(
                [
                    {
                        "what": f"zrl env ceiling, {c['processes']} processes x {c['envs_per_process']} envs",
                        "steps/s": c["steps_per_s"],
                        "frames/s": c["frames_per_s"],
                        "frames/s per core": c["frames_per_s_per_core"],
                    }
                ]
                + [
                    {
                        "what": f"{p['peer']}, {p['envs']} envs",
                        "steps/s": p["steps_per_s"],
                        "frames/s": p["frames_per_s"],
                    }
                    for p in result["peers"]
                ],
                ["what", "steps/s", "frames/s", "frames/s per core"],
            )
        )
        out += [f"not run: {why}" for why in result["not_installed"]]
    elif mode == "sampling":
        out.append(
            _table(
                result["rows"],
                ["workers", "envs_per_worker", "policy", "frames_per_s", "ceiling_frames_per_s", "ratio_to_ceiling"],
            )
        )
    elif mode == "transport":
        r, q, i, w = result["ring"], result["queue"], result["index_messages"], result["weights"]
        out.append(
            _table(
                [
                    {"hop": f"ring write+read, slots of {r['slot_bytes']:,} B", "figure": f"{r['gb_per_s']} GB/s"},
                    {
                        "hop": "pickled multiprocessing.Queue, same slots",
                        "figure": f"{q['gb_per_s']} GB/s ({q['ring_over_queue']}x slower)",
                    },
                    {
                        "hop": f"index messages ({i['message_bytes']:,} B), each decoded",
                        "figure": f"{i['messages_per_s']:,.0f} /s (encode {i['encode_us']} us, decode {i['decode_us']} us)",
                    },
                    {
                        "hop": "index message round trip",
                        "figure": f"{i['round_trip_us_median']} us median, {i['round_trip_us_p99']} us p99",
                    },
                    {
                        "hop": f"weights broadcast ({w['message_mb']} MB)",
                        "figure": f"{w['latency_ms_median']} ms median, {w['latency_ms_max']} ms max",
                    },
                ],
                ["hop", "figure"],
            )
        )
        if "remote" in result:
            rem = result["remote"]
            out.append(
                f"the remote path (a worker on another host): zstd over TCP loopback into the ingest, against the "
                f"shm ring's {rem['shm_frames_per_s']:,} frames/s:"
            )
            out.append(
                _table(
                    [{"path": "tcp + zstd" + (" + CurveZMQ" if p["curve"] else ""), **p} for p in rem["paths"]],
                    [
                        "path",
                        "frames_per_s",
                        "ratio_to_shm",
                        "bytes_per_frame",
                        "ingest_cpu_us_per_frame",
                        "sender_cpu_us_per_frame",
                    ],
                )
            )
    elif mode == "learner":
        out.append(
            _table(
                [
                    {
                        "learner": f"fed by the broker, B={result['batch_size']} x T={result['unroll_length']}",
                        "steps/s": result["fed_steps_per_s"],
                        "samples/s": result["fed_samples_per_s"],
                    },
                    {
                        "learner": "bare PyTorch loop, same batch shape (segments alternating with the fed learner)",
                        "steps/s": result["bare_steps_per_s"],
                        "samples/s": result["bare_samples_per_s"],
                    },
                ],
                ["learner", "steps/s", "samples/s"],
            )
        )
        out.append(
            f"segments of {result['segment_s']} s, steps/s: fed {result['fed_segments_steps_per_s']}, "
            f"bare {result['bare_segments_steps_per_s']}"
        )
        out.append(f"ratio fed / bare: {result['ratio_to_bare']}")
    elif mode == "elite":
        out.append(
            f"learner step, B={result['batch_size']} x T={result['unroll_length']}: {result['learner_step_s']} s"
        )
        out.append(_table(result["rows"], ["sampler", "prepare_s", "ratio_to_learner_step"]))
    elif mode == "pipeline" and "summary" in result:
        label = result["label"]
        extra = {
            "observer": ["page_updates"],
            "workers": ["joined"],
            "replay_checkpoint": ["replay_saves", "replay_save_s", "replay_mb", "mb_per_million_frames"],
            "evaluation": ["evaluations", "eval_seconds", "eval_episodes", "evaluator_restarts"],
        }[label]
        out.append(f"{result['workers']} workers x {result['envs_per_worker']} envs, {result['rounds']} rounds:")
        out.append(
            _table(result["rows"], ["round", label, "learner_steps_per_s", "frames_per_s", "learner_wait", *extra])
        )
        first = result["summary"][0][label]
        out.append(f"mean over the rounds, and the mean of each round's ratio to the {first} run beside it:")
        out.append(
            _table(
                result["summary"],
                [
                    label,
                    "learner_steps_per_s",
                    "frames_per_s",
                    "learner_ratio",
                    "learner_ratio_range",
                    "frames_ratio",
                ],
            )
        )
    elif mode in ("pipeline", "suggest"):
        rows = result["rows"] if mode == "suggest" else [result]
        out.append(_table(rows, ["workers", "envs_per_worker", "frames_per_s", "learner_steps_per_s", "policy_lag"]))
        if mode == "pipeline":
            per = result["seconds_per_second"]
            role, section = result["bottleneck"]["role"], result["bottleneck"]["section"]
            out.append("time per second of run (workers summed):")
            from zrl.metrics.time_split import SECTION_LABELS as LABELS
            from zrl.metrics.time_split import SECTIONS

            for group, sections in SECTIONS.items():
                out.append(
                    f"  {group}: "
                    + ", ".join(
                        f"{LABELS[s]} {per[s]:.2f}" + (" <- bottleneck" if s == section else "") for s in sections
                    )
                )
            out.append(f"bottleneck: {role}, {LABELS[section]}")
            if "limit" in result:
                lim = result["limit"]
                out.append(
                    f"the machine's limit on {lim['cores']} cores, from costs measured alone (core-ms): env step "
                    f"{lim['env_step_core_ms']:.3f}, inference {lim['inference_core_ms_per_obs']:.3f} per "
                    f"observation, learner {lim['learner_core_ms_per_sample']:.3f} per sample (fresh share "
                    f"{lim['fresh_share']:g})"
                )
                out.append(
                    f"env steps trained on per second: {lim['trained_steps_per_s']:,.0f} of a limit of "
                    f"{lim['limit_trained_steps_per_s']:,.0f} ({lim['ratio_to_limit']:.2f})"
                )
                out.append(
                    f"learner: {lim['learner_gflop_per_step']:.2f} GFLOP a step, {lim['learner_gflop_per_s']:.1f} "
                    f"GFLOP/s over the run, {lim['learner_gflop_per_s_stepping']:.1f} while stepping (bare loop "
                    f"{lim['bare_learner_gflop_per_s']:.1f}); fp32 matmul {lim['matmul_gflop_per_s']:.1f} GFLOP/s "
                    f"with {lim['learner_threads']} thread(s) ({lim['ratio_to_matmul']:.2f})"
                )
        else:
            best = result["best"]
            out.append(
                f"best for this machine: --workers {best['workers']} --envs-per-worker {best['envs_per_worker']}"
            )
    out += _targets(result)
    return "\n".join(out)
