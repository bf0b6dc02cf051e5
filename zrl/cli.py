"""The commands: argument parsing and exit codes only.

Exit codes: 0 a finished run, 1 a run that failed, 2 a usage or config mistake, 129 SIGHUP, 130 Ctrl-C, 143 SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import click

from zrl import __version__
from zrl.config import ConfigError

EXIT_USAGE = 2


def _usage_error(prog: str, message: str) -> None:
    click.echo(f"{prog}: error: {message}", err=True)
    sys.exit(EXIT_USAGE)


def _trust_option(read: str, more: str = ""):
    """--trust-env-module: the one way an env.id read from data (``read``) may import its module."""
    return click.option(
        "--trust-env-module",
        "trusted",
        multiple=True,
        metavar="MODULE",
        help=f"Let the env.id of {read} import MODULE (an id MODULE:ENV registers ENV on import), which runs its "
        f"code; without it such an id is refused. Repeatable.{more}",
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=str,
    default=None,
    help="TOML run file (see config/defaults.toml for every key). Without it: the built-in default, Pong.",
)
@click.option("--workers", type=int, default=None, help="Worker processes (workers.count).")
@click.option("--envs-per-worker", type=int, default=None, help="Environments per worker (workers.envs_per_worker).")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help='Override one config key; repeatable. Values are TOML: 16, 0.5, true, "text", [64, 64].',
)
@click.option(
    "--replay",
    "replay_json",
    type=str,
    default=None,
    metavar="JSON",
    help="The replays as the reference platform's JSON list, replacing the run file's [[replay]] tables, "
    'e.g. \'[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
    '{"type": "standard", "capacity": 1000, "sample_ratio": 0.5}]\'. '
    "standard means uniform; custom with sample_strategy means elite or attentive.",
)
@click.option(
    "--resume",
    "resume_ref",
    type=str,
    default=None,
    metavar="RUN|auto",
    help="Continue a run in its own folder from its newest good checkpoint (auto: the newest run of the "
    "config's env). Its config is used; only keys such as the budget, worker counts, threads and "
    "intervals may change.",
)
@click.option(
    "--init-from",
    "init_from",
    type=str,
    default=None,
    metavar="CHECKPOINT",
    help="Start a new run from a checkpoint's weights (the same game and network).",
)
@click.option("--init-optimizer", is_flag=True, help="With --init-from: take the checkpoint's optimiser state too.")
@click.option("--quiet", is_flag=True, help="No progress output (the log and CSV files are still written).")
@click.option(
    "--dashboard",
    is_flag=True,
    help="Serve a live page of the run on 127.0.0.1 (its address is printed): the learning curve, rates, each "
    "role's time split and the bottleneck, lag, replay, processes, warnings.",
)
@click.option(
    "--port", type=int, default=None, help="With --dashboard: the page's TCP port; 0, the default, picks a free one."
)
@click.option(
    "--dashboard-host",
    type=str,
    default=None,
    metavar="HOST",
    help="With --dashboard: serve on this address instead of 127.0.0.1. Any address but a loopback one needs a "
    "token, printed once with the address; requests without it get 403.",
)
@click.option(
    "--ray",
    "ray_address",
    type=str,
    default=None,
    metavar="auto|ADDRESS",
    help="Place the run's remote workers (workers.remote) on a Ray cluster as actors, restarted by Ray: auto joins "
    "the cluster this host is part of (ray start), ADDRESS another (HEAD:6379). Needs zrl's cluster extra.",
)
@click.option(
    "--ray-keys",
    "ray_keys",
    type=str,
    default="",
    metavar="DIR",
    help="With --ray, when the run has CurveZMQ keys: the client key folder (zrl-keys --client NAME) the actors use, "
    "at the same path on every node.",
)
@_trust_option("a resumed run's config.toml", " An id you give with --config or --set needs no flag.")
@click.version_option(__version__, prog_name="zrl")
def launch_main(
    config_path,
    workers,
    envs_per_worker,
    sets,
    replay_json,
    resume_ref,
    init_from,
    init_optimizer,
    quiet,
    dashboard,
    port,
    dashboard_host,
    ray_address,
    ray_keys,
    trusted,
) -> None:
    """Train an agent: zrl-launch --config config/pong.toml --workers 8 --envs-per-worker 4"""
    from zrl import config as config_mod
    from zrl import forkserver
    from zrl.namespace import namespace

    try:
        namespace()  # a bad $ZRL_NAMESPACE is a usage error before anything is made
        options = {"workers.count": workers, "workers.envs_per_worker": envs_per_worker, "replay": replay_json}
        if resume_ref is not None and init_from is not None:
            raise ConfigError("--resume continues a run and --init-from starts a new one; give one of them")
        if init_optimizer and init_from is None:
            raise ConfigError("--init-optimizer goes with --init-from CHECKPOINT")
        page = _page_address(dashboard, port, dashboard_host)
        if ray_keys and ray_address is None:
            raise ConfigError("--ray-keys goes with --ray")
        ray = (ray_address, ray_keys) if ray_address is not None else None
        if resume_ref is not None:
            if config_path is not None and resume_ref != "auto":
                raise ConfigError(
                    f"--config: a resumed run uses its own config ({resume_ref}/config.toml); "
                    "change safe keys with --set or the options"
                )
            probe_cfg = config_mod.load(config_path, sets, options)
            forkserver.begin()  # its preload runs beside the checks that follow (zrl/forkserver.py)
            from zrl.launch import resume

            code = resume(
                resume_ref, probe_cfg, sets, options, quiet=quiet, dashboard=page, ray=ray, trusted=tuple(trusted)
            )
        else:
            cfg = config_mod.load(config_path, sets, options)
            forkserver.begin()
            from zrl.launch import launch

            code = launch(cfg, quiet=quiet, init_from=init_from, init_optimizer=init_optimizer, dashboard=page, ray=ray)
    except ConfigError as err:
        _usage_error("zrl-launch", str(err))
    except KeyboardInterrupt:  # Ctrl-C before the launcher took over its signals: no run was started
        click.echo("zrl-launch: interrupted before the run started", err=True)
        sys.exit(130)
    finally:
        forkserver.abandon()  # a launch that never opened its wiring (a Wiring that did stops it itself)
    # The run is over and cleaned up. A late Ctrl-C must not kill the interpreter as it exits (Python puts the
    # default handlers back while it shuts down, and would die of the signal rather than exit with ``code``).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    _let_go_of_a_closed_terminal()
    sys.exit(code)


def _let_go_of_a_closed_terminal() -> None:
    """Point stdout and stderr at /dev/null where the terminal went away under the run (a hang-up): Python would
    otherwise fail to flush them as it exits, and exit with 120 instead of the run's code."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
            with contextlib.suppress(OSError):
                stream.flush()


def _page_address(dashboard: bool, port: int | None, host: str | None) -> tuple[str, int] | None:
    """zrl-launch's (host, port) for the dashboard, None without --dashboard."""
    if not dashboard:
        for flag, value in (("--port", port), ("--dashboard-host", host)):
            if value is not None:
                raise ConfigError(f"{flag} goes with --dashboard")
        return None
    return _checked_address(host or "127.0.0.1", 0 if port is None else port, "--dashboard-host")


def _checked_address(host: str, port: int, host_flag: str) -> tuple[str, int]:
    """(host, port) once the host looks like an address (the port's range is the Dashboard's own check)."""
    if not host or any(c.isspace() for c in host):
        raise ConfigError(f"{host_flag} {host!r}: give an address to serve on, such as 127.0.0.1 or 0.0.0.0")
    return host, port


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run", type=str)
@click.option("--port", type=int, default=0, show_default=True, help="TCP port; 0 picks a free one.")
@click.option(
    "--host",
    type=str,
    default="127.0.0.1",
    show_default=True,
    help="Address to serve on. Any address but a loopback one needs a token, printed once with the address; "
    "requests without it get 403.",
)
def dashboard_main(run, port, host) -> None:
    """Serve a run's page, live or finished, until Ctrl-C: zrl-dashboard results/ALE-Pong-v5_1764000000

    The same page as zrl-launch --dashboard: the learning curve, rates, each role's time split with the
    bottleneck named, policy lag and sample age, replay figures, processes and warnings. Read-only."""
    from pathlib import Path

    from zrl.dashboard import Dashboard, is_run

    try:
        if not is_run(Path(run)):
            raise ConfigError(
                f"{run}: not a zrl run folder (a run folder holds config.toml, metrics.csv, episodes.csv)"
            )
        page = Dashboard(*_checked_address(host, port, "--host"))
    except ConfigError as err:
        _usage_error("zrl-dashboard", str(err))
    import threading

    stop = threading.Event()
    from zrl.launch.supervise import stop_signals

    for sig in stop_signals():
        if sig != signal.SIGINT:  # Ctrl-C: the KeyboardInterrupt below
            signal.signal(sig, lambda *_: stop.set())
    page.serve(run)
    click.echo(f"dashboard: {page.url} (Ctrl-C to stop)")
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # closing is not cut short by a second Ctrl-C
        page.close()


def _counts(text: str | None, flag: str) -> list[int]:
    """--workers 2 or --workers 1,2,4: positive integers."""
    if text is None:
        return []
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected a positive integer or a comma list such as 1,2,4") from None
    if any(v < 1 for v in values):
        raise ConfigError(f"{flag} {text!r}: every value must be at least 1")
    return values


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument(
    "mode",
    required=False,
    type=click.Choice(["env", "sampling", "transport", "learner", "elite", "pipeline", "learning"]),
)
@click.option(
    "--config",
    "config_path",
    type=str,
    default=None,
    help="TOML run file whose env, network and batch shape are measured.",
)
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE", help="Override one config key; repeatable.")
@click.option(
    "--workers", type=str, default=None, metavar="N[,N...]", help="Worker processes; sampling takes a list (a grid)."
)
@click.option(
    "--envs-per-worker", type=str, default=None, metavar="M[,M...]", help="Envs per worker; sampling takes a list."
)
@click.option(
    "--seconds",
    type=float,
    default=None,
    help="Measured seconds of each step of the mode [5]; learning: each run's wall-clock budget.",
)
@click.option("--warmup", type=float, default=None, help="Seconds before measuring (sampling 2, pipeline 15).")
@click.option(
    "--json", "json_path", type=str, default=None, metavar="PATH", help="Write the figures and the machine's facts."
)
@click.option(
    "--policy",
    type=click.Choice(["uniform", "network"]),
    default="uniform",
    show_default=True,
    help="sampling: act uniformly at random (the data path alone) or with the fixed initial network.",
)
@click.option(
    "--no-ceiling",
    is_flag=True,
    help="sampling: do not measure the env ceiling (no ratio_to_ceiling); "
    "pipeline: do not measure the machine's limit (the unit costs, GFLOP/s and matmul peak).",
)
@click.option("--no-peers", is_flag=True, help="env: only zrl's ceiling, not ale-py's vector env, Gymnasium, EnvPool.")
@click.option("--capacity", type=int, default=1000, show_default=True, help="learner, elite: replay capacity in units.")
@click.option(
    "--lambda", "lam", type=float, default=6.0, show_default=True, help="elite: lambda, the pool is lambda x B."
)
@click.option(
    "--feature-steps",
    type=int,
    default=None,
    help="elite: steps compared per unit, 0: all (default: the config's first elite or attentive replay's, else 0).",
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "bf16"]),
    default="fp32",
    show_default=True,
    help="elite: the broker's feature passes.",
)
@click.option(
    "--repeats", type=int, default=5, show_default=True, help="elite: batches timed (the median is reported)."
)
@click.option(
    "--suggest",
    is_flag=True,
    help="Short pipeline runs over a grid (the --workers and --envs-per-worker "
    "lists; by default half, all and twice the cores x 2, 4, 8 envs); prints the best for this machine, the "
    "one whose learner trains the most per second.",
)
@click.option(
    "--observers",
    is_flag=True,
    help="pipeline: the run with nothing watching it, with TensorBoard events, and with the dashboard and an "
    "open page reading it, in turn, --rounds times; learner steps/s and frames/s of each, and ratios.",
)
@click.option(
    "--remote",
    is_flag=True,
    help="transport: the remote path too (a worker's frames zstd-compressed over TCP loopback into the ingest, "
    "with and without CurveZMQ), beside the shm ring; pipeline: N+1 local workers against N local and one remote "
    "(zrl-worker over TCP on this host), in turn, --rounds times.",
)
@click.option(
    "--replay-checkpoint",
    is_flag=True,
    help="pipeline: a checkpoint every 25 learner steps, without and with the replays saved beside it "
    "(run.checkpoint_replay), in turn, --rounds times; learner steps/s, its time waiting for batches, and the "
    "replay checkpoint's size on disk per million frames.",
)
@click.option(
    "--evaluation",
    is_flag=True,
    help="pipeline: the run without and with evaluation during training (the config's eval.interval_frames, or "
    "one every 5,000 frames: always busy), at eval.nice and at nice 5, in turn, --rounds times; learner steps/s "
    "and frames/s of each, and the evaluations "
    "done.",
)
@click.option(
    "--rounds",
    type=int,
    default=2,
    show_default=True,
    help="pipeline --observers, --remote, --replay-checkpoint or --evaluation: rounds of each.",
)
@click.option("--frames", type=int, default=None, help="learning: each run's budget of env frames.")
@click.option(
    "--seeds",
    type=str,
    default="0",
    show_default=True,
    metavar="S[,S...]",
    help="learning: one run per seed, one after another (each alone on the machine).",
)
@click.option(
    "--runs",
    multiple=True,
    metavar="RUN_DIR",
    help="learning: read these run folders' curves instead of training (runs started by hand); repeatable.",
)
@click.option(
    "--png",
    "png_path",
    type=str,
    default=None,
    metavar="PATH",
    help="learning: draw the curves (return against frames and against wall time) with the reference.",
)
@click.option(
    "--results-dir",
    type=str,
    default="results",
    show_default=True,
    help="learning: where the runs' folders go (learning_<time>/seed<S>/ under it).",
)
def bench_main(
    mode,
    config_path,
    sets,
    workers,
    envs_per_worker,
    seconds,
    warmup,
    json_path,
    policy,
    no_ceiling,
    no_peers,
    capacity,
    lam,
    feature_steps,
    precision,
    repeats,
    suggest,
    observers,
    remote,
    replay_checkpoint,
    evaluation,
    rounds,
    frames,
    seeds,
    runs,
    png_path,
    results_dir,
) -> None:
    """Measure a hop of the pipeline against the machine's own ceiling, in the same run:
    zrl-bench sampling --workers 2 --envs-per-worker 4 --json perf/results/sampling.json

    Learning curves: zrl-bench learning --config config/pong.toml --seconds 3600 --seeds 1,2 --json c.json --png c.png"""
    import json
    from pathlib import Path

    from zrl import bench
    from zrl.bench.facts import machine
    from zrl.launch import namespace

    try:
        namespace()
        if suggest == (mode is not None):
            raise ConfigError(f"give one of MODE ({', '.join(bench.MODES)}) or --suggest")
        if mode == "learning":
            _learning(
                config_path,
                sets,
                workers,
                envs_per_worker,
                seconds,
                frames,
                seeds,
                runs,
                json_path,
                png_path,
                results_dir,
            )
            return
        seconds = 5.0 if seconds is None else seconds
        if seconds <= 0 or (warmup is not None and warmup < 0) or capacity < 1 or repeats < 1 or lam < 1 or rounds < 1:
            raise ConfigError(
                "--seconds must be > 0, --warmup >= 0, --capacity, --repeats and --rounds >= 1, --lambda >= 1"
            )
        if observers and mode != "pipeline":
            raise ConfigError("--observers goes with the pipeline mode: zrl-bench pipeline --observers")
        if remote and mode not in ("pipeline", "transport"):
            raise ConfigError("--remote goes with the transport and pipeline modes: zrl-bench transport --remote")
        if replay_checkpoint and mode != "pipeline":
            raise ConfigError("--replay-checkpoint goes with the pipeline mode: zrl-bench pipeline --replay-checkpoint")
        if evaluation and mode != "pipeline":
            raise ConfigError("--evaluation goes with the pipeline mode: zrl-bench pipeline --evaluation")
        if sum((remote, observers, replay_checkpoint, evaluation)) > 1:
            raise ConfigError("give one of --remote, --observers, --replay-checkpoint and --evaluation")
        opt = bench.Options(
            config_path=config_path,
            sets=list(sets),
            workers=_counts(workers, "--workers"),
            envs_per_worker=_counts(envs_per_worker, "--envs-per-worker"),
            seconds=seconds,
            warmup=warmup,
            policy=policy,
            ceiling=not no_ceiling,
            peers=not no_peers,
            capacity=capacity,
            lam=lam,
            feature_steps=feature_steps,
            precision=precision,
            repeats=repeats,
            observers=observers,
            remote=remote,
            replay_checkpoint=replay_checkpoint,
            evaluation=evaluation,
            rounds=rounds,
        )
        name = "suggest" if suggest else mode
        result = bench.run(name, opt, progress=lambda text: click.echo(f"zrl-bench: {text} ...", err=True))
    except ConfigError as err:
        _usage_error("zrl-bench", str(err))
    except KeyboardInterrupt:
        click.echo("zrl-bench: interrupted; nothing was written", err=True)
        sys.exit(130)
    except RuntimeError as err:
        click.echo(f"zrl-bench: error: {err}", err=True)
        sys.exit(1)
    click.echo(bench.render(name, result))
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"mode": name, "seconds": seconds, "machine": machine(), "result": result}
        path.write_text(json.dumps(doc, indent=2) + "\n")
        click.echo(f"wrote {path}")


def _learning(
    config_path, sets, workers, envs_per_worker, seconds, frames, seeds, runs, json_path, png_path, results_dir
) -> None:
    """zrl-bench learning: train (or read) runs, print their marks beside the reference, write JSON and PNG."""
    import json
    from pathlib import Path

    from zrl.bench import _table, learning
    from zrl.bench.facts import machine

    if (seconds is not None and seconds <= 0) or (frames is not None and frames <= 0):
        raise ConfigError("--seconds and --frames must be > 0")
    one_count = {
        "--workers": _counts(workers, "--workers"),
        "--envs-per-worker": _counts(envs_per_worker, "--envs-per-worker"),
    }
    for flag, values in one_count.items():
        if len(values) > 1:
            raise ConfigError(f"learning: {flag} takes one number, not a list")
    w = one_count["--workers"][0] if one_count["--workers"] else None
    m = one_count["--envs-per-worker"][0] if one_count["--envs-per-worker"] else None
    try:
        seed_list = [int(s) for s in seeds.split(",")]
    except ValueError:
        raise ConfigError(f"--seeds {seeds!r}: expected an integer or a comma list such as 1,2") from None
    result = learning.learning(
        config_path,
        list(sets),
        w,
        m,
        seed_list,
        seconds,
        frames,
        list(runs),
        results_dir,
        progress=lambda text: click.echo(f"zrl-bench: {text}", err=True),
    )
    facts = machine()
    click.echo(
        _table(
            learning.summary_rows(result),
            [
                "curve",
                "minutes",
                "env_frames",
                "learner_steps",
                "episodes",
                *(f"{m}min" for m in learning.MARKS_MIN),
                "last",
                f"last {learning.LAST_FEW} ep",
            ],
        )
    )
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"mode": "learning", "machine": facts, "result": learning.for_json(result)}
        path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")  # thousands of points: compact
        click.echo(f"wrote {path}")
    if png_path:
        where = f"{facts['cpu']}, {facts['cores']} cores"
        click.echo(f"wrote {learning.plot(result, png_path, where)}")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint_or_run", required=False)
@click.option("--episodes", type=int, default=100, show_default=True, help="Episodes to play; episode i uses seed S+i.")
@click.option(
    "--protocol",
    type=click.Choice(["deepmind", "machado", "saber"]),
    default="deepmind",
    show_default=True,
    help="deepmind: 30 no-ops, 108k-frame cap; machado: sticky 0.25, full action set; saber: machado, a "
    "100-hour cap and 5 minutes without reward ends an episode (scores at 5 min, 30 min, uncapped).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="S: episode i is played with seed S+i.")
@click.option("--workers", type=int, default=1, show_default=True, help="Processes that play episodes in parallel.")
@click.option("--greedy/--sample", default=False, help="Act on the most likely action, or sample the policy (default).")
@click.option(
    "--compare",
    "compare_runs",
    nargs=2,
    default=None,
    metavar="RUN_A RUN_B",
    help="Put two runs' newest evaluations under --protocol side by side, with the difference of means.",
)
@click.option(
    "--video",
    type=str,
    default=None,
    metavar="OUT.mp4|OUT.gif",
    help="Record the first episode as the agent sees it (84x84 frames, scaled up, real time).",
)
@click.option("--render", is_flag=True, help="Show the first episode in a window (needs a display).")
@click.option("--quiet", is_flag=True, help="Only the table.")
@_trust_option("the checkpoint's stored config")
def eval_main(
    checkpoint_or_run, episodes, protocol, seed, workers, greedy, compare_runs, video, render, quiet, trusted
) -> None:
    """Score a checkpoint (or a run folder's best.pt) under a standard Atari protocol:
    zrl-eval results/ALE-Pong-v5_1795270480 --episodes 100 --protocol saber --workers 2"""
    from zrl import evaluate

    try:
        if compare_runs:
            result = evaluate.compare(*compare_runs, protocol=protocol, seed=seed)
            for side in ("a", "b"):
                r = result[side]
                click.echo(
                    f"{side.upper()} {r['run']}: mean {r['mean']:.1f} [{r['ci95_low']:.1f}, {r['ci95_high']:.1f}] "
                    f"over {r['episodes']} episodes"
                )
            click.echo(
                f"B - A: {result['difference_of_means']:+.1f}, 95% CI [{result['ci95_low']:+.1f}, "
                f"{result['ci95_high']:+.1f}]{' (significant)' if result['significant'] else ''}"
            )
            return
        if checkpoint_or_run is None:
            raise ConfigError("give a checkpoint or a run folder (or --compare RUN_A RUN_B)")
        report = evaluate.evaluate(
            checkpoint_or_run,
            episodes,
            protocol,
            seed,
            workers,
            greedy,
            progress=(lambda _: None) if quiet else click.echo,
            video=video,
            render=render,
            trusted=tuple(trusted),
        )
    except ConfigError as err:
        _usage_error("zrl-eval", str(err))
    except KeyboardInterrupt:
        click.echo("zrl-eval: interrupted; nothing was written", err=True)
        sys.exit(130)
    click.echo(evaluate.table(report))
    if not quiet:
        click.echo("wrote " + " and ".join(report["files"]))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("folder")
@click.option(
    "--client",
    "client",
    default=None,
    metavar="NAME",
    help="Add a key for one remote worker host to the existing FOLDER: FOLDER/clients/NAME/, to copy to that "
    "host for zrl-worker --keys, authorized by FOLDER/authorized/NAME.key (delete it to revoke the host).",
)
def keys_main(folder, client) -> None:
    """Make a folder of CurveZMQ keys for transport.curve_keys: zrl-keys ~/.zrl/keys

    It holds a server and a client certificate (secret files mode 0600) and authorized/, the client public
    keys that bound sockets admit. An existing folder is never overwritten. zrl-keys --client NAME FOLDER adds
    one remote worker host's own key to it."""
    from zrl.transport import make_client_keys, make_curve_keys

    if client is not None:
        try:
            target = make_client_keys(folder, client)
        except ConfigError as err:
            _usage_error("zrl-keys", str(err))
        except OSError as err:
            _usage_error("zrl-keys", f"cannot write the key of {client!r} into {folder} ({err.strerror or err})")
        click.echo(
            f"wrote {target}: copy that folder to the host {client!r} and give it to zrl-worker --keys there "
            f"(its secret never needs to leave that host again); revoke it by deleting "
            f"{os.path.join(folder, 'authorized', client + '.key')}"
        )
        return
    if os.path.lexists(folder):
        _usage_error("zrl-keys", f"{folder} already exists; keys are never overwritten, give a new folder")
    try:
        make_curve_keys(folder)
    except OSError as err:
        _usage_error("zrl-keys", f"cannot make {folder} ({err.strerror or err})")
    click.echo(
        f"wrote CurveZMQ keys to {folder}; run with --set transport.curve_keys={folder!r} "
        "(and, to bind beyond loopback, --set transport.bind_host=...)"
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("sweep_file", required=False)
@click.option("--out", default=None, metavar="DIR", help="The sweep's folder (default results/sweeps/<name>_<time>).")
@click.option("--resume", "resume_dir", default=None, metavar="DIR", help="Continue the sweep in DIR.")
@click.option(
    "--only",
    multiple=True,
    metavar="PATTERN",
    help="Run only the labels, or label/seedN, that match this shell pattern (repeatable), e.g. --only 'breakout-*' or --only 'pong-*/seed1'.",
)
@click.option(
    "--retry-failed",
    "retry",
    is_flag=True,
    help="With --resume: start the failed runs again (of those --only selects), each in a new run folder.",
)
@_trust_option("a stopped run's config.toml, resumed by --resume,")
def sweep_main(sweep_file, out, resume_dir, only, retry, trusted) -> None:
    """Run configs x seeds, each zrl-launch in its own run folder: zrl-sweep config/suites/elite_vs_uniform.toml

    OUT/index.json says where each run stands (pending, running, done, failed, stopped). Ctrl-C stops the
    running runs in order; --resume OUT continues the sweep (stopped runs from their checkpoints)."""
    from zrl.experiment import sweep

    if retry and not resume_dir:
        _usage_error("zrl-sweep", "--retry-failed goes with --resume DIR (a new sweep has no failed runs)")
    if sweep_file and resume_dir:
        _usage_error("zrl-sweep", "give a sweep file or --resume DIR, not both (a resumed sweep reads its own copy)")
    if out and resume_dir:
        _usage_error("zrl-sweep", "--out names a new sweep's folder; --resume DIR continues in DIR")
    try:
        code = sweep.start(
            sweep_file, out, resume_dir, list(only), lambda text: click.echo(text, err=True), retry, tuple(trusted)
        )
    except ConfigError as err:
        _usage_error("zrl-sweep", str(err))
    sys.exit(code)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, metavar="RUN_OR_SWEEP...")
@click.option("--out", default=None, metavar="PREFIX", help="Write PREFIX.md, .json, _curves.png, _profile.png.")
@click.option("--svg", is_flag=True, help="SVG copies of the pictures too.")
@click.option("--reps", type=click.IntRange(100, 200_000), default=5000, help="Bootstrap replicates.")
@click.option(
    "--frames",
    type=click.IntRange(1, None),
    default=None,
    help="Read every run at this many env frames (each must have reached it). Default: where each game's "
    "shortest run stopped.",
)
def report_main(paths, out, svg, reps, frames) -> None:
    """Aggregate runs over seeds and games, rliable-style: zrl-report results/sweeps/NAME --out perf/results/NAME

    IQM and mean with stratified-bootstrap 95% CIs (human-normalised over several games), return against env
    frames and against wall time per arm with CI bands, performance profiles, and a Markdown table."""
    from zrl.experiment import report

    try:
        built = report.build(list(paths), reps, frames)
    except ConfigError as err:
        _usage_error("zrl-report", str(err))
    click.echo(report.markdown(built), nl=False)
    if out:
        for path in report.write(built, out, svg):
            click.echo(f"wrote {path}", err=True)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option(
    "--out",
    default=None,
    metavar="FILE.png|FILE.svg",
    help="The picture (SVG where it ends in .svg). Default: RUN/plots/curves.png (metrics.png with --metrics) for "
    "one run, zrl-plot.png in this folder for several.",
)
@click.option("--svg", is_flag=True, help="An SVG copy beside the PNG too (FILE.svg).")
@click.option("--metrics", is_flag=True, help="One run's health (losses, throughput, time split, replay) instead.")
def plot_main(runs, out, svg, metrics) -> None:
    """Draw runs' pictures from their CSV files, as they stand (a run still writing too):
    zrl-plot results/ALE-Pong-v5_1795270480 results/ALE-Pong-v5_1795274127 --out pong.png

    Return (the 100-episode mean raw return) against env frames and against wall time, and evaluations during
    training (eval.csv) as points with their 95% interval; runs of one config over seeds as their mean with a 95%
    bootstrap band. --metrics: one run's health against wall time: return, losses,
    gradient norm, learning rate, policy lag, throughput, each role's time split, step costs, replay, drops, elite
    distances, restarts and errors."""
    from zrl.experiment import plot

    try:
        written = plot.plot(
            list(runs), out, svg, metrics, note=lambda text: click.echo(f"zrl-plot: note: {text}", err=True)
        )
    except ConfigError as err:
        _usage_error("zrl-plot", str(err))
    except OSError as err:  # --out in a folder that cannot be written
        _usage_error("zrl-plot", f"cannot write {err.filename or 'the picture'}: {err.strerror or err}")
    for path in written:
        click.echo(f"wrote {path}", err=True)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--connect",
    required=True,
    metavar="tcp://HOST:PORT",
    help="The run's gate, as the launcher printed it and wrote it to <run>/connect.txt.",
)
@click.option(
    "--keys",
    default="",
    envvar="ZRL_KEYS",
    metavar="DIR",
    help="This host's key folder (zrl-keys --client NAME on the learner's host made it). Needed unless the run "
    "listens on loopback without keys. Default: $ZRL_KEYS.",
)
@click.option(
    "--envs-per-worker",
    type=click.IntRange(min=1),
    default=None,
    help="Envs this worker steps; the run's workers.envs_per_worker, which it checks (default: the run's).",
)
@click.option("--run", "run", default="", metavar="NAME", help="Join only the run of this name (its folder's).")
@_trust_option("the config the run sends")
def worker_main(connect, keys, envs_per_worker, run, trusted) -> None:
    """Work for a run on another host: zrl-worker --connect tcp://HOST:PORT --keys DIR

    It takes the run's config from the learner's host, plays its env here and sends the frames to the run's
    ingest over TCP (zstd-compressed, CurveZMQ-encrypted). It waits and joins again, with backoff, while the
    learner is not up or restarts. Ctrl-C, SIGTERM or SIGHUP leaves the run in order. Exit 0 when stopped, 2 when the
    run refuses it (another run, a misfit) or its options are wrong."""
    from zrl.roles import remote

    host, _, port = connect.removeprefix("tcp://").rpartition(":")
    if not connect.startswith("tcp://") or not host or not port.isdigit() or not 0 < int(port) < 65536:
        _usage_error("zrl-worker", f"--connect {connect!r}: give tcp://HOST:PORT, as the run's connect.txt has it")
    from zrl.dashboard.server import is_loopback

    if not keys and not is_loopback(host.strip("[]")):
        _usage_error(
            "zrl-worker",
            f"--connect {connect}: {host} is not this host, and without --keys the frames and weights would cross "
            "the network in plaintext to whoever answers there; give --keys DIR (zrl-keys --client NAME on the "
            "learner's host makes one)",
        )
    from zrl.launch.supervise import stop_signals

    signals: list[int] = []
    for sig in stop_signals():
        signal.signal(sig, lambda signum, _frame: signals.append(signum))
    try:
        code = remote.serve(
            connect,
            keys,
            envs_per_worker,
            run,
            say=lambda text: click.echo(f"zrl-worker: {text}", err=True),
            stopping=lambda: bool(signals),
            trusted=tuple(trusted),
        )
    except ConfigError as err:
        _usage_error("zrl-worker", str(err))
    sys.exit(code)


@click.command(
    context_settings={
        "help_option_names": ["-h", "--help"],
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    }
)
@click.option(
    "--from",
    "reference",
    type=click.Choice(["ebv", "rainbow"]),
    required=True,
    help="ebv: the elite-replay platform's main.py flags (--replay_parameters included); "
    "rainbow: Rainbow-IQN Ape-X's launch_learner.py flags.",
)
@click.option(
    "--out",
    type=str,
    default=None,
    metavar="FILE",
    help="Write the run file here (never over an existing file) instead of to standard output.",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def translate_main(reference, out, args) -> None:
    """A reference platform's command line as a zrl run file:
    zrl-translate --from ebv -- --env PongNoFrameskip-v4 --lr 0.0008 > pong.toml; zrl-launch --config pong.toml

    The run file is the run the reference would make: every option, given or at the reference's default, as
    the zrl key that does the same where zrl's default differs, each after a comment naming its flags. A
    given option with no zrl equivalent is named on standard error with the reason; one the reference does
    not have is a usage error (exit 2). README.md has both translation tables."""
    from zrl.translate import translate

    try:
        text, notes = translate(reference, list(args))
    except ConfigError as err:
        _usage_error("zrl-translate", str(err))
    for line in notes:
        click.echo(f"zrl-translate: {line}", err=True)
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        with open(out, "x") as fh:
            fh.write(text)
    except FileExistsError:
        _usage_error("zrl-translate", f"--out {out}: already exists; give a new file")
    except OSError as err:
        _usage_error("zrl-translate", f"--out {out}: cannot write it ({err.strerror or err})")
    click.echo(f"zrl-translate: wrote {out}; run it with zrl-launch --config {out}", err=True)
