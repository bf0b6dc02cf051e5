"""Remote workers end to end: real zrl-worker processes, in a network namespace of their own with its own address
(ip netns and a veth pair, made and removed here; root is needed, and 127.0.0.1 stands in where the machine does
not allow it), connected over TCP with CurveZMQ keys of their own to a real zrl-launch run. The run learns CartPole
to the bar of its learning test, goes on when a remote worker is killed, and leaves nothing behind."""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import signal
import subprocess
import time
import warnings

import pytest
from conftest import REPO, command, metrics_rows, run_command, start_command, wait_until

from zrl import transport

pytestmark = pytest.mark.e2e

CARTPOLE = REPO / "config" / "cartpole.toml"


@contextlib.contextmanager
def other_host():
    """``(prefix, address)``: the command prefix that runs a process in a network namespace of its own and the
    address this host has on the link to it; ``([], "127.0.0.1")`` where namespaces cannot be made here."""
    name = f"zrlt{os.getpid() % 100_000}"
    here, there = f"{name}h", f"{name}n"
    subnet = f"10.{77 + os.getpid() % 50}.{os.getpid() % 250}"
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", here, "type", "veth", "peer", "name", there],
        ["ip", "link", "set", there, "netns", name],
        ["ip", "addr", "add", f"{subnet}.1/24", "dev", here],
        ["ip", "link", "set", here, "up"],
        ["ip", "netns", "exec", name, "ip", "addr", "add", f"{subnet}.2/24", "dev", there],
        ["ip", "netns", "exec", name, "ip", "link", "set", there, "up"],
        ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
    ]
    made = False
    try:
        if shutil.which("ip") is None or os.geteuid() != 0:
            raise OSError("no ip command, or not root")
        for step in steps:
            subprocess.run(step, check=True, capture_output=True, timeout=10)
            made = True
    except (OSError, subprocess.SubprocessError) as err:
        warnings.warn(f"no network namespace here ({err}): the remote workers run on 127.0.0.1", stacklevel=1)
        _remove(name, here, made)
        yield [], "127.0.0.1"
        return
    try:
        yield ["ip", "netns", "exec", name], f"{subnet}.1"
    finally:
        _remove(name, here, made)


def _remove(name: str, link: str, made: bool) -> None:
    if made:
        subprocess.run(["ip", "link", "delete", link], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10)


def _worker(prefix: list[str], *args: str, keys, cwd) -> subprocess.Popen:
    env = {**os.environ, "ZRL_KEYS": str(keys)}
    return subprocess.Popen(prefix + command("zrl-worker", *args), cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def test_remote_workers_on_another_address_learn_cartpole_and_the_run_survives_losing_one(tmp_path, no_leaks):
    keys = tmp_path / "keys"
    assert run_command("zrl-keys", keys, cwd=tmp_path).returncode == 0
    made = run_command("zrl-keys", keys, "--client", "hostb", cwd=tmp_path)
    assert made.returncode == 0 and "authorized/hostb.key" in made.stdout, made.stderr
    client_keys = keys / "clients" / "hostb"
    (gate,) = transport.free_ports("127.0.0.1", 1)  # fixed, so that a worker can be started before the run
    with other_host() as (prefix, address):
        early = _worker(prefix, "--connect", f"tcp://{address}:{gate}", keys=client_keys, cwd=tmp_path)
        workers = [early]
        try:
            # started before the learner is up: it says so and tries again
            first_line = early.stderr.readline()
            assert f"tcp://{address}:{gate}: no answer within 5 s (try 1)" in first_line, first_line
            launch = start_command(
                "zrl-launch",
                *("--config", CARTPOLE, "--workers", "1", "--quiet"),
                *("--set", "workers.remote=2"),
                *("--set", f"transport.curve_keys={str(keys)!r}"),
                *("--set", 'transport.bind_host="0.0.0.0"'),
                *("--set", f"transport.public_host={address!r}"),
                *("--set", f"transport.remote_port={gate}"),
                *("--set", "run.heartbeat_timeout_s=5"),  # a lost remote worker's slot is freed after 5 s
                # long enough that the slot is freed before the run ends, on a fast machine too (100k took 14 s)
                *("--set", "run.max_env_frames=300_000"),
                cwd=tmp_path,
            )
            connect = wait_until(lambda: list((tmp_path / "results").glob("*/connect.txt")), 60, "connect.txt")[0]
            line = connect.read_text().strip()
            run_name = connect.parent.name
            assert line == (
                f'zrl-worker --connect tcp://{address}:{gate} --keys "$ZRL_KEYS" --envs-per-worker 4 --run {run_name}'
            )
            late = _worker(
                prefix, *line.split()[1:3], "--envs-per-worker", "4", "--run", run_name, keys=client_keys, cwd=tmp_path
            )
            workers.append(late)
            frames = lambda: int((metrics_rows(tmp_path) or [{}])[-1].get("env_frames") or 0)  # noqa: E731
            wait_until(lambda: frames() >= 20_000, 120, "20,000 env frames")
            early.kill()  # a remote host lost: the run goes on, and frees its slot when its heartbeats stop
            log = connect.parent / "zrl.log"
            wait_until(lambda: "sent nothing for" in log.read_text() or launch.poll() is not None, 120, "a freed slot")
            out, err = launch.communicate(timeout=300)
            assert launch.returncode == 0, err[-3000:]
        finally:
            results = [_stop(w) for w in workers]
    run_dir = connect.parent
    code, err = results[1]
    assert code == 0, err[-2000:]  # SIGTERM: it leaves in order
    assert f"joined run {run_name} as zrl-worker-" in err
    log = (run_dir / "zrl.log").read_text()
    assert "hostb on" in log and log.count("joined as zrl-worker-") >= 2, results[0][1] + "\n----\n" + err
    assert "sent nothing for" in log  # the killed worker's slot, freed
    with open(run_dir / "episodes.csv") as fh:
        episodes = list(csv.DictReader(fh))
    by_worker = {w: sum(1 for e in episodes if e["worker_id"] == w) for w in ("0", "1", "2")}
    assert by_worker["1"] > 0 and by_worker["2"] > 0, by_worker  # both remote slots played
    returns = [float(e["raw_return"]) for e in episodes]
    last_20 = sum(returns[-20:]) / 20
    assert last_20 >= 475, f"mean return of the last 20 episodes is {last_20:.1f} (tests/test_learning.py's bar)"
    final = metrics_rows(tmp_path)[-1]
    assert int(final["remote_frames"]) > 0 and int(final["remote_refused"]) == 0
    assert int(final["remote_auth_refused"]) == 0 and int(final["remote_joins"]) >= 2


def test_zrl_worker_says_what_is_wrong(tmp_path):
    bad = run_command("zrl-worker", "--connect", "localhost:5555", cwd=tmp_path)
    assert bad.returncode == 2 and "give tcp://HOST:PORT" in bad.stderr and "Traceback" not in bad.stderr
    nokeys = run_command("zrl-worker", "--connect", "tcp://127.0.0.1:9", "--keys", tmp_path / "nowhere", cwd=tmp_path)
    assert nokeys.returncode == 2 and "nowhere is not a folder" in nokeys.stderr and "Traceback" not in nokeys.stderr
    # nobody listens: it says so within seconds, retrying, and a SIGTERM ends it with 0
    (port,) = transport.free_ports("127.0.0.1", 1)
    proc = subprocess.Popen(
        command("zrl-worker", "--connect", f"tcp://127.0.0.1:{port}"), cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    started = time.monotonic()
    first = proc.stderr.readline()
    assert f"tcp://127.0.0.1:{port}: no answer within 5 s (try 1); trying again in 1 s" in first, first
    assert time.monotonic() - started < 20
    code, rest = _stop(proc)
    assert code == 0, rest
