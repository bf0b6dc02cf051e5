"""The type checker's verdict, held in CI: mypy over the packages and the test agent as pyproject.toml's [tool.mypy]
configures it (strict on the agents' contracts and the wire framework), run here; and shown to fail on an error of
each kind it must catch, in a copy of the tree with that one error added."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

CHECKED = ("zrl", "shm", "tests/onestep_agent")  # [tool.mypy]'s files, copied whole for the breaks below


def _mypy(cwd: Path) -> subprocess.CompletedProcess:
    """``mypy`` in ``cwd``, with no arguments: the files and settings of ``cwd``/pyproject.toml, its cache in
    ``cwd``/.mypy_cache (a later run checks only what changed)."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-color-output", "--no-error-summary"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=150,
    )


@pytest.mark.integration
def test_the_package_type_checks():
    done = _mypy(REPO)
    assert done.returncode == 0, done.stdout + done.stderr


# For each kind of error the check must catch, one made in a copy of the tree: (file, the text replaced (None:
# appended to the file), what replaces it, the error code mypy must report there).
BREAKS = {
    # a real agent's part that no longer fits its contract (its `_: type[Actor] = VtraceActor` line)
    "contract": (
        "zrl/agents/vtrace/actor.py",
        "    def act(self, obs:",
        "    def act(self, extra: int, obs:",
        "assignment",
    ),
    # the test agent's too: its parts are checked as the real ones are
    "test-agent": (
        "tests/onestep_agent/actor.py",
        "    def act(self, obs:",
        "    def act(self, extra: int, obs:",
        "assignment",
    ),
    # strict on the wire framework and the registry: a function without annotations
    "strict-protocol": ("zrl/protocol/framework.py", None, "def _untyped(x):\n    return x", "no-untyped-def"),
    "strict-registry": ("zrl/agents/__init__.py", None, "def _untyped(x):\n    return x", "no-untyped-def"),
    # everywhere else: a plain type error, in the package that knows nothing of zrl
    "package": ("shm/ring.py", None, '_count: int = "three"', "assignment"),
}


@pytest.mark.integration
@pytest.mark.parametrize("kind", BREAKS)
def test_a_type_error_fails_the_check(kind, tmp_path):
    """A check that nothing can fail holds nothing (a files entry that names no file, a strict override whose module
    moved): each kind of error is made here, in a copy of the checked tree, and mypy must fail naming it. The copy
    takes the repository's cache (left by the test above), so that only what changed is checked again."""
    path, old, new, code = BREAKS[kind]
    ignore = shutil.ignore_patterns("__pycache__")
    for folder in CHECKED:
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    if (REPO / ".mypy_cache").is_dir():
        shutil.copytree(REPO / ".mypy_cache", tmp_path / ".mypy_cache")
    target = tmp_path / path
    assert target.is_file(), f"{path} is gone: BREAKS needs another module to break {kind!r}"
    text = target.read_text()
    if old is None:
        text += f"\n\n{new}  # breaks {kind}\n"
    else:
        assert text.count(old) == 1, f"{path}: {old!r} is not there once: BREAKS needs another way to break {kind!r}"
        text = text.replace(old, new)
    target.write_text(text)
    done = _mypy(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(rf"^{re.escape(path)}:\d+: error: .*\[{code}\]$", done.stdout, re.M), done.stdout
