"""zrl-launch: check everything that can be checked before any process starts, then run the pipeline and
stop it in order. It alone creates and unlinks segments; at exit, whatever happened, nothing is left in
/dev/shm, no child process and no socket file.

The parts, one job each (none imports launcher.py, which puts them together):

- ``checks``: the checks before anything is made (keys, environment, results folder, the keys a resume may
  change);
- ``network``: what only torch can tell (the network's kind and size, the device, a checkpoint to start from),
  answered in a child of the fork server, so that the launcher never imports torch;
- ``folder``: the run folder: its layout, lock, disk room, config snapshot, log, CSV files and best.pt;
- ``wiring``: rings, sockets and role processes, and the plan of who binds what, created and torn down in one
  place (zrl-bench's pipelines use it too);
- ``supervise``: start, heartbeats, restarts, signals and the stop in order;
- ``tally``: what the roles report, the live line and the rows of metrics.csv and episodes.csv;
- ``reports``: the stats channel, each report checked, then counted, written or passed on;
- ``evaluations``: evaluation during training: when the evaluator is asked, its results, eval.final;
- ``resuming``: where a launch starts from when not afresh: a run continued in its folder, --init-from;
- ``page``: the live page (--dashboard), bound first and served once the run folder exists;
- ``console``: what the launcher says on the terminal;
- ``launcher``: ``launch`` and ``resume``, and the Launcher that runs the parts.
"""

from zrl.config import ConfigError
from zrl.launch.checks import FIXED_WHEN_DETERMINISTIC, preflight, resolve_model_kind
from zrl.launch.folder import LOCK_NAME, RunLock, check_room, find_run, make_run_dir
from zrl.launch.launcher import Launcher, launch, resume
from zrl.launch.network import Network, check_weights_fit
from zrl.launch.supervise import EXIT_FAILED, EXIT_OK, EXIT_SIGHUP, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE
from zrl.launch.wiring import Wiring, create_rings, sweep_stale
from zrl.namespace import NAMESPACE_VAR, namespace, private_prefix, role_title, shm_prefix
from zrl.roles.run_wiring import make_ring_spec, ring_slots

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_SIGHUP",
    "EXIT_SIGINT",
    "EXIT_SIGTERM",
    "EXIT_USAGE",
    "FIXED_WHEN_DETERMINISTIC",
    "LOCK_NAME",
    "NAMESPACE_VAR",
    "ConfigError",
    "Launcher",
    "Network",
    "RunLock",
    "Wiring",
    "check_room",
    "check_weights_fit",
    "create_rings",
    "find_run",
    "launch",
    "make_ring_spec",
    "make_run_dir",
    "namespace",
    "preflight",
    "private_prefix",
    "resolve_model_kind",
    "resume",
    "role_title",
    "ring_slots",
    "shm_prefix",
    "sweep_stale",
]
