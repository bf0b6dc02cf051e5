"""zrl-plot: draw runs' pictures from their CSV files."""

from __future__ import annotations

import click

from zrl.cli.common import usage_error
from zrl.config import ConfigError


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
        usage_error("zrl-plot", str(err))
    except OSError as err:  # --out in a folder that cannot be written
        usage_error("zrl-plot", f"cannot write {err.filename or 'the picture'}: {err.strerror or err}")
    for path in written:
        click.echo(f"wrote {path}", err=True)
