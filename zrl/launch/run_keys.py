"""A run's own CurveZMQ keys. Loopback is not a boundary between users: any local user can connect to a socket on
127.0.0.1. So a run whose sockets are TCP (``transport.kind = "tcp"``, or remote worker slots, whose gate is TCP)
and that was given no keys makes its own, in ``RUN/keys`` (mode 0700): every socket is then encrypted and admits only
the run's roles, and the gate only the keys in ``keys/authorized/``, first among them ``keys/clients/local``, which
this host's remote workers (a zrl-worker here, Ray actors on this node) use. They are made anew at each launch: a
resumed folder's are replaced, since whoever made the folder knows their secrets and may have authorized a key of
their own. ``transport.plaintext = true`` opts out, with a warning."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from zrl import transport
from zrl.config import Config, ConfigError

FOLDER = "keys"
LOCAL_CLIENT = "local"  # the client key folder for remote workers on this host: RUN/keys/clients/local


def needs_keys(cfg: Config) -> bool:
    """Whether the run has TCP sockets and was given no keys."""
    return (cfg.workers.remote > 0 or cfg.transport.kind == "tcp") and not cfg.transport.curve_keys


def run_keys(cfg: Config, run_dir: Path) -> tuple[Config, str, str]:
    """The config the run's sockets use (``transport.curve_keys`` naming the run's own keys where it needs them),
    the folder of the client key for remote workers on this host ("" for none), and a warning to say ("" for
    none). ConfigError for a key folder that fails the checks (another user's, a link)."""
    if not needs_keys(cfg):
        return cfg, "", ""
    if cfg.transport.plaintext:
        return (
            cfg,
            "",
            (
                "transport.plaintext = true: this run's TCP sockets are neither encrypted nor authenticated, and any "
                "user of this host can connect to them (send experience, take the weights); leave it false to have "
                "the run make its own keys"
            ),
        )
    folder = run_dir / FOLDER
    if folder.is_symlink() or folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: not a folder of this run's keys; remove it, and zrl-launch makes new ones")
    if folder.exists():  # a resumed run's: never trusted, replaced
        shutil.rmtree(folder)
    transport.make_curve_keys(str(folder))
    transport.make_client_keys(str(folder), LOCAL_CLIENT)
    transport.load_curve_keys(str(folder))
    local = folder / "clients" / LOCAL_CLIENT
    transport.load_client_keys(str(local), f"{FOLDER}/clients/{LOCAL_CLIENT}")
    keyed = dataclasses.replace(cfg.transport, curve_keys=str(folder.resolve()))
    return dataclasses.replace(cfg, transport=keyed), str(local.resolve()), ""
