"""Check scripts without a server: compile (Lua 5.1 through lupa), globals, declared keys.

- Compile errors name ``file:line`` (template lines are mapped back); a file that fails to
  compile and holds Jinja2 syntax without the ``-- @template`` opt-in gets a hint.
- Global assignments (Redis refuses them at run time) are found with ``luac5.1 -l`` when
  it is installed; otherwise a note says they were not checked.
- ``KEYS[n]``/``ARGV[n]`` beyond what the header declares are flagged.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from luapipe.errors import ScriptSyntaxError
from luapipe.scripts.script import LuaScript

__all__ = ["LintIssue", "compile_check", "lint_scripts", "luac_available"]

_LINE_RE = re.compile(r"user_script:(\d+):\s*(.*)")
_SETGLOBAL_RE = re.compile(r"\[(\d+)\]\s+SETGLOBAL\s+\S+\s+\S+\s+;\s+(\S+)")
_INDEX_RE = re.compile(r"\b(KEYS|ARGV)\[(\d+)\]")


@dataclass(frozen=True)
class LintIssue:
    """One finding: ``severity`` is "error" (will not load/run) or "warning"."""

    location: str
    severity: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.severity}: {self.message}"


def _compilable(source: str) -> str:
    """Redis drops a ``#!lua`` line but counts it as line 1: keep the numbering."""
    if source.startswith("#!"):
        return "\n" + source.split("\n", 1)[1] if "\n" in source else ""
    return source


@functools.cache
def _loadstring() -> Any:
    """Lua 5.1's ``loadstring`` (Redis runs Lua 5.1), created once."""
    from lupa import lua51

    return lua51.LuaRuntime(register_eval=False, encoding=None).eval("loadstring")


def compile_error(script: LuaScript) -> tuple[int, str] | None:
    """``(line, message)`` of the first compile error, or None."""
    source = _compilable(script.source).encode("utf-8")
    text = _compile(source)
    if text is None:
        return None
    m = _LINE_RE.search(text)
    if m:
        return int(m[1]), m[2]
    # A limit Lua reports without a position ("too many local variables": 32767
    # declarations in one function) comes with a traceback: keep its first line, and find
    # the line where it is reached by compiling ever longer prefixes.
    message = text.splitlines()[0].strip()
    return _first_failing_line(source, message), message


def _compile(source: bytes) -> str | None:
    """Lua 5.1's compile error for ``source``, or None when it compiles."""
    result = _loadstring()(source, b"=user_script")
    if isinstance(result, tuple) and len(result) > 1 and result[0] is None:
        # Bytes: Lua may quote half of a multi-byte character ("near '\xe2'").
        return bytes(result[1]).decode("utf-8", "backslashreplace")
    return None


def _first_failing_line(source: bytes, message: str) -> int:
    """The first line whose prefix of the source fails with ``message`` (binary search:
    the parser reads the prefix exactly as the whole file up to its end)."""
    lines = source.splitlines(keepends=True)
    low, high = 1, len(lines)
    while low < high:
        mid = (low + high) // 2
        err = _compile(b"".join(lines[:mid]))
        if err is not None and err.splitlines()[0].strip() == message:
            high = mid
        else:
            low = mid + 1
    return low


_JINJA_MARKERS = ("{%", "{{", "{#")
_OPT_IN_HINT = (
    " (hint: this file is sent as written; to render it with Jinja2 add the header line "
    "'-- @template')"
)


def _hint(script: LuaScript) -> str:
    """A plain file that fails to compile may be a template that forgot to opt in."""
    if script.template or not any(m in script.source for m in _JINJA_MARKERS):
        return ""
    return _OPT_IN_HINT


def compile_check(scripts: Iterable[LuaScript]) -> None:
    """Raise :class:`ScriptSyntaxError` (file:line) for the first script that won't compile."""
    for script in scripts:
        err = compile_error(script)
        if err is not None:
            line, message = err
            where = script.file_line(line)
            raise ScriptSyntaxError(
                f"{where}: Lua syntax error: {message}{_hint(script)}",
                path=script.path or script.name,
                line=line,
            )


def _globals(script: LuaScript, luac: str) -> list[LintIssue]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=True) as tmp:
        tmp.write(_compilable(script.source))
        tmp.flush()
        out = subprocess.run([luac, "-p", "-l", tmp.name], capture_output=True, text=True)
    return [
        LintIssue(script.file_line(int(m[1])), "error", f"assigns global {m[2]!r} (use local)")
        for m in _SETGLOBAL_RE.finditer(out.stdout)
    ]


def _indexes(script: LuaScript) -> list[LintIssue]:
    issues: list[LintIssue] = []
    for lineno, line in enumerate(script.source.splitlines(), start=1):
        code = line.split("--", 1)[0]
        for m in _INDEX_RE.finditer(code):
            params = script.keys if m[1] == "KEYS" else script.args
            if params is None or (params and params[-1].variadic):
                continue
            if int(m[2]) > len(params):
                kind = "key" if m[1] == "KEYS" else "arg"
                issues.append(
                    LintIssue(
                        script.file_line(lineno),
                        "error",
                        f"uses {m[0]} but the header declares {len(params)} @{kind}",
                    )
                )
    return issues


def lint_scripts(scripts: Iterable[LuaScript]) -> list[LintIssue]:
    """Every finding for every script, in order; an empty list means clean."""
    luac = shutil.which("luac5.1")
    issues: list[LintIssue] = []
    for script in scripts:
        err = compile_error(script)
        if err is not None:
            issues.append(
                LintIssue(script.file_line(err[0]), "error", f"Lua syntax: {err[1]}{_hint(script)}")
            )
            continue
        if luac:
            issues.extend(_globals(script, luac))
        issues.extend(_indexes(script))
    return issues


def luac_available() -> bool:
    return shutil.which("luac5.1") is not None
