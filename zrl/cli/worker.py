"""zrl-worker: work for a run on another host."""

from __future__ import annotations

import signal
import sys

import click

from zrl.cli.common import trust_option, usage_error
from zrl.config import ConfigError


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
@trust_option("the config the run sends")
def worker_main(connect, keys, envs_per_worker, run, trusted) -> None:
    """Work for a run on another host: zrl-worker --connect tcp://HOST:PORT --keys DIR

    It takes the run's config from the learner's host, plays its env here and sends the frames to the run's
    ingest over TCP (zstd-compressed, CurveZMQ-encrypted). It waits and joins again, with backoff, while the
    learner is not up or restarts. Ctrl-C, SIGTERM or SIGHUP leaves the run in order. Exit 0 when stopped, 2 when the
    run refuses it (another run, a misfit) or its options are wrong."""
    from zrl.roles import remote

    host, _, port = connect.removeprefix("tcp://").rpartition(":")
    if not connect.startswith("tcp://") or not host or not port.isdigit() or not 0 < int(port) < 65536:
        usage_error("zrl-worker", f"--connect {connect!r}: give tcp://HOST:PORT, as the run's connect.txt has it")
    from zrl.dashboard.server import is_loopback

    if not keys and not is_loopback(host.strip("[]")):
        usage_error(
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
        usage_error("zrl-worker", str(err))
    sys.exit(code)
