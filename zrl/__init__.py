"""zrl: distributed RL on ZeroMQ and shared memory."""

import atexit
import gc

__version__ = "0.1.0"

# At exit, Python's last garbage collections walk every object torch made, in each zrl-* command and in each
# launch's fork server, which its launcher waits for (perf/README.md, "Starting a run"). Frozen objects are left
# to the process's end instead; files and sockets still close as their modules are cleared, and every other
# atexit function (registered after this one, at zrl's first import) runs first.
atexit.register(gc.freeze)
