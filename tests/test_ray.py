"""zrl-launch --ray on a real local Ray cluster: ray.cluster_utils.Cluster, a head and a second node, each with a
raylet of its own on this machine. The run's remote workers become Ray actors on both nodes, a SIGKILLed actor is
restarted by Ray and joins again, the run stops in order on SIGTERM (a batch scheduler's stop: ray.init sets a SIGTERM
handler of its own, and the launcher's must be the one that runs), and nothing of it stays in Ray or in /dev/shm."""

from __future__ import annotations

import os
import re
import signal

import pytest
import ray
from conftest import REPO, metrics_rows, refused, run_command, start_command, wait_until
from ray.cluster_utils import Cluster

from zrl import checkpoint

pytestmark = pytest.mark.e2e

CARTPOLE = REPO / "config" / "cartpole.toml"
PLACED = re.compile(r"Ray actor zrl-ray-(\d+) is on node (\w+) \(.*\), pid (\d+)")


def _log(tmp_path) -> str:
    found = list((tmp_path / "results").glob("*/zrl.log"))
    return found[0].read_text() if found else ""


def test_ray_places_remote_workers_on_both_nodes_restarts_a_killed_one_and_leaves_nothing(tmp_path, no_leaks):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        launch = start_command(
            "zrl-launch",
            *("--config", CARTPOLE, "--workers", "1", "--quiet", "--ray", cluster.address),
            *(
                "--set",
                "workers.remote=2",
                "--set",
                "run.max_env_frames=100000000",
                "--set",
                "run.heartbeat_timeout_s=8",
            ),
            cwd=tmp_path,
        )
        try:
            placed = wait_until(
                lambda: (p := PLACED.findall(_log(tmp_path))) and len(p) >= 2 and p, 120, "two actors placed", launch
            )
            assert len({node for _, node, _ in placed}) == 2, placed  # one on each node
            wait_until(lambda: _log(tmp_path).count("joined as zrl-worker-") >= 2, 120, "two joins", launch)
            killed, _, pid = placed[0]
            os.kill(int(pid), signal.SIGKILL)  # the actor's process, as a node's OOM killer would
            wait_until(
                lambda: f"zrl-ray-{killed}'s Ray actor died; Ray restarts it (restart 1 of 3 allowed" in _log(tmp_path),
                60,
                "a restart",
                launch,
            )
            wait_until(lambda: _log(tmp_path).count("joined as zrl-worker-") >= 3, 120, "the rejoin", launch)
            rejoined = int(metrics_rows(tmp_path)[-1]["remote_frames"])
            # the run goes on past the rejoin (more remote frames), then stops in order on SIGTERM
            wait_until(lambda: int(metrics_rows(tmp_path)[-1]["remote_frames"]) > rejoined, 120, "frames after", launch)
            launch.send_signal(signal.SIGTERM)
            out, err = launch.communicate(timeout=120)
        finally:
            if launch.poll() is None:
                launch.send_signal(signal.SIGINT)
                launch.communicate(timeout=120)
        log = _log(tmp_path)
        assert launch.returncode == 143, err[-3000:] + log[-3000:]
        assert "placing 2 remote workers as Ray actors on 2 of the cluster's 2 nodes" in log
        assert "stopping (interrupted)" in log, log[-3000:]
        (run_dir,) = (tmp_path / "results").iterdir()
        final = checkpoint.load(checkpoint.latest(run_dir / "checkpoints"))
        assert final["learner_step"] > 0 and f"ckpt_{final['learner_step']:09d}" in log, log[-3000:]
        assert int(metrics_rows(tmp_path)[-1]["worker_restarts"]) >= 1
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            left = [a for a in ray.util.list_named_actors(all_namespaces=True) if "zrl-ray" in str(a)]
            assert left == [], left
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()


def test_ray_without_remote_slots_or_a_cluster_is_a_usage_error(tmp_path, no_leaks, monkeypatch):
    """No remote slots: refused by zrl-launch's click command in this process (CliRunner; an exception would fail
    the test). No cluster at the address, and no Ray installed: the real zrl-launch (the first starts the run's
    launcher before it finds out; the second needs an interpreter where `import ray` fails from the start)."""
    from zrl.cli.launch import launch_main

    monkeypatch.chdir(tmp_path)
    assert "workers.remote is 0" in refused(launch_main, "--config", CARTPOLE, "--ray", "auto")
    nowhere = run_command(
        "zrl-launch", "--config", CARTPOLE, "--ray", "127.0.0.1:9", "--set", "workers.remote=1", cwd=tmp_path
    )
    assert nowhere.returncode == 2 and "no Ray cluster to join" in nowhere.stderr, nowhere.stderr[-2000:]
    assert "Traceback" not in nowhere.stderr
    hidden = tmp_path / "no-ray" / "ray"  # a host without the cluster extra: `import ray` fails
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    env = {**os.environ, "PYTHONPATH": str(hidden.parent)}
    proc = start_command(
        "zrl-launch", "--config", CARTPOLE, "--ray", "auto", "--set", "workers.remote=1", cwd=tmp_path, env=env
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "pip install 'zrl[cluster]'" in err and "Traceback" not in err, err[-2000:]
