"""Which environment modules a process may import. An env id ``"pkg.envs:MyEnv-v0"`` imports ``pkg.envs``, which
registers ``MyEnv-v0`` (Gymnasium's convention): the import runs that module's code. So it runs only for an id the
user gave this command (its --config file, --set, an option) or for a module the user named with
--trust-env-module; never for an id read from data: a resumed run's config.toml, a checkpoint's stored config, the
config a run sends its remote workers. Whoever names it, a module found inside a results or run folder is refused:
anyone who can write there could have put it there."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from zrl.config import ConfigError

TRUST_FLAG = "--trust-env-module"
_ROOT = str(Path(__file__).resolve().parents[2])  # on the fork server's PYTHONPATH (zrl/forkserver.py)


def env_module(env_id: str) -> str:
    """The module an env id imports, "" for none: the part before its last ":"."""
    return env_id.rpartition(":")[0]


def trusts(trusted: Sequence[str], module: str) -> bool:
    """Whether --trust-env-module named ``module`` or a package that holds it."""
    return any(module == name or module.startswith(name + ".") for name in trusted)


def check_env_import(
    env_id: str, origin: str | None, trusted: Sequence[str] = (), data_dirs: Iterable[str | Path] = ()
) -> None:
    """A one-line ConfigError unless this process may import ``env_id``'s module. ``origin``: None when the user
    gave the id, else where it was read (a file, a checkpoint, a run), which is trusted only for a module in
    ``trusted``. ``data_dirs``: the results folder and the run folder, where no module may come from."""
    module = env_module(env_id)
    if not module:
        return
    if origin is not None and not trusts(trusted, module):
        raise ConfigError(
            f"{origin}: env.id = {env_id!r} would import and run module {module}, which this command was not "
            f"given; if you trust that module, give {TRUST_FLAG} {module}"
        )
    for found in module_files(module):
        for folder in data_dirs:
            if _inside(found, Path(folder)):
                raise ConfigError(
                    f"env.id: {env_id!r} would import {module} from {found}, inside {folder}, which holds runs' data, "
                    "not code; install the module elsewhere"
                )


def module_files(module: str, path: Sequence[str] | None = None) -> list[Path]:
    """What importing ``module`` would run or search, found as the path finder finds it but without running
    anything: each package's ``__init__`` and folders (a namespace package's too) and the module's own file, on
    ``path`` (default: this process's sys.path and the fork server's root); [] where nothing is found."""
    search = list(path) if path is not None else [*sys.path, _ROOT]
    found: list[Path] = []
    name = ""
    for part in module.split("."):
        name = f"{name}.{part}" if name else part
        spec, portions = None, []
        for entry in search:
            finder = _finder(entry or os.getcwd())
            here = finder.find_spec(name) if finder is not None and hasattr(finder, "find_spec") else None
            if here is None:
                continue
            if here.loader is None:  # a namespace portion: the import goes on looking, and keeps these folders
                portions += list(here.submodule_search_locations or [])
                continue
            spec = here
            break
        if spec is None and not portions:
            break
        if spec is not None and spec.has_location and spec.origin:
            found.append(Path(spec.origin))
        search = list(spec.submodule_search_locations or []) if spec is not None else portions
        found += [Path(p) for p in search]
        if not search:  # a plain module: nothing below it
            break
    return found


def _finder(entry: str):
    """The import system's finder for one sys.path entry (a folder or a zip file), made as it makes them."""
    if entry in sys.path_importer_cache:
        return sys.path_importer_cache[entry]
    for hook in sys.path_hooks:
        try:
            return hook(entry)
        except ImportError:
            continue
    return None


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or within it, as written (a link there picks what runs) or with links
    followed."""
    here = {Path(os.path.abspath(path)), Path(os.path.realpath(path))}
    there = {Path(os.path.abspath(folder)), Path(os.path.realpath(folder))}
    return any(p.is_relative_to(f) for p in here for f in there)
