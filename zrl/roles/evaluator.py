"""Playing a trained policy under a standard Atari protocol, and the evaluator role that does it during training.

The protocols (the training preprocessing otherwise: frame skip, frame size, frame stack, fire reset):

- ``deepmind``: no reward clipping, no episodic life, up to 30 random no-ops at the start, 108k-frame cap.
- ``machado``: sticky actions (p = 0.25), the full 18-action set, no life signal, no no-ops, 108k-frame cap
  (Machado et al. 2018).
- ``saber``: as machado, an episode cap of 100 hours of play, and an episode ends after 5 minutes (18,000
  frames) without reward. Three scores per episode: truncated at 5 minutes, at 30 minutes, and uncapped
  (Toromanoff et al. 2019).

A :class:`Player` plays whole episodes with one set of weights; zrl-eval (zrl/evaluate.py) plays a checkpoint's
with it, and the evaluator role (``run``) the learner's latest published weights whenever the launcher asks
(eval.interval_frames): it answers each request with an EvalResult on the stats channel, and with run.best_by =
"eval" keeps best.pt (the evaluated weights, model only) and best.json. For a value-based agent it also tracks
the mean max-Q over a fixed set of held-out states (eval.held_out_states), as DQN and Rainbow do.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import zmq

from zrl import agents, checkpoint, protocol, scores, transport
from zrl.config import Config, ConfigError, EnvConfig, to_dict
from zrl.envs import atari_rom, make_vector_env, run_protocol
from zrl.gather import ActingStack
from zrl.models import load_flat
from zrl.roles.lifecycle import Every, should_stop, start_role
from zrl.roles.reporting import StatsOut, crash_report
from zrl.roles.run_wiring import RunWiring
from zrl.roles.weights_feed import wait_for_weights

NAME = "zrl-evaluator"
PROTOCOLS = ("deepmind", "machado", "saber")
FRAMES_5_MIN = 18_000
FRAMES_30_MIN = 108_000
FRAMES_100_HOURS = 100 * 60 * 60 * 60
BOOTSTRAP_RESAMPLES = 10_000
HELD_OUT_FILE = "held_out_states.npz"
HELD_OUT_EVERY = 4  # one held-out state per this many random steps: fewer near-copies of one another
REQUESTER_ID = 2**31  # the evaluator's id in its weights requests: no worker's
RESULT_SEND_MS = 5000  # how long a result may wait for room on the stats channel


def protocol_env(train: EnvConfig, protocol_name: str) -> tuple[EnvConfig, int]:
    """The env settings a protocol plays under, and the frames without reward that end an episode (0: none)."""
    base = dataclasses.replace(train, clip_rewards=False, episodic_life=False)
    if protocol_name == "deepmind":
        return dataclasses.replace(base, noop_max=30, sticky_action_prob=0.0, max_episode_frames=FRAMES_30_MIN), 0
    if protocol_name == "machado":
        return dataclasses.replace(
            base, noop_max=0, sticky_action_prob=0.25, full_action_space=True, max_episode_frames=FRAMES_30_MIN
        ), 0
    if protocol_name == "saber":
        return dataclasses.replace(
            base, noop_max=0, sticky_action_prob=0.25, full_action_space=True, max_episode_frames=FRAMES_100_HOURS
        ), FRAMES_5_MIN
    raise ConfigError(f"--protocol: {protocol_name!r} is not one of {', '.join(PROTOCOLS)}")


def minimal_actions(rom: str) -> np.ndarray:
    """The ALE action ids of a game's minimal action set, in the order a minimal-set policy indexes them."""
    import ale_py

    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    path = ale_py.roms.get_rom_path(rom)
    if path is None:
        raise ValueError(f"ale-py has no ROM {rom!r}")
    ale.loadROM(path)
    return np.array([a.value for a in ale.getMinimalActionSet()], np.int64)


def summary(values: np.ndarray, seed: int) -> dict[str, float]:
    """Mean, median, min, max, standard deviation and a 95% bootstrap interval of the mean."""
    rng = np.random.default_rng(seed)
    means = rng.choice(values, (BOOTSTRAP_RESAMPLES, len(values)), replace=True).mean(axis=1)
    return {
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "min": float(values.min()),
        "max": float(values.max()),
        "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
        "ci95_low": float(np.percentile(means, 2.5)),
        "ci95_high": float(np.percentile(means, 97.5)),
    }


class Player:
    """A policy of ``cfg``'s agent playing whole episodes under ``protocol_name`` (an env that is not Atari plays
    as it trains). ``model``: the network, built here for the env in play (load weights into it before playing);
    ``mapping``: the ALE action of each of the policy's actions (a minimal-set policy in the full set)."""

    def __init__(self, cfg: Config, protocol_name: str, greedy: bool = False) -> None:
        self.cfg, self.agent = cfg, agents.get(cfg.algo)
        self.greedy = greedy or self.agent.acts_greedily
        self.env_cfg, self.stuck_frames = protocol_env(cfg.env, protocol_name)
        rom = atari_rom(cfg.env.id)
        if rom is None:
            self.env_cfg, self.stuck_frames = cfg.env, 0  # not Atari: the protocols' Atari settings do not apply
        probe = make_vector_env(self.env_cfg, 1, 0)
        try:
            self.frame_shape, self.frame_dtype = probe.frame_shape, probe.frame_dtype.str
            if self.env_cfg.full_action_space and rom is not None and not cfg.env.full_action_space:
                self.mapping = minimal_actions(rom)
            else:
                self.mapping = np.arange(probe.num_actions)
        finally:
            probe.close()
        self.model = self.agent.build_model(cfg, self.frame_shape, self.frame_dtype, len(self.mapping))
        self.model.eval()

    def play(
        self,
        seed: int,
        on_frame: Callable[[np.ndarray], None] | None = None,
        idle: Callable[[], bool] | None = None,
    ) -> dict[str, Any] | None:
        """One episode with seed ``seed``: its scores (uncapped, at 5 and at 30 minutes), frames and how it ended.
        ``on_frame`` sees every frame played; ``idle`` runs every step (keep it cheap) and returns True to give up
        (None is returned then)."""
        rng = np.random.default_rng(seed)
        q_generator = torch.Generator().manual_seed(seed)
        env = make_vector_env(self.env_cfg, 1, seed)
        try:
            stack = ActingStack(1, self.cfg.env.frame_stack, env.frame_shape, env.frame_dtype.str)
            first = env.reset()
            stack.reset(first)
            if on_frame is not None:
                on_frame(first[0])
            obs = torch.from_numpy(stack.array)
            total = at_5 = at_30 = 0.0
            frames = since_reward = 0
            ended_by = "game over"
            while True:
                if idle is not None and idle():
                    return None
                with torch.no_grad():
                    action_scores = self.agent.action_scores(self.model, obs, self.cfg, q_generator)[0]
                if self.greedy:
                    choice = int(np.argmax(action_scores))
                else:  # a sample of the policy's softmax (Gumbel-max)
                    choice = int(np.argmax(action_scores - np.log(-np.log(rng.random(action_scores.shape)))))
                step = env.step(np.array([self.mapping[choice]]))
                if on_frame is not None:
                    on_frame(step.frames[0])
                reward = float(step.raw_rewards[0])
                frames += env.frames_per_step
                total += reward
                at_5 += reward if frames <= FRAMES_5_MIN else 0.0
                at_30 += reward if frames <= FRAMES_30_MIN else 0.0
                since_reward = 0 if reward != 0.0 else since_reward + env.frames_per_step
                if step.game_over[0]:
                    if frames >= self.env_cfg.max_episode_frames - env.frames_per_step:
                        ended_by = "frame cap"
                    break
                if self.stuck_frames and since_reward >= self.stuck_frames:
                    ended_by = "no reward for 5 minutes"
                    break
                stack.push(step.frames, step.game_over)
        finally:
            env.close()
        return {
            "seed": seed,
            "score": total,
            "score_5min": at_5,
            "score_30min": at_30,
            "frames": frames,
            "ended_by": ended_by,
        }


def collect_states(cfg: Config, count: int, seed: int, idle: Callable[[], object] = lambda: None) -> np.ndarray:
    """``count`` stacked observations ``[count, S, *frame_shape]`` of a uniformly random policy in the training
    env (one every HELD_OUT_EVERY steps), seeded by ``seed``: the held-out states whose mean max-Q is tracked.
    ``idle`` runs every step (a heartbeat)."""
    rng = np.random.default_rng(seed)
    env = make_vector_env(cfg.env, 1, seed)
    try:
        stack = ActingStack(1, cfg.env.frame_stack, env.frame_shape, env.frame_dtype.str)
        stack.reset(env.reset())
        states = np.empty((count, *stack.array.shape[1:]), stack.array.dtype)
        taken = step = 0
        while taken < count:
            step += 1
            idle()
            result = env.step(rng.integers(env.num_actions, size=1))
            stack.push(result.frames, result.game_over)
            if step % HELD_OUT_EVERY == 0:
                states[taken] = stack.array[0]
                taken += 1
    finally:
        env.close()
    return states


def held_out_states(
    cfg: Config, folder: Path, shape: tuple[int, ...], idle: Callable[[], object] = lambda: None
) -> np.ndarray:
    """The run's held-out states, each of ``shape`` (the stack of frames the network takes): kept in ``folder``
    (eval/), so that a resumed run tracks the same ones; made (and kept, when the disk takes them) when there
    are none, or the kept ones are of another count, shape, type or seed, or cannot be read."""
    path = folder / HELD_OUT_FILE
    n = cfg.eval.held_out_states
    try:
        with open(checkpoint.open_regular(path, os.O_RDONLY), "rb") as fh, np.load(fh, allow_pickle=False) as kept:
            states, seed = kept["states"], int(kept["seed"])
        if states.shape == (n, *shape) and states.dtype == np.uint8 and seed == cfg.eval.seed:
            return states
    except Exception:  # missing, damaged, or not an npz file: made again
        pass
    states = collect_states(cfg, n, cfg.eval.seed, idle)
    try:  # written whole under a fresh name, then renamed: never through a link at either name
        folder.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.make_folder(folder)
        data = io.BytesIO()
        np.savez_compressed(data, states=states, seed=np.int64(cfg.eval.seed))
        checkpoint.write_atomic(path, data.getvalue())
    except OSError:  # a full disk, a link in the way: this evaluator keeps them in memory
        pass
    return states


def mean_max_q(
    player: Player, states: np.ndarray, seed: int, batch: int = 50, idle: Callable[[], object] = lambda: None
) -> float:
    """The mean over ``states`` of the largest Q-value the player's network gives (value-based agents)."""
    generator = torch.Generator().manual_seed(seed)
    best = []
    with torch.no_grad():
        for i in range(0, len(states), batch):
            idle()
            q = player.agent.action_scores(player.model, torch.from_numpy(states[i : i + batch]), player.cfg, generator)
            best.append(np.asarray(q).max(axis=1))
    return float(np.concatenate(best).mean())


def evaluation_terms(cfg: Config) -> dict[str, Any]:
    """What makes two evaluations' scores comparable: the protocol, the episodes, their seed and the action rule."""
    return {
        "protocol": run_protocol(cfg),
        "episodes": cfg.eval.episodes,
        "seed": cfg.eval.seed,
        "greedy": cfg.eval.greedy or agents.get(cfg.algo).acts_greedily,
    }


def best_so_far(checkpoints: Path, terms: dict[str, Any]) -> float:
    """The evaluation score best.pt holds (its ``evaluation`` record: a resumed or restarted evaluator's bar);
    -inf when best.pt holds none (run.best_by was "train"), or was evaluated on other ``terms``
    (evaluation_terms: a resumed run that changed them starts a new bar), or there is none, or it cannot be read."""
    try:
        record = checkpoint.load(checkpoints / checkpoint.BEST).get("evaluation")
    except (checkpoint.CheckpointError, OSError):
        return -math.inf
    if not isinstance(record, dict) or any(record.get(k) != v for k, v in terms.items()):
        return -math.inf
    try:
        return float(record["eval_mean"])
    except (KeyError, TypeError, ValueError):
        return -math.inf


def run(cfg: Config, wiring: RunWiring, run_dir: str, stop_event, final: bytes | None = None) -> None:
    """The evaluator: it answers the launcher's requests until the run stops; with ``final`` (an encoded
    EvalRequest with its checkpoint: messages are never pickled) it plays that one and exits."""
    start_role(NAME, wiring.launcher_pid)
    if cfg.eval.nice:  # below the roles that train: an evaluation takes longer on a busy machine, not training
        os.nice(cfg.eval.nice)
    transport.configure(cfg.transport)
    with crash_report(NAME, wiring):
        torch.set_num_threads(1)
        # what the launcher encoded: an EvalRequest
        request = cast(protocol.EvalRequest, protocol.decode(final)) if final is not None else None
        Evaluator(cfg, wiring, Path(run_dir), stop_event).run(request)


class Evaluator:
    """The evaluator role: a PULL for the launcher's requests, a PUSH for its reports, the learner's weights on
    request, a Player, and (run.best_by = "eval") best.pt's score."""

    def __init__(self, cfg: Config, wiring: RunWiring, run_dir: Path, stop_event) -> None:
        self.cfg, self.wiring, self.stop_event = cfg, wiring, stop_event
        self.protocol = run_protocol(cfg)
        self.terms = evaluation_terms(cfg)
        self.folder = run_dir / "eval"
        self.checkpoints = run_dir / "checkpoints"
        self.rom = atari_rom(cfg.env.id)
        self.states: np.ndarray | None = None
        self.evaluations = self.episodes = self.skipped = 0
        self.beat = Every(1.0)

    def run(self, final: protocol.EvalRequest | None = None) -> None:
        cfg, poll = self.cfg, self.cfg.transport.poll_timeout_ms
        self.ctx = transport.context(cfg.transport, binds=False)
        sockets: list[zmq.Socket | StatsOut] = []
        try:  # connected first: the launcher's requests find a peer while the player is made
            self.requests = transport.socket(self.ctx, zmq.PULL, hwm=100, connect=self.wiring.endpoints.evaluations)
            sockets.append(self.requests)
            self.stats = StatsOut.connect(self.ctx, self.wiring, hwm=100)
            sockets.append(self.stats)
            self.player = Player(cfg, "deepmind" if self.protocol == "train_env" else self.protocol, cfg.eval.greedy)
            self.best = best_so_far(self.checkpoints, self.terms)
            self.heartbeat(force=True)  # its first report: the start's grace (STARTUP_GRACE_S) covered the above
            if final is not None:  # the final evaluation: this one, then out, its result delivered first
                self.evaluate(final)
                self.stats.linger(RESULT_SEND_MS)
                return
            while not should_stop(self.stop_event):
                self.heartbeat()
                request = self._newest_request(poll)
                if request is not None:
                    self.evaluate(request)
        finally:
            for sock in sockets:
                sock.close()
            transport.term(self.ctx)

    def _newest_request(self, poll_ms: int) -> protocol.EvalRequest | None:
        """The newest request waiting (older ones are skipped: the evaluation came too late for them)."""
        newest = None
        data = transport.recv(self.requests, poll_ms)
        while data is not None:
            try:
                message = protocol.decode(data)
            except protocol.ProtocolError:
                message = None
            if isinstance(message, protocol.EvalRequest):
                if newest is not None:
                    self.skipped += 1
                newest = message
            data = transport.recv(self.requests, 0)
        return newest

    def heartbeat(self, force: bool = False) -> bool:
        """Tell the launcher it is alive (about once a second; cheap to call every step); True when the run is
        stopping."""
        if force or self.beat.due():
            self.stats.send(
                protocol.EvaluatorStats(
                    pid=os.getpid(),
                    time=time.time(),
                    evaluations=self.evaluations,
                    episodes=self.episodes,
                    skipped=self.skipped,
                ).encode(),
            )
        return should_stop(self.stop_event)

    def evaluate(self, request: protocol.EvalRequest) -> None:
        """Play eval.episodes with the learner's current weights (or the request's checkpoint's) and report; nothing
        if the run stops meanwhile."""
        cfg = self.cfg
        self.heartbeat(force=True)
        if request.checkpoint:
            state = checkpoint.load(
                request.checkpoint
            )  # one that cannot be read: the role's crash, which the launcher tells
            self.player.model.load_state_dict(state["model"])
            taken_at, step, version = float(state["saved_at"]), state["learner_step"], state["policy_version"]
        else:
            got = wait_for_weights(self.ctx, self.wiring, REQUESTER_ID, cfg.transport.poll_timeout_ms, self.stop_event)
            if got is None:
                return
            taken_at, step, version = time.time(), got.learner_step, got.version
            load_flat(self.player.model, got.flat)
        started = time.monotonic()
        played = []
        for i in range(cfg.eval.episodes):
            result = self.player.play(cfg.eval.seed + i, idle=self.heartbeat)
            if result is None:
                return
            played.append(result)
        q = math.nan
        if self.player.agent.acts_greedily and cfg.eval.held_out_states:
            if self.states is None:
                shape = (cfg.env.frame_stack, *self.player.frame_shape)
                self.states = held_out_states(cfg, self.folder, shape, self.heartbeat)
            q = mean_max_q(self.player, self.states, cfg.eval.seed, idle=self.heartbeat)
        score = np.array([r["score"] for r in played], np.float64)
        stats = summary(score, cfg.eval.seed)
        human = scores.human_normalised(self.rom, stats["mean"]) if self.rom is not None else None
        normalised = math.nan if human is None else human  # None: a game without reference scores
        best = (
            cfg.run.best_by == "eval" and stats["mean"] > self.best and self._keep_best(request, step, version, stats)
        )
        self.evaluations += 1
        self.episodes += len(played)  # of finished evaluations: an evaluation cut short counts nowhere
        self.stats.send_waiting(
            protocol.EvalResult(
                pid=os.getpid(),
                index=request.index,
                env_frames=request.env_frames,
                weights_time=taken_at,
                learner_step=step,
                policy_version=version,
                protocol=self.protocol,
                episodes=len(played),
                mean=stats["mean"],
                ci95_low=stats["ci95_low"],
                ci95_high=stats["ci95_high"],
                median=stats["median"],
                min=stats["min"],
                max=stats["max"],
                human_normalised=normalised,
                mean_max_q=q,
                frames_played=sum(r["frames"] for r in played),
                seconds=time.monotonic() - started,
                best=int(best),
                final=int(bool(request.checkpoint)),
            ).encode(),
            RESULT_SEND_MS,
        )
        self.heartbeat(force=True)  # its counts with the result

    def _keep_best(self, request: protocol.EvalRequest, step: int, version: int, stats: dict[str, float]) -> bool:
        """best.pt: the evaluated weights (model only: zrl-eval and --init-from read it) with their evaluation,
        and best.json that evaluation; False (and nothing changed) when the disk refuses them."""
        record = {
            "by": "eval",
            "checkpoint": checkpoint.BEST,
            "eval_mean": stats["mean"],
            "eval_ci95": [stats["ci95_low"], stats["ci95_high"]],
            **self.terms,
            "asked_at_env_frames": request.env_frames,  # eval.csv's row: the frames when its weights were taken
            "learner_step": step,
            "policy_version": version,
            "wall_time": time.time(),
        }
        state = {
            "model": self.player.model.state_dict(),
            "config": to_dict(self.cfg),
            "learner_step": step,
            "policy_version": version,
            "env_frames": request.env_frames,
            "evaluation": record,
            "saved_at": time.time(),
        }
        try:
            checkpoint.make_folder(self.checkpoints)  # a link in its place is refused, not written through
            checkpoint.save(self.checkpoints / checkpoint.BEST, state)
            checkpoint.write_atomic(self.checkpoints / "best.json", (json.dumps(record, indent=2) + "\n").encode())
        except OSError:
            return False
        self.best = stats["mean"]
        return True
