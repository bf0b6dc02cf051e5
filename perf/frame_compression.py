"""Which codec a remote worker should compress its frames with (issue "5 of 7", item 1): lz4 or zstd, on real
Atari frames as a worker sends them, one unroll's new frames per message (T frames of each of its M envs, 84x84
uint8, as zrl's preprocessing makes them).

For each game, a vector env plays with random actions (the frames of a trained policy may compress differently:
this is the start of a run, not its end). Each codec compresses each message whole, as raw frames and as each
env's frame XOR its previous one (a frame that barely moves becomes mostly zeros); the ratio is raw bytes over
compressed bytes, the times are one thread's, per frame, the median over the messages.

    pip install -e '.[cluster]'   # lz4 and zstandard
    python perf/frame_compression.py --games Pong,Breakout,SpaceInvaders,Seaquest --json perf/results/frame_compression.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zrl import config as config_mod  # noqa: E402
from zrl.bench.facts import machine  # noqa: E402
from zrl.envs import make_vector_env, probe  # noqa: E402


def codecs() -> dict:
    """name -> (compress, decompress) of bytes."""
    import lz4.block
    import lz4.frame
    import zstandard

    out = {
        "lz4 block": (lz4.block.compress, lz4.block.decompress),
        "lz4 frame": (lz4.frame.compress, lz4.frame.decompress),
        "lz4 frame hc 3": (lambda b: lz4.frame.compress(b, compression_level=3), lz4.frame.decompress),
    }
    for level in (-5, -1, 1, 3):
        c = zstandard.ZstdCompressor(level=level)
        d = zstandard.ZstdDecompressor()
        out[f"zstd {level}"] = (c.compress, d.decompress)
    return out


def messages(game: str, envs: int, unroll: int, count: int) -> list[np.ndarray]:
    """``count`` messages of [T, M, 84, 84] frames from random play, after a warm-up of a few hundred steps."""
    cfg = config_mod.load(None, [f'env.id="ALE/{game}-v5"'], {})
    spec = probe(cfg.env)
    env = make_vector_env(cfg.env, envs, seed=0)
    rng = np.random.default_rng(0)
    env.reset()
    for _ in range(200):
        env.step(rng.integers(0, spec.num_actions, envs).astype(np.int32))
    out = []
    for _ in range(count):
        frames = np.empty((unroll, envs, *spec.frame_shape), np.uint8)
        for t in range(unroll):
            frames[t] = env.step(rng.integers(0, spec.num_actions, envs).astype(np.int32)).frames
        out.append(frames)
    env.close()
    return out


def xor_delta(frames: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Each env's frame XOR its previous one (``before``: the frames just before the message)."""
    prev = np.concatenate([before[None], frames[:-1]])
    return np.bitwise_xor(frames, prev)


def measure(msgs: list[np.ndarray], name: str, compress, decompress, delta: bool) -> dict:
    frames = msgs[0].shape[0] * msgs[0].shape[1]
    ratios, c_us, d_us = [], [], []
    for i, m in enumerate(msgs[1:], 1):
        data = (xor_delta(m, msgs[i - 1][-1]) if delta else m).tobytes()
        t0 = time.perf_counter()
        packed = compress(data)
        t1 = time.perf_counter()
        back = decompress(packed)
        t2 = time.perf_counter()
        assert back == data
        ratios.append(len(data) / len(packed))
        c_us.append((t1 - t0) / frames * 1e6)
        d_us.append((t2 - t1) / frames * 1e6)
    return {
        "codec": name,
        "xor_delta": delta,
        "ratio": round(float(np.median(ratios)), 2),
        "ratio_min": round(float(np.min(ratios)), 2),
        "compress_us_per_frame": round(float(np.median(c_us)), 2),
        "decompress_us_per_frame": round(float(np.median(d_us)), 2),
        "bytes_per_frame": round(float(msgs[0][0, 0].nbytes / np.median(ratios)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", default="Pong,Breakout,SpaceInvaders,Seaquest")
    parser.add_argument("--envs", type=int, default=8, help="envs per worker (M)")
    parser.add_argument("--unroll", type=int, default=20, help="frames per env per message (T)")
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    table = codecs()
    rows = []
    for game in args.games.split(","):
        msgs = messages(game, args.envs, args.unroll, args.messages)
        for delta in (False, True):
            for name, (c, d) in table.items():
                row = {"game": game, **measure(msgs, name, c, d, delta)}
                rows.append(row)
                print(
                    f"{game:14s} {name:15s} {'xor' if delta else 'raw'}  ratio {row['ratio']:6.2f} "
                    f"(min {row['ratio_min']:6.2f})  compress {row['compress_us_per_frame']:6.2f} us/frame  "
                    f"decompress {row['decompress_us_per_frame']:6.2f} us/frame",
                    flush=True,
                )
    if args.json:
        doc = {"command": " ".join(sys.argv), "machine": machine(), "args": vars(args), "rows": rows}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
