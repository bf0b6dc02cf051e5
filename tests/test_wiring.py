"""The launcher's wiring and stop on their own: what Wiring makes (rings, socket folder, sockets, the roles'
RunWiring) it removes on close, also after a failed open; a role that ignores its stop is killed and reaped."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest
import zmq
from conftest import REPO, zrl_segments

from zrl import envs
from zrl.config import load
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


def test_a_process_that_ignores_its_stop_is_killed_and_reaped():
    ctx = mp.get_context("spawn")
    procs = {"zrl-test-sleeper": ctx.Process(target=time.sleep, args=(60,), name="zrl-test-sleeper")}
    procs["zrl-test-sleeper"].start()
    drained = []
    assert stop_in_order(procs, 0.3, drained.append) == ["zrl-test-sleeper"]
    assert drained[-1] == 0 and 50 in drained  # it took messages while it waited, and once more at the end
    assert kill_all(procs) == ["zrl-test-sleeper"]
    assert procs["zrl-test-sleeper"].exitcode == -9
