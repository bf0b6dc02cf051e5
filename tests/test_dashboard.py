"""The dashboard's server and view on a run folder written by the real CSV writers: what it serves agrees with the
files, it serves nothing outside the folder, it changes nothing, it needs a token off loopback, a page that goes
away costs it nothing, a flood of idle or slow connections takes no more than its cap and its deadline, and the
commands' bad input is one line and exit code 2. The real run in a real browser is
tests/test_dashboard_browser.py."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, command, refused

from zrl.agents import get as get_agent
from zrl.cli.dashboard import dashboard_main
from zrl.cli.launch import launch_main
from zrl.config import ConfigError, dumps, load
from zrl.dashboard import Dashboard, RunView
from zrl.launch.folder import LOCK_NAME
from zrl.metrics.columns import EPISODE_COLUMNS, EVAL_COLUMNS, metric_columns
from zrl.metrics.time_split import SECTIONS
from zrl.metrics.writing import CsvLog

pytestmark = pytest.mark.integration


def _metrics_row(i: int) -> dict:
    row = {
        "wall_time": f"{1.7e9 + 2 * i:.3f}",
        "elapsed_s": 2.0 * i,
        "env_frames": 4000 * i,
        "frames_per_s": 2000.0 + i,
        "learner_step": 30 * i,
        "policy_lag": 1.5,
        "sample_age_mean": 2.5,
        "replay_size": 10 * i,
        "replay_sizes": f"{10 * i} 3",
        "worker_restarts": 0,
        "mean_return_100": -20.0,
    }
    shares = {"env_step": 0.9, "inference": 0.4, "learner_step": 0.5, "learner_wait": 0.45, "broker_sample": 0.05}
    for group in SECTIONS.values():
        for section in group:
            row[f"time_{section}_s"] = 2.0 * i * shares.get(section, 0.01)
    return row


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run folder of 20 metrics rows and 150 episodes, as a launcher writes them."""
    folder = tmp_path / "ALE-Pong-v5_1700000000"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.toml").write_text(dumps(load(None, ["workers.count=2"], {})))
    metrics = CsvLog(folder / "metrics.csv", metric_columns(get_agent("vtrace")))
    for i in range(1, 21):
        metrics.write(_metrics_row(i))
    metrics.close()
    episodes = CsvLog(folder / "episodes.csv", EPISODE_COLUMNS)
    for i in range(1, 151):
        episodes.write({"episode": i, "raw_return": -21 + (i % 5), "env_frames": 500 * i, "wall_time": 1.7e9 + i / 4})
    episodes.close()
    (folder / "zrl.log").write_text(
        "2026-11-26 10:00:00,000 INFO zrl 0.1.0 run x, pid 1, config x\n"
        "2026-11-26 10:00:05,000 WARNING zrl-worker-1 exited with code -9; restarted it with the current weights\n"
    )
    (folder / "checkpoints" / "step_1.pt").write_bytes(b"weights")
    return folder


@pytest.fixture
def page(run_dir):
    dashboard = Dashboard("127.0.0.1", 0, push_interval_s=0.2)
    dashboard.serve(run_dir)
    yield dashboard
    dashboard.close()


def _get(port: int, path: str, host: str = "127.0.0.1", method: str = "GET", headers: dict | None = None):
    """One raw request (the path exactly as given: no client-side normalisation); (status, body)."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True)
        for key, value in {"Host": f"127.0.0.1:{port}", **(headers or {})}.items():
            conn.putheader(key, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_state_agrees_with_the_run_folder_files(page, run_dir):
    status, body = _get(page.port, "/api/state")
    assert status == 200
    state = json.loads(body)
    assert state["latest"]["env_frames"] == 80_000 and state["latest"]["frames_per_s"] == 2020.0
    assert state["latest"]["learner_steps_per_s"] == 15.0  # 30 steps per 2 s
    expected = sum(-21 + (i % 5) for i in range(51, 151)) / 100
    assert state["latest"]["mean_return_100"] == pytest.approx(expected)
    assert len(state["curve"]["frames"]) == 150 and state["curve"]["frames"][-1] == 75_000
    split = state["time_split"]
    assert split["roles"]["workers"]["env_step"] == pytest.approx(0.9)
    named = split["bottleneck"]
    assert (named["role"], named["section"], named["label"]) == ("workers (2)", "env_step", "env step")
    assert "waits for batches 46% of its time" in named["why"]  # 0.45 of 0.45 + 0.5 + 0.01 + 0.01
    assert state["run"]["status"] == "stopped" and state["run"]["workers"] == 2
    assert any("restarted it" in line for line in state["restarts"])
    # A row written now shows at the next read, and a half-written one does not.
    log = CsvLog(run_dir / "metrics.csv", metric_columns(get_agent("vtrace")))
    log.write(_metrics_row(21))
    log.close()
    with open(run_dir / "metrics.csv", "a") as fh:
        fh.write("1700000044.000,44,88")
    time.sleep(0.6)  # the view reads the files at most twice a second
    state = json.loads(_get(page.port, "/api/state")[1])
    assert state["latest"]["env_frames"] == 84_000


def test_evaluations_during_training_are_points_with_their_interval_and_the_last_one_is_named(page, run_dir):
    state = json.loads(_get(page.port, "/api/state")[1])
    assert state["evaluations"]["mean"] == [] and state["last_evaluation"] is None  # a run without eval.csv
    log = CsvLog(run_dir / "eval.csv", EVAL_COLUMNS)
    for i, (mean, best) in enumerate(((-20.5, 1), (-18.0, 1), (-19.0, 0)), start=1):
        row = {"wall_time": f"{1.7e9 + 12 * i:.3f}", "elapsed_s": 12 * i, "env_frames": 20_000 * i, "index": i}
        row |= {"protocol": "deepmind", "episodes": 10, "mean": mean, "ci95_low": mean - 1, "ci95_high": mean + 0.5}
        log.write(row | {"human_normalised": (mean + 20.7) / 35.6, "mean_max_q": "", "best": best})
    log.close()
    with open(run_dir / "eval.csv", "a") as fh:
        fh.write("1700000048.000,48,80000")  # a row half written: not shown until its line ends
    time.sleep(0.6)
    state = json.loads(_get(page.port, "/api/state")[1])
    e = state["evaluations"]
    assert e["frames"] == [20_000, 40_000, 60_000] and e["mean"] == [-20.5, -18.0, -19.0]
    assert e["ci95_low"] == [-21.5, -19.0, -20.0] and e["ci95_high"] == [-20.0, -17.5, -18.5]
    assert e["minutes"] == [0.2, 0.4, 0.6]  # the run started at 1.7e9 (metrics.csv: wall time less elapsed)
    last = state["last_evaluation"]
    assert (last["env_frames"], last["protocol"], last["episodes"], last["mean"]) == (60_000, "deepmind", 10, -19.0)
    assert last["human_normalised"] == pytest.approx(1.7 / 35.6) and last["mean_max_q"] is None and not last["best"]


def test_a_live_run_shows_its_processes_and_an_ended_one_its_closing_line(run_dir):
    (run_dir / LOCK_NAME).write_text(f"{os.getpid()}\n")
    view = RunView(run_dir, min_interval_s=0)
    state = view.state()
    assert state["run"]["status"] == "running"
    assert state["processes"][0]["name"] == "zrl-launch" and state["processes"][0]["pid"] == os.getpid()
    assert state["processes"][0]["rss_mb"] > 10
    time.sleep(0.2)
    assert view.state()["processes"][0]["cpu_percent"] is not None  # measured over the time between two reads
    (run_dir / LOCK_NAME).unlink()
    with open(run_dir / "zrl.log", "a") as fh:
        fh.write("2026-11-26 10:09:00,000 INFO exit 0: 80,000 env frames, 600 learner steps\n")
    state = view.state()
    assert state["run"]["status"] == "ended" and state["processes"] == []
    assert "exit code 0" in state["run"]["status_text"]


@pytest.mark.parametrize(
    "path",
    [
        "/run/../config.toml",
        "/run/../../../../etc/passwd",
        "/run/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/run/..%2f..%2f..%2fetc%2fpasswd",
        "/run/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
        "/run/%2fetc%2fpasswd",
        "/run//etc/passwd",
        "/run/checkpoints/../../outside.txt",
        "/run/..%5c..%5coutside.txt",
        "/run/outside_link.txt",
        "/run/.zrl-launch.lock",
        "/run/metrics.csv%00.png",
        "/run/%ff%fe.csv",
        "/run/" + "a" * 5000 + ".csv",
    ],
)
def test_no_path_outside_the_run_folder_is_served(page, run_dir, path):
    (run_dir.parent / "outside.txt").write_text("secret")
    (run_dir / "outside_link.txt").symlink_to(run_dir.parent / "outside.txt")
    (run_dir / LOCK_NAME).write_text("1\n")
    status, body = _get(page.port, path)
    assert status in (400, 403, 404), (path, status)
    assert b"secret" not in body and b"root:" not in body


def test_the_run_folder_own_files_are_served_but_not_checkpoints(page, run_dir):
    status, body = _get(page.port, "/run/metrics.csv")
    assert status == 200 and body == (run_dir / "metrics.csv").read_bytes()
    assert _get(page.port, "/run/%7a%72%6c.log")[0] == 200  # zrl.log, encoded
    assert _get(page.port, "/run/checkpoints/step_1.pt")[0] == 404
    assert _get(page.port, "/run/%252e%252e/config.toml")[0] == 404  # decoded once: a name, not a way up


def test_it_changes_nothing_and_refuses_other_hosts(page):
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert _get(page.port, "/api/state", method=method)[0] == 405
    assert _get(page.port, "/", headers={"Host": "evil.example:80"})[0] == 403  # DNS rebinding
    assert _get(page.port, "/", headers={"Host": f"localhost:{page.port}"})[0] == 200
    status, body = _get(page.port, "/")
    assert status == 200 and b"<title>zrl dashboard</title>" in body
    assert b"http://" not in body.replace(b"http://www.w3.org", b"") and b"https://" not in body  # no CDN
    assert _get(page.port, "/nothing")[0] == 404


def test_off_loopback_every_request_needs_the_token(run_dir):
    dashboard = Dashboard("0.0.0.0", 0)
    dashboard.serve(run_dir)
    try:
        token = dashboard.token
        assert token and len(token) >= 24 and f"?token={token}" in dashboard.url
        for path in ("/", "/api/state", "/api/stream", "/run/metrics.csv"):
            assert _get(dashboard.port, path)[0] == 403
            assert _get(dashboard.port, path + "?token=wrong" + token[5:])[0] == 403
        assert _get(dashboard.port, f"/api/state?token={token}")[0] == 200
        assert _get(dashboard.port, "/run/metrics.csv", headers={"Authorization": f"Bearer {token}"})[0] == 200
    finally:
        dashboard.close()


def test_a_port_in_use_is_a_clear_error_and_port_0_picks_a_free_one(run_dir):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--port {port}: the port is in use on 127.0.0.1"):
            Dashboard("127.0.0.1", port)
        free = Dashboard("127.0.0.1", 0)
        assert free.port not in (0, port)
        free.close()
    finally:
        taken.close()
    with pytest.raises(ConfigError, match="--port 70000"):
        Dashboard("127.0.0.1", 70000)


def _connections(port: int) -> list:
    return [c for c in psutil.Process().net_connections("tcp") if port in (c.laddr.port, c.raddr and c.raddr.port)]


def _until_data(client: socket.socket) -> None:
    """Read a stream until its first update."""
    client.settimeout(10)
    received = b""
    while b"data: {" not in received:
        chunk = client.recv(65536)
        assert chunk, f"the stream ended before its first update: {received[-300:]!r}"
        received += chunk


def test_a_page_closed_mid_stream_leaves_no_thread_or_socket(page):
    threads = set(threading.enumerate())
    clients = []
    for _ in range(3):
        client = socket.create_connection(("127.0.0.1", page.port))
        client.sendall(f"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n\r\n".encode())
        _until_data(client)
        clients.append(client)
    assert page.streams == 3 and len(set(threading.enumerate()) - threads) >= 3
    for client in clients:
        client.close()  # mid-stream, as a closed tab does
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (page.streams or set(threading.enumerate()) - threads):
        time.sleep(0.05)
    assert page.streams == 0 and not set(threading.enumerate()) - threads
    established = [c for c in _connections(page.port) if c.status != psutil.CONN_LISTEN]
    deadline = time.monotonic() + 5
    while established and time.monotonic() < deadline:
        time.sleep(0.1)
        established = [c for c in _connections(page.port) if c.status == psutil.CONN_ESTABLISHED]
    assert not established


def test_close_leaves_no_thread_and_frees_the_port(run_dir):
    before = set(threading.enumerate())
    dashboard = Dashboard("127.0.0.1", 0, push_interval_s=0.2)
    dashboard.serve(run_dir)
    client = socket.create_connection(("127.0.0.1", dashboard.port))
    client.sendall(f"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{dashboard.port}\r\n\r\n".encode())
    _until_data(client)
    idle = socket.create_connection(("127.0.0.1", dashboard.port))  # a connection that never sends a request
    dashboard.close()  # returns once every connection's thread has ended
    assert set(threading.enumerate()) <= before
    client.settimeout(5)
    while client.recv(65536):  # the stream ends: the server closed its side
        pass
    client.close()
    idle.close()
    Dashboard("127.0.0.1", dashboard.port).close()  # the port is free again


def test_zrl_dashboard_on_a_folder_that_is_not_a_run_exits_2_with_one_line(tmp_path):
    assert refused(dashboard_main, tmp_path).strip().splitlines() == [
        f"zrl-dashboard: error: {tmp_path}: not a zrl run folder (a run folder holds config.toml, metrics.csv, "
        "episodes.csv)"
    ]


def test_zrl_dashboard_serves_a_finished_run_until_sigterm(run_dir):
    import signal
    import subprocess

    proc = subprocess.Popen(
        command("zrl-dashboard", run_dir, "--port", 0), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("dashboard: http://127.0.0.1:"), line
        port = int(re.match(r"dashboard: http://127\.0\.0\.1:(\d+)/", line).group(1))
        state = json.loads(_get(port, "/api/state")[1])
        assert state["latest"]["env_frames"] == 80_000
        taken = refused(dashboard_main, run_dir, "--port", port)
        assert len(taken.strip().splitlines()) == 1 and f"--port {port}: the port is in use" in taken
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--port", "8080"], "--port goes with --dashboard"),
        (["--dashboard-host", "0.0.0.0"], "--dashboard-host goes with --dashboard"),
        (["--dashboard", "--port", "70000"], "--port 70000"),
    ],
)
def test_zrl_launch_dashboard_options_are_checked_before_anything_starts(tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    err = refused(launch_main, "--config", REPO / "config" / "smoke.toml", *args)
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "results").exists()


# -- a flood of connections: the cap, the deadline for a whole request, the token on the request line ------------


def _server_side(port: int) -> int:
    """This process's established connections accepted on ``port`` (the dashboard runs in it)."""
    return sum(c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED for c in _connections(port))


def test_an_idle_flood_holds_at_most_the_cap_and_a_page_still_answers(run_dir):
    from zrl.dashboard.server import IDLE_GRACE_S, MAX_CONNECTIONS

    dashboard = Dashboard("0.0.0.0", 0)
    dashboard.serve(run_dir)
    threads = len(threading.enumerate())
    idle = []
    try:
        for _ in range(200):
            idle.append(socket.create_connection(("127.0.0.1", dashboard.port), timeout=10))
            time.sleep(0.005)  # paced, so that a short backlog drops none (a dropped one is tried again in 1 s)
        # Meanwhile the server takes (or closes) every one of them; then the idle ones have waited past their grace,
        # and a page takes the place of one.
        until = time.monotonic() + IDLE_GRACE_S + 0.5
        while time.monotonic() < until:
            assert _server_side(dashboard.port) <= MAX_CONNECTIONS
            time.sleep(0.1)
        assert len(threading.enumerate()) <= threads + MAX_CONNECTIONS  # those hung up have ended by now
        started = time.monotonic()
        status, body = _get(dashboard.port, f"/api/state?token={dashboard.token}")
        assert status == 200 and json.loads(body)["latest"]["env_frames"] == 80_000
        assert time.monotonic() - started < 3
        assert _server_side(dashboard.port) <= MAX_CONNECTIONS
    finally:
        for sock in idle:
            sock.close()
        dashboard.close()


def _held_for(sock: socket.socket, every_s: float, limit_s: float) -> float | None:
    """Seconds until the server ended ``sock`` while it sent a byte every ``every_s``; None if it held ``limit_s``."""
    sock.settimeout(every_s)
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        try:
            sock.recv(4096)  # b"" (closed), or an answer: the request is over either way
            return time.monotonic() - started
        except TimeoutError:
            pass
        except OSError:
            return time.monotonic() - started
        try:
            sock.sendall(b"x")
        except OSError:
            return time.monotonic() - started
    return None


def test_a_slowloris_is_cut_at_the_request_deadline_and_a_stream_is_not(page, monkeypatch):
    from zrl.dashboard import server

    monkeypatch.setattr(server, "REQUEST_DEADLINE_S", 2.0)  # the rule at a shorter deadline: a shorter test
    stream = socket.create_connection(("127.0.0.1", page.port))
    stream.sendall(f"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n\r\n".encode())
    _until_data(stream)
    slow = socket.create_connection(("127.0.0.1", page.port))
    try:
        slow.sendall(b"GET / HTTP/1.1\r\nX-Slow: ")  # then a byte every half second: each read is quick
        held = _held_for(slow, every_s=0.5, limit_s=2.0 + 3)
        assert held is not None, "a request that never ends was not cut within its deadline and 3 s"
        stream.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while stream.recv(65536):  # what it sent before
                pass
        _until_data(stream)  # and an update now: the stream, open past the deadline, goes on
    finally:
        slow.close()
        stream.close()


def test_a_wrong_token_on_the_request_line_is_refused_before_any_header(run_dir):
    dashboard = Dashboard("0.0.0.0", 0)
    dashboard.serve(run_dir)
    try:
        for method in ("GET", "HEAD"):
            client = socket.create_connection(("127.0.0.1", dashboard.port), timeout=3)
            client.sendall(f"{method} /api/state?token=wrong HTTP/1.1\r\n".encode())  # and no header, ever
            answer = b""
            while chunk := client.recv(4096):
                answer += chunk
            client.close()
            assert answer.startswith(b"HTTP/1.0 403 "), answer
            assert (b"needs its token" in answer) == (method == "GET")
        # The token in a header still works, its headers sent slowly but within the deadline.
        client = socket.create_connection(("127.0.0.1", dashboard.port), timeout=5)
        client.sendall(b"GET /api/state HTTP/1.1\r\n")
        for piece in (b"Host: 127.0.0.1\r\n", f"Authorization: Bearer {dashboard.token}\r\n".encode(), b"\r\n"):
            time.sleep(0.3)
            client.sendall(piece)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
        client.close()
        assert answer.startswith(b"HTTP/1.0 200 ") and b'"env_frames": 80000' in answer
    finally:
        dashboard.close()
