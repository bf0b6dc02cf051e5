"""The machine a benchmark ran on: CPU, cores, memory, GPU and the versions that matter."""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata

from zrl.config import usable_cores


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_description() -> str:
    """The CPU's model name with its family, model and widest vector extension, "AMD EPYC (family 25, model 17,
    AVX-512)": virtual machines often show only a model name, which several generations share."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return cpu_model()
    flags, details = set(fields.get("flags", "").split()), []
    if fields.get("cpu family"):
        details.append(f"family {fields['cpu family']}")
    if fields.get("model"):
        details.append(f"model {fields['model']}")
    if "avx512f" in flags:
        details.append("AVX-512")
    elif "avx2" in flags:
        details.append("AVX2")
    name = fields.get("model name") or cpu_model()
    return f"{name} ({', '.join(details)})" if details else name


def ram_gib() -> float:
    """The machine's memory in GiB, without psutil (the launcher records it in every run)."""
    return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)


cores = usable_cores  # the cores this process may run on (its affinity), which the workers share


def machine() -> dict:
    import psutil
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
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
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
