"""The import layering of DESIGN.md's module map, held in code: no import cycles, shm/ knows nothing of zrl, the
numerics and sampling rules import no role or program, agents import no role, and roles do not import each
other. Imports inside functions count: a deferred import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.unit

PROGRAMS = ("zrl.roles", "zrl.launch", "zrl.bench", "zrl.cli", "zrl.evaluate", "zrl.experiment", "zrl.dashboard")


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*(REPO / "zrl").rglob("*.py"), *(REPO / "shm").rglob("*.py")]:
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The zrl and shm modules that ``name`` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != name:
                out.add(target)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), a package's edges to its own modules and
    theirs to it left out."""
    edges = {v: {w for w in ws if not (_within(w, v) or _within(v, w))} for v, ws in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def _offenders(sources: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{name} imports {dep}"
        for name, deps in GRAPH.items()
        if _within(name, sources)
        for dep in sorted(deps)
        if any(_within(dep, f) for f in forbidden)
    ]


def test_the_graph_is_read():
    assert len(MODULES) > 40
    assert "zrl.config" in GRAPH["zrl.roles.learner"] and "shm.ring" in GRAPH["zrl.roles.learner"]


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_a_cycle_is_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_shm_knows_nothing_of_zrl():
    assert _offenders("shm", ("zrl",)) == []


AGENT_SECTIONS = [n for n in MODULES if n.startswith("zrl.agents.") and n.endswith(".config")]


@pytest.mark.parametrize("layer", ["zrl.algos", "zrl.replay", "zrl.config", "zrl.protocol", "zrl.errors"])
def test_the_pure_layer_imports_no_role_agent_or_program(layer):
    """An agent's config section is the one part of an agent the config may import: it composes the sections."""
    assert _offenders(layer, PROGRAMS) == []
    agents = [n for n in MODULES if n.startswith("zrl.agents.") and n not in AGENT_SECTIONS]
    assert [f"{n} imports {d}" for n in GRAPH if _within(n, layer) for d in GRAPH[n] if d in agents] == []


def test_an_agents_config_section_is_a_leaf():
    """zrl.config imports each agent's section, so a section imports nothing of zrl but the error type."""
    assert sorted(AGENT_SECTIONS) == [
        "zrl.agents.apex_iqn.config",
        "zrl.agents.impact.config",
        "zrl.agents.vtrace.config",
    ]
    for section in AGENT_SECTIONS:
        assert GRAPH[section] <= {"zrl.errors"}, section


def test_agents_import_no_role_or_program():
    assert _offenders("zrl.agents", PROGRAMS) == []


# A role in more than one module: the remote worker (zrl-worker) is the worker loop with its frames sent over TCP.
SAME_ROLE = {"zrl.roles.remote": "zrl.roles.worker"}


def test_roles_do_not_import_each_other():
    shared = {"inbound", "lifecycle", "reporting", "run_wiring", "weights_feed", "worker_link"}  # what every role uses
    roles = [n for n in MODULES if _within(n, "zrl.roles") and n.rpartition(".")[2] not in ("roles", *shared)]
    for role in roles:
        assert not [d for d in GRAPH[role] if d in roles and SAME_ROLE.get(role) != d], role


def test_the_launchers_parts_do_not_import_the_launcher():
    """zrl/launch/launcher.py puts the parts together; a part (run folder, wiring, supervision, tally, ...) imports
    no other part but the console, so that zrl-bench can take the wiring, supervision's stop or the tally alone."""
    parts = [n for n in MODULES if n.startswith("zrl.launch.") and n != "zrl.launch.launcher"]
    assert {"zrl.launch.folder", "zrl.launch.wiring", "zrl.launch.supervise", "zrl.launch.tally"} <= set(parts)
    for part in parts:
        assert [d for d in GRAPH[part] if _within(d, "zrl.launch") and d != "zrl.launch.console"] == [], part


def test_the_bench_reuses_the_launchers_wiring():
    assert "zrl.launch.wiring" in GRAPH["zrl.bench.roles"]
    assert "zrl.roles.worker" not in GRAPH["zrl.bench.roles"]  # the wiring makes the role processes


def test_importing_the_config_loads_only_the_agents_leaves():
    """Importing an agent's section runs its package's __init__ first, so what zrl.config loads at import time is
    that __init__'s module-level imports too: only the registry, the error type and its own section (its parts
    and the models are imported inside functions, when a role asks for them)."""
    for section in AGENT_SECTIONS:
        package = section.rpartition(".")[0]
        body = ast.parse(MODULES[package].read_text()).body
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
        assert found <= {"zrl.agents", "zrl.errors", section}, (package, found)


def test_zrl_launch_imports_no_torch():
    """zrl-launch's process never imports torch (seconds of CPU and hundreds of MB a launch; perf/README.md): what
    only torch can tell it asks a child of its fork server (zrl/launch/network.py), its roles run in children of
    it, and its TensorBoard events go through TensorBoard's own writer. Checked in a fresh interpreter, on every
    module the launch path imports."""
    import subprocess
    import sys

    script = (
        "import sys, zrl.cli, zrl.launch, zrl.launch.network, zrl.metrics, zrl.checkpoint; "
        "zrl.metrics.ScalarWriter; print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout[:500]
