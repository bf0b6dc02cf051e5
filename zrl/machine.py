"""The machine this process runs on, in words: what zrl-bench's figures and each run's starts.csv record. Imports
nothing heavy, as the launcher never imports torch."""

from __future__ import annotations

import os
import platform


def cpu_description() -> str:
    """The CPU's model name with its family, model and widest vector extension, as in "<model name> (family F,
    model M, AVX2)": virtual machines often show only a model name, which several generations share."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags, details = set(fields.get("flags", "").split()), []
    if fields.get("cpu family"):
        details.append(f"family {fields['cpu family']}")
    if fields.get("model"):
        details.append(f"model {fields['model']}")
    if "avx512f" in flags:
        details.append("AVX-512")
    elif "avx2" in flags:
        details.append("AVX2")
    name = fields.get("model name") or platform.processor() or platform.machine()
    return f"{name} ({', '.join(details)})" if details else name


def ram_gib() -> float:
    """The machine's memory in GiB; 0.0 where the system does not say."""
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        return 0.0
