"""zrl-bench: one subcommand per mode, each taking only the options its mode uses. An option a mode does not take
is click's own "No such option"; the values of the options it takes are checked here. Every refusal is one line,
exit 2."""

from __future__ import annotations

import click

from zrl.bench import MODES
from zrl.cli.bench_common import (
    HELP,
    BenchGroup,
    capacity_option,
    config_options,
    count,
    envs_option,
    grid,
    in_range,
    json_option,
    measure,
    one_split,
    refusals,
    seconds_option,
    warmup_option,
    workers_option,
)
from zrl.cli.common import usage_error
from zrl.config import ConfigError


@click.group(
    cls=BenchGroup,
    context_settings=HELP,
    invoke_without_command=True,
    no_args_is_help=False,
    subcommand_metavar="MODE [OPTIONS]...",
)
@click.pass_context
def bench_main(ctx: click.Context) -> None:
    """Measure a hop of the pipeline against the machine's own ceiling, in the same run.

    \b
      zrl-bench sampling --workers 2 --envs-per-worker 4 --json perf/results/sampling.json
      zrl-bench learning --config config/pong.toml --seconds 3600 --seeds 1,2 --json c.json --png c.png

    zrl-bench MODE --help lists the options MODE takes. zrl-bench --suggest is zrl-bench suggest."""
    if ctx.invoked_subcommand is None:
        usage_error("zrl-bench", f"give one of MODE ({', '.join(MODES)}) or suggest; zrl-bench --help lists them")


# -- the modes -------------------------------------------------------------------------------------------------


@bench_main.command(context_settings=HELP)
@config_options
@workers_option(many=False)
@envs_option(many=False)
@seconds_option("Measured seconds of the ceiling and of each peer.")
@click.option("--no-peers", is_flag=True, help="Only zrl's ceiling, not ale-py's vector env, Gymnasium, EnvPool.")
@json_option
def env(config_path, sets, workers, envs_per_worker, seconds, no_peers, json_path) -> None:
    """The env ceiling: bare env stepping, and the peers that install.

    zrl's own env stepping with its preprocessing, one process per worker and no pipeline: the ceiling every
    other mode is judged against; beside it ale-py's AtariVectorEnv, Gymnasium's AsyncVectorEnv and EnvPool."""
    with refusals():
        in_range(seconds=seconds)
        split = one_split(workers, envs_per_worker, "env")
    measure("env", json_path, config_path=config_path, sets=list(sets), seconds=seconds, peers=not no_peers, **split)


@bench_main.command(context_settings=HELP)
@config_options
@workers_option(many=True)
@envs_option(many=True)
@seconds_option("Measured seconds of each grid point, after --warmup.")
@warmup_option(2.0)
@click.option(
    "--policy",
    type=click.Choice(["uniform", "network"]),
    default="uniform",
    show_default=True,
    help="Act uniformly at random (the data path alone) or with the fixed initial network.",
)
@click.option("--no-ceiling", is_flag=True, help="Do not measure the env ceiling (no ratio_to_ceiling).")
@json_option
def sampling(config_path, sets, workers, envs_per_worker, seconds, warmup, policy, no_ceiling, json_path) -> None:
    """Frames/s of workers, rings and broker against the env ceiling.

    Workers, rings and broker with no learner, for every point of the --workers x --envs-per-worker grid, each
    against the env ceiling on the same split."""
    with refusals():
        in_range(seconds=seconds, warmup=warmup)
        split = grid(workers, envs_per_worker)
    measure(
        "sampling",
        json_path,
        config_path=config_path,
        sets=list(sets),
        seconds=seconds,
        warmup=warmup,
        policy=policy,
        ceiling=not no_ceiling,
        **split,
    )


@bench_main.command(context_settings=HELP)
@config_options
@envs_option(many=False)
@seconds_option("Measured seconds of each hop.")
@click.option(
    "--remote",
    is_flag=True,
    help="The remote path too (a worker's frames zstd-compressed over TCP loopback into the ingest, with and "
    "without CurveZMQ), beside the shm ring.",
)
@json_option
def transport(config_path, sets, envs_per_worker, seconds, remote, json_path) -> None:
    """Each transport hop alone: ring, queue, index messages, weights.

    Ring write+read, a pickled multiprocessing.Queue for the same frames, index messages through PUSH/PULL with
    the schema decode and their round trip, the weights broadcast; --remote adds the remote path."""
    with refusals():
        in_range(seconds=seconds)
        envs = count(envs_per_worker, "--envs-per-worker", "transport")
    measure(
        "transport",
        json_path,
        config_path=config_path,
        sets=list(sets),
        envs_per_worker=envs,
        seconds=seconds,
        remote=remote,
    )


@bench_main.command(context_settings=HELP)
@config_options
@workers_option(many=False)
@envs_option(many=False)
@seconds_option("Measured seconds in all, in alternating bare and fed segments of about 10 s.")
@capacity_option
@json_option
def learner(config_path, sets, workers, envs_per_worker, seconds, capacity, json_path) -> None:
    """The learner fed by the broker against a bare PyTorch loop.

    The real learner fed by the real broker from a full uniform replay of --capacity units (the workers fill it,
    then stop), against a bare loop on the same batch shape, in alternating segments."""
    with refusals():
        in_range(seconds=seconds, capacity=capacity)
        split = one_split(workers, envs_per_worker, "learner")
    measure("learner", json_path, config_path=config_path, sets=list(sets), seconds=seconds, capacity=capacity, **split)


@bench_main.command(context_settings=HELP)
@config_options
@capacity_option
@click.option("--lambda", "lam", type=float, default=6.0, show_default=True, help="Lambda: the pool is lambda x B.")
@click.option(
    "--feature-steps",
    type=int,
    default=None,
    help="Steps compared per unit, 0: all (default: the config's first elite or attentive replay's, else 0).",
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "bf16"]),
    default="fp32",
    show_default=True,
    help="The broker's feature passes.",
)
@click.option("--repeats", type=int, default=5, show_default=True, help="Batches timed (the median is reported).")
@json_option
def elite(config_path, sets, capacity, lam, feature_steps, precision, repeats, json_path) -> None:
    """Elite and attentive batch preparation against a learner step.

    The broker's time to prepare one elite, then one attentive batch, on a replay of real frames in a real ring,
    against the learner's step on the same batch shape."""
    with refusals():
        in_range(capacity=capacity, lam=lam, repeats=repeats)
    measure(
        "elite",
        json_path,
        config_path=config_path,
        sets=list(sets),
        capacity=capacity,
        lam=lam,
        feature_steps=feature_steps,
        precision=precision,
        repeats=repeats,
    )


@bench_main.command(context_settings=HELP)
@config_options
@workers_option(many=False)
@envs_option(many=False)
@seconds_option("Measured seconds of each run, after --warmup.")
@warmup_option(15.0)
@click.option(
    "--no-ceiling",
    is_flag=True,
    help="Do not measure the machine's limit (the unit costs, GFLOP/s and matmul peak).",
)
@click.option(
    "--observers",
    is_flag=True,
    help="The run with nothing watching it, with TensorBoard events, and with the dashboard and an open page "
    "reading it, in turn, --rounds times; learner steps/s and frames/s of each, and ratios.",
)
@click.option(
    "--remote",
    is_flag=True,
    help="N+1 local workers against N local and one remote (zrl-worker over TCP on this host), in turn, --rounds "
    "times.",
)
@click.option(
    "--replay-checkpoint",
    is_flag=True,
    help="A checkpoint every 25 learner steps, without and with the replays saved beside it "
    "(run.checkpoint_replay), in turn, --rounds times; learner steps/s, its time waiting for batches, and the "
    "replay checkpoint's size on disk per million frames.",
)
@click.option(
    "--evaluation",
    is_flag=True,
    help="The run without and with evaluation during training (the config's eval.interval_frames, or one every "
    "5,000 frames: always busy), at eval.nice and at nice 5, in turn, --rounds times; learner steps/s and "
    "frames/s of each, and the evaluations done.",
)
@click.option(
    "--rounds",
    type=int,
    default=2,
    show_default=True,
    help="With --observers, --remote, --replay-checkpoint or --evaluation: rounds of each.",
)
@json_option
def pipeline(
    config_path,
    sets,
    workers,
    envs_per_worker,
    seconds,
    warmup,
    no_ceiling,
    observers,
    remote,
    replay_checkpoint,
    evaluation,
    rounds,
    json_path,
) -> None:
    """The real zrl-launch: frames/s, learner steps/s, the bottleneck.

    The run's time split by role and its bottleneck, beside the machine's limit from unit costs measured alone.
    --observers, --remote, --replay-checkpoint or --evaluation instead run it two or three ways in turn."""
    with refusals():
        in_range(seconds=seconds, warmup=warmup, rounds=rounds)
        if sum((remote, observers, replay_checkpoint, evaluation)) > 1:
            raise ConfigError("give one of --remote, --observers, --replay-checkpoint and --evaluation")
        split = one_split(workers, envs_per_worker, "pipeline")
    measure(
        "pipeline",
        json_path,
        config_path=config_path,
        sets=list(sets),
        seconds=seconds,
        warmup=warmup,
        ceiling=not no_ceiling,
        observers=observers,
        remote=remote,
        replay_checkpoint=replay_checkpoint,
        evaluation=evaluation,
        rounds=rounds,
        **split,
    )


@bench_main.command(context_settings=HELP)
@config_options
@workers_option(many=True)
@envs_option(many=True)
@seconds_option("Measured seconds of each grid point's run, after --warmup.")
@warmup_option(15.0)
@json_option
def suggest(config_path, sets, workers, envs_per_worker, seconds, warmup, json_path) -> None:
    """Pipeline runs over a grid of splits; the best for this machine.

    The grid is the --workers and --envs-per-worker lists, by default half, all and twice the cores x 2, 4, 8
    envs; the best is the one whose learner trains the most per second."""
    with refusals():
        in_range(seconds=seconds, warmup=warmup)
        split = grid(workers, envs_per_worker)
    measure("suggest", json_path, config_path=config_path, sets=list(sets), seconds=seconds, warmup=warmup, **split)


@bench_main.command(context_settings=HELP)
@config_options
@workers_option(many=False)
@envs_option(many=False)
@seconds_option("Each run's wall-clock budget.", default=None)
@click.option("--frames", type=int, default=None, help="Each run's budget of env frames.")
@click.option(
    "--seeds",
    type=str,
    default="0",
    show_default=True,
    metavar="S[,S...]",
    help="One run per seed, one after another (each alone on the machine).",
)
@click.option(
    "--runs",
    multiple=True,
    metavar="RUN_DIR",
    help="Read these run folders' curves instead of training (runs started by hand); repeatable.",
)
@json_option
@click.option(
    "--png",
    "png_path",
    type=str,
    default=None,
    metavar="PATH",
    help="Draw the curves (return against frames and against wall time) with the reference.",
)
@click.option(
    "--results-dir",
    type=str,
    default="results",
    show_default=True,
    help="Where the runs' folders go (learning_<time>/seed<S>/ under it).",
)
def learning(
    config_path, sets, workers, envs_per_worker, seconds, frames, seeds, runs, json_path, png_path, results_dir
) -> None:
    """Learning curves from the real zrl-launch, beside a reference.

    Trains (or reads, with --runs) one run per seed and prints their marks beside the reference curve:
    zrl-bench learning --config config/pong.toml --seconds 3600 --seeds 1,2 --json c.json --png c.png"""
    import json
    from pathlib import Path

    from zrl.bench import _table
    from zrl.bench import learning as curves
    from zrl.bench.facts import machine

    with refusals():
        in_range(seconds=seconds, frames=frames)
        split = one_split(workers, envs_per_worker, "learning")
        try:
            seed_list = [int(s) for s in seeds.split(",")]
        except ValueError:
            raise ConfigError(f"--seeds {seeds!r}: expected an integer or a comma list such as 1,2") from None
        one_workers, one_envs = (one[0] if one else None for one in split.values())
        result = curves.learning(
            config_path,
            list(sets),
            one_workers,
            one_envs,
            seed_list,
            seconds,
            frames,
            list(runs),
            results_dir,
            progress=lambda text: click.echo(f"zrl-bench: {text}", err=True),
        )
        facts = machine()
        columns = ["curve", "minutes", "env_frames", "learner_steps", "episodes"]
        columns += [*(f"{mark}min" for mark in curves.MARKS_MIN), "last", f"last {curves.LAST_FEW} ep"]
        click.echo(_table(curves.summary_rows(result), columns))
        if json_path:
            path = Path(json_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            doc = {"mode": "learning", "machine": facts, "result": curves.for_json(result)}
            path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")  # thousands of points: compact
            click.echo(f"wrote {path}")
        if png_path:
            where = f"{facts['cpu']}, {facts['cores']} cores"
            click.echo(f"wrote {curves.plot(result, png_path, where)}")
