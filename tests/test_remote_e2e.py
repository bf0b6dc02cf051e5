"""Remote workers end to end: real zrl-worker processes, in a network namespace of their own with its own address
(ip netns and a veth pair, made and removed here; root is needed, and 127.0.0.1 stands in where the machine does
not allow it), connected over TCP with CurveZMQ keys of their own to a real zrl-launch run. The run goes on when a
remote worker is killed, learns CartPole to the bar of its learning test, stops in order on Ctrl-C, and leaves
nothing behind."""

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


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60 if sig == signal.SIGINT else 20)
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
        workers, launch = [early], None
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
                # a bound, not the end: the test stops the run with Ctrl-C once it has seen what it waits for, which
                # a run of a fixed length could outrun while a late worker still starts on a loaded machine
                *("--set", "run.max_env_frames=3_000_000"),
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
            both = lambda: all(_returns_by_worker(connect.parent)[w] for w in ("1", "2"))  # noqa: E731
            wait_until(both, 180, "an episode of each remote worker", launch)
            early.kill()  # a remote host lost: the run goes on, and frees its slot when its heartbeats stop
            log = connect.parent / "zrl.log"
            wait_until(lambda: "sent nothing for" in log.read_text(), 60, "a freed slot", launch)
            # and learns on, to the bar of tests/test_learning.py, when it is stopped in order with Ctrl-C
            wait_until(lambda: _last_20(connect.parent) >= 475, 180, "a mean return of 475 over 20 episodes", launch)
            launch.send_signal(signal.SIGINT)
            _, err = launch.communicate(timeout=60)
        finally:  # the waits above and this stop fit the e2e tier's 600 s, so that a wait names what did not come
            if launch is not None and launch.poll() is None:
                _stop(launch, signal.SIGINT)
            results = [_stop(w) for w in workers]
    assert launch.returncode == 130, err[-3000:]
    run_dir = connect.parent
    code, err = results[1]
    assert code == 0, err[-2000:]  # SIGTERM: it leaves in order
    assert f"joined run {run_name} as zrl-worker-" in err
    log = (run_dir / "zrl.log").read_text()
    assert "hostb on" in log and log.count("joined as zrl-worker-") >= 2, results[0][1] + "\n----\n" + err
    assert _returns_by_worker(run_dir)["0"]  # the local worker played beside them
    final = metrics_rows(tmp_path)[-1]
    assert int(final["remote_frames"]) > 0 and int(final["remote_refused"]) == 0
    assert int(final["remote_auth_refused"]) == 0 and int(final["remote_joins"]) >= 2


def _episode_returns(run_dir) -> list[tuple[str, float]]:
    """(worker id, raw return) of each episode the run has written so far, a line still being written left out."""
    with open(run_dir / "episodes.csv") as fh:
        rows = list(csv.DictReader(fh))
    return [(row["worker_id"], float(row["raw_return"])) for row in rows if row.get("raw_return") and row["worker_id"]]


def _returns_by_worker(run_dir) -> dict[str, list[float]]:
    """The raw returns of the local worker ("0") and the two remote slots, apart."""
    played = _episode_returns(run_dir)
    return {w: [ret for who, ret in played if who == w] for w in ("0", "1", "2")}


def _last_20(run_dir) -> float:
    """The mean raw return of the run's last 20 episodes (0 before it has 20)."""
    returns = [ret for _, ret in _episode_returns(run_dir)][-20:]
    return sum(returns) / 20 if len(returns) == 20 else 0.0


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
