"""Where a launch starts from when it does not start afresh: a run continued in its own folder (``resume``: the
learner from the run's newest usable checkpoint, its counts going on; the replays from its newest replay
checkpoint under run.checkpoint_replay), or a new run from another run's checkpoint (--init-from). The launcher
reads the run folder and the checkpoints with its parts (folder, checks, network) and hands what it found here."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from zrl import config as config_mod
from zrl.config import Config, ConfigError
from zrl.launch.console import Console
from zrl.replay.snapshot import SnapshotMismatch
from zrl.replay_checkpoint import ManifestError, check_manifest, new_stream, newest, replay_folder, restore_frames
from zrl.roles.run_wiring import RunWiring, StartFrom

log = logging.getLogger("zrl")


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run goes on: the learner's checkpoint, the env frames and each replay's sample calls it
    holds, and why each newer checkpoint was skipped."""

    start: StartFrom
    env_frames: int
    sample_calls: tuple[int, ...]
    skipped: tuple[str, ...]


def stored_config(run_dir: Path, sets: list[str], options: dict) -> tuple[Path, Config, Config]:
    """The run's config.toml, and the config it holds, as stored and with ``sets`` and ``options`` over it."""
    stored = run_dir / "config.toml"
    return stored, config_mod.load(stored, stored=True), config_mod.load(stored, sets, options, stored=True)


def resume_point(run_dir: Path, newest_usable: tuple[Path | None, dict | None, list[str]]) -> ResumePoint:
    """The point ``newest_usable`` (network.newest_usable's answer for ``run_dir``) names; a ConfigError when the
    run holds no usable checkpoint."""
    path, state, skipped = newest_usable
    if path is None or state is None:
        reasons = "; ".join(skipped) if skipped else "there is none"
        raise ConfigError(f"{run_dir / 'checkpoints'}: no usable checkpoint to resume from ({reasons})")
    return ResumePoint(StartFrom(str(path)), state["env_frames"], state["sample_calls"], tuple(skipped))


def start_text(
    start: StartFrom | None, resumed: Path | None, env_frames: int, episodes: int, checkpoint_replay: bool
) -> str:
    """What a launch says of where it starts from: a run resumed in ``resumed`` (its counts and what its replays
    start with), a new run from a checkpoint (--init-from), or nothing when it starts afresh."""
    if resumed is not None and start is not None:
        replays = (
            "the replays start from the newest replay checkpoint (run.checkpoint_replay)"
            if checkpoint_replay
            else "the replays refill before learning resumes (run.checkpoint_replay = true keeps them)"
        )
        return f"resuming {resumed} from {start.path}: {env_frames:,} env frames, {episodes} episodes so far; {replays}"
    if start is not None:
        return f"starting from the weights{' and optimiser state' if start.optimizer else ''} of {start.path}"
    return ""


def continue_hint(run_dir: Path, latest: Path | None) -> str:
    """How a run that stopped on a failure goes on: from ``latest``, its last checkpoint, with --resume."""
    if latest:
        return f"the last checkpoint is {latest}; continue with: zrl-launch --resume {run_dir}"
    return "no checkpoint was written yet"


def restart_point(
    newest_usable: tuple[Path | None, dict | None, list[str]], start: StartFrom | None, sample_calls: tuple[int, ...]
) -> tuple[StartFrom | None, tuple[int, ...], str]:
    """Where the run's roles start again after one was lost (run.restart_policy = "resume"): the checkpoint
    ``newest_usable`` names (the ones skipped logged), or where this launch began (``start``, ``sample_calls``)
    when there is none yet; with its name, to say."""
    path, state, skipped = newest_usable
    for reason in skipped:
        log.warning("skipped a checkpoint that cannot be used: %s", reason)
    if path is None or state is None:
        return start, sample_calls, "where this launch began (no checkpoint yet)"
    return StartFrom(str(path)), state["sample_calls"], path.name


def init_start(init_from: str, init_optimizer: bool, held: dict, cfg: Config) -> StartFrom:
    """--init-from: a new run's learner starts from the weights of ``init_from`` (and its optimiser state if
    ``init_optimizer``); ``held``: what network.start_checkpoint read of it. A ConfigError when the state asked
    for is not there, or is another optimiser's."""
    theirs = held["optimizer"]
    if init_optimizer and not held["has_optimizer"]:
        raise ConfigError(
            f"--init-optimizer: {init_from} holds a network's weights only (best.pt kept by the evaluator "
            "under run.best_by = eval); drop --init-optimizer, or start from one of the run's ckpt_*.pt"
        )
    if init_optimizer and theirs != cfg.learner.optimizer:
        raise ConfigError(
            f"--init-optimizer: {init_from} holds {theirs} state and this run uses "
            f"learner.optimizer = {cfg.learner.optimizer!r}; drop --init-optimizer or use {theirs}"
        )
    return StartFrom(str(init_from), resume=False, optimizer=init_optimizer)


class SavedReplays:
    """run.checkpoint_replay: the replay checkpoints the broker writes in the run folder, and the one it starts
    with."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.stream = ""  # this launch's rings' token in replay file names
        self.rings_hold = ""  # the replay checkpoint whose frames were put back into them

    def roles(self, run_dir: Path, wiring, start: bool) -> RunWiring:
        """``wiring.roles`` (``wiring``: the run's Wiring) with the broker writing replay checkpoints in the run
        folder and starting with the newest one there whose frames the rings hold. At the launch's ``start`` (new
        rings) a resumed run's newest one has its frames put back into them first; one that does not fit (another
        ring layout) or cannot be read is said, and the replays refill. At a restart of the roles the rings go on:
        the newest one is used if these rings wrote it (its stream) or took its frames at the start. A manifest
        the broker did not write (a name outside the folder, a symlink, a key of the wrong type) is a ConfigError
        at the start, and at a restart the replays refill."""
        folder, roles = replay_folder(run_dir), wiring.roles
        if start:
            self.stream, self.rings_hold = new_stream(), ""
        found, state, text = newest(folder), "", ""
        if found is not None and start:
            path, _ = found
            try:
                restored = restore_frames(path, wiring.rings, wiring.ring_spec)
            except ManifestError as err:
                raise ConfigError(
                    f"{err} (not a replay checkpoint zrl wrote); --set run.checkpoint_replay=false starts without "
                    "the saved replay"
                ) from None
            except SnapshotMismatch as err:
                text = f"the replays refill: {err}"
            else:
                state = self.rings_hold = str(path)
                text = f"the replays start from {path.name} ({restored:,} frames put back into the rings)"
        elif found is not None:
            path, manifest = found
            if manifest.get("stream") != self.stream and str(path) != self.rings_hold:
                text = f"the replays refill: the frames of {path.name} are not in this launch's rings"
            else:
                try:
                    check_manifest(path, manifest)
                    state = str(path)
                except ManifestError as err:
                    text = f"the replays refill: {err}"
        if text:
            log.info(text)
            self.console.say(text)
        return dataclasses.replace(roles, replay_dir=str(folder), replay_state=state, replay_stream=self.stream)
