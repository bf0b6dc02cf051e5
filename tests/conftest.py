"""Shared test helpers: run the real commands, and check that nothing leaks."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest

from shm import segment_name
from shm.ring import Ring, RingSpec
from zrl import agents, protocol
from zrl.agents.apex_iqn.messages import Transitions
from zrl.agents.vtrace.messages import Batch, Unroll
from zrl.config import Config
from zrl.namespace import NAMESPACE_VAR, namespace, private_prefix, role_title, shm_prefix

REPO = Path(__file__).resolve().parents[1]

# The tiers (markers declared in pyproject.toml) and each one's timeout per test: the suite's one timeout policy,
# enforced by pytest-timeout. A command that a test runs has its own, shorter timeout (run_command), so that a
# hung run fails with its own output; these catch a test that hangs anywhere else. A timeout that bounds a budgeted
# run is at least 3x what the run takes in CI, so that a machine about three times slower still passes; the
# learning tier's holds the Pong test's 2400 s (tests/test_learning.py) and the minute its Ctrl-C gets.
TIER_TIMEOUT_S = {"unit": 60, "integration": 180, "e2e": 600, "learning": 4900}
BIN = REPO / "bin"
ROLE_TITLES = ("zrl-worker", "zrl-broker", "zrl-learner", "zrl-ingest", "zrl-evaluator")


# ---------------------------------------------------------------------------------------------- factories


def make_config(**sections) -> Config:
    """A Config of the defaults with some sections' fields changed: ``make_config(learner={"batch_size": 4},
    replay=[{"capacity": 8}])``. A dict changes those fields of its section; ``replay`` takes a list of dicts
    (each a ReplayConfig over the defaults); any other value replaces the field."""
    import dataclasses

    from zrl.config import ReplayConfig

    base = Config()
    changes: dict = {}
    agent_sections = dict(base.agent_sections)
    for name, value in sections.items():
        if name == "replay":
            changes[name] = tuple(ReplayConfig(**r) if isinstance(r, dict) else r for r in value)
        elif name in agent_sections:  # an agent's section ([vtrace], [apex], ...)
            agent_sections[name] = dataclasses.replace(agent_sections[name], **value)
            changes["agent_sections"] = tuple(agent_sections.items())
        elif isinstance(value, dict):
            changes[name] = dataclasses.replace(getattr(base, name), **value)
        else:
            changes[name] = value
    return dataclasses.replace(base, **changes)


def apex_broker(
    capacity: int,
    batch_size: int,
    learn_start: int,
    workers: int,
    envs_per_worker: int,
    num_actions: int,
    n_step: int,
    beta: float,
    beta_anneal_steps: int,
    seed: int,
    rings: list | None = None,
    **broker,
):
    """Ape-X's broker part on a config of these figures (``broker``: the [broker] section's range keys), with
    ``rings`` (none: what needs no ring, its replay's rules)."""
    from zrl.agents.apex_iqn.broker import ApexBroker

    cfg = make_config(
        algo="apex_iqn",
        replay=[{"type": "prioritized", "capacity": capacity, "sample_ratio": 1.0}],
        learner={"batch_size": batch_size, "replay_ratio": 0.0},
        workers={"count": workers, "envs_per_worker": envs_per_worker},
        apex={
            "learn_start": learn_start,
            "n_step": n_step,
            "importance_beta": beta,
            "beta_anneal_steps": beta_anneal_steps,
            "priority_batch": min(capacity, 32),
        },
        run={"seed": seed},
        broker=broker,
    )
    return ApexBroker(cfg, SimpleNamespace(num_actions=num_actions, frames_per_step=1), rings or [])


def unroll_message(num_envs: int = 2, length: int = 4, num_actions: int = 3, **fields) -> Unroll:
    """A well-formed Unroll from worker 0 of ``num_envs`` x ``length`` steps over ``num_actions`` actions: action 0,
    no reward, discount 1, zero logits and values, no features; ``fields`` change any of them."""
    m, t = num_envs, length
    message = dict(
        worker_id=0,
        seq=0,
        policy_version=0,
        first_frame=0,
        num_envs=m,
        length=t,
        env_frames=0,
        actions=np.zeros((m, t), np.int32),
        rewards=np.zeros((m, t), np.float32),
        discounts=np.ones((m, t), np.float32),
        behaviour_logits=np.zeros((m, t, num_actions), np.float32),
        behaviour_values=np.zeros((m, t), np.float32),
        features=np.zeros((0, 0, 0), np.float32),
    )
    return Unroll(**{**message, **fields})


def batch_message(size: int = 2, length: int = 4, num_actions: int = 3, **fields) -> Batch:
    """A well-formed Batch of ``size`` units of ``length`` steps, each worker 0's env 0 from frame 0, zeros
    elsewhere (discounts 1); ``fields`` change any of them."""
    b, t = size, length
    message = dict(
        batch_id=1,
        length=t,
        env_frames=0,
        worker_ids=np.zeros(b, np.int32),
        env_index=np.zeros(b, np.int32),
        first_frame=np.zeros(b, np.int64),
        policy_versions=np.zeros(b, np.int64),
        actions=np.zeros((b, t), np.int32),
        rewards=np.zeros((b, t), np.float32),
        discounts=np.ones((b, t), np.float32),
        behaviour_logits=np.zeros((b, t, num_actions), np.float32),
        behaviour_values=np.zeros((b, t), np.float32),
        replay_index=np.zeros(b, np.int32),
    )
    return Batch(**{**message, **fields})


def transitions_message(frames=(0, 1, 2, 3), n_step: int = 3, **fields) -> Transitions:
    """A well-formed Ape-X Transitions message from worker 0, env 0: one transition per frame number in
    ``frames``, action 0, return 0, bootstrap discount 1, s_(t+n) ``n_step`` frames on, priority 1; ``fields``
    change any of them."""
    frame = np.asarray(frames, np.int64)
    n = len(frame)
    message = dict(
        worker_id=0,
        seq=0,
        policy_version=0,
        env_frames=0,
        count=n,
        env_index=np.zeros(n, np.int32),
        frame=frame,
        action=np.zeros(n, np.int32),
        nstep_return=np.zeros(n, np.float32),
        bootstrap_discount=np.ones(n, np.float32),
        next_frame=frame + n_step,
        priority=np.ones(n, np.float32),
    )
    return Transitions(**{**message, **fields})


def worker_stats_message(**fields) -> protocol.WorkerStats:
    """A WorkerStats of worker 7, 10^9 env frames into its run; ``fields`` change any of them."""
    message = dict(
        worker_id=7,
        pid=4242,
        time=1.0,
        env_frames=10**9,
        env_steps=2 * 10**8,
        unrolls_sent=5000,
        policy_version=17,
        weight_updates=16,
        step_time_s=0.5,
        inference_time_s=0.25,
        ring_write_time_s=0.125,
        send_time_s=0.0625,
        weights_wait_time_s=0.5,
    )
    return protocol.WorkerStats(**{**message, **fields})


def broker_stats_message(**fields) -> protocol.BrokerStats:
    """A BrokerStats with two replays (16 units and none) and every count and time set; ``fields`` change any."""
    message = dict(
        pid=1,
        time=1.0,
        unrolls_received=100,
        unrolls_dropped_stale=3,
        unrolls_dropped_full=5,
        seq_gaps=2,
        decode_errors=4,
        batches_sent=10,
        replay_size=16,
        ready_batches=2,
        replay_sizes=np.array([16, 0], np.int64),
        prepare_time_s=1.5,
        feature_time_s=1.0,
        insert_time_s=0.25,
        figures={"elite_lambda": 5.5, "elite_distance_pool": 3.0, "elite_distance_min": 0.5},
    )
    return protocol.BrokerStats(**{**message, **fields})


def learner_stats_message(**fields) -> protocol.LearnerStats:
    """A LearnerStats at learner step 100 whose step figures (every agent's, and two of V-trace's own) are all 0.5;
    ``fields`` change any."""
    message = dict(
        pid=99,
        time=1.0,
        learner_step=100,
        policy_version=100,
        samples=3200,
        env_frames_trained=10**7,
        env_frames=2_500_000,
        units_dropped_torn=1,
        learning_rate=6e-4,
        step_time_s=5.0,
        gather_time_s=1.0,
        wait_time_s=2.0,
        publish_time_s=0.5,
        decode_errors=3,
        checkpoint_path="/tmp/ckpt/step_100.npz",
        **{name: 0.5 for name, stat in protocol.LearnerStats.STATS if stat.step},
        figures={"pg_loss": 0.5, "entropy_cost": 0.5},
    )
    return protocol.LearnerStats(**{**message, **fields})


@pytest.fixture
def make_rings():
    """Make real worker rings (``make_rings(count, slots, frame_shape, frame_dtype, envs)``: per slot one frame of
    each env and each env's episode step, as a worker's); every one is closed and unlinked after the test."""
    made: list[Ring] = []
    tag = os.urandom(3).hex()

    def make(count: int, slots: int, frame_shape: tuple[int, ...], frame_dtype: str = "uint8", envs: int = 2):
        spec = RingSpec(slots, {"frame": ((envs, *frame_shape), frame_dtype), "episode_step": ((envs,), "int32")})
        for _ in range(count):
            made.append(Ring.create(segment_name("zrltest", tag, os.getpid(), f"r{len(made)}"), spec))
        return made[-count:]

    yield make
    for ring in made:
        ring.close()
        ring.unlink()


# -------------------------------------------------------------------------------------- run folders, commands


def csv_rows(path: Path) -> list[dict]:
    import csv

    with open(path) as fh:
        return list(csv.DictReader(fh))


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the TensorBoard event files in ``folder``, by tag, in the order TensorBoard reads them
    (file by file, oldest first), read with TensorBoard's own loader."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, value.tensor.float_val[0]))
    return out


def assert_loadable(run_dir: Path) -> Path:
    """The run's latest checkpoint, after checking that it loads into the model its own config builds, has
    stepped, and holds finite weights."""
    import torch

    from zrl import agents, checkpoint
    from zrl.config import from_dict
    from zrl.envs import probe

    latest = checkpoint.latest(run_dir / "checkpoints")
    assert latest is not None, "no checkpoint written"
    state = checkpoint.load(latest)
    cfg = from_dict(state["config"], str(latest))
    spec = probe(cfg.env)
    model = agents.get(cfg.algo).build_model(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)
    model.load_state_dict(state["model"])
    assert state["learner_step"] > 0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    return latest


def last_metric(cwd: Path, column: str) -> int:
    """The last value of ``column`` in the metrics.csv of the one run under ``cwd/results`` (-1 while none)."""
    values = [int(float(r[column])) for r in metrics_rows(cwd) if r.get(column)]
    return values[-1] if values else -1


# What these see is scoped to this session's $ZRL_NAMESPACE (tests/run_all runs the learning tier in its own, beside
# the rest), so that a test counts what its own runs left, not what the other lane's runs hold meanwhile.


def zrl_segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"{shm_prefix()}_")}


def zrl_socket_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob(f"{private_prefix()}*")}


def zrl_processes() -> list[psutil.Process]:
    """The role processes of this namespace: a role's title ends with its namespace (zrl/namespace.py)."""
    found, mark = [], role_title("")
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or []).strip()  # a title may leave empty argv entries after it
        if any(cmd.startswith(title) for title in ROLE_TITLES):
            if cmd.endswith(mark) if mark else f"({NAMESPACE_VAR}=" not in cmd:
                found.append(proc)
    return found


def zrl_fork_servers() -> list[psutil.Process]:
    """The fork servers of this namespace's launches (zrl/forkserver.py): each exits with its launcher."""
    found, ours = [], namespace()
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "multiprocessing.forkserver import main" in cmd and "'zrl.roles.worker'" in cmd:
            try:
                if proc.environ().get(NAMESPACE_VAR, "") == ours:
                    found.append(proc)
            except psutil.Error:
                continue
    return found


def command(name: str, *args: str) -> list[str]:
    """The real command, run through its bin/ shim with this interpreter."""
    return [sys.executable, str(BIN / name), *map(str, args)]


def refused(main, *args, one_line: bool = True) -> str:
    """A zrl command's click ``main`` run in this process (click's CliRunner) on ``args``, which must refuse them as
    the installed command would: exit code 2 and one line on stderr (``one_line=False``: click's own usage error,
    its usage, a hint and the error), where an exception fails the test with its traceback, as the command would have
    printed one. A refusal sets no signal handler, leaves the environment as it was and leaves no process (one
    that comes after zrl-launch started its fork server stops it), so the test's own process is checked for each.
    Returns the stderr."""
    from click.testing import CliRunner

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    environ, children = _environ(), {c.pid for c in psutil.Process().children()}
    done = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert done.exit_code == 2, (done.stdout, done.stderr)
    assert len(done.stderr.splitlines()) == 1 or not one_line, done.stderr
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers, "the refusal set a signal handler"
    assert _environ() == environ, "the refusal changed the environment"
    assert {c.pid for c in psutil.Process().children()} <= children, "the refusal left a process running"
    return done.stderr


def _environ() -> dict[str, str]:
    """The environment, less the variable gymnasium's first import sets for good (to quiet pygame)."""
    return {k: v for k, v in os.environ.items() if k != "PYGAME_HIDE_SUPPORT_PROMPT"}


def run_command(name: str, *args: str, cwd: Path, timeout: float = 300, preexec_fn=None) -> subprocess.CompletedProcess:
    """Run a command to its end. One past ``timeout`` gets Ctrl-C first, as a user would give it, so that a hung
    run fails its test with its own output and cleans up after itself; it is killed only if that fails.
    ``preexec_fn`` runs in the child before the command (to set a resource limit)."""
    with subprocess.Popen(
        command(name, *args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            raise AssertionError(
                f"{name} ran past {timeout:g} s; its stdout ends:\n{out[-3000:]}\nits stderr ends:\n{err[-3000:]}"
            ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start_command(name: str, *args: str, cwd: Path, env: dict | None = None, prefix=()) -> subprocess.Popen:
    """Start the real command (``prefix`` before it: ``ip netns exec NAME``), its output piped as text."""
    return subprocess.Popen(
        [*prefix, *command(name, *args)], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@contextlib.contextmanager
def reaped(proc: subprocess.Popen):
    """The block that drives a command's process (``with reaped(start_command(...)) as proc:``): one still running
    when the block ends (an assertion failed, or the test never stopped it) is killed and reaped, its pipes read."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def reaped_pid() -> int:
    """The pid of a child that has exited and been reaped: no process has it (until the kernel reuses it, which it
    does only after cycling through every other pid), and it is within pid_max, as a dead launcher's is."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def wait_until(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    """``predicate()``'s first true value within ``timeout`` seconds; an AssertionError naming ``what`` if none
    came, or if ``proc`` exited first (with its stderr's end)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"{proc.args[2:4]} exited ({proc.returncode}) before {what}: {proc.stderr.read()[-3000:]}"
            )
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout:g} s")


def metrics_rows(cwd: Path) -> list[dict]:
    """The rows of the metrics.csv of the one run under ``cwd/results`` so far ([] before it exists)."""
    import csv

    found = list((cwd / "results").glob("*/metrics.csv"))
    if not found:
        return []
    with open(found[0]) as fh:
        return list(csv.DictReader(fh))


def wait_for_checkpoint(cwd: Path, timeout: float = 120) -> Path:
    """The checkpoints folder of the one run under ``cwd/results``, once it holds a periodic checkpoint."""
    import time

    from zrl import checkpoint

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        folders = list((cwd / "results").glob("*/checkpoints"))
        if folders and checkpoint.periodic(folders[0]):
            return folders[0]
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint was written within {timeout:g} s")


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves a zrl shared-memory segment, socket folder, role process or fork server behind."""
    before, folders_before = zrl_segments(), zrl_socket_folders()
    servers_before = {p.pid for p in zrl_fork_servers()}
    yield
    left = zrl_segments() - before
    folders = zrl_socket_folders() - folders_before
    procs = zrl_processes()
    for proc in procs:
        proc.kill()
    deadline = time.monotonic() + 5.0  # a killed launcher's fork server exits as its pipe closes: moments
    while (servers := [p for p in zrl_fork_servers() if p.pid not in servers_before]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in servers:
        proc.kill()
    assert not left, f"shared-memory segments left behind: {sorted(left)}"
    assert not folders, f"socket folders left behind: {sorted(folders)}"
    assert not procs, f"role processes left behind: {[p.info['cmdline'] for p in procs]}"
    assert not servers, f"fork servers left behind: {[p.info['cmdline'] for p in servers]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test has exactly one tier marker (its own, or its module's ``pytestmark``; a module whose tests
    differ marks each test instead), and runs under that tier's timeout."""
    for item in items:
        tiers = {m.name for m in item.iter_markers() if m.name in TIER_TIMEOUT_S}
        if len(tiers) != 1:
            raise pytest.UsageError(
                f"{item.nodeid}: a test takes exactly one tier marker of {', '.join(TIER_TIMEOUT_S)}, found "
                f"{', '.join(sorted(tiers)) or 'none'}; mark the test, or its module with pytestmark"
            )
        item.add_marker(pytest.mark.timeout(TIER_TIMEOUT_S[tiers.pop()]))


CPU_LOG_VAR = "ZRL_TEST_CPU_LOG"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """With ``ZRL_TEST_CPU_LOG=FILE``, append each test's CPU seconds (this process's and its reaped children's,
    setup to teardown), its wall seconds and its id to FILE: what a test costs a busy 2-core machine, which wall
    time beside another lane does not say (perf/ci_time.sh sets it)."""
    path = os.environ.get(CPU_LOG_VAR)
    if not path:
        yield
        return
    before, started = _cpu_seconds(), time.monotonic()
    yield
    cpu, wall = _cpu_seconds() - before, time.monotonic() - started
    with open(path, "a") as fh:
        fh.write(f"{cpu:.2f} {wall:.2f} {item.nodeid}\n")


def _cpu_seconds() -> float:
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.fixture
def onestep(monkeypatch):
    """The test agent under tests/onestep_agent, registered here and, through $ZRL_AGENTS and $PYTHONPATH, in every
    process a run starts; both undone after the test."""
    monkeypatch.setenv(agents.ENV_VAR, "")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
    )
    agents.register("onestep", "onestep_agent")
    assert os.environ[agents.ENV_VAR] == "onestep=onestep_agent"
    yield agents.get("onestep")
    del agents.REGISTRY["onestep"]  # the registry is one dict, which modules hold by name
