"""CurveZMQ: zrl-keys makes a key folder, bound sockets admit only authorized clients, and a run binds beyond
loopback only with keys."""

from __future__ import annotations

import os
import stat
import subprocess
import time

import pytest
import zmq
import zmq.auth
from conftest import REPO, command, metrics_rows, run_command

from zrl import transport
from zrl.config import ConfigError, TransportConfig

CARTPOLE = REPO / "config" / "cartpole.toml"


@pytest.fixture
def keys(tmp_path):
    folder = tmp_path / "keys"
    done = run_command("zrl-keys", folder, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"transport.curve_keys='{folder}'" in done.stdout
    return folder


@pytest.mark.e2e
def test_zrl_keys_writes_private_secrets_and_never_overwrites(tmp_path, keys):
    for name in ("server.key_secret", "client.key_secret"):
        assert stat.S_IMODE((keys / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    before = (keys / "server.key_secret").read_bytes()
    again = run_command("zrl-keys", keys, cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr
    assert (keys / "server.key_secret").read_bytes() == before


@pytest.mark.e2e
def test_bad_key_folders_name_the_file(tmp_path, keys):
    with pytest.raises(ConfigError, match="is not a folder"):
        transport.load_curve_keys(str(tmp_path / "nowhere"))
    os.chmod(keys / "client.key_secret", 0o644)
    with pytest.raises(ConfigError, match="client.key_secret can be read by other users"):
        transport.load_curve_keys(str(keys))
    os.chmod(keys / "client.key_secret", 0o600)
    good = (keys / "server.key").read_text()
    (keys / "server.key").write_text(good.replace('public-key = "', 'public-key = "abc'))  # 43 characters
    with pytest.raises(ConfigError, match="server.key holds no valid public key"):
        transport.load_curve_keys(str(keys))
    (keys / "server.key").write_text("not a key\n")
    with pytest.raises(ConfigError, match="server.key"):
        transport.load_curve_keys(str(keys))
    (keys / "server.key").write_text(good)
    (keys / "authorized" / "client.key").write_text('metadata\ncurve\n    public-key = "short"\n')
    with pytest.raises(ConfigError, match="authorized/client.key holds no valid public key"):
        transport.load_curve_keys(str(keys))
    (keys / "authorized" / "client.key").unlink()
    with pytest.raises(ConfigError, match="holds no client public key"):
        transport.load_curve_keys(str(keys))


def _delivered(sender: zmq.Socket, receiver: zmq.Socket) -> bool:
    try:
        sender.send(b"hello", flags=zmq.NOBLOCK) if sender.poll(0, zmq.POLLOUT) else None
    except zmq.Again:  # the server dropped the connection between the poll and the send: a refused handshake
        return False
    return receiver.poll(1500, zmq.POLLIN) != 0 and receiver.recv() == b"hello"


@pytest.mark.integration
def test_bound_sockets_admit_only_authorized_clients(keys):
    ctx = transport.context(TransportConfig(curve_keys=str(keys)))
    others = zmq.Context()
    socks = []
    try:
        server = transport.socket(ctx, zmq.PULL, hwm=10, bind="tcp://127.0.0.1:*")
        endpoint = server.getsockopt_string(zmq.LAST_ENDPOINT)
        socks.append(server)

        def client(public=None, secret=None, server_key=None) -> zmq.Socket:
            sock = others.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            if public is not None:
                sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = public, secret, server_key
            sock.connect(endpoint)
            socks.append(sock)
            time.sleep(0.2)
            return sock

        server_public, _ = zmq.auth.load_certificate(str(keys / "server.key"))
        assert not _delivered(client(), server)  # plain text: no handshake, nothing arrives
        rogue_public, rogue_secret = zmq.curve_keypair()
        assert not _delivered(client(rogue_public, rogue_secret, server_public), server)  # a key not authorized
        assert _delivered(transport.socket(ctx, zmq.PUSH, hwm=10, connect=endpoint), server)  # the run's client key
    finally:
        for sock in socks:
            sock.close()
        others.term()
        transport.term(ctx)
        transport.configure(TransportConfig())  # this process's later sockets are plain again


@pytest.mark.e2e
def test_a_run_binds_every_interface_only_with_keys(tmp_path, keys, no_leaks):
    refused = run_command(
        "zrl-launch",
        "--config",
        CARTPOLE,
        "--set",
        'transport.kind="tcp"',
        "--set",
        'transport.bind_host="0.0.0.0"',
        cwd=tmp_path,
    )
    assert refused.returncode == 2 and "transport.bind_host" in refused.stderr and "zrl-keys" in refused.stderr
    done = run_command(
        "zrl-launch",
        "--config",
        CARTPOLE,
        "--set",
        'transport.kind="tcp"',
        "--set",
        'transport.bind_host="0.0.0.0"',
        "--set",
        f"transport.curve_keys={str(keys)!r}",
        "--set",
        "run.max_env_frames=20000",
        "--quiet",
        cwd=tmp_path,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = metrics_rows(tmp_path)
    assert int(rows[-1]["learner_step"]) > 0 and int(rows[-1]["env_frames"]) >= 20000


@pytest.mark.e2e
def test_a_worker_that_fails_before_its_sockets_exist_still_reports_over_curve(tmp_path, keys, no_leaks):
    """The crash report travels on a socket made after the failure: it must use the keys too, or the
    launcher's CURVE server drops it and the traceback is lost."""
    faults = REPO / "tests" / "faults"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(faults), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        command(
            "zrl-launch",
            "--config",
            CARTPOLE,
            "--set",
            'env.id="zrl_fault_envs:ZrlCrashInWorker-v0"',
            "--workers",
            "1",
            "--set",
            "workers.max_restarts=0",
            "--set",
            f"transport.curve_keys={str(keys)!r}",
            "--quiet",
        ),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "injected fault while a worker builds its env" in done.stderr and "zrl-worker-0's traceback:" in done.stderr
