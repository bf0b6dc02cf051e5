"""No module sends Python objects over a socket with pickle, and every torch.load passes weights_only=True.

The check reads the syntax tree of every module of the project (zrl/, shm/, perf/, bin/), so that a new call
anywhere is caught. pickle itself may be named only where it is caught as an exception type (the
checkpoint reader catches pickle.UnpicklingError from torch.load)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PICKLING_SOCKET_METHODS = {"send_pyobj", "recv_pyobj", "send_serialized", "recv_serialized"}
PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "cloudpickle", "dill"}


def _modules() -> list[Path]:
    files = [p for d in ("zrl", "shm", "perf") for p in (REPO / d).rglob("*.py")]
    return files + sorted((REPO / "bin").iterdir())


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    caught = {id(n) for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.type for n in ast.walk(h.type)}
    for node in ast.walk(tree):
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in PICKLING_SOCKET_METHODS:
                found.append(f"{where}: {node.func.attr} pickles over a socket")
            if node.func.attr == "load" and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                safe = any(k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                           for k in node.keywords)  # fmt: skip
                if not safe:
                    found.append(f"{where}: torch.load without weights_only=True")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n.split(".")[0] in PICKLE_MODULES for n in names) and path.name != "checkpoint.py":
                found.append(f"{where}: imports a pickle module")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in PICKLE_MODULES:
            if id(node) not in caught:
                found.append(f"{where}: {node.value.id}.{node.attr} used other than as a caught exception")
    return found


def test_no_module_pickles_over_a_socket_or_loads_torch_files_unsafely():
    modules = _modules()
    assert len(modules) > 30
    violations = [v for path in modules for v in _violations(path)]
    assert not violations, "\n".join(violations)


def test_the_check_finds_what_it_looks_for(tmp_path):
    """The checker itself: each forbidden form in a file is reported."""
    bad = tmp_path / "sample.py"
    bad.write_text("import pickle\nimport torch\n\ndef f(sock, path):\n    sock.send_pyobj({})\n"
                   "    torch.load(path)\n    torch.load(path, weights_only=False)\n    return pickle.loads(b'')\n")
    assert len(_violations(bad)) == 5, _violations(bad)
