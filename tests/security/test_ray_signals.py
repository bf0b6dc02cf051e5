"""Issue 38, item 7 (Ray): with --ray, the launcher's stop signals stay the launcher's, and an actor's restarts are
counted in zrl's workers.restart_window_s window alone.

A stand-in ``ray`` module (in sys.modules) does what real Ray does where it matters here: its ``init`` sets a SIGTERM
handler that raises SystemExit (ray/_private/worker.py, ``sigterm_handler``), and an actor it was told
``max_restarts=N`` comes back from its first N deaths only (-1: from every one). The launcher's real Supervisor sets
the handlers, and a real SIGTERM goes to this process. The cluster end of both is tests/test_ray.py."""

from __future__ import annotations

import os
import signal
import sys
import types

import pytest
from conftest import make_config

from zrl.launch import ray_workers
from zrl.launch.console import Console
from zrl.launch.supervise import STOP_SIGNALS, Supervisor

pytestmark = pytest.mark.unit


class RayError(Exception):
    pass


class RayActorError(RayError):
    pass


class Ref:
    """An ObjectRef: pending until its actor's call ends, with a value or the actor's death."""

    def __init__(self, value=None, error: Exception | None = None, done: bool = True) -> None:
        self.value, self.error, self.done = value, error, done


class Actor:
    def __init__(self, options: dict) -> None:
        self.options = options
        self.deaths = 0
        self.alive = True
        self.killed_for_good = False
        self.call: Ref | None = None  # the running loop
        self.where = types.SimpleNamespace(remote=lambda: Ref(("node-a", "host", 1234)))
        self.run = types.SimpleNamespace(remote=self._run)
        self.stop = types.SimpleNamespace(remote=lambda: Ref())

    def _run(self, *args) -> Ref:
        if not self.alive:
            return Ref(error=RayActorError("The actor died: it is out of restarts"))
        self.call = Ref(done=False)
        return self.call

    def die(self) -> None:
        """Its process is killed (an OOM killer, a lost node): the running call ends, and Ray brings it back if its
        max_restarts allows."""
        self.deaths += 1
        limit = self.options["max_restarts"]
        self.alive = limit == -1 or self.deaths <= limit
        if self.call is not None:
            self.call.done, self.call.error, self.call = True, RayActorError("The actor died unexpectedly"), None


def fake_ray(monkeypatch) -> types.ModuleType:
    ray = types.ModuleType("ray")
    ray.actors = []
    ray.killed = []

    def init(**kwargs) -> None:
        def sigterm_handler(signum, frame):  # as ray.init sets it
            sys.exit(signum)

        signal.signal(signal.SIGTERM, sigterm_handler)

    def remote(cls):
        def options(**kw):
            def make():
                actor = Actor(kw)
                ray.actors.append(actor)
                return actor

            return types.SimpleNamespace(remote=make)

        return types.SimpleNamespace(options=options)

    def kill(actor, no_restart=True):
        ray.killed.append(actor)
        actor.alive, actor.killed_for_good = False, no_restart

    def get(ref):
        if ref.error is not None:
            raise ref.error
        return ref.value

    ray.init, ray.remote, ray.kill, ray.get, ray.shutdown = init, remote, kill, get, lambda: None
    ray.wait = lambda refs, num_returns=1, timeout=None: ([r for r in refs if r.done], [r for r in refs if not r.done])
    ray.nodes = lambda: [{"NodeID": "node-a", "Alive": True, "NodeManagerAddress": "127.0.0.1"}]
    ray.get_runtime_context = lambda: types.SimpleNamespace(get_node_id=lambda: "node-a")
    ray.exceptions = types.SimpleNamespace(RayError=RayError, RayActorError=RayActorError)
    util = types.ModuleType("ray.util")
    util.get_node_ip_address = lambda: "127.0.0.1"
    strategies = types.ModuleType("ray.util.scheduling_strategies")
    strategies.NodeAffinitySchedulingStrategy = lambda node, soft: (node, soft)
    util.scheduling_strategies = strategies
    ray.util = util
    for name, module in (("ray", ray), ("ray.util", util), ("ray.util.scheduling_strategies", strategies)):
        monkeypatch.setitem(sys.modules, name, module)
    return ray


def test_joining_ray_leaves_every_stop_signal_with_the_launchers_supervisor(monkeypatch):
    fake_ray(monkeypatch)
    cfg = make_config(workers={"remote": 1})
    sup = Supervisor(cfg, Console(quiet=True), lambda i, start: None)
    sup.catch_signals()  # as Launcher.run does, before it joins the cluster
    try:
        workers = ray_workers.RayWorkers(cfg, "auto", "", "run", say=lambda text: None)
        workers.join()
        handlers = {signal.Signals(s).name: signal.getsignal(s) for s in STOP_SIGNALS}
        assert handlers == {signal.Signals(s).name: sup._on_signal for s in STOP_SIGNALS}
        os.kill(os.getpid(), signal.SIGTERM)  # a batch scheduler's stop: a request the launcher's loop sees
        assert sup.signal_code() == 143
        workers.close()
    finally:
        sup.restore_signals()


def test_an_actors_restarts_count_in_zrls_window_alone(monkeypatch):
    ray = fake_ray(monkeypatch)
    clock = [1000.0]
    monkeypatch.setattr(ray_workers, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    cfg = make_config(workers={"remote": 1, "max_restarts": 2, "restart_window_s": 60.0})
    workers = ray_workers.RayWorkers(cfg, "auto", "", "run", say=lambda text: None)
    workers.join()
    workers.place(5555)
    (actor,) = ray.actors

    def dies_and_comes_back(after_s: float) -> None:
        clock[0] += after_s
        actor.die()
        workers.check()  # the death, counted
        clock[0] += ray_workers.RETRY_AFTER_S
        workers.check()  # the loop again, in the restarted actor
        workers.check()

    # Four deaths a window apart: never more than one within workers.restart_window_s, so each is a restart, also
    # past workers.max_restarts deaths in all
    for _ in range(4):
        dies_and_comes_back(61.0)
    assert actor.alive and actor.call is not None and 0 in workers.calls, (
        f"after {actor.deaths} deaths a window apart the actor is gone (Ray was told "
        f"max_restarts={actor.options['max_restarts']}); zrl counted {workers.restarts} restarts"
    )
    assert workers.restarts == 4 and ray.killed == []
    # Three within the window: the third is one more than workers.max_restarts, and zrl ends the actor for good
    dies_and_comes_back(61.0)
    dies_and_comes_back(1.0)
    clock[0] += 1.0
    actor.die()
    workers.check()
    assert ray.killed == [actor] and actor.killed_for_good and 0 not in workers.calls
    assert workers.restarts == 6
    assert actor.options["max_restarts"] == -1  # Ray's own count never decides
    workers.close()
    # workers.max_restarts = 0: no restart in Ray either (one it made would only be killed)
    never = ray_workers.RayWorkers(make_config(workers={"remote": 1, "max_restarts": 0}), "auto", "", "run", say=str)
    never.join()
    never.place(5555)
    assert ray.actors[-1].options["max_restarts"] == 0
    never.close()
