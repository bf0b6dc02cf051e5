"""What several commands share: the one-line usage error (exit 2), the --trust-env-module option, and the check
of an address to serve on."""

from __future__ import annotations

import sys

import click

from zrl.config import ConfigError

EXIT_USAGE = 2


def usage_error(prog: str, message: str) -> None:
    click.echo(f"{prog}: error: {message}", err=True)
    sys.exit(EXIT_USAGE)


def trust_option(read: str, more: str = ""):
    """--trust-env-module: the one way an env.id read from data (``read``) may import its module."""
    return click.option(
        "--trust-env-module",
        "trusted",
        multiple=True,
        metavar="MODULE",
        help=f"Let the env.id of {read} import MODULE (an id MODULE:ENV registers ENV on import), which runs its "
        f"code; without it such an id is refused. Repeatable.{more}",
    )


def checked_address(host: str, port: int, host_flag: str) -> tuple[str, int]:
    """(host, port) once the host looks like an address (the port's range is the Dashboard's own check)."""
    if not host or any(c.isspace() for c in host):
        raise ConfigError(f"{host_flag} {host!r}: give an address to serve on, such as 127.0.0.1 or 0.0.0.0")
    return host, port
