"""What ``luapipe bench`` does with a script: a ``.lua`` file, a ``.bench.toml`` profile, or
the name of a script of the scripts directory (``bench incr_capped``).

- ``path/x.lua``: the script, with the profile beside it (``path/x.bench.toml``) if there
  is one, else the default cases (keys and args from its header);
- ``path/x.bench.toml``: that profile and the script it names;
- ``x``: ``<dir>/x.lua`` (``--dir``, else ``./scripts_lua``, else the bundled scripts), as
  above; a built-in or catalogue operation of the same name comes first.
"""

from __future__ import annotations

from pathlib import Path

from luapipe.bench.scriptprofile import PROFILE_SUFFIX, default_profile, load_profile, profile_of
from luapipe.bench.scriptworkload import ScriptWorkload
from luapipe.errors import LuapipeError
from luapipe.scripts.compiler import compile_check
from luapipe.scripts.libparse import is_library
from luapipe.scripts.loader import load_file
from luapipe.scripts.registry import bundled_scripts_dir
from luapipe.scripts.script import read_source

__all__ = ["is_script_target", "script_workload", "scripts_dir"]


def scripts_dir(directory: str | Path | None) -> Path:
    """``--dir``, else ``./scripts_lua``, else the bundled scripts."""
    if directory is not None:
        return Path(directory)
    local = Path("scripts_lua")
    return local if local.is_dir() else bundled_scripts_dir()


def is_script_target(name: str) -> bool:
    return name.endswith((".lua", PROFILE_SUFFIX))


def _script_file(name: str, directory: str | Path | None) -> Path | None:
    if name.endswith(".lua"):
        path = Path(name)
        if not path.is_file():
            raise LuapipeError(f"{name}: no such script")
        return path
    found = scripts_dir(directory) / f"{name}.lua"
    return found if "/" not in name and found.is_file() else None


def script_workload(
    name: str,
    directory: str | Path | None = None,
    *,
    contention: str = "spread",
    seed: int = 1,
    batch: int = 1,
    tasks: int = 1,
) -> ScriptWorkload | None:
    """The workload of a script target (see the module's docstring); None when ``name``
    is no script."""
    if name.endswith(PROFILE_SUFFIX):
        if not Path(name).is_file():
            raise LuapipeError(f"{name}: no such bench profile")
        profile = load_profile(name)
    else:
        path = _script_file(name, directory)
        if path is None:
            return None
        if is_library(read_source(path)):
            raise LuapipeError(
                f"{path}: a Function library, not a script; bench the scripts it was built "
                "from (their function twins are timed beside them)"
            )
        beside = profile_of(path)
        profile = load_profile(beside, path) if beside else default_profile(load_file(path))
    compile_check([profile.script])  # file:line now, not "no case runs" after a server
    return ScriptWorkload(profile, contention=contention, seed=seed, batch=batch, tasks=tasks)
