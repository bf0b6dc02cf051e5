"""The remote path alone: a worker on another host, over TCP. Recorded frames of the config's game go
zstd-compressed, with and without CurveZMQ, over TCP loopback into a real ingest role (zrl-bench transport --remote)."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time

import numpy as np
import zmq

from shm.ring import Ring
from zrl import protocol, transport
from zrl.agents.vtrace.messages import Unroll
from zrl.bench.transport import unroll_message
from zrl.config import Config


def recorded_frames(cfg: Config, envs: int, steps: int = 160) -> np.ndarray:
    """``steps`` slots of real frames of ``envs`` envs of the config's game under random play, after a warm-up of
    a few hundred steps (the frames a remote worker compresses; random noise would not compress at all)."""
    from zrl.envs import make_vector_env

    env = make_vector_env(cfg.env, envs, seed=0)
    rng = np.random.default_rng(0)
    try:
        frames = env.reset()
        out = []
        for k in range(300 + steps):
            frames = env.step(rng.integers(0, env.num_actions, envs)).frames
            if k >= 300:
                out.append(np.array(frames))
    finally:
        env.close()
    return np.stack(out)


def _remote_sender(gate: str, keys: str, frames: np.ndarray, unroll: int, actions: int, seconds: float, report):
    """A remote worker's sending alone: write ``unroll`` slots of recorded frames into a private ring, then send
    them zstd-compressed with an Unroll that names them (RemoteLink's RemoteData), as fast as the gate takes them.
    Reports (slots sent, bytes sent, CPU seconds of this process) once ``seconds`` are up."""
    import zstandard

    from zrl.roles.remote import deflate_slots
    from zrl.roles.run_wiring import make_ring_spec

    transport.configure_client(keys)
    ctx = transport.context(None, binds=False)
    gate_sock = transport.socket(ctx, zmq.DEALER, hwm=64, connect=gate)
    try:
        join = protocol.Join(run="", host="bench", pid=os.getpid(), envs_per_worker=0, zrl_version="")
        gate_sock.send(join.encode())
        if not gate_sock.poll(30_000, zmq.POLLIN):
            raise RuntimeError("the ingest did not answer the bench's join")
        welcome = protocol.decode(gate_sock.recv())
        if not isinstance(welcome, protocol.Welcome):
            raise RuntimeError(f"the ingest refused the bench's join: {welcome}")
        import tomllib

        from zrl.config import from_dict
        from zrl.envs import EnvSpec

        cfg = from_dict(tomllib.loads(welcome.config), "the bench's run")
        m = frames.shape[1]
        spec = EnvSpec(tuple(frames.shape[2:]), frames.dtype.str, actions, 4, True)
        ring = Ring.private(make_ring_spec(cfg, spec))
        zip_ = zstandard.ZstdCompressor(level=1)
        steps = np.zeros(m, np.int32)
        base = unroll_message(m, unroll, actions)
        sent = seq = total = k = 0
        cpu0, end = time.process_time(), time.perf_counter() + seconds
        ring.write(frame=frames[0], episode_step=steps)
        while time.perf_counter() < end:
            first = ring.head - 1
            for _ in range(unroll):
                k += 1
                steps += 1
                ring.write(frame=frames[k % len(frames)], episode_step=steps)
            message = Unroll(
                **{f: getattr(base, f) for f in base.FIELDS if f not in ("worker_id", "seq", "first_frame")},
                worker_id=welcome.worker_id,
                seq=seq,
                first_frame=first,
            ).encode()
            data = protocol.RemoteData(
                seq=seq,
                first_frame=sent,
                count=ring.head - sent,
                frames=deflate_slots(ring, sent, ring.head, zip_),
                message=np.frombuffer(message, np.uint8),
            ).encode()
            while not transport.send(gate_sock, data, 100):
                if time.perf_counter() > end + 30:
                    raise RuntimeError("the ingest stopped taking frames")
            sent, seq, total = ring.head, seq + 1, total + len(data)
        report.send((sent, total, time.process_time() - cpu0))
        ring.close()
    finally:
        gate_sock.close()
        transport.term(ctx)


def remote_path(cfg: Config, spec, frames: np.ndarray, seconds: float, curve: bool) -> dict:
    """A remote worker's frames over TCP loopback into a real ingest role (zrl/roles/ingest.py), which checks,
    decompresses, writes them into the slot's ring and forwards each unroll to a broker socket in this process:
    observation frames per second end to end, bytes per frame on the wire, and the CPU per frame of the ingest
    (its whole process, from psutil) and of the sender. ``curve``: with CurveZMQ keys of a temporary folder."""
    import psutil

    from zrl import envs as envs_mod
    from zrl.config import TransportConfig, load
    from zrl.launch.wiring import Wiring

    m, t = frames.shape[1], cfg.learner.unroll_length
    with tempfile.TemporaryDirectory(prefix="zrl-bench-keys") as tmp:
        sets = [f"workers.envs_per_worker={m}", "workers.count=1", "workers.remote=1", 'transport.kind="ipc"']
        client = ""
        if curve:
            transport.make_curve_keys(f"{tmp}/keys")
            client = str(transport.make_client_keys(f"{tmp}/keys", "bench"))
            sets.append(f"transport.curve_keys={tmp + '/keys'!r}")
        from zrl.config import dumps

        with open(f"{tmp}/run.toml", "w") as fh:
            fh.write(dumps(cfg))
        run_cfg = load(f"{tmp}/run.toml", sets)
        wiring = Wiring(run_cfg, envs_mod.probe(run_cfg.env))
        ctx = mp.get_context("spawn")
        mine, theirs = ctx.Pipe(duplex=False)
        sender = None
        try:
            wiring.open()
            broker = wiring.socket(zmq.PULL, hwm=1000, bind=wiring.endpoints.unrolls)
            wiring.serve_weights()
            stop = wiring.stop_flag()
            ingest = wiring.ingest(stop, "bench")
            ingest.start()
            sender = ctx.Process(
                target=_remote_sender,
                args=(wiring.endpoints.gate, client, frames, t, spec.num_actions, max(seconds, 2.5) + 3.0, theirs),
            )
            sender.start()
            got = {"forwarded": 0}

            def latest(until: float) -> protocol.IngestStats | None:
                last = None
                while time.monotonic() < until:
                    while broker.poll(0, zmq.POLLIN):
                        broker.recv()
                        got["forwarded"] += 1
                    data = wiring.take_stats(10)
                    if data is not None:
                        msg = protocol.decode(data)
                        if isinstance(msg, protocol.IngestStats):
                            last = msg
                return last

            deadline = time.monotonic() + 60
            first = None
            while first is None or first.remote_frames == 0:
                if time.monotonic() > deadline:
                    raise RuntimeError("the bench's remote sender never got through")
                first = latest(time.monotonic() + 1.0)
            cpu0, t0 = psutil.Process(ingest.pid).cpu_times(), time.monotonic()
            last = latest(time.monotonic() + max(seconds, 2.5))  # the ingest reports once a second
            cpu1, t1 = psutil.Process(ingest.pid).cpu_times(), time.monotonic()
            if last is None or last.remote_frames <= first.remote_frames:
                raise RuntimeError("the ingest reported no frames during the measurement")
            while sender.is_alive() and not mine.poll(0):
                latest(time.monotonic() + 0.2)
            slots_sent, bytes_sent, sender_cpu = mine.recv() if mine.poll(30) else (0, 0, 0.0)
            stop.set()
            ingest.join(10)
        finally:
            if sender is not None:
                sender.join(30)
                if sender.is_alive():
                    sender.kill()
            wiring.close()
            transport.configure(TransportConfig())
    frames_n = last.remote_frames - first.remote_frames
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {
        "curve": curve,
        "frames_per_s": round(frames_n / (t1 - t0)),
        "bytes_per_frame": round((last.remote_bytes - first.remote_bytes) / max(frames_n, 1), 1),
        "raw_bytes_per_frame": int(frames[0, 0].nbytes),
        "ingest_cpu_us_per_frame": round(cpu / max(frames_n, 1) * 1e6, 2),
        "ingest_busy_us_per_frame": round((last.ingest_busy_s - first.ingest_busy_s) / max(frames_n, 1) * 1e6, 2),
        "sender_cpu_us_per_frame": round(sender_cpu / max(slots_sent * m, 1) * 1e6, 2),
        "refused": last.remote_refused,
        "forwarded_unrolls": got["forwarded"],
    }
