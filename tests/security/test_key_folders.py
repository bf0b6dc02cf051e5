"""Issue 38, item 6: a key folder is checked for its owner and for symbolic links, not only for mode bits.

``authorized/`` linked to another folder (someone else's 0700 folder passed the mode check) would let whoever
writes there admit themselves; a secret key that is a link, or another user's, is not this run's secret."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import REPO, refused

from zrl import transport
from zrl.cli.launch import launch_main
from zrl.config import ConfigError

pytestmark = pytest.mark.integration


@pytest.fixture
def keys(tmp_path):
    folder = tmp_path / "keys"
    transport.make_curve_keys(str(folder))
    transport.load_curve_keys(str(folder))  # what zrl-keys makes passes, whatever the umask
    return folder


def test_a_linked_authorized_folder_is_refused_and_the_launch_says_so(tmp_path, keys):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(keys / "authorized", elsewhere)
    shutil.rmtree(keys / "authorized")
    (keys / "authorized").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="authorized is a symbolic link"):
        transport.load_curve_keys(str(keys))
    err = refused(
        launch_main, "--config", REPO / "config" / "cartpole.toml", "--set", f"transport.curve_keys={keys}",
        "--set", "transport.kind=tcp",
    )  # fmt: skip
    assert "authorized is a symbolic link" in err and "transport.curve_keys" in err


def test_a_linked_secret_or_client_key_is_refused(tmp_path, keys):
    secret = keys / "server.key_secret"
    moved = tmp_path / "server.key_secret"
    secret.rename(moved)
    secret.symlink_to(moved)
    with pytest.raises(ConfigError, match="server.key_secret is a symbolic link"):
        transport.load_curve_keys(str(keys))
    secret.unlink()
    moved.rename(secret)
    linked = keys / "authorized" / "other.key"
    linked.symlink_to(keys / "client.key")
    with pytest.raises(ConfigError, match="other.key is a symbolic link"):
        transport.load_curve_keys(str(keys))
    assert "other" not in transport.AuthorizedKeys(str(keys / "authorized")).names.values()  # a server admits none


def test_a_group_writable_authorized_key_is_refused(keys):
    os.chmod(keys / "authorized" / "client.key", 0o664)
    with pytest.raises(ConfigError, match="client.key can be written by other users"):
        transport.load_curve_keys(str(keys))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_key_folder_or_authorized_key_is_refused(keys):
    os.chown(keys / "authorized" / "client.key", 65534, 65534)
    with pytest.raises(ConfigError, match="client.key belongs to uid 65534, not to this user"):
        transport.load_curve_keys(str(keys))
    assert transport.AuthorizedKeys(str(keys / "authorized")).names == {}
    os.chown(keys / "authorized" / "client.key", 0, 0)
    os.chown(keys, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to uid 65534"):
        transport.load_curve_keys(str(keys))


def test_a_failed_read_of_the_authorized_folder_revokes_no_one(keys, monkeypatch):
    """An ingest out of files (a flood) cannot open the key files: that is no revocation. Every joined worker would
    otherwise be shut out, and every join refused for good."""
    import zmq.auth

    authorized = transport.AuthorizedKeys(str(keys / "authorized"), every_s=0.0)
    before = dict(authorized.names)
    assert list(before.values()) == ["client"]

    def out_of_files(path):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(zmq.auth, "load_certificate", out_of_files)
    assert authorized.reload() == before
    monkeypatch.undo()
    (keys / "authorized" / "client.key").unlink()
    assert authorized.reload() == {}  # a key deleted is revoked, as before


def test_a_resumed_folders_own_keys_are_replaced_never_trusted(tmp_path):
    """Whoever made a run folder knows the secrets of the keys in it, and may have authorized a key of their own:
    a launch makes the run's keys anew."""
    from conftest import make_config

    from zrl.launch.run_keys import run_keys

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    transport.make_curve_keys(str(run_dir / "keys"))
    theirs = run_dir / "keys" / "authorized" / "theirs.key"
    shutil.copy(run_dir / "keys" / "client.key", theirs)
    old_secret = (run_dir / "keys" / "server.key_secret").read_bytes()
    cfg, local, warning = run_keys(make_config(workers={"remote": 1}), run_dir)
    assert not warning and local == str((run_dir / "keys" / "clients" / "local").resolve())
    assert cfg.transport.curve_keys == str((run_dir / "keys").resolve())
    assert sorted(p.name for p in (run_dir / "keys" / "authorized").iterdir()) == ["client.key", "local.key"]
    assert (run_dir / "keys" / "server.key_secret").read_bytes() != old_secret
    (run_dir / "keys").rename(tmp_path / "moved")
    (run_dir / "keys").symlink_to(tmp_path / "moved")
    with pytest.raises(ConfigError, match="not a folder of this run's keys"):
        run_keys(make_config(workers={"remote": 1}), run_dir)
    assert (tmp_path / "moved" / "server.key").exists()  # a link is refused, and nothing behind it removed
