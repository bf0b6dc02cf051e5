"""zrl-sweep: run configs x seeds, each zrl-launch in its own run folder."""

from __future__ import annotations

import sys

import click

from zrl.cli.common import trust_option, usage_error
from zrl.config import ConfigError


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
@trust_option("a stopped run's config.toml, resumed by --resume,")
def sweep_main(sweep_file, out, resume_dir, only, retry, trusted) -> None:
    """Run configs x seeds, each zrl-launch in its own run folder: zrl-sweep config/suites/elite_vs_uniform.toml

    OUT/index.json says where each run stands (pending, running, done, failed, stopped). Ctrl-C stops the
    running runs in order; --resume OUT continues the sweep (stopped runs from their checkpoints)."""
    from zrl.experiment import sweep

    if retry and not resume_dir:
        usage_error("zrl-sweep", "--retry-failed goes with --resume DIR (a new sweep has no failed runs)")
    if sweep_file and resume_dir:
        usage_error("zrl-sweep", "give a sweep file or --resume DIR, not both (a resumed sweep reads its own copy)")
    if out and resume_dir:
        usage_error("zrl-sweep", "--out names a new sweep's folder; --resume DIR continues in DIR")
    try:
        code = sweep.start(
            sweep_file, out, resume_dir, list(only), lambda text: click.echo(text, err=True), retry, tuple(trusted)
        )
    except ConfigError as err:
        usage_error("zrl-sweep", str(err))
    sys.exit(code)
