"""Every check a launch makes before any process of its run starts, each failing with a ConfigError that names the
key and what would work: CurveZMQ keys, the environment, the results folder, and which keys a resume may change (the
network, the device and a checkpoint to start from, which only torch can tell: zrl.launch.network)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from zrl import envs, transport
from zrl.config import SAFE_ON_RESUME, TOP_KEYS, Config, ConfigError, to_dict

# Keys safe on resume that a deterministic run still cannot change: the worker's env count (the replayed
# actions are per env), and the thread counts, device and first-convolution path (floating-point sums are
# split by them).
FIXED_WHEN_DETERMINISTIC = (
    "workers.envs_per_worker",
    "workers.torch_threads",
    "learner.torch_threads",
    "learner.device",
    "learner.unroll_conv",
    "broker.torch_threads",
)


def preflight(cfg: Config) -> envs.EnvSpec:
    """Every check that needs no process and no torch: CurveZMQ keys, environment, results folder (the network
    and the device: zrl.launch.network)."""
    if cfg.transport.curve_keys:  # here, not in zrl.config, which transport imports
        transport.load_curve_keys(cfg.transport.curve_keys)
    spec = envs.probe(cfg.env)
    check_results_dir(Path(cfg.run.results_dir))
    return spec


def check_results_dir(results: Path) -> None:
    """ConfigError unless ``results`` is a folder this process can write, or one it could make: checked without
    making it, so that a launch that fails a later check leaves nothing in (or of) the results folder."""
    hint = "give a folder you can write with --set run.results_dir=PATH"
    whole = Path(os.path.abspath(results))
    existing = next(p for p in (whole, *whole.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"run.results_dir: cannot create {results} (Not a directory); {hint}")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = f"{results} is not writable" if existing == whole else f"cannot create {results} (Permission denied)"
        raise ConfigError(f"run.results_dir: {what}; {hint}")


def resolve_model_kind(cfg: Config, kind: str) -> Config:
    """The config with model.kind as this run builds it (auto resolved by the frames), so that the run folder's
    config.toml and the checkpoints name the network whatever a later zrl means by auto."""
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, kind=kind))


def check_resume_changes(run_dir: Path, old_cfg: Config, new_cfg: Config) -> None:
    """ConfigError unless ``new_cfg`` differs from the run's stored ``old_cfg`` only in SAFE_ON_RESUME keys (and,
    for a deterministic run, not in FIXED_WHEN_DETERMINISTIC ones); its top-level keys (algo, ...) never."""
    old, new = to_dict(old_cfg), to_dict(new_cfg)
    for section, values in new.items():
        if section in TOP_KEYS:
            if values != old[section]:
                raise ConfigError(f"{section}: cannot change when resuming {run_dir} (it would not be the same run)")
            continue
        if section == "replay":
            if values != old["replay"]:
                raise ConfigError("replay: the replays cannot change on resume; start a new run (--init-from) instead")
            continue
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if value != old[section][key] and dotted not in SAFE_ON_RESUME:
                raise ConfigError(
                    f"{dotted}: cannot change when resuming {run_dir} (it would not be the same run); "
                    f"keys that may change: {', '.join(SAFE_ON_RESUME)}"
                )
            if value != old[section][key] and new_cfg.run.deterministic and dotted in FIXED_WHEN_DETERMINISTIC:
                raise ConfigError(
                    f"{dotted}: cannot change when resuming the deterministic run {run_dir}; it would "
                    f"change the results (keys fixed: {', '.join(FIXED_WHEN_DETERMINISTIC)})"
                )


SHM_DIR = "/dev/shm"


def check_shm_room(cfg: Config, spec: envs.EnvSpec, shm_dir: str = SHM_DIR) -> None:
    """ConfigError when the rings (one per local worker and remote slot) would not fit the room ``shm_dir`` has
    free: found before the run folder is made, rather than as the rings are created."""
    from zrl.config import worker_slots
    from zrl.roles.run_wiring import make_ring_spec

    need = worker_slots(cfg) * make_ring_spec(cfg, spec).nbytes
    try:
        st = os.statvfs(shm_dir)
    except OSError:  # no such folder here: the rings' creation says what is wrong
        return
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise ConfigError(
            f"workers.ring_slots: the rings need {need / 1e6:,.0f} MB of shared memory and {shm_dir} has "
            f"{free / 1e6:,.0f} MB free; lower workers.ring_slots (0: sized from the replay), workers.count or "
            f"workers.remote, shrink the replays, use smaller frames (env.resolution, env.grayscale: "
            f"{int(np.prod(spec.frame_shape))} bytes each now), or give {shm_dir} more room"
        )
