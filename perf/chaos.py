"""Chaos soak: a zrl-launch run kept for a set time while a fault hits it every 1-3 minutes, from a seeded schedule;
every fault, its recovery time, what leaked, memory growth, the counters and the learning curve across the faults.

    python perf/chaos.py --minutes 60 --config config/pong.toml --remote --seed 0 \\
        --json perf/results/chaos/pong_60min.json --png perf/results/chaos/pong_60min.png

The faults, each drawn with equal odds among those this machine allows:

- SIGKILL of a random local worker, of the broker, of the learner;
- SIGSTOP of one of them, SIGCONT after 5 s to the heartbeat timeout plus 15 s (past it, the role is declared
  hung, killed and replaced first);
- SIGTERM of the launcher (an orderly stop, exit 143), then ``zrl-launch --resume`` of the run;
- a full results disk for a minute: the results folder is a tmpfs of its own (``--disk-mb``), filled by a file
  and emptied again (only where this process may mount one: root);
- with ``--remote``: SIGKILL of the remote worker (a zrl-worker on this host over TCP loopback), started again
  2 s later, as Ray would.

A fault has recovered when the run trains again: the learner's step has risen in two metrics rows in a row since
the fault (or since its end, for a stop or a full disk), frames have grown, and the role hit runs again (a new
pid, or the same one continued). The run keeps its checkpoints every minute, saves its replays with them
(run.checkpoint_replay) and is allowed as many restarts as the soak needs (run.max_restarts, workers.max_restarts):
the crash-loop stop is tested elsewhere (tests/faults/test_role_death.py).

Every ``--every`` seconds it samples the memory (USS) of the launcher and its roles, the launcher's open files and
the run's shared-memory segments. At the end (Ctrl-C to the launcher: an orderly stop) it checks that nothing of
the run is left (segments, socket folders, processes), that frames played and episodes never went backwards in
metrics.csv, and that episodes.csv numbers its episodes without a gap; and it compares the memory after the
warm-up with the memory at the end (the goal: under 5% growth). The samples also give the learner's weights version
beside the oldest and newest a worker acts with; the curve and the plot give each episode's worker, and the run's
metrics.csv and episodes.csv are kept gzipped beside the JSON. Not part of CI: a record, kept in perf/results/.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zrl.bench.facts import machine  # noqa: E402
from zrl.namespace import private_prefix, role_title, shm_prefix  # noqa: E402

GOAL = 0.05
ROLES = ("zrl-learner", "zrl-broker", "zrl-worker", "zrl-ingest")
RECOVERY_LIMIT_S = 300.0


def rows(path: Path) -> list[dict]:
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        return []


def roles_of(launcher: psutil.Process | None) -> dict[str, psutil.Process]:
    """The launcher's role processes by title (zrl-worker-0, ...), namespace mark left out."""
    found = {}
    if launcher is None:
        return found
    try:
        children = launcher.children(recursive=True)
    except psutil.Error:
        return found
    for child in children:
        try:
            title = " ".join(child.cmdline()).strip().split(" ")[0]
        except psutil.Error:
            continue
        if title.startswith(ROLES):
            found[title] = child
    return found


def segments() -> list[os.DirEntry]:
    return [e for e in os.scandir("/dev/shm") if e.name.startswith(shm_prefix() + "_")]


def leftovers() -> dict:
    """What of a run is left on this machine: segments, socket folders, role processes of this namespace."""
    folders = [str(p) for p in Path(tempfile.gettempdir()).glob(f"{private_prefix()}*")]
    procs = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or []).strip()
        if cmd.startswith(ROLES) and cmd.endswith(role_title("")):
            procs.append(cmd)
    return {"segments": [e.name for e in segments()], "socket_folders": folders, "processes": procs}


class Soak:
    def __init__(self, args) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.base = Path(tempfile.mkdtemp(prefix="zrl-chaos-"))
        self.results = self.base / "results"
        self.results.mkdir()
        self.tmpfs = args.disk_mb > 0 and self._mount()
        self.run_dir: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.remote: subprocess.Popen | None = None
        self.port = self._free_port() if args.remote else 0
        self.start = time.monotonic()
        self.faults: list[dict] = []
        self.samples: list[dict] = []
        self.launches = 0

    # -- the run -------------------------------------------------------------------------------------------------
    def _mount(self) -> bool:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.args.disk_mb}m", "zrl-chaos", str(self.results)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            print(f"chaos: no tmpfs for the results ({done.stderr.strip()}): no full-disk faults", flush=True)
        return done.returncode == 0

    @staticmethod
    def _free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def launch(self) -> None:
        """Start the run, or resume it in its folder after a SIGTERM."""
        if self.run_dir is None:
            sets = [
                f'run.results_dir="{self.results}"',
                "run.max_env_frames=100000000000",
                "run.checkpoint_every_minutes=1",
                "run.checkpoint_every_steps=0",
                "run.checkpoint_replay=true",
                "run.max_restarts=1000",
                "workers.max_restarts=1000",
                f"run.heartbeat_timeout_s={self.args.heartbeat}",
                "run.log_interval_s=1",
            ]
            if self.args.remote:
                sets += ["workers.remote=1", f"transport.remote_port={self.port}"]
            args = ["--config", self.args.config, *(x for s in sets for x in ("--set", s))]
        else:
            args = ["--resume", str(self.run_dir)]
        log = open(self.base / f"launch{self.launches}.out", "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "bin" / "zrl-launch"), *args, "--quiet"],
            cwd=self.base,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.launches += 1
        while self.run_dir is None and self.proc.poll() is None:
            found = [p for p in self.results.iterdir() if (p / "config.toml").exists()]
            self.run_dir = found[0] if found else None
            time.sleep(0.5)
        if self.run_dir is None:
            log.close()
            raise RuntimeError(f"zrl-launch exited with {self.proc.returncode}: {Path(log.name).read_text()[-3000:]}")
        if self.args.remote and self.remote is None:
            self.start_remote()

    def start_remote(self) -> None:
        while not (self.run_dir / "connect.txt").exists():
            time.sleep(0.5)
        line = (self.run_dir / "connect.txt").read_text().split()
        self.remote = subprocess.Popen(
            [sys.executable, str(REPO / "bin" / "zrl-worker"), *line[1:]],
            stdout=subprocess.DEVNULL,
            stderr=open(self.base / "remote.err", "a"),
        )

    @property
    def launcher(self) -> psutil.Process | None:
        try:
            return psutil.Process(self.proc.pid) if self.proc and self.proc.poll() is None else None
        except psutil.Error:
            return None

    def metrics(self) -> list[dict]:
        return rows(self.run_dir / "metrics.csv") if self.run_dir else []

    def now(self) -> float:
        return time.monotonic() - self.start

    # -- faults --------------------------------------------------------------------------------------------------
    def kinds(self) -> list[str]:
        kinds = ["kill worker", "stop worker", "kill broker", "stop broker", "kill learner", "stop learner"]
        kinds.append("SIGTERM launcher, --resume")
        if self.tmpfs:
            kinds.append("full results disk")
        if self.args.remote:
            kinds.append("kill remote worker")
        return [k for k in kinds if not self.args.faults or k in self.args.faults]

    def target(self, role: str) -> psutil.Process | None:
        roles = roles_of(self.launcher)
        if role == "worker":
            workers = [p for t, p in roles.items() if t.startswith("zrl-worker")]
            return self.rng.choice(workers) if workers else None
        return roles.get(f"zrl-{role}")

    def inject(self, kind: str) -> dict:
        record = {"at_s": round(self.now(), 1), "fault": kind}
        before = self.metrics()
        record["learner_step_before"] = int(before[-1]["learner_step"] or 0) if before else 0
        verb, _, role = kind.partition(" ")
        if verb in ("kill", "stop") and role in ("worker", "broker", "learner"):
            victim = self.target(role)
            if victim is None:
                record["skipped"] = f"no {role} running"
                return record
            record["target"] = " ".join(victim.cmdline()).split(" ")[0]
            record["pid"] = victim.pid
            if verb == "kill":
                victim.send_signal(signal.SIGKILL)
            else:
                pause = self.rng.uniform(5.0, self.args.heartbeat + 15.0)
                record["stopped_s"] = round(pause, 1)
                victim.send_signal(signal.SIGSTOP)
                time.sleep(pause)
                try:
                    victim.send_signal(signal.SIGCONT)
                except psutil.NoSuchProcess:
                    pass  # declared hung and killed meanwhile
        elif kind.startswith("SIGTERM"):
            self.proc.send_signal(signal.SIGTERM)
            record["exit_code"] = self.proc.wait(timeout=180)
            self.launch()
        elif kind == "full results disk":
            filler = self.results / "filler"
            block = b"\0" * (1 << 20)
            with open(filler, "wb", buffering=0) as fh:
                try:
                    while True:  # until the disk refuses: then not one more byte fits
                        fh.write(block)
                except OSError:
                    pass
                try:
                    while True:
                        fh.write(b"\0" * 4096)
                except OSError:
                    pass
            time.sleep(60)
            filler.unlink()
            record["full_s"] = 60
        elif kind == "kill remote worker":
            self.remote.send_signal(signal.SIGKILL)
            self.remote.wait()
            time.sleep(2)
            self.start_remote()
        record["fault_end_s"] = round(self.now(), 1)
        record.update(self.recovery(record))
        return record

    def recovery(self, record: dict) -> dict:
        """Wait until the run trains again after the fault; how long it took from the fault's end."""
        since = time.time()
        deadline = time.monotonic() + RECOVERY_LIMIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return {"recovered": False, "run_exit_code": self.proc.returncode}
            after = [r for r in self.metrics() if float(r["wall_time"]) > since]
            steps = [int(r["learner_step"] or 0) for r in after]
            rising = any(b > a and c > b for a, b, c in zip(steps, steps[1:], steps[2:]))
            frames = [int(r["env_frames"]) for r in after]
            target = record.get("target")
            back = target is None or target in roles_of(self.launcher)
            if rising and len(frames) > 1 and frames[-1] > frames[0] and back:
                return {"recovered": True, "recovery_s": round(self.now() - record["fault_end_s"], 1)}
            time.sleep(0.5)
        return {"recovered": False}

    # -- samples ---------------------------------------------------------------------------------------------
    def sample(self) -> None:
        launcher = self.launcher
        if launcher is None:
            return
        procs = {"zrl-launch": launcher, **roles_of(launcher)}
        uss, fds = {}, 0
        for title, proc in procs.items():
            try:
                uss[title] = round(proc.memory_full_info().uss / 2**20, 1)
                if title == "zrl-launch":
                    fds = proc.num_fds()
            except psutil.Error:
                continue
        segs = segments()
        last = self.metrics()[-1:] or [{}]
        self.samples.append(
            {
                "at_s": round(self.now(), 1),
                # the learner's weights version, and the oldest and newest a worker acts with: a worker left on
                # old weights (after a restart, say) shows as a version gap that does not close
                "policy_version": [
                    last[0].get(k, "")
                    for k in ("policy_version", "worker_policy_version_min", "worker_policy_version_max")
                ],
                "uss_mb": uss,
                "total_uss_mb": round(sum(uss.values()), 1),
                "launcher_fds": fds,
                "shm_segments": len(segs),
                "shm_mb": round(sum(e.stat().st_blocks * 512 for e in segs) / 2**20, 1),
            }
        )

    # -- the soak ----------------------------------------------------------------------------------------------
    def run(self) -> dict:
        self.launch()
        end = self.args.minutes * 60
        next_fault = self.rng.uniform(*self.args.fault_every)
        next_sample = 0.0
        while self.now() < end:
            if self.proc.poll() is not None:  # the run stopped by itself: say so, and resume it
                self.faults.append(
                    {"at_s": round(self.now(), 1), "fault": "(run stopped)", "exit": self.proc.returncode}
                )
                self.launch()
            if self.now() >= next_sample:
                self.sample()
                next_sample += self.args.every
            if self.now() >= next_fault:
                kind = self.rng.choice(self.kinds())
                print(f"chaos: {self.now() / 60:5.1f} min: {kind}", flush=True)
                record = self.inject(kind)
                print(f"chaos:   {record}", flush=True)
                self.faults.append(record)
                next_fault = self.now() + self.rng.uniform(*self.args.fault_every)
            time.sleep(0.5)
        return self.finish()

    def finish(self) -> dict:
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self.remote is not None:
            self.remote.send_signal(signal.SIGTERM)
            try:
                self.remote.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.remote.kill()
        time.sleep(5)  # "within 5 s of the last zrl process of a run exiting"
        left = leftovers()
        metrics = self.metrics()
        frames = [int(r["env_frames"]) for r in metrics]
        episodes_counted = [int(r["episodes"]) for r in metrics]
        episodes = rows(self.run_dir / "episodes.csv")
        numbers = [int(r["episode"]) for r in episodes]
        warm = [s for s in self.samples if s["at_s"] >= self.args.warmup * 60]
        window = max(1, len(warm) // 6)
        first = sorted(s["total_uss_mb"] for s in warm[:window])
        last = sorted(s["total_uss_mb"] for s in warm[-window:])
        growth = (last[len(last) // 2] - first[len(first) // 2]) / first[len(first) // 2] if first else float("nan")
        curve = [
            {
                "env_frames": int(r["env_frames"]),
                "wall_time": float(r["wall_time"]),
                "raw_return": float(r["raw_return"]),
                "worker_id": int(r["worker_id"]),
                "env_index": int(r["env_index"]),
                "length_frames": int(r["length_frames"]),
            }
            for r in episodes
        ]
        kept = self.keep_logs()
        recovered = [f["recovery_s"] for f in self.faults if f.get("recovered")]
        result = {
            "minutes": self.args.minutes,
            "seed": self.args.seed,
            "remote": self.args.remote,
            "full_disk_faults": self.tmpfs,
            "final_exit_code": code,
            "launches": self.launches,
            "faults": self.faults,
            "recovered": f"{len(recovered)}/{sum(1 for f in self.faults if 'recovered' in f)}",
            "recovery_s_median": sorted(recovered)[len(recovered) // 2] if recovered else None,
            "recovery_s_max": max(recovered) if recovered else None,
            "left_behind": left,
            "counters_monotone": frames == sorted(frames) and episodes_counted == sorted(episodes_counted),
            "episodes_numbered_without_gap": numbers == list(range(1, len(numbers) + 1)),
            "uss_growth_after_warmup": round(growth, 4),
            "uss_goal_met": growth < GOAL,
            "launcher_fds_first_last": [warm[0]["launcher_fds"], warm[-1]["launcher_fds"]] if warm else None,
            "samples": self.samples,
            "curve": curve,
            "logs": kept,
        }
        return result

    def keep_logs(self) -> list[str]:
        """The run's metrics.csv and episodes.csv, gzipped beside the JSON (the run folder goes with the soak):
        every column (losses, weights versions, each episode's worker and env) for a look after the fact."""
        kept = []
        for name in ("metrics.csv", "episodes.csv"):
            src = self.run_dir / name
            if not src.exists():
                continue
            dst = Path(self.args.json).with_suffix(f".{name}.gz")
            dst.parent.mkdir(parents=True, exist_ok=True)
            with open(src, "rb") as fin, gzip.open(dst, "wb", compresslevel=9) as fout:
                shutil.copyfileobj(fin, fout)
            kept.append(dst.name)
        return kept

    def close(self) -> None:
        if self.tmpfs:
            subprocess.run(["umount", str(self.results)], capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)


def table(result: dict) -> str:
    out = ["| at (min) | fault | target | recovered in (s) |", "|---|---|---|---|"]
    for f in result["faults"]:
        recovered = f"{f['recovery_s']}" if f.get("recovered") else ("no" if "recovered" in f else "-")
        out.append(f"| {f['at_s'] / 60:.1f} | {f['fault']} | {f.get('target', '')} | {recovered} |")
    return "\n".join(out)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = result["curve"]
    if not curve:
        return
    t0 = curve[0]["wall_time"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    for worker in sorted({c.get("worker_id", 0) for c in curve}):  # one colour per worker slot
        mine = [c for c in curve if c.get("worker_id", 0) == worker]
        returns = [c["raw_return"] for c in mine]
        a.plot([c["env_frames"] / 1e6 for c in mine], returns, ".", ms=3, label=f"worker {worker}")
        b.plot([(c["wall_time"] - t0) / 60 for c in mine], returns, ".", ms=3)
    a.set_xlabel("env frames (M)")
    a.set_ylabel("episode return")
    a.legend(loc="upper left", fontsize=8)
    for f in result["faults"]:
        b.axvline(f["at_s"] / 60, color="red" if "kill" in f["fault"] else "orange", alpha=0.4, lw=1)
    b.set_xlabel("minutes (faults: red kill, orange other)")
    fig.suptitle(f"chaos soak, {len(result['faults'])} faults, recovered {result['recovered']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--config", default=str(REPO / "config" / "pong.toml"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fault-every", default="60,180", help="seconds between faults, drawn uniformly: LOW,HIGH")
    ap.add_argument("--every", type=float, default=15.0, help="seconds between memory samples")
    ap.add_argument("--warmup", type=float, default=10.0, help="minutes before memory growth is measured from")
    ap.add_argument("--heartbeat", type=float, default=20.0, help="run.heartbeat_timeout_s of the run")
    ap.add_argument("--remote", action="store_true", help="one remote worker slot, a zrl-worker on this host")
    ap.add_argument("--disk-mb", type=int, default=2048, help="the results tmpfs's size (0: no full-disk faults)")
    ap.add_argument("--faults", default="", help="only these faults, comma-separated (their names as listed above)")
    ap.add_argument("--json", default=str(REPO / "perf" / "results" / "chaos" / "chaos.json"))
    ap.add_argument("--png", default="")
    args = ap.parse_args()
    args.fault_every = tuple(float(x) for x in args.fault_every.split(","))
    args.config = str(Path(args.config).resolve())
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]  # the run starts in a folder of its own
    soak = Soak(args)
    try:
        result = soak.run()
    finally:
        soak.close()
    doc = {"mode": "chaos", "machine": {**machine(), "command": " ".join(["python", *sys.argv])}, "result": result}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    if args.png:
        plot(result, args.png)
    print(table(result))
    keys = ("recovered", "recovery_s_median", "recovery_s_max", "left_behind", "counters_monotone")
    for key in (*keys, "episodes_numbered_without_gap", "uss_growth_after_warmup", "launcher_fds_first_last"):
        print(f"chaos: {key}: {result[key]}")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
