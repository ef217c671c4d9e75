"""Run luacheck (the Lua linter, Debian package ``lua-check``) over script sources.

One luacheck process checks every source, against a standard that describes the server's
Lua environment (:mod:`luapipe.scripts.luaenv`). The checks are the ones that matter in a
Redis script: globals read or written that do not exist (1xx), unused variables, arguments
and loop variables (21x), a local redefined or shadowed in the same function (41x, 42x),
and unreachable code or a loop that runs at most once (51x). Style checks (whitespace,
line length) and shadowing an upvalue (43x: a helper whose parameter is named like an
outer local) are left out, and so are unused names starting with ``_`` (the usual
convention for "unused on purpose"). ``-- luacheck: ignore`` comments work as usual.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from luapipe.errors import EnvironmentProblem
from luapipe.scripts.luaenv import Env, luacheck_config

__all__ = ["Finding", "luacheck_path", "run_luacheck"]

CHECKS = ("0", "1", "21", "41", "42", "51")
#: the usual convention: a name starting with "_" is meant to be unused
IGNORED = ("21/_.*",)
_LINE = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): \((?P<code>[EW]\d+)\) (?P<msg>.*)$")
INSTALL_HINT = (
    "luacheck is not installed: on Debian or Ubuntu `apt-get install lua-check` "
    "(`make deps` does it), elsewhere `luarocks install luacheck`"
)


@dataclass(frozen=True)
class Finding:
    """One luacheck warning or error in one source (line and column 1-based)."""

    line: int
    col: int
    code: str  # "W113", "E011"
    message: str


def luacheck_path() -> str | None:
    return shutil.which("luacheck")


def run_luacheck(
    sources: Sequence[str], env: Env, *, keys_argv: bool = True
) -> list[list[Finding]]:
    """luacheck's findings for each source, in order (``keys_argv=False``: Function
    libraries, which have no ``KEYS``/``ARGV`` globals)."""
    exe = luacheck_path()
    if exe is None:
        raise EnvironmentProblem(INSTALL_HINT)
    found: list[list[Finding]] = [[] for _ in sources]
    if not sources:
        return found
    with tempfile.TemporaryDirectory(prefix="luapipe-luacheck-") as tmp:
        config = Path(tmp, "luacheckrc.lua")
        config.write_text(luacheck_config(env, keys_argv=keys_argv), encoding="utf-8")
        files = []
        for i, source in enumerate(sources):
            path = Path(tmp, f"{i}.lua")
            path.write_text(source, encoding="utf-8")
            files.append(path.name)
        cmd = [exe, "--config", str(config), "--no-cache", "--codes", "--no-color"]
        cmd += ["--formatter", "plain", "--only", *CHECKS, "--ignore", *IGNORED, "--", *files]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if done.returncode > 2:  # 0: clean, 1: warnings, 2: errors; more: luacheck failed
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise EnvironmentProblem(f"luacheck failed: {detail[-1] if detail else done.returncode}")
    for line in done.stdout.splitlines():
        m = _LINE.match(line)
        if m is not None:
            index = int(Path(m["file"]).stem)
            found[index].append(Finding(int(m["line"]), int(m["col"]), m["code"], m["msg"]))
    return found
