"""The machine a benchmark ran on: CPU, cores, memory, GPU and the versions that matter."""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata

from zrl.config import usable_cores
from zrl.machine import cpu_description, ram_gib

cores = usable_cores  # the cores this process may run on (its affinity), which the workers share


def machine() -> dict:
    import torch

    versions = {"python": platform.python_version()}
    for dist in ("zrl", "torch", "numpy", "pyzmq", "msgspec", "ale-py", "gymnasium", "envpool"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu_description(),
        "cores": cores(),
        "logical_cpus": os.cpu_count(),
        "ram_gib": ram_gib(),
        "gpu": gpu,
        "platform": platform.platform(),
        "versions": versions,
        "command": " ".join(["zrl-bench", *sys.argv[1:]]),
    }


def write_script_rows(path: str, rows: list[dict]) -> None:
    """A perf/ script's result file: this machine's facts, the script's own command line, and its rows."""
    import json
    from pathlib import Path

    facts = machine() | {"command": "python " + " ".join(["perf/" + Path(sys.argv[0]).name, *sys.argv[1:]])}
    Path(path).write_text(json.dumps({"machine": facts, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
