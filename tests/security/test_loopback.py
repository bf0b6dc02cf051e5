"""Issue 38, item 3: loopback is not a boundary between users. A run with remote worker slots and no keys made
its gate a plaintext TCP socket on 127.0.0.1 that took any local user's Join; now it makes its own CurveZMQ keys,
private to its folder, and its gate admits only a client holding one of them."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
import zmq
from conftest import REPO, command, refused
from remote_client import Client, connect_words, keyed_dealer

from zrl import protocol
from zrl.cli.worker import worker_main

pytestmark = pytest.mark.e2e


def test_a_run_with_remote_slots_and_no_keys_makes_its_own_and_admits_no_plaintext_client(tmp_path, no_leaks):
    proc = subprocess.Popen(
        command("zrl-launch", "--config", REPO / "config" / "cartpole.toml", "--set", "workers.remote=1",
                "--set", "run.max_env_frames=100000000"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ctx = zmq.Context()
    try:
        words = connect_words(tmp_path)
        gate, keys, run_dir = words["connect"], words["keys"], Path(words["folder"])
        folder = run_dir / "keys"
        assert keys == str((folder / "clients" / "local").resolve())
        st = folder.lstat()
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
        plain = ctx.socket(zmq.DEALER)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(gate)
        join = protocol.Join(run=run_dir.name, host="stranger", pid=1, envs_per_worker=0, zrl_version="0")
        assert Client(plain).ask(join, timeout_ms=3000) is None  # no handshake without a key: no answer at all
        welcome = Client(keyed_dealer(ctx, gate, keys)).ask(join, timeout_ms=10_000)
        assert isinstance(welcome, protocol.Welcome), welcome  # the key the run names for this host gets in
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=90)
    finally:
        ctx.destroy(linger=0)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    stored = tomllib.loads((run_dir / "config.toml").read_text())["transport"]
    assert stored["curve_keys"] == ""  # the user's setting, not the keys' path: a copied folder brings its own keys


def test_zrl_worker_refuses_plaintext_to_another_host():
    err = refused(worker_main, "--connect", "tcp://10.0.0.1:5555")
    assert "10.0.0.1 is not this host" in err and "give --keys DIR" in err
