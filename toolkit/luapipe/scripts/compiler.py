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

__all__ = ["compile_check", "compile_error", "compile_problems", "opt_in_hint"]

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
    result = _loadstring()(_compilable(script.source).encode("utf-8"), b"=user_script")
    if isinstance(result, tuple) and len(result) > 1 and result[0] is None:
        # Bytes: Lua may quote half of a multi-byte character ("near '\xe2'").
        text = bytes(result[1]).decode("utf-8", "backslashreplace")
        m = _LINE_RE.search(text)
        return (int(m[1]), m[2]) if m else (1, text)
    return None


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
