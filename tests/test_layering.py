"""The import layering of DESIGN.md's module map, held in code. The contracts (layers, no cycles, roles and the
launcher's parts independent, shm knowing nothing of zrl, the agents' leaves, no torch in the commands) are
import-linter's, in pyproject.toml: run here, and each shown to fail on an import that breaks it. import-linter reads
every import at any depth of a module's code; what a module loads when it is imported, which it cannot tell, is
checked here too."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO

CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]

# For each contract, an import that breaks it (and, today, no other contract): added to a copy of the tree.
BREAKS = {
    "layers": ("zrl/replay/queue.py", "zrl.models"),  # a sampling rule importing the networks
    "acyclic": ("zrl/namespace.py", "zrl.forkserver"),  # which imports zrl.namespace
    "roles": ("zrl/roles/learner.py", "zrl.roles.broker"),
    "launch-parts": ("zrl/launch/tally.py", "zrl.launch.folder"),
    "shm": ("shm/reaper.py", "zrl.errors"),
    "agent-leaves": ("zrl/agents/vtrace/config.py", "zrl.protocol"),
    "bench-roles": ("zrl/bench/roles.py", "zrl.roles.worker"),
    "no-torch": ("zrl/launch/supervise.py", "torch"),
}


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """import-linter's lint-imports on ``cwd``/pyproject.toml's contracts, over the packages under ``cwd``; its report
    in lines wide enough to hold a contract's name whole."""
    script = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "COLUMNS": "500"}
    return subprocess.run(
        [str(script), "--no-cache", "--no-logo"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.integration
def test_the_import_contracts_hold():
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda contract: contract["id"])
def test_an_import_that_breaks_a_contract_fails_the_check(contract, tmp_path):
    """A contract that no import can break holds nothing (a misspelt module, a wildcard that matches none): each is
    broken here, in a copy of zrl/ and shm/ with one import more, and lint-imports must fail naming it."""
    assert contract["id"] in BREAKS, f"contract {contract['id']!r}: add to BREAKS an import that breaks it"
    path, imported = BREAKS[contract["id"]]
    for package in ("zrl", "shm"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    assert (tmp_path / path).is_file(), f"{path} is gone: BREAKS needs another module to break {contract['id']!r}"
    with open(tmp_path / path, "a") as fh:
        fh.write(f"\nimport {imported}  # breaks {contract['id']}\n")
    done = _lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{contract['name']} BROKEN" in done.stdout, done.stdout


@pytest.mark.unit
def test_importing_the_config_loads_only_the_agents_leaves():
    """Importing an agent's section runs its package's __init__ first, so what zrl.config loads at import time is
    that __init__'s module-level imports too: only the registry, the error type, its own section and the packages of
    the agents it builds on (IMPACT declares V-trace's figures as its own); its parts and the models are imported
    inside functions, when a role asks for them."""
    sections = sorted((REPO / "zrl" / "agents").glob("*/config.py"))
    assert sections, "no agent's config section found"
    packages = {f"zrl.agents.{path.parent.name}" for path in sections}
    for path in sections:
        package = f"zrl.agents.{path.parent.name}"
        body = ast.parse((path.parent / "__init__.py").read_text()).body
        found = {
            node.module
            for node in body
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("zrl", "shm")
        } | {
            alias.name
            for node in body
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name.split(".")[0] in ("zrl", "shm")
        }
        assert found <= {"zrl.agents", "zrl.errors", f"{package}.config", *packages}, (package, found)


@pytest.mark.integration
def test_zrl_launch_imports_no_torch():
    """zrl-launch's process never imports torch (seconds of CPU and hundreds of MB a launch; perf/README.md): what
    only torch can tell it asks a child of its fork server (zrl/launch/network.py), its roles run in children of
    it, and its TensorBoard events go through TensorBoard's own writer. Checked in a fresh interpreter, on every
    module the launch path imports."""
    script = (
        "import sys, zrl.cli.launch, zrl.launch, zrl.launch.network, zrl.metrics.tensorboard, zrl.checkpoint; "
        "zrl.metrics.tensorboard.ScalarWriter; print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout[:500]
