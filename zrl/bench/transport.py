"""Each hop of zrl's transport alone: ring write+read, index messages through PUSH/PULL with the schema
decode, their round trip, the weights broadcast, and a pickled multiprocessing.Queue for the same frames."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import statistics
import struct
import tempfile
import time
from contextlib import contextmanager

import numpy as np
import zmq

import shm
from shm.ring import Ring, RingSpec
from zrl import protocol, transport
from zrl.agents.vtrace.messages import Unroll
from zrl.config import Config
from zrl.launch import private_prefix, shm_prefix

FRAME = (84, 84)


@contextmanager
def private_dir():
    """An ipc folder named for this process, so that zrl-launch sweeps it if the bench dies."""
    path = transport.make_private_dir(
        tempfile.gettempdir(), f"{private_prefix()}{os.getpid()}-bench{os.urandom(2).hex()}"
    )
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _ring_writer(name: str, spec: RingSpec, envs: int, unroll: int, seconds: float, read_upto) -> None:
    ring = Ring.attach(name, spec)
    block = np.random.default_rng(0).integers(0, 256, (envs, *FRAME), dtype=np.uint8)
    steps = np.zeros(envs, np.int32)
    room = spec.capacity - 2 * unroll
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if ring.head - read_upto.value >= room:  # never lap the reader: every slot written is read
            time.sleep(0)
            continue
        ring.write(frame=block, episode_step=steps)
    ring.close()


def ring_bandwidth(envs: int, unroll: int, seconds: float) -> dict:
    """A writer process writes one slot (a frame of each of ``envs`` envs) per step, as a worker does; this
    process reads every ``unroll`` slots back in one call with the stamp checks, as the learner's gather does.
    The writer never laps the reader, so every byte is written once and read once; the figure is bytes read
    per second."""
    spec = RingSpec(32 * unroll, {"frame": ((envs, *FRAME), "uint8"), "episode_step": ((envs,), "int32")})
    ring = Ring.create(shm.segment_name(shm_prefix(), f"bench{os.urandom(2).hex()}", os.getpid(), "bw"), spec)
    ctx = mp.get_context("spawn")
    read_upto = ctx.RawValue("q", 0)
    proc = ctx.Process(target=_ring_writer, args=(ring.name, spec, envs, unroll, seconds + 1.0, read_upto))
    try:
        out: dict[str, np.ndarray] = {
            "frame": np.empty((unroll, envs, *FRAME), np.uint8),
            "episode_step": np.empty((unroll, envs), np.int32),
        }
        proc.start()
        deadline = time.monotonic() + 120
        while ring.head < unroll:  # the clock starts once the writer runs
            if time.monotonic() > deadline or proc.exitcode is not None:
                raise RuntimeError("the ring writer process never wrote")
            time.sleep(0.001)
        pos, torn, start = 0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            if ring.head - pos < unroll:
                continue
            ok = ring.read(np.arange(pos, pos + unroll), out)
            torn += int((~ok).sum())
            pos += unroll
            read_upto.value = pos
        elapsed = time.perf_counter() - start
    finally:
        proc.join(seconds + 30)
        if proc.is_alive():
            proc.kill()
        ring.close()
        ring.unlink()
    slot = envs * FRAME[0] * FRAME[1]
    return {"slot_bytes": slot, "slots": pos, "torn": torn, "gb_per_s": round(pos * slot / elapsed / 1e9, 3)}


def _queue_producer(envs: int, seconds: float, q) -> None:
    block = np.random.default_rng(0).integers(0, 256, (envs, *FRAME), dtype=np.uint8)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        q.put(block)
    q.put(None)


def queue_bandwidth(envs: int, seconds: float) -> dict:
    """The same slots, one per message, through a multiprocessing.Queue (pickled, over a pipe) to this process."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue(maxsize=64)
    proc = ctx.Process(target=_queue_producer, args=(envs, seconds, q))
    proc.start()
    try:
        first = q.get(timeout=120)  # the clock starts at the first arrival, after the child's start-up
        start, count = time.perf_counter(), 0
        while q.get(timeout=60) is not None:
            count += 1
        elapsed = time.perf_counter() - start
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return {"slot_bytes": first.nbytes, "messages": count, "gb_per_s": round(count * first.nbytes / elapsed / 1e9, 3)}


def unroll_message(envs: int, unroll: int, actions: int) -> Unroll:
    """An index message as a worker sends it: frame numbers, actions, rewards, behaviour logits and values."""
    return Unroll(
        worker_id=0,
        seq=0,
        policy_version=1,
        first_frame=1000,
        num_envs=envs,
        length=unroll,
        env_frames=0,
        actions=np.zeros((envs, unroll), np.int32),
        rewards=np.zeros((envs, unroll), np.float32),
        discounts=np.ones((envs, unroll), np.float32),
        behaviour_logits=np.zeros((envs, unroll, actions), np.float32),
        behaviour_values=np.zeros((envs, unroll), np.float32),
        features=np.zeros((0, 0, 0), np.float32),
    )


def _pusher(endpoint: str, envs: int, unroll: int, actions: int, seconds: float, hwm: int) -> None:
    # Encoded once: the sender stands for many workers, each of which encodes its own (timed apart, encode_us),
    # so that on a small machine the sender does not take the receiver's core.
    data = unroll_message(envs, unroll, actions).encode()
    ctx = zmq.Context()
    sock = transport.socket(ctx, zmq.PUSH, hwm=hwm, connect=endpoint)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        transport.send(sock, data, 1000)
    sock.close()
    ctx.term()


def codec_us(envs: int, unroll: int, actions: int, repeats: int = 20_000) -> tuple[float, float]:
    """Microseconds to encode and to decode one index message, in this process."""
    msg = unroll_message(envs, unroll, actions)
    data = msg.encode()
    t0 = time.perf_counter()
    for _ in range(repeats):
        msg.encode()
    t1 = time.perf_counter()
    for _ in range(repeats):
        protocol.decode(data)
    t2 = time.perf_counter()
    return (t1 - t0) / repeats * 1e6, (t2 - t1) / repeats * 1e6


def _echo(endpoint: str, count: int) -> None:
    ctx = zmq.Context()
    sock = transport.socket(ctx, zmq.ROUTER, hwm=1000, connect=endpoint)
    reply = protocol.Credit(batches=1).encode()
    for _ in range(count):
        if not sock.poll(30_000):
            break
        peer, data = sock.recv_multipart()
        protocol.decode(data)
        sock.send_multipart([peer, reply])
    sock.close()
    ctx.term()


def index_messages(cfg: Config, actions: int, seconds: float, round_trips: int = 2000) -> dict:
    """Unroll messages from another process into a PULL socket, each decoded by the schema as the broker does;
    then the round trip of a small message and its reply, each decoded."""
    envs, unroll = cfg.workers.envs_per_worker, cfg.learner.unroll_length
    encode_us, decode_us = codec_us(envs, unroll, actions)
    ctx = mp.get_context("spawn")
    zctx = zmq.Context()
    with private_dir() as folder:
        pull = transport.socket(zctx, zmq.PULL, hwm=cfg.transport.hwm, bind=f"ipc://{folder}/unrolls")
        proc = ctx.Process(
            target=_pusher, args=(f"ipc://{folder}/unrolls", envs, unroll, actions, seconds + 2.0, cfg.transport.hwm)
        )
        proc.start()
        try:
            data = transport.recv(pull, 120_000)  # the clock starts once the sender runs
            if data is None:
                raise RuntimeError(f"the sender process sent nothing in 120 s (exit code {proc.exitcode})")
            size = len(data)
            count, errors, start = 0, 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                data = transport.recv(pull, 1000)
                if data is None:
                    break
                try:
                    protocol.decode(data)
                    count += 1
                except protocol.ProtocolError:
                    errors += 1
            rate = count / (time.perf_counter() - start)
        finally:
            proc.join(seconds + 30)
            if proc.is_alive():
                proc.kill()
            pull.close()
        dealer = transport.socket(zctx, zmq.DEALER, hwm=1000, bind=f"ipc://{folder}/echo")
        proc = ctx.Process(target=_echo, args=(f"ipc://{folder}/echo", round_trips + 10))
        proc.start()
        try:
            ask = protocol.Credit(batches=1).encode()
            times = []
            for i in range(round_trips + 10):
                t0 = time.perf_counter()
                dealer.send(ask)
                reply = transport.recv(dealer, 30_000)
                if reply is None:
                    raise RuntimeError("the echo process stopped answering")
                protocol.decode(reply)
                if i >= 10:  # the first ones pay for the connection
                    times.append(time.perf_counter() - t0)
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
            dealer.close()
            zctx.term()
    times.sort()
    return {
        "message_bytes": size,
        "envs": envs,
        "unroll_length": unroll,
        "messages_per_s": round(rate, 1),
        "encode_us": round(encode_us, 2),
        "decode_us": round(decode_us, 2),
        "decode_errors": errors,
        "round_trip_us_median": round(statistics.median(times) * 1e6, 1),
        "round_trip_us_p99": round(times[int(0.99 * len(times))] * 1e6, 1),
    }


def _subscriber(endpoint: str, back: str, cfg: Config, shape, dtype, actions: int) -> None:
    import torch

    from zrl.models import build_model, load_flat

    torch.set_num_threads(cfg.workers.torch_threads)
    model = build_model(cfg.model, shape, dtype, cfg.env.frame_stack, actions)
    ctx = zmq.Context()
    sub = transport.socket(ctx, zmq.SUB, hwm=2, connect=endpoint)
    push = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=back)
    while True:
        data = transport.recv(sub, 30_000)
        if data is None:
            break
        version, _, flat = protocol.decode_weights(data)
        if version == -2:
            break
        load_flat(model, flat)
        push.send(struct.pack("<qd", version, time.perf_counter()))  # the monotonic clock is the machine's
    sub.close()
    push.close()
    ctx.term()


def weights_latency(cfg: Config, shape, dtype, actions: int, count: int = 20) -> dict:
    """From the learner's flatten + encode + PUB send to a subscriber that has decoded the weights and loaded
    them into its model, for the config's network; one broadcast at a time."""
    import torch

    from zrl.models import build_model, flat_parameters

    model = build_model(cfg.model, shape, dtype, cfg.env.frame_stack, actions)
    ctx = mp.get_context("spawn")
    zctx = zmq.Context()
    with private_dir() as folder:
        pub = transport.socket(zctx, zmq.PUB, hwm=2, bind=f"ipc://{folder}/weights")
        back = transport.socket(zctx, zmq.PULL, hwm=1000, bind=f"ipc://{folder}/back")
        proc = ctx.Process(
            target=_subscriber, args=(f"ipc://{folder}/weights", f"ipc://{folder}/back", cfg, shape, dtype, actions)
        )
        proc.start()
        latencies: list[float] = []
        try:
            hello = protocol.encode_weights(-1, 0, flat_parameters(model))
            deadline = time.monotonic() + 120
            while transport.recv(back, 200) is None:  # a subscriber sees only what is sent after it joined
                if time.monotonic() > deadline or proc.exitcode is not None:
                    raise RuntimeError("the subscriber process never received weights")
                pub.send(hello)
            while transport.recv(back, 200) is not None:
                pass
            for version in range(count):
                with torch.no_grad():
                    next(model.parameters()).add_(1e-6)  # new weights each time
                t0 = time.perf_counter()
                pub.send(protocol.encode_weights(version, version, flat_parameters(model)))
                data = transport.recv(back, 30_000)
                if data is None:
                    raise RuntimeError("the subscriber stopped answering")
                got, t1 = struct.unpack("<qd", data)
                if got != version:
                    raise RuntimeError(f"the subscriber loaded version {got}, not {version}")
                latencies.append(t1 - t0)
            pub.send(protocol.encode_weights(-2, 0, np.zeros(1, np.float32)))
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
            pub.close()
            back.close()
            zctx.term()
    params = sum(p.numel() for p in model.parameters())
    return {
        "parameters": params,
        "message_mb": round(params * 4 / 1e6, 2),
        "latency_ms_median": round(statistics.median(latencies) * 1e3, 2),
        "latency_ms_max": round(max(latencies) * 1e3, 2),
    }
