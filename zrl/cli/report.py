"""zrl-report: aggregate runs over seeds and games, rliable-style."""

from __future__ import annotations

import click

from zrl.cli.common import usage_error
from zrl.config import ConfigError


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
        usage_error("zrl-report", str(err))
    click.echo(report.markdown(built), nl=False)
    if out:
        for path in report.write(built, out, svg):
            click.echo(f"wrote {path}", err=True)
