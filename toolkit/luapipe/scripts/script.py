"""One Lua script: its exact source, SHA, declared keys/args/flags and where it came from.

A script file may start with a header in Lua comments::

    #!lua flags=no-writes                      (optional, Redis 7 flags)
    -- Fixed-window rate limiter.              (description: comment lines before the tags)
    -- @key counter  the window's counter
    -- @arg limit    hits allowed per window
    -- @arg extra... any number of further args (variadic, last only)
    -- @return 1 if allowed, else 0
    -- @template                               (optional: render the file with Jinja2)

A file without ``@key``/``@arg`` tags is still a script; its calls are then not checked.
Only a file whose header has the line ``-- @template`` is a Jinja2 template (see
:mod:`luapipe.scripts.loader`); every other file is sent byte for byte, however much of it looks
like Jinja2 (``return {{1}}`` is Lua), so ``sha`` equals ``sha1sum`` of the file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from redis.exceptions import DataError

from luapipe.errors import CallArgumentError, ScriptError

__all__ = ["LuaScript", "Param", "parse_header", "validate_name"]

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TAG_RE = re.compile(r"^--+\s*@(?P<tag>\w+)\s*(?P<rest>.*)$")
_PARAM_RE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<var>\.\.\.)?(?:\s+(?P<doc>.*))?$")
KNOWN_FLAGS = frozenset(
    {"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"}
)

Value = str | bytes | int | float


@dataclass(frozen=True)
class Param:
    """A declared key or argument."""

    name: str
    doc: str = ""
    variadic: bool = False


@dataclass(frozen=True)
class Header:
    description: str
    keys: tuple[Param, ...] | None
    args: tuple[Param, ...] | None
    flags: tuple[str, ...]
    returns: str
    template: bool = False


def _name_problem(name: str) -> str:
    """What is wrong with a name that does not match :data:`NAME_RE`."""
    if not name:
        return "it is empty"
    if name[0].isdigit():
        return "it starts with a digit, which is not allowed"
    bad = next((c for c in name if not (c.isascii() and (c.isalnum() or c == "_"))), "")
    return f"{bad!r} is not allowed"


def _one_line(text: str) -> str:
    """``text`` with control characters escaped (a file name may hold a newline)."""
    return "".join(repr(c)[1:-1] if ord(c) < 32 or ord(c) == 127 else c for c in text)


def validate_name(name: str, what: str = "script name", where: str | None = None) -> str:
    """A script or parameter name: ASCII letters, digits and ``_``, not starting with a
    digit; no paths, no ``..``. ``where`` (the file) starts the error message."""
    if not NAME_RE.fullmatch(name):
        prefix = f"{_one_line(where)}: " if where else ""
        raise ScriptError(
            f"{prefix}invalid {what} {name!r}: {_name_problem(name)} (use letters, digits "
            "and '_', not starting with a digit; no spaces, path separators or '..')"
        )
    return name


def _parse_flags(first_line: str, where: str) -> tuple[str, ...]:
    parts = first_line[2:].split()
    if not parts or parts[0] != "lua":
        raise ScriptError(f"{where}:1: a shebang line must start with '#!lua'")
    flags: tuple[str, ...] = ()
    for part in parts[1:]:
        key, _, value = part.partition("=")
        if key != "flags":
            raise ScriptError(f"{where}:1: unknown shebang option {key!r} (only 'flags=')")
        flags = tuple(f for f in value.split(",") if f)
        unknown = [f for f in flags if f not in KNOWN_FLAGS]
        if unknown:
            raise ScriptError(
                f"{where}:1: unknown flag {unknown[0]!r}; known: {', '.join(sorted(KNOWN_FLAGS))}"
            )
    return flags


def parse_header(source: str, where: str = "<script>") -> Header:
    """Read the leading comment block: description, @key, @arg, @return, @template and
    the flags."""
    lines = source.splitlines()
    flags: tuple[str, ...] = ()
    start = 0
    if lines and lines[0].startswith("#!"):
        flags = _parse_flags(lines[0], where)
        start = 1
    desc: list[str] = []
    keys: list[Param] = []
    args: list[Param] = []
    returns = ""
    template = False
    tagged = False
    for lineno, raw in enumerate(lines[start:], start=start + 1):
        line = raw.strip()
        if not line.startswith("--"):
            break
        tag = _TAG_RE.match(line)
        if tag is None:
            if not tagged and not line.startswith("--["):
                text = line.lstrip("-").strip()
                if text:
                    desc.append(text)
            continue
        name, rest = tag["tag"], tag["rest"].strip()
        if name == "template":  # opts into Jinja2; declares no keys or args
            if rest:
                raise ScriptError(f"{where}:{lineno}: @template takes nothing, got {rest!r}")
            if template:
                raise ScriptError(f"{where}:{lineno}: @template is declared twice")
            template = True
            continue
        tagged = True
        if name == "return":
            returns = rest
            continue
        if name not in ("key", "arg"):
            raise ScriptError(
                f"{where}:{lineno}: unknown header tag @{name} (use @key, @arg, @return, @template)"
            )
        m = _PARAM_RE.match(rest)
        if m is None:
            raise ScriptError(f"{where}:{lineno}: @{name} needs a name (letters, digits, '_')")
        target = keys if name == "key" else args
        if target and target[-1].variadic:
            raise ScriptError(f"{where}:{lineno}: only the last @{name} may be variadic ('...')")
        if any(p.name == m["name"] for p in target):
            raise ScriptError(f"{where}:{lineno}: @{name} {m['name']} is declared twice")
        target.append(Param(m["name"], (m["doc"] or "").strip(), bool(m["var"])))
    return Header(
        description=" ".join(desc),
        keys=tuple(keys) if tagged else None,
        args=tuple(args) if tagged else None,
        flags=flags,
        returns=returns,
        template=template,
    )


def _count_ok(params: tuple[Param, ...] | None, n: int) -> bool:
    if params is None:
        return True
    if params and params[-1].variadic:
        return n >= len(params)  # "name..." means one or more
    return n == len(params)


def _describe(params: tuple[Param, ...]) -> str:
    if not params:
        return "none"
    names = [p.name + ("..." if p.variadic else "") for p in params]
    return f"{len(params)}{'+' if params[-1].variadic else ''} ({', '.join(names)})"


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
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise ScriptError(f"{p}:{line}: not valid UTF-8 (byte {exc.start})") from None
        return cls.from_source(p.stem, text, path=str(p))

    @property
    def read_only(self) -> bool:
        """Declared ``no-writes``: called with EVALSHA_RO, allowed on replicas."""
        return "no-writes" in self.flags

    @property
    def checked(self) -> bool:
        """Whether the header declares keys/args (so calls are checked before sending)."""
        return self.keys is not None

    def file_line(self, line: int) -> str:
        """``path:line`` in the file for a line number of the sent source."""
        mapped = self.line_map[line - 1] if 0 < line <= len(self.line_map) else line
        return f"{self.path or self.name}:{mapped}"

    def check_call(self, keys: Sequence[Value], args: Sequence[Value]) -> None:
        """Raise :class:`CallArgumentError` unless the counts fit the header and every
        value is one redis-py can send (also a ``redis.exceptions.DataError`` otherwise)."""
        _check_values(self.name, "keys", keys)
        _check_values(self.name, "args", args)
        if not _count_ok(self.keys, len(keys)):
            assert self.keys is not None
            raise CallArgumentError(
                f"script {self.name!r} takes {_describe(self.keys)} keys, got {len(keys)}"
            )
        if not _count_ok(self.args, len(args)):
            assert self.args is not None
            raise CallArgumentError(
                f"script {self.name!r} takes {_describe(self.args)} args, got {len(args)}"
            )


_SENDABLE = (str, bytes, bytearray, memoryview, int, float)


def _check_values(name: str, kind: str, values: Sequence[object]) -> None:
    """What redis-py's encoder refuses (None, a bool, a dict...), refused before sending."""
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, _SENDABLE):
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise CallArgumentError(
                f"script {name!r}: {kind}[{i}] is {shown} ({type(v).__name__}); keys and args "
                "must be str, bytes, int or float; nothing was sent",
                like=DataError,
            )
