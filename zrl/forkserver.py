"""The fork server a pipeline's roles are forked from, and the reaper and private socket folder it lives in. A
Wiring (zrl/launch/wiring.py) starts them when it opens; zrl-launch starts them earlier, as soon as its config has
loaded (``begin``), so that the server's preload runs beside the launcher's own checks rather than after them,
and the Wiring it opens then takes them over (``adopt``). What the launcher must know that only torch can tell
(the network's size, a checkpoint's fit), it asks a child of the server (``ask``): zrl-launch never imports
torch. This module imports no torch, and nothing that does.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import shm
from zrl import transport
from zrl.errors import ConfigError
from zrl.namespace import private_prefix, role_title, shm_prefix

# What the fork server imports once, so that no role pays for it (torch alone is about a second of CPU).
# torch._dynamo: torch imports it the first time an optimiser is built (its _disable_dynamo decorator), seconds of
# CPU that the learner would otherwise spend before its first weights (perf/README.md, "Starting a run").
FORKSERVER_PRELOAD = [
    "torch",
    "torch._dynamo",
    "zrl.envs",
    "zrl.models",
    "zrl.roles.broker",
    "zrl.roles.learner",
    "zrl.roles.worker",
    "zrl.roles.ingest",
    "zrl.roles.evaluator",
    "zrl.launch.network",  # what the launcher asks of a child of this server (ask)
]


ASK_NAME = "zrl-ask"  # ask's child, in ps and top


def role_context() -> mp.context.ForkServerContext:
    """Where the role processes come from: a fork server, started with the first role, that imports
    FORKSERVER_PRELOAD once; each role is a fork of it, running in a fraction of a second where a freshly spawned
    interpreter spends about a second of CPU on its imports (more than half of a short run's start, and of a
    restarted worker's gap). The fork server only imports: it runs no torch op, opens no socket of zrl's and holds
    no CUDA context, so each fork starts as clean as a spawned process. Its roles hand back their copy of its
    lifeline (zrl/roles/lifecycle.py), so that it exits when its launcher does, and its roles then get SIGTERM, their
    parent-death signal. It is one per process, so a process has one Wiring open at a time; Wiring.open starts it
    (with its socket in the Wiring's private folder), or takes over the one zrl-launch started early (``begin``),
    and Wiring.close stops it."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    return ctx


def run_role(ref: str, *args) -> None:
    """A role process's target: ``ref`` ("module:function", a module of FORKSERVER_PRELOAD, imported in the fork
    server already) run with ``args``."""
    module, _, name = ref.partition(":")
    getattr(importlib.import_module(module), name)(*args)


_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int) -> None:
    """Have the kernel send this process ``sig`` when its parent dies (Linux's PR_SET_PDEATHSIG; elsewhere
    nothing). The caller checks os.getppid() afterwards: a parent that died before this call sent nothing."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


def let_the_fork_server_go() -> None:
    """Close this process's copy of its fork server's lifeline. multiprocessing hands every fork a copy (so that
    a fork could start processes of its own), and the fork server runs until the last copy closes: kept, the
    roles would keep it alive, and it them, after their launcher died. Closed, the launcher's copy is the last."""
    from multiprocessing import forkserver

    server: Any = getattr(forkserver, "_forkserver", None)  # CPython's private state: typeshed leaves it out
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None


def ask(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a module-level function) in a child of this process's fork server, which has torch and the
    roles imported, so that this process need not import them: its return value, or the exception it raised (a
    ConfigError, CheckpointError or OSError as itself, anything else as a RuntimeError with its traceback, as is
    a child that died without answering). In this process when no fork server runs (``begin`` failed, or none
    was begun). A Ctrl-C or a signal while it waits kills the child at once; the child dies with the server too."""
    if _server_pid() is None:
        return fn(*args)
    ctx = role_context()
    reply, child_end = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_answer, args=(child_end, fn, args), name=ASK_NAME, daemon=True)
    answered = False
    try:
        child.start()
        child_end.close()
        kind, value = reply.recv()
        answered = True
    except EOFError:
        raise RuntimeError(
            f"{fn.__qualname__}: the child of the fork server that ran it died without an answer"
        ) from None
    finally:
        reply.close()
        child_end.close()
        if not answered and child.pid is not None:
            child.kill()
        if child.pid is not None:
            child.join()
    if kind == "config":
        raise ConfigError(*value)
    if kind == "raised":
        raise value
    if kind == "failed":
        raise RuntimeError(f"{fn.__qualname__} failed in a child of the fork server:\n{value}")
    return value


def _answer(reply, fn: Callable[..., Any], args: tuple) -> None:
    """``ask``'s child: runs ``fn`` once and sends what came of it (a ConfigError's message and key, since its
    pickle keeps the message only). It dies with its fork server (SIGKILL: it ignores the stop signals, as the
    server does), which exits with its launcher."""
    from zrl.checkpoint import CheckpointError

    parent = os.getppid()
    let_the_fork_server_go()
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent:  # the server died before the signal was set
        os._exit(1)
    with contextlib.suppress(ImportError):
        import setproctitle

        setproctitle.setproctitle(role_title(ASK_NAME))
    try:
        answer = ("value", fn(*args))
    except ConfigError as err:
        answer = ("config", (str(err), err.key))
    except (CheckpointError, OSError) as err:
        answer = ("raised", err)
    except Exception:
        answer = ("failed", traceback.format_exc())
    with contextlib.suppress(OSError):  # the launcher stopped waiting: nobody to tell
        reply.send(answer)
    reply.close()


def new_run_id() -> str:
    """A pipeline's id in its segment and folder names: the time, and 64 random bits, so that no other local user
    can guess a name before it is made and take it first (every name is created exclusively, and a taken one would
    stop the launch)."""
    return f"{int(time.time())}{os.urandom(8).hex()}"


def private_folder(run_id: str) -> str:
    """The path of a pipeline's private socket folder: this process's pid, so that a later launch sweeps it if
    this process dies, and the namespace's prefix, so that only its own namespace's launches do."""
    return os.path.join(tempfile.gettempdir(), f"{private_prefix()}{os.getpid()}-{run_id}")


def fork_server_folder(folder: str | None) -> str | None:
    """Have multiprocessing put its files (the fork server's socket) in ``folder`` rather than a /tmp/pymp-*
    folder of its own that a launcher killed by SIGKILL would leave behind; the folder it used before."""
    process: Any = mp.current_process()  # its _config is CPython's private state, which typeshed leaves out
    config = process._config
    before = config.get("tempdir")
    if folder is None:
        config.pop("tempdir", None)
    else:
        config["tempdir"] = folder
    return before


def start_fork_server() -> None:
    """Start this process's fork server now, with SIGINT, SIGTERM and SIGHUP ignored, which it and its roles keep
    until start_role sets their own: a Ctrl-C, a SIGTERM or a hang-up to the process group is the launcher's to handle, and a fork
    server killed by one would look to multiprocessing as if every role had died. It finds the zrl this process
    runs first on its path (a checkout run through bin/, beside an installed zrl, must not fork roles of the
    other), and not the working folder, which ``python -c`` would put first on its path for its preload: a launch
    from inside a run folder must not import that folder's files in place of torch or zrl. Returns once the fork
    server is spawned; its imports go on, and the first role's start waits for them with signals handled as usual."""
    from multiprocessing import forkserver

    role_context()  # the preload list is the forkserver module's, set before the server starts
    root = str(Path(__file__).resolve().parents[1])  # the folder that holds zrl/ and shm/
    before = {name: os.environ.get(name) for name in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, before["PYTHONPATH"]]))
    os.environ["PYTHONSAFEPATH"] = "1"  # no working folder on the server's sys.path
    handlers = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        forkserver.ensure_running()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def stop_fork_server() -> None:
    """Stop this process's fork server if one runs (its roles are down), so that the next Wiring starts its own."""
    _fork_server()._stop()


def _fork_server() -> Any:
    """This process's multiprocessing fork server: what zrl reads and calls of it (_forkserver_pid, _stop) is
    CPython's private state, which typeshed leaves out."""
    from multiprocessing import forkserver

    return forkserver._forkserver


def _resource_tracker() -> Any:
    """This process's multiprocessing resource tracker, for its private _pid and _stop, as ``_fork_server``."""
    from multiprocessing import resource_tracker

    return resource_tracker._resource_tracker


def start_reaper(run_id: str, private: str) -> subprocess.Popen:
    """This process's reaper (shm/reaper.py) for one Wiring: when this process is gone, however it went (SIGKILL
    and the OOM killer included), it unlinks the run's segments and removes its socket folder within moments,
    rather than at the next launch's sweep. Chosen over the last role unlinking (roles die in any order, and a
    restarted worker needs the names) and over unlinking once every role attached (restarts and remote slots would
    need the mappings handed over by file descriptor): a pipe's end closing is the one event every way of dying
    gives. It runs in a session of its own, so that a kill of the launcher's process group spares it."""
    script = Path(shm.__file__).with_name("reaper.py")
    return subprocess.Popen(
        [sys.executable, "-I", str(script), str(os.getpid()), shm_prefix(), run_id, private],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def close_reaper(reaper: subprocess.Popen) -> None:
    """Let a reaper go once its pipeline is torn down: it finds nothing left, and exits."""
    assert reaper.stdin is not None  # started with stdin=PIPE
    reaper.stdin.close()
    try:
        reaper.wait(10)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait(5)


@dataclasses.dataclass
class Started:
    """A fork server started ahead of its Wiring, with the reaper and private folder it lives in."""

    run_id: str
    private: str
    reaper: subprocess.Popen
    tempdir_before: str | None
    tracker_started: bool  # multiprocessing's resource tracker was started with the server


_started: Started | None = None  # begin's, until a Wiring adopts it or abandon stops it


def _server_pid() -> int | None:
    return _fork_server()._forkserver_pid


def begin() -> None:
    """Start this process's reaper, private socket folder and fork server now, for the Wiring it opens next. Best
    effort: nothing happens if they are started already or a fork server runs (a Wiring is open), and a failure
    (no room in /tmp) leaves nothing, for Wiring.open to meet and report as it always has. The reaper comes first:
    whatever is made next, it removes if this process dies."""
    global _started
    if _started is not None or _server_pid() is not None:
        return
    tracker_before = _resource_tracker()._pid is not None
    run_id = new_run_id()
    path = private_folder(run_id)
    try:
        reaper = start_reaper(run_id, path)
    except OSError:
        return
    try:
        private = transport.make_private_dir(*os.path.split(path))
    except OSError:
        close_reaper(reaper)
        return
    # recorded before the server starts, so that a signal in between still leaves abandon() something to stop
    _started = Started(run_id, private, reaper, fork_server_folder(private), not tracker_before)
    try:
        start_fork_server()
    except Exception:
        abandon()


def adopted() -> Started | None:
    """What begin started, for the Wiring that opens now; it calls ``taken()`` once it holds it, and stops it when
    it closes. None if nothing was started."""
    return _started


def taken() -> None:
    """The Wiring holds what begin started: abandon no longer stops it."""
    global _started
    _started = None


def abandon() -> None:
    """Stop what begin started if no Wiring took it (the launch was refused, or failed before its rings), at once:
    the server is killed, not asked to stop (it would finish its preload first: seconds); and the resource tracker
    its start started. A refused launch leaves no process behind, in its own process either (zrl-launch's refusals
    run in-process in tests)."""
    started = _started
    if started is None:
        return
    try:
        pid = _server_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # it has forked no role: it holds imports only
        stop_fork_server()  # reaps it and removes its socket
        if started.tracker_started:
            _resource_tracker()._stop()
    finally:
        taken()
        fork_server_folder(started.tempdir_before)
        shutil.rmtree(started.private, ignore_errors=True)
        close_reaper(started.reaper)
