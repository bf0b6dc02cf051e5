"""zrl-launch: train an agent."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import click

from zrl import __version__
from zrl.cli.common import checked_address, trust_option, usage_error
from zrl.config import ConfigError


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
@trust_option("a resumed run's config.toml", " An id you give with --config or --set needs no flag.")
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
        usage_error("zrl-launch", str(err))
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
    return checked_address(host or "127.0.0.1", 0 if port is None else port, "--dashboard-host")
