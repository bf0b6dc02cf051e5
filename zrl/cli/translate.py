"""zrl-translate: a reference platform's command line as a zrl run file."""

from __future__ import annotations

import click

from zrl.cli.common import usage_error
from zrl.config import ConfigError


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
        usage_error("zrl-translate", str(err))
    for line in notes:
        click.echo(f"zrl-translate: {line}", err=True)
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        with open(out, "x") as fh:
            fh.write(text)
    except FileExistsError:
        usage_error("zrl-translate", f"--out {out}: already exists; give a new file")
    except OSError as err:
        usage_error("zrl-translate", f"--out {out}: cannot write it ({err.strerror or err})")
    click.echo(f"zrl-translate: wrote {out}; run it with zrl-launch --config {out}", err=True)
