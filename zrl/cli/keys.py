"""zrl-keys: make a folder of CurveZMQ keys, or add a remote worker host's key to one."""

from __future__ import annotations

import os

import click

from zrl.cli.common import usage_error
from zrl.config import ConfigError


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
            usage_error("zrl-keys", str(err))
        except OSError as err:
            usage_error("zrl-keys", f"cannot write the key of {client!r} into {folder} ({err.strerror or err})")
        click.echo(
            f"wrote {target}: copy that folder to the host {client!r} and give it to zrl-worker --keys there "
            f"(its secret never needs to leave that host again); revoke it by deleting "
            f"{os.path.join(folder, 'authorized', client + '.key')}"
        )
        return
    if os.path.lexists(folder):
        usage_error("zrl-keys", f"{folder} already exists; keys are never overwritten, give a new folder")
    try:
        make_curve_keys(folder)
    except OSError as err:
        usage_error("zrl-keys", f"cannot make {folder} ({err.strerror or err})")
    click.echo(
        f"wrote CurveZMQ keys to {folder}; run with --set transport.curve_keys={folder!r} "
        "(and, to bind beyond loopback, --set transport.bind_host=...)"
    )
