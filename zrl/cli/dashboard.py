"""zrl-dashboard: serve a run's page, live or finished."""

from __future__ import annotations

import signal

import click

from zrl.cli.common import checked_address, usage_error
from zrl.config import ConfigError


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
        page = Dashboard(*checked_address(host, port, "--host"))
    except ConfigError as err:
        usage_error("zrl-dashboard", str(err))
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
