"""No module sends Python objects over a socket with pickle, and every torch.load passes weights_only=True.

The check reads the syntax tree of every module of the project (zrl/, shm/, perf/, bin/), so that a new call
anywhere is caught. pickle itself may be named only where it is caught as an exception type (the
checkpoint reader catches pickle.UnpicklingError from torch.load)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.unit

PICKLING_SOCKET_METHODS = {"send_pyobj", "recv_pyobj", "send_serialized", "recv_serialized"}
PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "cloudpickle", "dill"}


def _modules() -> list[Path]:
    files = [p for d in ("zrl", "shm", "perf") for p in (REPO / d).rglob("*.py")]
    return files + sorted((REPO / "bin").iterdir())


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    caught = {id(n) for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.type for n in ast.walk(h.type)}
    torch_names = {"torch"} | {
        a.asname for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names if a.name == "torch" and a.asname
    }
    load_names = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "torch"
        for a in n.names
        if a.name == "load"
    }
    may_import_pickle = path == REPO / "zrl" / "checkpoint.py"  # it catches pickle.UnpicklingError

    def keyword_true(call: ast.Call, name: str) -> bool:
        return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)

    for node in ast.walk(tree):
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            func = node.func
            is_torch_load = (
                isinstance(func, ast.Attribute)
                and func.attr == "load"
                and isinstance(func.value, ast.Name)
                and func.value.id in torch_names
            ) or (isinstance(func, ast.Name) and func.id in load_names)
            if is_torch_load and not keyword_true(node, "weights_only"):
                found.append(f"{where}: torch.load without weights_only=True")
            if isinstance(func, ast.Attribute) and func.attr in PICKLING_SOCKET_METHODS:
                found.append(f"{where}: {func.attr} pickles over a socket")
            if isinstance(func, ast.Attribute) and func.attr == "load" and keyword_true(node, "allow_pickle"):
                found.append(f"{where}: numpy load with allow_pickle=True")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n.split(".")[0] in PICKLE_MODULES for n in names) and not may_import_pickle:
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
    bad.write_text(
        "import pickle\nimport numpy as np\nimport torch\nimport torch as T\nfrom torch import load as L\n\n"
        "def f(sock, path):\n    sock.send_pyobj({})\n    torch.load(path)\n    torch.load(path, weights_only=False)\n"
        "    T.load(path)\n    L(path)\n    np.load(path, allow_pickle=True)\n    return pickle.loads(b'')\n"
    )
    found = _violations(bad)
    # import pickle, send_pyobj, torch.load twice, T.load, L, np.load(allow_pickle), pickle.loads
    assert len(found) == 8, found
    fine = tmp_path / "fine.py"
    fine.write_text("import torch\n\ndef f(path):\n    return torch.load(path, weights_only=True)\n")
    assert _violations(fine) == []
