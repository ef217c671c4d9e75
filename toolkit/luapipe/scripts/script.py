"""One Lua script: its exact source, SHA, declared keys/args/flags and where it came from.

A script file may start with a header in Lua comments::

    #!lua flags=no-writes                      (optional, Redis 7 flags)
    -- Fixed-window rate limiter.              (description: comment lines before the tags)
    -- @key counter  the window's counter
    -- @arg limit    hits allowed per window
    -- @arg [extra...] zero or more further args (see :mod:`luapipe.scripts.header`)
    -- @return 1 if allowed, else 0
    -- @template                               (optional: render the file with Jinja2)

A file without ``@key``/``@arg`` tags is still a script; its calls are then not checked.
Only a file whose header has the line ``-- @template`` is a Jinja2 template (see
:mod:`luapipe.scripts.loader`); every other file is sent byte for byte, however much of it looks
like Jinja2 (``return {{1}}`` is Lua), so ``sha`` equals ``sha1sum`` of the file.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.exceptions import DataError

from luapipe.errors import CallArgumentError, ScriptError
from luapipe.scripts.header import Param, Signature, parse_header
from luapipe.wire.replies import Value

__all__ = [
    "LuaScript",
    "Param",
    "Value",
    "call_values",
    "check_count",
    "check_values",
    "name_of_file",
    "param_name",
    "parse_header",
    "script_name_problem",
    "validate_name",
]

#: An identifier (operation names and ``@key``/``@arg`` names); script names are freer.
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def script_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a script name, or None. A script is named after its file
    (``addStandardJob-9.lua`` is ``addStandardJob-9``): anything goes except what could
    be read as a path or breaks a line or a column of output."""
    if not name:
        return "it is empty"
    if "/" in name or "\\" in name:
        return "a path separator is not allowed"
    if name == ".":
        return "'.' is not allowed (it reads as a path)"
    if ".." in name:
        return "'..' is not allowed (it reads as a path)"
    for c in name:
        if c.isspace():
            return f"whitespace ({c!r}) is not allowed"
        if unicodedata.category(c) in ("Cc", "Cf"):
            return f"the control character {c!r} is not allowed"
    return None


def name_of_file(path: str | Path) -> str:
    """The script name of a file: its name without ``.lua`` (``.lua`` alone is the empty
    name, refused; ``Path.stem`` would call it ``.lua``)."""
    name = Path(path).name
    return name[: -len(".lua")] if name.endswith(".lua") else Path(path).stem


def one_line(text: str) -> str:
    """``text`` with control characters escaped (a file name may hold a newline)."""
    return "".join(repr(c)[1:-1] if ord(c) < 32 or ord(c) == 127 else c for c in text)


def validate_name(name: str, what: str = "script name", where: str | None = None) -> str:
    """A script name (see :func:`script_name_problem`). ``where`` (the file) starts the
    error message."""
    problem = script_name_problem(name)
    if problem is not None:
        prefix = f"{one_line(where)}: " if where else ""
        raise ScriptError(
            f"{prefix}invalid {what} {name!r}: {problem} (names may hold letters, digits, "
            "'_', '-' and '.')"
        )
    return name


def read_source(p: Path) -> str:
    """A Lua file's text, byte for byte: UTF-8 without a byte-order mark, else a
    :class:`ScriptError` naming ``file:line``."""
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ScriptError(f"{p}: cannot read: {exc.strerror}") from None
    if data.startswith(b"\xef\xbb\xbf"):  # Lua 5.1 cannot compile it; it also hides the header
        raise ScriptError(
            f"{p}:1: starts with a UTF-8 byte-order mark, which Redis's Lua cannot "
            "compile: save the file without it"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ScriptError(f"{p}:{line}: not valid UTF-8 (byte {exc.start})") from None


@dataclass(frozen=True)
class LuaScript:
    """A script as it is sent to Redis. ``sha`` is sha1 of ``source`` encoded as UTF-8."""

    name: str
    source: str
    sha: str
    keys: tuple[Param, ...] | None = None
    args: tuple[Param, ...] | None = None
    flags: tuple[str, ...] = ()
    path: str | None = None
    description: str = ""
    returns: str = ""
    #: line in ``source`` -> line in the file (only for templates; empty means identity)
    line_map: tuple[int, ...] = field(default=(), repr=False)
    #: the header opts into Jinja2 (``-- @template``): ``source`` is the rendered text
    template: bool = False

    @classmethod
    def from_source(
        cls,
        name: str,
        source: str,
        *,
        path: str | None = None,
        line_map: Sequence[int] = (),
        header_source: str | None = None,
    ) -> LuaScript:
        """Build a script from text (``header_source``: where to read the header, if not it)."""
        validate_name(name, where=path)
        where = path or name
        if not source.strip():
            raise ScriptError(f"{where}: the script is empty")
        header = parse_header(source if header_source is None else header_source, where)
        return cls(
            name=name,
            source=source,
            sha=hashlib.sha1(source.encode("utf-8")).hexdigest(),
            keys=header.keys,
            args=header.args,
            flags=header.flags,
            path=path,
            description=header.description,
            returns=header.returns,
            line_map=tuple(line_map),
            template=header.template,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> LuaScript:
        """Read a script file byte for byte (a ``-- @template`` file is not rendered here:
        :func:`luapipe.scripts.loader.load_file` renders it)."""
        p = Path(path)
        return cls.from_source(name_of_file(p), read_source(p), path=str(p))

    @property
    def read_only(self) -> bool:
        """Declared ``no-writes``: called with EVALSHA_RO, allowed on replicas."""
        return "no-writes" in self.flags

    @property
    def checked(self) -> bool:
        """Whether the header declares keys/args (so calls are checked before sending)."""
        return self.keys is not None

    def as_dict(self) -> dict[str, Any]:
        """The script as ``scripts list --json`` prints it (declared keys and args by their
        display names; None where the header declares none, so calls are unchecked)."""
        return {
            "name": self.name,
            "sha": self.sha,
            "keys": None if self.keys is None else [p.display for p in self.keys],
            "args": None if self.args is None else [p.display for p in self.args],
            "flags": list(self.flags),
            "path": self.path,
            "description": self.description,
            "problem": None,
        }

    def file_line(self, line: int) -> str:
        """``path:line`` in the file for a line number of the sent source."""
        mapped = self.line_map[line - 1] if 0 < line <= len(self.line_map) else line
        return f"{self.path or self.name}:{mapped}"

    def check_call(self, keys: Sequence[Value], args: Sequence[Value]) -> None:
        """Raise :class:`CallArgumentError` unless the counts fit the header and every
        value is one redis-py can send (also a ``redis.exceptions.DataError`` otherwise)."""
        if _fits(self.keys, keys) and _fits(self.args, args):
            return  # the usual call, checked without building a message
        what = f"script {self.name!r}"
        check_values(what, "keys", keys, self.keys)
        check_values(what, "args", args, self.args)
        check_count(what, self.keys, len(keys), "key")
        check_count(what, self.args, len(args), "arg")


_SENDABLE = (str, bytes, bytearray, memoryview, int, float)


@functools.cache
def _bounds(params: tuple[Param, ...]) -> tuple[int, int | None]:
    """(minimum, maximum or None) of a declared signature, computed once per signature: a
    call checks its counts on the hot path (reg.call within a few % of raw EVALSHA)."""
    signature = Signature(params)
    return signature.minimum, signature.maximum


#: (min, max) per signature tuple, found by identity: hashing a tuple of frozen Params on
#: every call cost a microsecond (the tuple is kept here, so its id cannot be reused)
_BOUNDS_BY_ID: dict[int, tuple[tuple[Param, ...], tuple[int, int | None]]] = {}


def _fits(params: tuple[Param, ...] | None, values: Sequence[object]) -> bool:
    """Whether ``values`` are all plain (str, bytes, int, float) and as many as ``params``
    allow: the hot path's check, True for nearly every call (the slow path says why not)."""
    for v in values:
        if v.__class__ not in _PLAIN:
            return False
    if params is None:
        return True
    hit = _BOUNDS_BY_ID.get(id(params))
    if hit is None or hit[0] is not params:
        hit = _BOUNDS_BY_ID[id(params)] = (params, _bounds(params))
    low, high = hit[1]
    n = len(values)
    return low <= n and (high is None or n <= high)


def check_count(what: str, params: tuple[Param, ...] | None, n: int, noun: str) -> None:
    """``what`` (``script 'x'``, ``function 'f'``) takes ``n`` keys or args: refused unless
    the declared ``params`` allow that many (None: not declared, anything goes)."""
    if params is None:
        return
    low, high = _bounds(params)
    if n < low or (high is not None and n > high):
        raise CallArgumentError(f"{what} takes {Signature(params).describe(noun)}, got {n}")


_PLAIN = frozenset({str, bytes, int, float})
_SEQUENCES = frozenset({list, tuple})
_TEXT = (str, bytes, bytearray, memoryview)


def call_values(name: str, kind: str, values: Any) -> Sequence[Value]:
    """``keys`` or ``args`` of a call: a list or tuple as it is, None as none (as redis-py's
    ``register_script`` takes them), another iterable as a tuple. A str or bytes is refused
    (iterating ``"ab"`` would send ``a`` and ``b``, iterating ``b"ab"`` the numbers 97 and
    98), and so is a value that is not iterable."""
    if values.__class__ in _SEQUENCES:
        return values
    if values is None:
        return ()
    shown = repr(values) if len(repr(values)) <= 40 else repr(values)[:37] + "..."
    hint = f"; write [{shown}] for one value" if isinstance(values, _TEXT) else ""
    if not isinstance(values, _TEXT):
        try:
            return tuple(values)
        except TypeError:
            pass
    raise CallArgumentError(
        f"script {name!r}: {kind} must be a list of values, got {type(values).__name__} "
        f"{shown}{hint}; nothing was sent"
    )


def check_values(
    what: str, kind: str, values: Sequence[object], params: Sequence[Param] | None = None
) -> None:
    """What redis-py's encoder refuses (None, a bool, a dict...), refused before sending
    (redis-py's own refusal names neither the callee nor the value); ``what`` names the
    callee (``script 'x'``), ``params`` the declared names (``args[1] (limit)``)."""
    for v in values:
        if v.__class__ not in _PLAIN:
            break
    else:
        return  # the usual case, checked without building anything
    for i, v in enumerate(values):
        # an int subclass (IntEnum...) too: hiredis refuses it unnamed, the asyncio encoder
        # sends its repr ('<Status.OK: 1>')
        if (
            isinstance(v, bool)
            or not isinstance(v, _SENDABLE)
            or (isinstance(v, int) and v.__class__ is not int)
        ):
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise CallArgumentError(
                f"{what}: {kind}[{i}]{param_name(params, i)} is {shown} ({type(v).__name__}); "
                "keys and args must be str, bytes, int or float; nothing was sent",
                like=DataError,
            )


def param_name(params: Sequence[Param] | None, i: int) -> str:
    """`` (limit)``: the declared name of position ``i`` (a variadic one names the rest),
    or ``""`` where nothing is declared."""
    if not params:
        return ""
    if i < len(params):
        return f" ({params[i].name})"
    return f" ({params[-1].name})" if params[-1].variadic else ""
