"""Whether a script can run as a Redis Function, unchanged, and its body as a function's.

A function's callback gets its keys and args as parameters; the built library names them
``KEYS`` and ``ARGV``, so ``KEYS[1]``, ``#KEYS``, ``ipairs(KEYS)`` and ``local k = KEYS``
mean what they meant in the script. What a function cannot do that a script can (observed
on Redis 7.0.15, see REDIS_FACTS.md):

- reach ``KEYS``/``ARGV`` as *globals*: ``_G.KEYS``, ``_G['ARGV']``, ``rawget(_G, 'KEYS')``,
  ``getfenv().KEYS``, or code compiled at run time (``loadstring('return KEYS[1]')``) see
  the globals, and a function has no such globals ("Script attempted to access nonexistent
  global variable"). A script that reads the global ``_G``, ``getfenv``/``setfenv`` or
  ``loadstring``/``load`` is not converted (read from its bytecode, ``GETGLOBAL``: a local,
  a parameter, a field or a table constructor's key of that name is not one);
- call ``redis.replicate_commands`` (a no-op since Redis 7), ``redis.breakpoint`` or
  ``redis.debug`` (the script debugger's): functions do not have them (calling one is
  "attempt to call field ... (a nil value)");
- assign the global ``KEYS``/``ARGV`` (``KEYS = {...}``, ``x, ARGV = ...``, ``function
  KEYS() ... end``): an error in a script ("Attempt to modify a readonly table"), a plain
  assignment of the parameter in a function. Read from the code's Lua 5.1 bytecode
  (``SETGLOBAL``), so a local of that name, a field and a table constructor's key are not;
- use ``...`` at its top level (a script's chunk is a vararg function, the callback is
  not), or anything else that compiles as a script and not inside a function: the wrapped
  body is compiled, and its error is the reason.

Flags: a script's ``#!lua flags=...`` become the function's flags. A script without a
``#!lua`` line runs in Redis's compatibility mode, which a function never does: it may
reach keys of other slots on its node, so its function gets ``allow-cross-slot-keys``;
under ``maxmemory`` it runs until its first write (which is refused), where the function
is refused before it starts (see the README).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from luapipe.scripts.header import TAG_RE
from luapipe.scripts.luatokens import Tok, tokens
from luapipe.scripts.script import LuaScript

__all__ = ["Unconverted", "body_of", "conversion_problem", "function_flags", "function_suffix"]

#: names that reach the globals (so a global KEYS/ARGV a function does not have)
_GLOBAL_ACCESS = {
    "_G": "reads globals through _G",
    "getfenv": "reads globals through getfenv",
    "setfenv": "changes a function's globals with setfenv",
    "loadstring": "compiles code at run time with loadstring, and that code sees the globals",
    "load": "compiles code at run time with load, and that code sees the globals",
}
_MISSING_API = {
    "replicate_commands": "a no-op since Redis 7: delete the call",
    "breakpoint": "the script debugger's",
    "debug": "the script debugger's",
}
_FLAGS_OF_COMPAT_MODE = ("allow-cross-slot-keys",)
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class Unconverted:
    """A script of the directory left out of the built library, and why (one line)."""

    name: str
    path: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "reason": self.reason}


def body_of(script: LuaScript) -> tuple[str, int]:
    """The script's code as a callback's body and the script line it starts on: without
    its ``#!lua`` line, header tags made plain comments (``-- @key`` reads ``-- @ key``, so a
    library reader never takes them for the library's own tags), ending in a newline.
    Nothing else changes, so every line keeps its text and its place."""
    lines = script.source.split("\n")
    first = 1
    if lines and lines[0].startswith("#!"):
        lines, first = lines[1:], 2
    out = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith("--") and TAG_RE.match(stripped):
            at = line.index("@")
            line = line[: at + 1] + " " + line[at + 1 :]
        out.append(line)
    body = "\n".join(out)
    return (body if body.endswith("\n") else body + "\n"), first


def function_flags(script: LuaScript) -> tuple[str, ...]:
    """The function's flags: the script's ``#!lua flags=``; without a ``#!lua`` line, those
    of Redis's compatibility mode that a flag can keep (``allow-cross-slot-keys``)."""
    if script.source.startswith("#!"):
        return script.flags
    return _FLAGS_OF_COMPAT_MODE


def function_suffix(name: str) -> str:
    """A script name as the end of a function name (letters, digits and ``_`` only):
    ``addStandardJob-9`` -> ``addStandardJob_9``."""
    return _NOT_NAME.sub("_", name)


def _is_field(toks: list[Tok], i: int) -> bool:
    return i > 0 and toks[i - 1].text in (".", ":")


def _tag_in_string(script: LuaScript, body: str, toks: list[Tok]) -> str | None:
    """A line inside a multi-line string that reads as a header tag: making it a plain
    comment would change the string, and leaving it would make the library unreadable."""
    inside: set[int] = set()
    for t in toks:
        if t.kind == "string" and "\n" in t.text:
            inside.update(range(t.line + 1, t.line + t.text.count("\n") + 1))
    original = script.source.split("\n")
    offset = 1 if script.source.startswith("#!") else 0
    for n in sorted(inside):
        text = original[n - 1 + offset].lstrip() if n - 1 + offset < len(original) else ""
        if text.startswith("--") and TAG_RE.match(text):
            return (
                f"line {n + offset}, inside a string, reads as a header tag, which a library "
                "file cannot hold there"
            )
    return None


#: what a script must mention for a token check to apply (tokenizing is the slow part)
_SUSPECT = re.compile(r"\b(?:replicate_commands|breakpoint|debug)\b")
_LONG_STRING = re.compile(r"\[=*\[")


@functools.cache
def _dump() -> Any:
    """Lua 5.1's bytecode of a chunk (``string.dump`` of what ``loadstring`` compiles), or
    nil when it does not compile."""
    from lupa import lua51

    return lua51.LuaRuntime(register_eval=False, encoding=None).eval(
        "function(s) local f = loadstring(s) return f and string.dump(f) end"
    )


_GETGLOBAL, _SETGLOBAL = 5, 7  # Lua 5.1's opcodes: a global's read and assignment
_PARAMS = (b"KEYS", b"ARGV")
_REACHING = tuple(n.encode() for n in _GLOBAL_ACCESS)


@functools.lru_cache(maxsize=512)
def _global_uses(body: str) -> tuple[tuple[int, int, str], ...]:
    """``(line, opcode, name)`` of each read of a global that reaches the globals
    (:data:`_GLOBAL_ACCESS`) and each assignment of a global ``KEYS``/``ARGV`` in ``body``,
    read from its Lua 5.1 bytecode: a local of that name, a field or a table constructor's
    key is neither. Empty when the body does not compile (its error is the reason)."""
    code = _dump()(body.encode("utf-8", "surrogateescape"))
    if not code:
        return ()
    head = bytes(code[:12])
    at, int_size, size_t, num_size = 12, head[7], head[8], head[10]
    data = bytes(code)
    found: list[tuple[int, int, str]] = []

    def integer(size: int) -> int:
        nonlocal at
        at += size
        return int.from_bytes(data[at - size : at], "little")

    def string() -> bytes:
        nonlocal at
        n = integer(size_t)
        at += n
        return data[at - n : at - 1] if n else b""

    def function() -> None:
        nonlocal at
        string()
        at += 2 * int_size + 4  # line defined, last line, upvalues, params, vararg, stack
        code = [integer(4) for _ in range(integer(int_size))]
        constants: list[Any] = []
        for _ in range(integer(int_size)):
            kind = data[at]
            at += 1
            if kind == 1:
                at += 1
            elif kind == 3:
                at += num_size
            constants.append(string() if kind == 4 else None)
        for _ in range(integer(int_size)):
            function()
        lines = [integer(int_size) for _ in range(integer(int_size))]
        for _ in range(integer(int_size)):  # locals: name, start pc, end pc
            string()
            at += 2 * int_size
        for _ in range(integer(int_size)):  # upvalue names
            string()
        for pc, op in enumerate(code):
            opcode = op & 0x3F
            name = constants[op >> 14] if opcode in (_GETGLOBAL, _SETGLOBAL) else None
            wanted = _PARAMS if opcode == _SETGLOBAL else _REACHING
            if name is not None and name in wanted:
                found.append((lines[pc] if pc < len(lines) else 0, opcode, name.decode()))

    function()
    return tuple(sorted(found))


def global_writes(body: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each assignment to a global ``KEYS`` or ``ARGV`` in ``body``,
    read from its Lua 5.1 bytecode (``SETGLOBAL``): ``x, KEYS = ...``, ``function ARGV()``
    are; a local of that name, a field or a table constructor's key are not."""
    return [(line, name) for line, op, name in _global_uses(body) if op == _SETGLOBAL]


def global_reads(body: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each read of ``_G``, ``getfenv``, ``setfenv``, ``loadstring`` or
    ``load`` as a global (``GETGLOBAL``): a local of that name (``local load = ...``), a
    field (``t.load``) or a table constructor's key (``{load = 1}``) is not one."""
    return [(line, name) for line, op, name in _global_uses(body) if op == _GETGLOBAL]


def conversion_problem(script: LuaScript) -> str | None:
    """Why ``script`` cannot run as a function unchanged (one line, naming the script
    line), or None when it can."""
    body, first = body_of(script)
    for at, name in global_writes(body):
        return (
            f"line {at + first - 1} assigns the global {name}: an error in a script, "
            "a plain assignment in a function"
        )
    for at, name in global_reads(body):
        return (
            f"line {at + first - 1} {_GLOBAL_ACCESS[name]}: a function has no KEYS/ARGV "
            "globals (they are its callback's parameters)"
        )
    if not _SUSPECT.search(body) and not (
        _LONG_STRING.search(body)
        and any(TAG_RE.match(x.lstrip()) for x in script.source.split("\n"))
    ):
        return None
    toks = tokens(body)

    def line(t: Tok) -> int:  # the script's own line of a token
        return t.line + first - 1

    for i, t in enumerate(toks):
        if t.kind != "name" or _is_field(toks, i):
            continue
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.text in ("redis", "server") and nxt is not None and nxt.text in (".", ":"):
            field = toks[i + 2].text if i + 2 < len(toks) else ""
            if field in _MISSING_API:
                return (
                    f"line {line(t)} uses {t.text}.{field}, which functions do not have "
                    f"({_MISSING_API[field]})"
                )
    return _tag_in_string(script, body, toks)
