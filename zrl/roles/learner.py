"""The learner: one loop for every agent. It takes batch descriptors from the broker, has the agent's learner
part gather their frames from the rings and step (zrl/agents/<name>/learner.py), publishes weights, answers
workers that ask for the current weights, reports its figures (they double as its heartbeat), and writes
checkpoints."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import zmq

from shm.ring import Ring
from zrl import __version__, agents, checkpoint, protocol, transport
from zrl.config import Config, learner_threads, to_dict
from zrl.models import flat_parameters, resolve_device
from zrl.roles.inbound import Decoder
from zrl.roles.lifecycle import Every, keep_freed_memory, should_stop, start_role
from zrl.roles.reporting import StatsOut, crash_report
from zrl.roles.run_wiring import RunWiring, StartFrom
from zrl.roles.weights_feed import next_batch

# The longest the learner goes without asking the broker for its replay index (for checkpoints): IndexSchedule
INDEX_EVERY_S = 10.0

# The step figures every agent reports, by their LearnerStats names (declared there); one a step lacks stays 0
STEP_METRICS = tuple(field for field, stat in protocol.LearnerStats.STATS if stat.step)


class IndexSchedule:
    """When the learner asks the broker for its replay index: at the first chance, then every ``every_s`` seconds
    and 1, 2, 4, 8, ... steps after this launch's first, so that a short launch's final checkpoint holds its replay
    as of about half its steps."""

    def __init__(self, every_s: float = INDEX_EVERY_S) -> None:
        self.every_s, self.last, self.next_steps = every_s, -math.inf, 1

    def due(self, stepped: int, now: float) -> bool:
        """Whether to ask now, ``stepped`` steps into this launch (counted from its first), at monotonic ``now``."""
        if stepped < self.next_steps and now - self.last < self.every_s:
            return False
        self.last = now
        while self.next_steps <= stepped:
            self.next_steps *= 2
        return True


def rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def run(cfg: Config, wiring: RunWiring, run_dir: str, stop_event, start: StartFrom | None = None) -> None:
    start_role("zrl-learner", wiring.launcher_pid)
    transport.configure(cfg.transport)  # before anything can fail: the crash report uses the keys too
    with crash_report("zrl-learner", wiring):
        Learner(cfg, wiring, run_dir, stop_event, start).run()


class Learner:
    """The learner process's state: the agent's part, the run's counters, timings and sockets."""

    def __init__(self, cfg: Config, wiring: RunWiring, run_dir: str, stop_event, start: StartFrom | None) -> None:
        if cfg.run.keep_freed_memory:
            keep_freed_memory()
        torch.set_num_threads(learner_threads(cfg))
        if cfg.run.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's condition for repeatable results
            torch.use_deterministic_algorithms(True)
        torch.manual_seed(cfg.run.seed)
        self.cfg, self.wiring, self.stop_event = cfg, wiring, stop_event
        self.device = resolve_device(cfg.learner.device)
        self.rings = [Ring.attach(name, wiring.ring_spec) for name in wiring.ring_names]
        agent = agents.get(cfg.algo)
        self.part = agent.learner_part()(cfg, wiring, self.rings, self.device)
        self.figures = tuple(agent.learner_figures)  # the agent's own step figures, beside STEP_METRICS
        self.ckpt_dir = Path(run_dir) / "checkpoints"
        self.learner_step = self.policy_version = self.samples = self.frames_trained = 0
        self.dropped_torn = self.env_frames = 0
        self.decoded = Decoder()
        self.timing = {"step": 0.0, "gather": 0.0, "wait": 0.0, "publish": 0.0}
        self.metrics: dict[str, float] = {}  # the last step's figures
        self.last_ckpt, self.saved_step = "", -1
        self.nonfinite_steps = self.nonfinite_run = 0  # learner steps skipped, in all and in a row
        if start is not None:  # the launcher has verified the file and its fit
            self._start_from(start)
        self.current = self._weights()

    def _start_from(self, start: StartFrom) -> None:
        state = checkpoint.load(start.path)
        self.part.load(state, resume=start.resume, optimizer=start.optimizer)
        if start.resume:
            self.learner_step, self.policy_version = state["learner_step"], state["policy_version"]
            self.samples, self.frames_trained = state["samples"], state["env_frames_trained"]
            self.env_frames = state["env_frames"]
            set_rng_state(state["rng"], self.device)

    def _weights(self) -> bytes:
        return protocol.encode_weights(self.policy_version, self.learner_step, flat_parameters(self.part.model))

    def run(self) -> None:
        cfg, wiring, part, timing = self.cfg, self.wiring, self.part, self.timing
        poll_ms = cfg.transport.poll_timeout_ms
        ctx = transport.context(cfg.transport)
        batches = transport.socket(ctx, zmq.PULL, hwm=cfg.broker.prefetch_batches, bind=wiring.endpoints.batches)
        credits = transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.credits)
        replies = (
            transport.socket(ctx, zmq.PUSH, hwm=1000, connect=wiring.endpoints.priorities) if part.replies else None
        )
        weights_pub = transport.socket(ctx, zmq.PUB, hwm=2, bind=wiring.endpoints.weights)
        weights_rep = transport.socket(ctx, zmq.ROUTER, hwm=256, bind=wiring.endpoints.weights_req)
        self.stats = StatsOut.connect(ctx, wiring, hwm=1000)
        one_credit = protocol.Credit(batches=1).encode()
        try:
            weights_pub.send(self.current, copy=False)
            transport.send_nowait(credits, protocol.Credit(batches=cfg.broker.prefetch_batches).encode())
            every_s, last_save = cfg.run.checkpoint_every_minutes * 60.0, time.monotonic()
            index_due, first_step = IndexSchedule(), self.learner_step
            self._report()
            heartbeat = Every(1.0)
            while not should_stop(self.stop_event):
                if heartbeat.due():  # stats double as the heartbeat: send them even when idle
                    self._report()
                if part.asks_replay_index and index_due.due(self.learner_step - first_step, time.monotonic()):
                    transport.send_nowait(credits, protocol.IndexRequest(learner_step=self.learner_step).encode())
                data = next_batch(batches, poll_ms, weights_rep, self.current, self.decoded, timing)
                if data is None:
                    continue
                t1 = time.perf_counter()
                if (message := self.decoded(data, part.batch_types)) is None:
                    continue
                if part.misfit(message):
                    self.decoded.refuse()
                    continue
                if part.take(message):
                    continue
                transport.send_nowait(credits, one_credit)
                if cfg.run.deterministic and self.frames_trained >= cfg.run.max_env_frames:
                    continue  # the budget counts frames trained: not one step more
                self.env_frames = max(self.env_frames, message.env_frames)
                gathered = part.gather(message)
                self.dropped_torn += gathered.torn
                if gathered.batch is None:
                    continue
                t2 = time.perf_counter()
                timing["gather"] += t2 - t1
                trained = part.step(gathered.batch, self.learner_step + 1, self.policy_version)
                if not trained.applied:
                    if self._skipped(trained.metrics):
                        weights_pub.send(self.current, copy=False)
                    continue
                self.nonfinite_run = 0
                if trained.reply is not None:
                    assert replies is not None  # a step replies only where its part does (part.replies)
                    transport.send_nowait(replies, trained.reply)
                self.learner_step += 1
                self.samples += trained.samples
                self.frames_trained += trained.frames
                self.metrics = trained.metrics
                t3 = time.perf_counter()
                timing["step"] += t3 - t2
                if self.learner_step % cfg.learner.publish_every == 0:
                    self.policy_version += 1
                    self.current = self._weights()
                    weights_pub.send(self.current, copy=False)  # zmq keeps the bytes alive until sent
                    timing["publish"] += time.perf_counter() - t3
                steps_due = cfg.run.checkpoint_every_steps
                by_steps = steps_due and self.learner_step % steps_due == 0
                if by_steps or (every_s and time.monotonic() - last_save >= every_s):
                    self.last_ckpt = self._save()
                    last_save = time.monotonic()
                    if cfg.run.checkpoint_replay and self.saved_step == self.learner_step:  # the replays beside it
                        transport.send_nowait(credits, protocol.SaveReplay(learner_step=self.learner_step).encode())
            self.last_ckpt = self._save()
            self.metrics = {}  # the last report: counters and the final checkpoint, no step
            self._report()
        finally:
            for sock in (batches, credits, replies, weights_pub, weights_rep, self.stats):
                if sock is not None:
                    sock.close()
            transport.term(ctx)
            for ring in self.rings:
                ring.close()

    def _skipped(self, metrics: dict[str, float]) -> bool:
        """Count a step skipped for a non-finite loss or gradient norm, say it at the 1st and every 100th, and
        after learner.max_nonfinite_steps in a row restore the model and optimiser from the newest checkpoint that
        loads; whether they were restored (new weights to publish)."""
        self.nonfinite_steps += 1
        self.nonfinite_run += 1
        if self.nonfinite_steps == 1 or self.nonfinite_steps % 100 == 0:
            self._notice(
                f"skipped learner step {self.learner_step + 1}: loss {metrics.get('total_loss', 0.0):g}, gradient "
                f"norm {metrics.get('grad_norm', 0.0):g} ({self.nonfinite_steps} skipped so far; the weights stay)"
            )
        limit = self.cfg.learner.max_nonfinite_steps
        if not limit or self.nonfinite_run < limit:
            return False
        self.nonfinite_run = 0
        try:
            good = next(((path, state) for path, state, _ in checkpoint.newest_good(self.ckpt_dir) if state), None)
        except OSError:  # the folder cannot be read
            good = None
        if good is None:
            self._notice(f"{limit} learner steps in a row were not finite, and no checkpoint loads to go back to")
            return False
        latest, state = good
        # its weights and optimiser moments; the schedule, the counters and the replays go on from here
        self.part.load(state, resume=False, optimizer=True)
        self.policy_version += 1
        self.current = self._weights()
        self._notice(f"restored the model and optimiser from {latest.name} after {limit} non-finite steps in a row")
        return True

    def _notice(self, text: str) -> None:
        self.stats.send(protocol.Notice(role="zrl-learner", pid=os.getpid(), text=text).encode())

    def _report(self) -> None:
        # LearnerStats' step=True fields, by name: typed Any, as mypy cannot match names known at run time
        step: dict[str, Any] = {name: float(self.metrics.get(name, 0.0)) for name in STEP_METRICS}
        figures = {name: float(self.metrics.get(name, 0.0)) for name in self.figures}
        message = protocol.LearnerStats(
            pid=os.getpid(),
            time=time.time(),
            learner_step=self.learner_step,
            policy_version=self.policy_version,
            samples=self.samples,
            env_frames_trained=self.frames_trained,
            env_frames=self.env_frames,
            units_dropped_torn=self.dropped_torn,
            learning_rate=self.part.scheduler.get_last_lr()[0],
            step_time_s=self.timing["step"],
            gather_time_s=self.timing["gather"],
            wait_time_s=self.timing["wait"],
            publish_time_s=self.timing["publish"],
            decode_errors=self.decoded.errors,
            checkpoint_path=self.last_ckpt,
            nonfinite_steps=self.nonfinite_steps,
            figures=figures,
            **step,
        )
        self.stats.send(message.encode())

    def _save(self) -> str:
        """Write a checkpoint (not twice for one step); a failed write (a full disk) is reported on stderr and
        leaves the previous checkpoints as they were, and training goes on."""
        if self.learner_step == self.saved_step:
            return self.last_ckpt
        try:
            checkpoint.make_folder(self.ckpt_dir)  # a link there would take the checkpoints out of the run folder
            path = checkpoint.save(self.ckpt_dir / checkpoint.PATTERN.format(step=self.learner_step), self._state())
            checkpoint.prune(self.ckpt_dir, self.cfg.run.keep_checkpoints)
        except OSError as err:
            print(
                f"zrl-learner: checkpoint at learner step {self.learner_step} failed ({err.strerror or err}); the "
                "previous checkpoints are untouched, training goes on",
                file=sys.stderr,
                flush=True,
            )
            return self.last_ckpt
        self.saved_step = self.learner_step
        return str(path)

    def _state(self) -> dict[str, Any]:
        return {
            "zrl_version": __version__,
            **self.part.state(),
            "learner_step": self.learner_step,
            "env_frames": self.env_frames,
            "env_frames_trained": self.frames_trained,
            "samples": self.samples,
            "policy_version": self.policy_version,
            "config": to_dict(self.cfg),
            "rng": rng_state(self.device),
            "saved_at": time.time(),
        }
