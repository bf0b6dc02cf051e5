"""Checkpoints: atomic writes that survive a kill at any moment, verification by SHA-256, and a one-line
refusal for every kind of bad file, including one that carries a pickle payload."""

from __future__ import annotations

import hashlib
import os
import pickle
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from zrl import checkpoint
from zrl.checkpoint import CheckpointError
from zrl.config import ModelConfig
from zrl.models import build_model

SHAPE = (4,)


def _model(hidden=(8,)):
    return build_model(ModelConfig(kind="mlp", mlp_hidden=hidden, feature_size=4), SHAPE, "float32", 1, 2)


def _state(env_id="CartPole-v1", hidden=(8,)) -> dict:
    return {"model": _model(hidden).state_dict(), "learner_step": 7, "config": {"env": {"id": env_id}}}


def _rehash(path: Path) -> None:
    """Record the file's current hash, as a careful attacker (or a bug) would."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    checkpoint.hash_path(path).write_text(f"{digest}  {path.name}\n")


@pytest.mark.unit
def test_round_trip_with_its_hash_beside_it(tmp_path):
    path = checkpoint.save(tmp_path / checkpoint.PATTERN.format(step=7), _state())
    assert checkpoint.hash_path(path).read_text().split()[0] == hashlib.sha256(path.read_bytes()).hexdigest()
    state = checkpoint.load(path)
    assert state["learner_step"] == 7 and state["format"] == checkpoint.FORMAT
    checkpoint.check_compatible(state, path, "CartPole-v1", _model())
    best = checkpoint.copy(path, tmp_path / checkpoint.BEST)
    assert checkpoint.load(best)["learner_step"] == 7
    assert checkpoint.periodic(tmp_path) == [path]


def _one_line(err: CheckpointError, path: Path, reason: str) -> None:
    text = str(err)
    assert "\n" not in text and text.startswith(str(path)) and reason in text, text


@pytest.mark.unit
@pytest.mark.parametrize(
    "damage, reason",
    [
        ("truncate", "SHA-256 mismatch"),
        ("empty", "empty"),
        ("bitflip", "SHA-256 mismatch"),
        ("nohash", "no SHA-256 recorded"),
        ("truncate_rehashed", "refused, not a plain zrl checkpoint"),
        ("newer", "newer zrl"),
    ],
)
def test_every_bad_file_gets_a_one_line_reason(tmp_path, damage, reason):
    path = checkpoint.save(tmp_path / "ckpt.pt", _state())
    data = path.read_bytes()
    if damage.startswith("truncate"):
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "bitflip":
        flipped = bytearray(data)
        flipped[len(data) // 3] ^= 0x10
        path.write_bytes(bytes(flipped))
    elif damage == "nohash":
        checkpoint.hash_path(path).unlink()
    elif damage == "newer":
        path = checkpoint.save(path, {**_state(), "format": checkpoint.FORMAT + 1})
    if damage.endswith("rehashed"):
        _rehash(path)
    with pytest.raises(CheckpointError) as err:
        checkpoint.load(path)
    _one_line(err.value, path, reason)


@pytest.mark.unit
def test_wrong_game_and_wrong_model_are_named(tmp_path):
    path = checkpoint.save(tmp_path / "ckpt.pt", _state(env_id="Acrobot-v1"))
    with pytest.raises(CheckpointError) as err:
        checkpoint.check_compatible(checkpoint.load(path), path, "CartPole-v1", _model())
    _one_line(err.value, path, "trained on Acrobot-v1, not CartPole-v1 (wrong game)")
    path = checkpoint.save(tmp_path / "ckpt.pt", _state(hidden=(16,)))
    with pytest.raises(CheckpointError) as err:
        checkpoint.check_compatible(checkpoint.load(path), path, "CartPole-v1", _model())
    _one_line(err.value, path, "wrong model")


@pytest.mark.unit
def test_a_nature_net_checkpoint_from_before_the_small_default_says_which_model_to_set(tmp_path):
    """Checkpoints written before atari_small became the default stored model.kind = "auto" for the Nature
    net; loading one into a run of the new default names the keys that would make it fit."""
    from zrl.config import ModelConfig
    from zrl.models import AtariNet, build_model

    old = AtariNet(4, 6, 512, 512, "atari")
    state = {
        "config": {"env": {"id": "ALE/Pong-v5"}, "model": {"kind": "auto", "hidden_size": 512}},
        "model": old.state_dict(),
    }
    with pytest.raises(CheckpointError) as err:
        checkpoint.check_compatible(state, "old.pt", "ALE/Pong-v5", build_model(ModelConfig(), (84, 84), "|u1", 4, 6))
    assert "model.kind = 'atari' and model.hidden_size = 512" in str(err.value)


class _Payload:
    """Unpickling this creates a marker file: the side effect a malicious checkpoint would have."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.unit
@pytest.mark.parametrize("form", ["torch_zip", "raw_pickle"])
def test_a_checkpoint_carrying_a_pickle_payload_is_refused_and_never_runs(tmp_path, form):
    marker = tmp_path / "pwned"
    path = tmp_path / "ckpt.pt"
    state = {"format": checkpoint.FORMAT, **_state(), "extra": _Payload(marker)}
    if form == "torch_zip":
        torch.save(state, path)
    else:
        path.write_bytes(pickle.dumps(state))
    _rehash(path)  # the hash matches: only weights_only stands between the file and the payload
    with pytest.raises(CheckpointError) as err:
        checkpoint.load(path)
    _one_line(err.value, path, "refused")
    assert not marker.exists()


WRITERS = """
import os, signal, sys, traceback, torch
from pathlib import Path
from zrl import checkpoint
# As zrl's fork server (zrl/launch/wiring.py), this process only imports: each writer forked runs the first torch op.
torch.set_num_threads(1)
folder = Path(sys.argv[1])
# Python leaves SIGINT ignored when it starts with it ignored (a job started in the background, as CI may be): each
# writer, forked with this handler, must take Ctrl-C as a terminal user's process does.
signal.signal(signal.SIGINT, signal.default_int_handler)
print("ready", flush=True)
for _ in sys.stdin:  # a line: fork a writer, say its pid, and once it is dead, its wait status
    pid = os.fork()
    if pid == 0:
        try:
            state = {"weights": torch.randn(4_000_000), "learner_step": 0}  # 16 MB: a write takes a while
            newest = checkpoint.latest(folder)  # each writer goes on after the ones killed before it
            step = int(newest.stem.removeprefix("ckpt_")) if newest else 0
            while True:
                step += 1
                state["learner_step"] = step
                checkpoint.save(folder / checkpoint.PATTERN.format(step=step), state)
                checkpoint.prune(folder, 2)
        except KeyboardInterrupt:
            os._exit(130)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    print(pid, flush=True)
    print(os.waitpid(pid, 0)[1], flush=True)
"""


def _newest_step(folder: Path) -> int:
    """The step in the name of the newest periodic checkpoint in ``folder``; 0 when there is none."""
    newest = checkpoint.latest(folder)
    return int(newest.stem.removeprefix("ckpt_")) if newest else 0


def _line(stream, timeout: float) -> bytes:
    """The next line ``stream`` (an unbuffered pipe) gives within ``timeout`` seconds."""
    import select

    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no word from the writers' process in {timeout:g} s"
    return stream.readline().strip()


@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_killed_while_writing_a_loadable_checkpoint_always_remains(tmp_path, signum):
    """A real process writes 16 MB checkpoints back to back and is killed at a random moment, 10 times (each writer
    forked, torch imported already, by one process that reaps it, each going on from the step its predecessor
    reached); every time the newest checkpoint that verifies loads and is one the killed writer wrote, and no temp
    file passes for a checkpoint."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    rng = __import__("random").Random(0)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    writers = subprocess.Popen(
        [sys.executable, "-c", WRITERS, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,
        env=env,
        start_new_session=True,  # its group holds it and its writers: one killpg ends them all
    )
    try:
        assert _line(writers.stdout, 60) == b"ready"
        for _ in range(10):
            before = _newest_step(folder)
            writers.stdin.write(b"go\n")
            pid = int(_line(writers.stdout, 10))
            deadline = time.monotonic() + 60  # a loaded machine writes 16 MB slowly: wait for its first one
            while _newest_step(folder) <= before and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _newest_step(folder) > before, "the writer wrote no checkpoint in 60 s"
            time.sleep(rng.uniform(0.0, 0.3))
            os.kill(pid, signum)
            status = int(_line(writers.stdout, 60))  # an interrupt lands once the write in progress returns
            assert os.waitstatus_to_exitcode(status) == (-signal.SIGKILL if signum == signal.SIGKILL else 130)
            assert all(not p.name.startswith(".") for p in checkpoint.periodic(folder))
            good = next((state for _, state, err in checkpoint.newest_good(folder) if state is not None), None)
            assert good is not None and good["learner_step"] > before  # one of this writer's
    finally:
        os.killpg(writers.pid, signal.SIGKILL)
        writers.wait()
        writers.stdin.close()
        writers.stdout.close()
    leftovers = [p.name for p in folder.iterdir() if ".tmp-" in p.name]
    if signum == signal.SIGINT:
        assert not leftovers  # an orderly interrupt removes its temp file


@pytest.mark.unit
@pytest.mark.parametrize("fail_at, expected_step", [(1, 1), (2, 1), (3, 2)])
def test_overwriting_a_name_never_leaves_a_file_that_fails_its_hash(tmp_path, monkeypatch, fail_at, expected_step):
    """best.pt and a final checkpoint at a periodic one's step are overwritten in place: a write that fails
    (a full disk) or stops at any point leaves the old file or the new one, verifying either way."""
    path = checkpoint.save(tmp_path / checkpoint.BEST, {**_state(), "learner_step": 1})
    real, calls = checkpoint.write_atomic, []

    def failing(target, data):
        calls.append(target)
        if len(calls) == fail_at:  # 1: the hash file with both hashes; 2: the data; 3: the final hash
            raise OSError(28, "No space left on device")
        real(target, data)

    monkeypatch.setattr(checkpoint, "write_atomic", failing)
    with pytest.raises(OSError):
        checkpoint.save(path, {**_state(), "learner_step": 2})
    monkeypatch.setattr(checkpoint, "write_atomic", real)
    assert checkpoint.load(path)["learner_step"] == expected_step


@pytest.mark.unit
def test_a_damaged_hash_file_is_a_one_line_refusal_and_orphan_hashes_are_pruned(tmp_path):
    path = checkpoint.save(tmp_path / checkpoint.PATTERN.format(step=1), _state())
    checkpoint.hash_path(path).write_bytes(b"\xff\xfe not a hash")
    with pytest.raises(CheckpointError) as err:
        checkpoint.load(path)
    _one_line(err.value, path, "SHA-256 mismatch")
    orphan = checkpoint.hash_path(tmp_path / checkpoint.PATTERN.format(step=2))
    orphan.write_text("0" * 64 + "\n")
    checkpoint.prune(tmp_path, 3)
    assert not orphan.exists() and path.exists()


@pytest.mark.unit
def test_a_write_the_disk_refuses_leaves_each_name_and_its_hash_as_they_were(tmp_path):
    """A checkpoint write that fails part-way (here the kernel's file-size limit, as a full disk would) raises,
    and leaves no partial file and no hash file naming a checkpoint that is not there: a name that held a
    checkpoint still holds it, verifiable; a new name stays absent."""
    kept = tmp_path / "best.pt"
    checkpoint.save(kept, {"x": torch.zeros(10)})
    before = (kept.read_bytes(), checkpoint.hash_path(kept).read_bytes())
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
    try:
        for path in (kept, tmp_path / "ckpt_000000100.pt"):
            with pytest.raises(OSError):
                checkpoint.save(path, {"x": torch.zeros(1_000_000)})  # 4 MB
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert (kept.read_bytes(), checkpoint.hash_path(kept).read_bytes()) == before
    assert checkpoint.load(kept)["x"].shape == (10,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "best.pt.sha256"]
