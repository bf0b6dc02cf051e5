"""What zrl-launch must know that only PyTorch can tell: the network a config builds (its kind and its size, built
on PyTorch's meta device), whether a CUDA device is there, and which checkpoint a run can start from. The
launcher asks each in a child of its fork server (``zrl.forkserver.ask``), which has torch imported already, and
never imports torch itself. This module imports no torch at its top; its functions do, in that child.

What comes back is small and plain: a :class:`Network`, and of a checkpoint the few fields the launcher reads,
never its tensors.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from zrl import agents, checkpoint, envs, protocol
from zrl.config import Config, ConfigError, devices


@dataclasses.dataclass(frozen=True)
class Network:
    """The network a config builds for an environment."""

    kind: str  # model.kind as built: auto resolved by the frames
    parameters: int


def describe(cfg: Config, spec: envs.EnvSpec) -> Network:
    """The network ``cfg`` builds for ``spec``'s frames, or the ConfigError that names the key that stops it (a
    model key, weights too large for one message, or a CUDA device on a machine without one)."""
    from zrl.models import model_kind, parameter_count

    try:
        model = _shapes(cfg, spec)
        kind = model_kind(cfg.model, spec.frame_shape)
    except ConfigError:
        raise  # a model key's own mistake, named by the model
    except ValueError as err:
        raise ConfigError(f"model.kind: {err}") from None
    for key, device in devices(cfg):
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise ConfigError(f"{key}: {device!r} but no CUDA device is available; use auto or cpu")
    parameters = parameter_count(model)
    check_weights_fit(parameters)
    return Network(kind, parameters)


def check_weights_fit(parameters: int) -> None:
    """ConfigError when the network's weights, which travel to the workers as one float32 message, would be
    larger than a zrl socket takes (MAX_MESSAGE_BYTES): zmq would drop them and the workers would wait for
    weights for ever."""
    most = (protocol.MAX_MESSAGE_BYTES - protocol.WEIGHTS_HEADER_BYTES) // 4
    if parameters > most:
        raise ConfigError(
            f"model: the network has {parameters:,} parameters ({parameters * 4 / 2**20:.0f} MiB as "
            f"float32), more than the {most:,} that fit in one weights message of "
            f"{protocol.MAX_MESSAGE_BYTES // 2**20} MiB; make it smaller (model.hidden_size, model.mlp_hidden, "
            "apex.embedding_dim)"
        )


def _shapes(cfg: Config, spec: envs.EnvSpec):
    return agents.get(cfg.algo).model_shapes(cfg, spec.frame_shape, spec.frame_dtype, spec.num_actions)


def usable_checkpoint(path: Path, cfg: Config, spec: envs.EnvSpec) -> dict:
    """A checkpoint that loads, verifies and fits this config's game and network, or ConfigError."""
    try:
        state = checkpoint.load(path)
        checkpoint.check_compatible(state, path, cfg.env.id, _shapes(cfg, spec))
    except checkpoint.CheckpointError as err:
        raise ConfigError(str(err)) from None
    return state


def start_checkpoint(path: Path, cfg: Config, spec: envs.EnvSpec) -> dict[str, Any]:
    """Of a checkpoint a new run starts from (--init-from), once it is usable: the optimiser it was trained with
    (``optimizer``, None when it does not say) and whether it holds that optimiser's state (``has_optimizer``;
    best.pt kept by the evaluator holds the network only)."""
    state = usable_checkpoint(path, cfg, spec)
    return {
        "optimizer": state.get("config", {}).get("learner", {}).get("optimizer"),
        "has_optimizer": "optimizer" in state,
    }


def newest_usable(run_dir: Path, cfg: Config, spec: envs.EnvSpec) -> tuple[Path | None, dict | None, list[str]]:
    """The run's newest checkpoint that loads and fits ``cfg``, what the launcher reads of it (``env_frames``,
    and each replay's ``sample_calls``, from which elite lambda annealing goes on), and why each newer one was
    skipped ((None, None, reasons) when none is usable). A write cut short by a crash is removed; a damaged file
    is set aside as NAME.bad, kept for a look, so that it is never picked again."""
    folder = run_dir / "checkpoints"
    checkpoint.remove_partials(folder)
    skipped = []
    shapes = None
    for path, state, err in checkpoint.newest_good(folder):
        reason = str(err) if err is not None else None
        if reason is None:
            assert state is not None  # newest_good gives a state or the error that kept it from loading
            shapes = shapes if shapes is not None else _shapes(cfg, spec)
            try:
                checkpoint.check_compatible(state, path, cfg.env.id, shapes)
            except checkpoint.CheckpointError as bad:
                reason = str(bad)
        if reason is not None and err is not None and checkpoint.is_corrupt(err):
            skipped.append(reason + f" (set aside as {path.name}.bad)")
            path.rename(path.with_name(path.name + ".bad"))
            if checkpoint.hash_path(path).exists():
                checkpoint.hash_path(path).rename(path.with_name(path.name + ".bad" + checkpoint.HASH_SUFFIX))
            continue
        if reason is not None:
            skipped.append(reason)
            continue
        assert state is not None  # as above: it loaded
        index = state.get("replay_index") or {}
        calls = tuple(int(c) for c in index["sample_calls"]) if "sample_calls" in index else ()
        return path, {"env_frames": int(state["env_frames"]), "sample_calls": calls}, skipped
    return None, None, skipped
