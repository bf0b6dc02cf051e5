"""Issue 38, item 4: data never becomes code. An env id ``module:Env`` imports its module only when the user named it
(their own --config, --set, an option) or trusted it (--trust-env-module); never from a resumed run's config.toml, a
checkpoint's stored config or the config a run sends a remote worker; never from inside a results or run folder;
and a launch whose working folder is a run folder does not import that folder's files.

The payload is a module ``sec_probe`` written to the test's folder, whose import touches a marker file: the marker
is the evidence that data ran as code."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
import zmq
from conftest import REPO, refused, run_command, start_command

from zrl import checkpoint, protocol
from zrl.cli.eval import eval_main
from zrl.cli.launch import launch_main
from zrl.config import dumps, load, to_dict

pytestmark = pytest.mark.integration

CARTPOLE = REPO / "config" / "cartpole.toml"
PAYLOAD = "sec_probe:CartPole-v1"  # CartPole-v1 is registered already: the import is the module's only effect


def _payload(folder: Path, marker: Path, name: str = "sec_probe") -> Path:
    """A module ``name`` in ``folder`` whose import touches ``marker``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    return folder


@pytest.fixture
def probe_module(tmp_path, monkeypatch) -> Path:
    """sec_probe on this process's path (zrl-launch's refusals run in this process); the marker it would touch."""
    marker = tmp_path / "imported"
    monkeypatch.syspath_prepend(str(_payload(tmp_path / "mods", marker)))
    monkeypatch.delitem(sys.modules, "sec_probe", raising=False)
    yield marker
    sys.modules.pop("sec_probe", None)


def _run_folder(tmp_path: Path, env_id: str) -> Path:
    """A run folder as another hand left it: a config.toml naming ``env_id``, no checkpoint."""
    results = tmp_path / "results"
    run_dir = results / "CartPole-v1_1700000000"
    run_dir.mkdir(parents=True)
    cfg = load(CARTPOLE, [f'env.id="{env_id}"', f'run.results_dir="{results}"'])
    (run_dir / "config.toml").write_text(dumps(cfg))
    return run_dir


def test_a_resumed_runs_config_toml_does_not_import_its_env_module(tmp_path, probe_module):
    run_dir = _run_folder(tmp_path, PAYLOAD)
    err = refused(launch_main, "--resume", run_dir)
    assert not probe_module.exists(), "the resume imported the module its config.toml named"
    assert str(run_dir / "config.toml") in err and "env.id" in err and "--trust-env-module sec_probe" in err, err


@pytest.mark.parametrize("given", [["--trust-env-module", "sec_probe"], ["--set", f'env.id="{PAYLOAD}"']])
def test_the_flag_or_the_users_own_set_lets_a_resume_import_it(tmp_path, probe_module, given):
    run_dir = _run_folder(tmp_path, PAYLOAD)
    err = refused(launch_main, "--resume", run_dir, *given)  # past the check, the folder has no checkpoint
    assert probe_module.exists()
    assert "--trust-env-module" not in err and "no usable checkpoint" in err, err


def test_a_module_inside_the_results_folder_is_refused_even_when_trusted(tmp_path, monkeypatch):
    """The results folder's parent on the path (as the working folder is for ``python -m``) makes
    results.<run>.<module> importable; trusting its name does not make the folder's files code."""
    run_dir = _run_folder(tmp_path, "results.planted.sec_planted:CartPole-v1")
    marker = tmp_path / "imported"
    _payload(tmp_path / "results" / "planted", marker, "sec_planted")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "results" or n.startswith("results.")]:
        monkeypatch.delitem(sys.modules, name)
    err = refused(launch_main, "--resume", run_dir, "--trust-env-module", "results.planted.sec_planted")
    assert not marker.exists(), "a module inside the results folder was imported"
    assert "inside" in err and "results" in err, err


def test_zrl_eval_does_not_import_the_env_module_a_checkpoint_names(tmp_path, probe_module):
    cfg = load(CARTPOLE, [f'env.id="{PAYLOAD}"'])
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    ckpt = checkpoint.save(
        tmp_path / "run" / "checkpoints" / checkpoint.PATTERN.format(step=1),
        {"model": {}, "learner_step": 1, "env_frames": 0, "config": to_dict(cfg)},
    )
    err = refused(eval_main, ckpt, "--episodes", "1")
    assert not probe_module.exists(), "zrl-eval imported the module its checkpoint's config named"
    assert str(ckpt) in err and "--trust-env-module sec_probe" in err, err


def _fake_gate(port_holder: list, stop: threading.Event, config: str) -> None:
    """A run's gate as a hostile host would run it: it welcomes every Join with ``config``."""
    ctx = zmq.Context()
    gate = ctx.socket(zmq.ROUTER)
    gate.setsockopt(zmq.LINGER, 0)
    port_holder.append(gate.bind_to_random_port("tcp://127.0.0.1"))
    welcome = protocol.Welcome(
        run="CartPole-v1_1700000000", worker_id=0, generation=0, env_frames=0, env_frames_start=0,
        weights_port=1, env_spec="not what any env here gives", config=config,
    ).encode()  # fmt: skip
    try:
        while not stop.is_set():
            if gate.poll(100):
                who, data = gate.recv_multipart()
                if isinstance(protocol.decode(data), protocol.Join):
                    gate.send_multipart([who, welcome])
    finally:
        gate.close()
        ctx.term()


@pytest.mark.parametrize("trust", [False, True])
def test_a_remote_worker_does_not_import_the_env_module_a_run_sends(tmp_path, trust):
    marker = tmp_path / "imported"
    mods = _payload(tmp_path / "mods", marker)
    stop, port = threading.Event(), []
    gate = threading.Thread(target=_fake_gate, args=(port, stop, dumps(load(CARTPOLE, [f'env.id="{PAYLOAD}"']))))
    gate.start()
    try:
        while not port:
            threading.Event().wait(0.01)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(mods), os.environ.get("PYTHONPATH")]))}
        args = ["--connect", f"tcp://127.0.0.1:{port[0]}", *(["--trust-env-module", "sec_probe"] if trust else [])]
        proc = start_command("zrl-worker", *args, cwd=tmp_path, env=env)
        _, err = proc.communicate(timeout=120)
    finally:
        stop.set()
        gate.join()
    assert proc.returncode == 2, err
    if trust:  # past the check: the worker imports it, then finds its env differs from the run's
        assert marker.exists() and "--trust-env-module" not in err and "env gives" in err, err
    else:
        assert not marker.exists(), "the worker imported the module the run's config named"
        assert "env.id" in err and "--trust-env-module sec_probe" in err, err


@pytest.mark.parametrize("trust", [False, True])
def test_zrl_sweep_resume_passes_the_trust_on_only_when_its_own_command_line_gave_it(tmp_path, trust):
    """A stopped run of a sweep is resumed by zrl-launch --resume on its config.toml, which another hand may have
    changed since: the sweep vouches for its module only with its own --trust-env-module. Resumed from inside its
    folder, as ``cd OUT; zrl-sweep --resume .`` does, the launches do not import the folder's files either."""
    from zrl.experiment import sweep_plan

    marker = tmp_path / "imported"
    mods = _payload(tmp_path / "mods", marker)
    run_dir = _run_folder(tmp_path, PAYLOAD)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / checkpoint.PATTERN.format(step=1)).write_bytes(b"not a checkpoint")
    out = tmp_path / "sweep"
    out.mkdir()
    (out / sweep_plan.SWEEP_COPY).write_text(f'[sweep]\nconfig = "{CARTPOLE}"\nseeds = [1]\n')
    plan = sweep_plan.load(out / sweep_plan.SWEEP_COPY)
    plan.runs[0].status, plan.runs[0].folder = "stopped", str(run_dir)
    sweep_plan.write_index(out, plan)
    planted = tmp_path / "planted imported"
    _payload(out / "zrl", planted, "__init__")  # would shadow zrl itself for a python -c in this folder
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(mods), os.environ.get("PYTHONPATH")]))}
    args = ["--resume", ".", *(["--trust-env-module", "sec_probe"] if trust else [])]
    proc = start_command("zrl-sweep", *args, cwd=out, env=env)
    _, err = proc.communicate(timeout=180)
    (log,) = out.rglob(sweep_plan.LOG)
    assert not planted.exists(), "a launch imported a file of the sweep folder it was started in"
    assert proc.returncode == 1, err  # the run failed either way: refused, or (trusted) no usable checkpoint
    if trust:
        assert marker.exists() and "no usable checkpoint" in log.read_text(), log.read_text()
    else:
        assert not marker.exists(), "the resumed sweep imported the module a run's config.toml named"
        assert "--trust-env-module sec_probe" in log.read_text(), log.read_text()


def test_zrl_sweep_resume_does_not_import_what_its_folders_sweep_file_names_for_a_pending_run(tmp_path, probe_module):
    """A pending run of a resumed sweep starts from the sweep file's copy in the sweep folder, which another hand may
    have changed: its env id imports its module only with zrl-sweep's own --trust-env-module."""
    from zrl.config import ConfigError
    from zrl.experiment import sweep, sweep_plan

    out = tmp_path / "sweep"
    out.mkdir()
    (out / sweep_plan.SWEEP_COPY).write_text(
        f'[sweep]\nconfig = "{CARTPOLE}"\nseeds = [1]\nset = {{"env.id" = "{PAYLOAD}"}}\n'
    )
    sweep_plan.write_index(out, sweep_plan.load(out / sweep_plan.SWEEP_COPY))
    with pytest.raises(ConfigError, match="--trust-env-module sec_probe") as refusal:
        sweep.start(None, None, str(out), [], print)
    assert str(out / sweep_plan.SWEEP_COPY) in str(refusal.value)
    assert not probe_module.exists(), "the resumed sweep imported the module its folder's sweep file named"


def test_a_launch_from_inside_a_run_folder_does_not_import_its_files(tmp_path):
    """The fork server's interpreter would put its working folder first on its path: a torch.py a run folder holds
    would then run in place of torch, before any check."""
    run_dir = _run_folder(tmp_path, "CartPole-v1")
    marker = tmp_path / "imported"
    _payload(run_dir, marker, "torch")
    result = run_command("zrl-launch", "--resume", ".", cwd=run_dir, timeout=120)
    assert not marker.exists(), "the launch imported a file of the run folder it was started in"
    assert result.returncode == 2 and "no usable checkpoint" in result.stderr, result.stderr[-3000:]
