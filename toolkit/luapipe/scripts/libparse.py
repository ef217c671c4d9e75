"""Read a Function library file (``#!lua name=<library>``) as the server will load it.

The functions a library registers are found by running its top level as ``FUNCTION LOAD``
does, in the sandbox of :mod:`luapipe.scripts.libsandbox`: so names computed at load time
(``prefix .. "set"``), code under ``if redis then`` and both forms of
``redis.register_function`` read as the server reads them, bounded in time and memory.

Keys and args come from header blocks, one per function, anywhere in the file::

    #!lua name=stock
    -- Stock reservations.                    (the library's description)

    -- @function reserve                      (a block: comment lines up to the code)
    -- Reserve qty units if there are enough.
    -- @key stock     the units left
    -- @arg qty       units to take
    -- @return 1 if reserved, else 0
    redis.register_function('reserve', function(keys, args) ... end)

A function without a block (or whose block has no ``@key``/``@arg``/``@return``) is
called unchecked, so an existing library can be dropped in as it is. Every problem is one
:class:`~luapipe.errors.ScriptError` naming ``file:line``: a Lua error at load time, a
``redis.call`` at load time, a function registered twice, no function at all, a bad name
or flag, a block naming no registered function.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luapipe.errors import ScriptError
from luapipe.scripts.header import TAG_RE, Param, parse_param
from luapipe.scripts.library import BASE_VERSION, FunctionLibrary, LuaFunction
from luapipe.scripts.libsandbox import Registration, registrations
from luapipe.scripts.script import one_line, read_source

__all__ = [
    "at_version",
    "is_library",
    "library_name_of",
    "parse_library",
    "read_library",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_BLOCK_RE = re.compile(r"^--+\s*@function\b\s*(?P<rest>.*)$")


def _words(line: str) -> list[str]:
    """The words of a ``#!`` line as the server splits them (``sdssplitargs``: blanks
    separate, quotes group: ``name="stock"`` is ``name=stock``)."""
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote: the server refuses the line
        return line.split()


def _is_name(word: str) -> bool:
    return word[:5].lower() == "name="  # the server compares it case-insensitively


def library_name_of(first_line: str, where: str) -> str | None:
    """The library name a ``#!lua name=<library>`` line declares; None for any other line
    (a script's ``#!lua flags=...``, code). A library line the server would refuse is a
    :class:`ScriptError` naming ``where:1``."""
    if not first_line.startswith("#!"):
        return None
    parts = _words(first_line[2:])
    if not any(_is_name(p) for p in parts[1:]):
        return None
    if parts[0].lower() != "lua":
        raise ScriptError(f"{where}:1: a library's first line must start with '#!lua'")
    names = [p[len("name=") :] for p in parts[1:] if _is_name(p)]
    others = [p for p in parts[1:] if not _is_name(p)]
    if others:
        key = others[0].partition("=")[0]
        hint = " (a function's flags go to redis.register_function)" if key == "flags" else ""
        raise ScriptError(
            f"{where}:1: unknown option {others[0]!r} in a library's first line (only "
            f"'name='){hint}"
        )
    if len(names) > 1:
        raise ScriptError(f"{where}:1: the library name is given {len(names)} times")
    if not _NAME_RE.match(names[0]):
        raise ScriptError(
            f"{where}:1: invalid library name {names[0]!r}: letters, digits and '_' only"
        )
    return names[0]


def is_library(text: str) -> bool:
    """Whether ``text`` starts with a library's ``#!lua name=...`` line (valid or not)."""
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and any(_is_name(p) for p in _words(first[2:])[1:])


# -- header blocks --------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """A ``-- @function name`` block: what it declares and the line it starts on."""

    name: str
    line: int
    description: str
    keys: tuple[Param, ...] | None
    args: tuple[Param, ...] | None
    returns: str


def _description(lines: list[str]) -> str:
    """The library's description: the comment lines after the ``#!lua`` line, up to the
    first line that is not a plain comment."""
    words = []
    for raw in lines[1:]:
        line = raw.strip()
        if not line.startswith("--") or line.startswith("--[") or TAG_RE.match(line):
            break
        text = line.lstrip("-").strip()
        if text:
            words.append(text)
    return " ".join(words)


def blocks(source: str, where: str) -> list[Block]:
    """Every ``-- @function`` block; a tag outside one, or a bad tag, is an error."""
    found: list[Block] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is not None:
            tagged = current["tagged"]
            found.append(
                Block(
                    current["name"],
                    current["line"],
                    " ".join(current["desc"]),
                    tuple(current["keys"]) if tagged else None,
                    tuple(current["args"]) if tagged else None,
                    current["returns"],
                )
            )

    for lineno, raw in enumerate(source.splitlines(), start=1):
        line = raw.strip()
        if not line.startswith("--") or line.startswith("--["):
            close()
            current = None
            continue
        start = _BLOCK_RE.match(line)
        if start is not None:
            close()
            name = start["rest"].strip()
            if not _NAME_RE.match(name):
                raise ScriptError(
                    f"{where}:{lineno}: @function needs the name of a registered function "
                    "(letters, digits and '_')"
                )
            current = {"name": name, "line": lineno, "desc": [], "keys": [], "args": []}
            current.update(returns="", tagged=False)
            continue
        tag = TAG_RE.match(line)
        if tag is None:
            if current is not None and not current["tagged"]:
                text = line.lstrip("-").strip()
                if text:
                    current["desc"].append(text)
            continue
        name, rest = tag["tag"], tag["rest"].strip()
        if current is None:
            raise ScriptError(
                f"{where}:{lineno}: @{name} outside a '-- @function <name>' block (in a "
                "library, keys and args are declared per function)"
            )
        if name == "return":
            current.update(returns=rest, tagged=True)
            continue
        if name not in ("key", "arg"):
            raise ScriptError(
                f"{where}:{lineno}: unknown tag @{name} in a @function block (use @key, "
                "@arg, @return)"
            )
        current["tagged"] = True
        target = current["keys"] if name == "key" else current["args"]
        target.append(parse_param(name, rest, target, f"{where}:{lineno}"))
    close()
    return found


# -- the whole file ---------------------------------------------------------------------
def parse_library(
    source: str, *, path: str | None = None, version: str = BASE_VERSION
) -> FunctionLibrary:
    """A library from its text: name from the first line, functions from running it (its
    top level sees ``redis.REDIS_VERSION`` ``version``), keys and args from its
    ``@function`` blocks."""
    where = one_line(path) if path else "<library>"
    lines = source.split("\n")
    name = library_name_of(lines[0].rstrip("\r"), where)
    if name is None:
        raise ScriptError(f"{where}:1: a library starts with '#!lua name=<library>'")
    found = registrations(source, where, version)
    if not found:
        raise ScriptError(
            f"{where}:1: library {name!r} registers no function (call "
            "redis.register_function at least once; the server refuses it otherwise)"
        )
    declared: dict[str, Block] = {}
    for block in blocks(source, where):
        if block.name in declared:
            first = declared[block.name].line
            raise ScriptError(
                f"{where}:{block.line}: @function {block.name} is declared twice (also line "
                f"{first})"
            )
        declared[block.name] = block
    later = _later(source, where, version, {r.name for r in found})
    registered = {r.name for r in (*found, *later)}
    for block in declared.values():
        if block.name not in registered:
            listed = ", ".join(r.name for r in found)
            raise ScriptError(
                f"{where}:{block.line}: @function {block.name} names no function the library "
                f"registers ({listed})"
            )

    def function(r: Registration) -> LuaFunction:
        found_block = declared.get(r.name)
        return LuaFunction(
            name=r.name,
            library=name,
            keys=found_block.keys if found_block else None,
            args=found_block.args if found_block else None,
            flags=r.flags,
            description=(found_block.description if found_block else "") or r.description,
            line=r.line,
            returns=found_block.returns if found_block else "",
        )

    return FunctionLibrary.of(
        name,
        source,
        [function(r) for r in found],
        path=path,
        description=_description(lines),
        version=version,
        later=[function(r) for r in later],
    )


#: the newest ``REDIS_VERSION`` there is (an unstable build's), to find the functions a
#: library registers only on servers newer than the one it is read for
NEWEST_VERSION = "255.255.255"


def _later(source: str, where: str, version: str, found: set[str]) -> list[Registration]:
    """The functions the newest server registers and ``version`` does not (under a
    version check): callable, and a ``@function`` block may declare them. Only a library
    that reads ``REDIS_VERSION`` is run a second time."""
    if "REDIS_VERSION" not in source or version == NEWEST_VERSION:
        return []
    try:
        newest = registrations(source, where, NEWEST_VERSION)
    except ScriptError:
        return []
    return [r for r in newest if r.name not in found]


@functools.lru_cache(maxsize=512)
def _parsed(source: str, path: str | None, version: str) -> FunctionLibrary:
    return parse_library(source, path=path, version=version)


def at_version(library: FunctionLibrary, version: str) -> FunctionLibrary:
    """``library`` as a server whose ``redis_version`` is ``version`` loads it: its top
    level run again with that ``REDIS_VERSION`` where it differs (a function registered
    only from 7.2 on is there on a 7.2 node, not on a 7.0 one). The same object when the
    functions and flags come out the same; a :class:`ScriptError` (file:line) if that
    server would refuse it."""
    if version == library.version:
        return library
    again = _parsed(library.source, library.path, version)
    same = [(f.name, f.flags) for f in again.functions] == [
        (f.name, f.flags) for f in library.functions
    ]
    return library if same else again


def read_library(path: str | Path) -> FunctionLibrary:
    """Read and parse a library file (UTF-8, no byte-order mark)."""
    return parse_library(read_source(Path(path)), path=str(path))
