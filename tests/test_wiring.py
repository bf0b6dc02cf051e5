"""The launcher's wiring and stop on their own: what Wiring makes (rings, socket folder, sockets, the roles'
RunWiring) it removes on close, also after a failed open; a namespace ($ZRL_NAMESPACE) names what it makes and
sweeps only its own; a role that ignores its stop is killed and reaped."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import zmq
from conftest import REPO, reaped_pid, zrl_processes, zrl_segments

from shm import segment_name
from zrl import envs
from zrl.config import ConfigError, load
from zrl.launch import NAMESPACE_VAR, private_prefix, role_title, shm_prefix, sweep_stale
from zrl.launch import wiring as wiring_mod
from zrl.launch.supervise import kill_all, stop_in_order
from zrl.launch.wiring import Wiring

pytestmark = pytest.mark.integration


def test_wiring_removes_what_it_made(no_leaks):
    cfg = load(REPO / "config" / "smoke.toml", ["workers.count=2"])
    w = Wiring(cfg, envs.probe(cfg.env))
    try:
        w.open()
        private = Path(w.private)
        assert private.is_dir() and len(w.rings) == 2
        assert {name.lstrip("/") for name in w.roles.ring_names} <= zrl_segments()
        assert w.roles.ring_spec == w.ring_spec and w.roles.endpoints.stats.startswith("ipc://" + str(private))
        w.serve_weights().setsockopt(zmq.LINGER, 0)
        proc = w.worker(1, w.stop_flag())
        assert proc.name == "zrl-worker-1" and proc.pid is None  # made, not started
    finally:
        w.close()
    assert not private.exists() and w.rings == [] and w.sockets == []


def test_a_wiring_that_fails_to_open_leaves_nothing(monkeypatch, no_leaks):
    cfg = load(REPO / "config" / "smoke.toml", ["workers.count=2"])
    real = wiring_mod.create_rings

    def made_then_full(cfg, ring_spec, run_id, rings):
        real(cfg, ring_spec, run_id, rings)
        raise OSError("cannot create shared memory for ring 2: No space left on device")

    monkeypatch.setattr(wiring_mod, "create_rings", made_then_full)
    w = Wiring(cfg, envs.probe(cfg.env))
    with pytest.raises(OSError, match="No space left"):
        w.open()
    assert len(w.rings) == 2
    w.close()  # the launcher's finally: the rings made before the failure go too


def test_the_fork_server_lives_in_the_private_folder_and_stops_with_the_wiring(no_leaks):
    """Roles are forks of a fork server (zrl/forkserver.py): its socket is in the run's private folder (swept
    with it if the launcher is killed), and Wiring.close stops it. Pins the multiprocessing internals it uses."""
    from multiprocessing import forkserver

    cfg = load(REPO / "config" / "smoke.toml", ["workers.count=1"])
    w = Wiring(cfg, envs.probe(cfg.env))
    try:
        w.open()
        proc = w.mp_ctx.Process(target=time.sleep, args=(0.1,))
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
        server = forkserver._forkserver
        pid, address = server._forkserver_pid, server._forkserver_address
        assert pid is not None and Path(address).parent == Path(w.private)
    finally:
        w.close()
    assert server._forkserver_pid is None and not Path(address).exists()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: it exited
    assert not any(Path(tempfile.gettempdir()).glob(f"pymp-*/{Path(address).name}"))


def test_zrl_launchs_early_fork_server_is_the_one_its_wiring_uses(no_leaks):
    """zrl-launch starts the fork server before its imports (zrl/forkserver.py's begin): the Wiring it opens then
    takes over that server, its reaper and its private folder, under the run id the reaper was given; its roles
    are forks of it, and Wiring.close stops it as its own."""
    from zrl import forkserver

    cfg = load(REPO / "config" / "smoke.toml", ["workers.count=1"])
    forkserver.begin()
    started = forkserver.adopted()
    pid = forkserver._server_pid()
    assert started is not None and pid is not None and Path(started.private).is_dir()
    w = Wiring(cfg, envs.probe(cfg.env))
    try:
        w.open()
        assert forkserver.adopted() is None and forkserver._server_pid() == pid
        assert (w.run_id, w.private, w.reaper) == (started.run_id, started.private, started.reaper)
        assert all(started.run_id in name for name in w.roles.ring_names)  # the names its reaper unlinks
        proc = w.mp_ctx.Process(target=time.sleep, args=(0.1,))
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
    finally:
        w.close()
        forkserver.abandon()  # nothing left to abandon: close stopped it
    assert forkserver._server_pid() is None and not Path(started.private).exists()
    assert started.reaper.returncode is not None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_a_refused_launchs_early_fork_server_is_stopped_with_everything_it_started(no_leaks):
    """A launch refused after its fork server started (zrl-launch's preflight, a locked run folder) stops it at
    once, without waiting for its imports, with its reaper, its private folder, the resource tracker its start
    started, and multiprocessing's folder setting as it was."""
    from multiprocessing import resource_tracker

    from zrl import forkserver

    children = {c.pid for c in psutil.Process().children()}
    tempdir = mp.current_process()._config.get("tempdir")
    forkserver.begin()
    started = forkserver.adopted()
    pid = forkserver._server_pid()
    assert started is not None and pid is not None
    forkserver.abandon()
    assert forkserver.adopted() is None and forkserver._server_pid() is None
    assert not Path(started.private).exists() and started.reaper.returncode is not None
    assert mp.current_process()._config.get("tempdir") == tempdir
    if started.tracker_started:
        assert resource_tracker._resource_tracker._pid is None
    assert {c.pid for c in psutil.Process().children()} <= children


def test_the_early_fork_server_imports_no_torch():
    """zrl/forkserver.py is imported by zrl-launch before torch, so that the server's preload runs beside the
    launcher's import of it: it must not pull torch in itself."""
    code = "import sys, zrl.forkserver; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def test_a_namespace_names_what_its_wiring_makes(monkeypatch):
    monkeypatch.setenv(NAMESPACE_VAR, "lane2")
    cfg = load(REPO / "config" / "smoke.toml", ["workers.count=2"])
    w = Wiring(cfg, envs.probe(cfg.env))
    try:
        w.open()
        private = Path(w.private)
        assert private.name.startswith("zrl.lane2-") and private.is_dir()
        assert all(name.lstrip("/").startswith("zrl.lane2_") for name in w.roles.ring_names)
        assert {name.lstrip("/") for name in w.roles.ring_names} <= zrl_segments()  # the leak check sees them
    finally:
        w.close()
    assert not private.exists() and not {name.lstrip("/") for name in w.roles.ring_names} & zrl_segments()


def test_a_namespace_sweeps_only_what_its_own_dead_launches_left(monkeypatch):
    dead = reaped_pid()
    left = {}
    for ns in ("", "lane", "lane2"):  # "" is the default, as unset; "lane" is the start of "lane2"
        monkeypatch.setenv(NAMESPACE_VAR, ns)
        segment = Path("/dev/shm", segment_name(shm_prefix(), "sweeptest", dead, "ring0"))
        folder = Path(tempfile.gettempdir(), f"{private_prefix()}{dead}-sweeptest")
        segment.write_bytes(b"")
        folder.mkdir()
        left[ns] = segment, folder
    try:
        assert left["lane2"][0].name.startswith("zrl.lane2_") and left[""][0].name.startswith("zrl_")
        for ns in ("lane", "lane2"):  # lane first: its sweep must not take lane2's
            monkeypatch.setenv(NAMESPACE_VAR, ns)
            assert sweep_stale() == ([left[ns][0].name], [str(left[ns][1])], [])
        assert all(path.exists() for path in left[""])
        monkeypatch.setenv(NAMESPACE_VAR, "")
        segments, folders, _ = sweep_stale()
        assert left[""][0].name in segments and str(left[""][1]) in folders
        assert not any(path.exists() for pair in left.values() for path in pair)
    finally:
        for segment, folder in left.values():
            segment.unlink(missing_ok=True)
            if folder.exists():
                folder.rmdir()


@pytest.mark.parametrize("ours", ["", "lane2"])
def test_the_leak_check_finds_the_roles_of_its_own_namespace_and_no_others(monkeypatch, ours):
    """tests/conftest.py's zrl_processes, on real processes titled as roles by start_role in three namespaces."""
    code = "import os, time\nfrom zrl.roles.lifecycle import start_role\nstart_role('zrl-broker', os.getppid())\n"
    code += "print('ready', flush=True)\ntime.sleep(60)\n"
    procs = {}
    try:
        for ns in ("", "lane", "lane2"):
            env = {**os.environ, NAMESPACE_VAR: ns}
            procs[ns] = subprocess.Popen(
                [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
            )
        for proc in procs.values():
            assert proc.stdout.readline().strip() == "ready"
        monkeypatch.setenv(NAMESPACE_VAR, ours)
        found = {p.pid for p in zrl_processes()}
        assert procs[ours].pid in found
        assert not found & {proc.pid for ns, proc in procs.items() if ns != ours}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("bad", ["a_b", "a-b", "x" * 33, "a/b", "a.b"])
def test_a_namespace_that_cannot_name_files_is_refused(monkeypatch, bad):
    monkeypatch.setenv(NAMESPACE_VAR, bad)
    for name in (shm_prefix, private_prefix, lambda: role_title("zrl-broker")):
        with pytest.raises(ConfigError, match=f"{NAMESPACE_VAR}=.*1 to 32 letters and digits"):
            name()


def test_a_process_that_ignores_its_stop_is_killed_and_reaped():
    ctx = mp.get_context("spawn")
    procs = {"zrl-test-sleeper": ctx.Process(target=time.sleep, args=(60,), name="zrl-test-sleeper")}
    procs["zrl-test-sleeper"].start()
    drained = []
    assert stop_in_order(procs, 0.3, drained.append) == ["zrl-test-sleeper"]
    assert drained[-1] == 0 and 50 in drained  # it took messages while it waited, and once more at the end
    assert kill_all(procs) == ["zrl-test-sleeper"]
    assert procs["zrl-test-sleeper"].exitcode == -9
