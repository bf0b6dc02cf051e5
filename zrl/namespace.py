"""The namespace a launch names what it makes in: ``$ZRL_NAMESPACE``, unset by default. Layer 0: the standard
library and zrl.errors only, so that the roles (their process titles) and the launcher's wiring (its segment and
folder names) both use it.

Without one: segments ``zrl_<run>_<pid>_ring0``, socket folders ``zrl-<pid>-<run>/``, roles titled ``zrl-broker``.
In namespace NS: ``zrl.NS_...``, ``zrl.NS-...`` and ``zrl-broker (ZRL_NAMESPACE=NS)``. A launch sweeps only the
segments and folders its own namespace's dead launches left, so that independent sets of runs sharing /dev/shm
(the two lanes of the test suite, or containers whose pids the other cannot see) each take their own.
"""

from __future__ import annotations

import os
import re

from zrl.errors import ConfigError

NAMESPACE_VAR = "ZRL_NAMESPACE"
LOCK_NAME = ".zrl-launch.lock"
"""A run folder's lock file, which holds its launcher's pid (zrl/launch/folder.py takes it; the dashboard reads it)."""
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9]{1,32}")


def namespace() -> str:
    """``$ZRL_NAMESPACE``, checked: 1 to 32 letters and digits (it goes into file names, before the '_' and '-'
    that end the prefix, so that no namespace's prefix is the start of another's); "" when unset."""
    value = os.environ.get(NAMESPACE_VAR, "")
    if value and not _NAMESPACE_RE.fullmatch(value):
        raise ConfigError(
            f"environment variable {NAMESPACE_VAR}={value!r}: use 1 to 32 letters and digits, or leave it unset"
        )
    return value


def shm_prefix() -> str:
    """The first piece of every shared-memory segment name: ``zrl``, or ``zrl.NS`` in namespace NS."""
    ns = namespace()
    return f"zrl.{ns}" if ns else "zrl"


def private_prefix() -> str:
    """The start of every private socket folder's name (``<prefix><pid>-...``): ``zrl-``, or ``zrl.NS-``."""
    return f"{shm_prefix()}-"


def role_title(name: str) -> str:
    """A role process's title as ps shows it: ``name``, or ``name (ZRL_NAMESPACE=NS)``."""
    ns = namespace()
    return f"{name} ({NAMESPACE_VAR}={ns})" if ns else name
