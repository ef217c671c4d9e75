"""Compile scripts as Redis does (Lua 5.1 through lupa), without a server.

Compile errors name ``file:line`` (template lines are mapped back; a ``#!lua`` line counts
as line 1); a file that fails to compile and holds Jinja2 syntax without the
``-- @template`` opt-in gets a hint.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from luapipe.errors import ScriptSyntaxError
from luapipe.scripts.problems import ScriptProblem, raise_problems
from luapipe.scripts.script import LuaScript

__all__ = ["compile_check", "compile_error", "compile_problems", "compile_text", "opt_in_hint"]

_LINE_RE = re.compile(r"user_script:(\d+):\s*(.*)")


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


def compile_text(source: str) -> str | None:
    """Lua 5.1's compile error for a chunk of Lua (``user_script:N: ...``), or None."""
    return _compile(source.encode("utf-8"))


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


def opt_in_hint(script: LuaScript) -> str:
    """A plain file that fails to compile may be a template that forgot to opt in."""
    if script.template or not any(m in script.source for m in _JINJA_MARKERS):
        return ""
    return _OPT_IN_HINT


def compile_problems(scripts: Iterable[LuaScript]) -> list[ScriptProblem]:
    """One :class:`ScriptProblem` (file:line) per script that does not compile."""
    problems = []
    for script in scripts:
        err = compile_error(script)
        if err is not None:
            line, message = err
            where = script.file_line(line)
            exc = ScriptSyntaxError(
                f"{where}: Lua syntax error: {message}{opt_in_hint(script)}",
                path=script.path or script.name,
                line=line,
            )
            problems.append(ScriptProblem.of(script.name, script.path or script.name, exc))
    return problems


def compile_check(scripts: Iterable[LuaScript]) -> None:
    """Raise :class:`ScriptSyntaxError` (file:line) naming every script that won't compile."""
    raise_problems(compile_problems(scripts))
