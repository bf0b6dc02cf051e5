"""The [workers] and [transport] sections: the worker processes, their pacing and restarts, and the sockets between
the roles. Each key declared once, as in ``zrl.config.schema``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta


@dataclass(frozen=True)
class WorkersConfig:
    count: Annotated[
        int,
        Meta(
            gt=0,
            description="Worker processes (the same as --workers). One worker of 8 envs leaves the second of 2 cores to the learner (zrl-bench --suggest's pick on 2 cores); give more on a larger machine.",
        ),
    ] = 1
    envs_per_worker: Annotated[
        int,
        Meta(
            gt=0,
            description="Environments each worker steps in lock-step (the same as --envs-per-worker); 8 envs batch the worker's inference.",
        ),
    ] = 8
    ring_slots: Annotated[
        int,
        Meta(
            ge=0,
            description="Slots in each worker's frame ring (one slot = one frame of every env); 0 sizes it from the replay and batch.",
        ),
    ] = 0
    torch_threads: Annotated[int, Meta(gt=0, description="PyTorch threads for each worker's policy inference.")] = 1
    stats_interval_s: Annotated[
        float, Meta(gt=0, description="Seconds between a worker's stats messages, which double as its heartbeat.")
    ] = 1.0
    produce_ratio: Annotated[
        float,
        Meta(
            ge=0,
            description="Actor/learner balance: per weights version the workers send about this many times the fresh unrolls it trains on, then wait for new weights; above 1 is a margin a full queue drops. 0: run free.",
        ),
    ] = 1.0
    nice: Annotated[
        int,
        Meta(
            ge=0,
            le=19,
            extra={"hint": "the workers only lower their priority"},
            description="Unix nice (0-19) the workers lower their priority by, so that the learner keeps its share of the cores whatever the worker count (perf/README.md, zrl-bench --suggest).",
        ),
    ] = 10
    max_weights_wait_s: Annotated[
        float,
        Meta(
            gt=0,
            description="The longest a throttled worker waits for new weights before it sends another unroll anyway.",
        ),
    ] = 2.0
    max_restarts: Annotated[
        int,
        Meta(
            ge=0,
            extra={"hint": "0: a worker that dies stops the run"},
            description="A dead or hung worker is restarted; one that needs more than this many restarts within workers.restart_window_s stops the run with its traceback. 0: never restart.",
        ),
    ] = 3
    restart_window_s: Annotated[
        float, Meta(gt=0, description="The window over which workers.max_restarts counts one worker's restarts.")
    ] = 300.0
    remote: Annotated[
        int,
        Meta(
            ge=0,
            description="Workers on other hosts the run admits beside its local ones (zrl-worker --connect, or zrl-launch --ray); the ingest role writes their frames into rings here. 0: none, and no ingest.",
        ),
    ] = 0
    policy: Annotated[
        str,
        Meta(
            description="How workers act: network (the learner's policy) or uniform (uniformly random actions without running the network; what zrl-bench sampling uses to measure the data path alone)."
        ),
    ] = "network"


@dataclass(frozen=True)
class TransportConfig:
    kind: Annotated[str, Meta(description="ipc (unix sockets in the run's private folder) or tcp.")] = "ipc"
    bind_host: Annotated[
        str,
        Meta(
            description="Address tcp sockets bind to: 127.0.0.1, or any other address (0.0.0.0: every interface) when curve_keys is set."
        ),
    ] = "127.0.0.1"
    curve_keys: Annotated[
        str,
        Meta(
            description="Folder of CurveZMQ keys from zrl-keys: every socket is encrypted, and bound ones admit only authorized/ keys; needed beyond loopback. Empty: a run with TCP sockets makes its own in RUN/keys."
        ),
    ] = ""
    plaintext: Annotated[
        bool,
        Meta(
            description="true: a run with TCP sockets and no curve_keys makes no keys, and its loopback sockets are open to any user of this host (warned at start). Beyond loopback keys are always needed."
        ),
    ] = False
    remote_port: Annotated[
        int,
        Meta(
            ge=0,
            le=65534,
            description="The tcp port on bind_host where remote workers (workers.remote) connect; their weights go out on the next port. 0: ports the OS picks, written to the run's connect.txt (fix one for a firewall).",
        ),
    ] = 0
    public_host: Annotated[
        str,
        Meta(
            description="The host name remote workers use to reach this one, in the zrl-worker line the launcher prints and writes to connect.txt. Empty: bind_host, or this machine's name when bind_host is 0.0.0.0.",
        ),
    ] = ""
    hwm: Annotated[
        int,
        Meta(gt=0, description="ZeroMQ high-water mark (messages) on every socket that carries unrolls or batches."),
    ] = 64
    poll_timeout_ms: Annotated[
        int, Meta(gt=0, description="Every blocking receive polls this long before it checks whether to stop.")
    ] = 100
    max_connections: Annotated[
        int,
        Meta(
            gt=0,
            description="The most connections the ingest's gate and its weights socket each hold (workers.remote); past it, those of no joined worker are hung up, the longest waiting first.",
        ),
    ] = 256
