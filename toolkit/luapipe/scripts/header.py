"""A script's header: the leading Lua comment block that declares its signature.

::

    #!lua flags=no-writes                      (optional, Redis 7 flags)
    -- Fixed-window rate limiter.              (description: comment lines before the tags)
    -- @key counter     the window's counter   (required)
    -- @arg limit       hits allowed per window
    -- @arg [window]    optional: may be left out
    -- @arg ids...      one or more further args
    -- @arg [ids...]    zero or more further args
    -- @return 1 if allowed, else 0
    -- @template                               (optional: render the file with Jinja2)

Keys and args are positional, so an optional one (``[name]``) may only be followed by
optional ones, and a variadic one (``name...`` or ``[name...]``) must be the last.
:class:`Signature` turns the declaration into the counts a call must meet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from luapipe.errors import ScriptError

__all__ = ["TAG_RE", "Header", "Param", "Signature", "parse_header", "parse_param"]

_TAG_RE = re.compile(r"^--+\s*@(?P<tag>\w+)\s*(?P<rest>.*)$")
_PARAM_RE = re.compile(
    r"^(?P<open>\[)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<var>\.\.\.)?(?P<close>\])?"
    r"(?:\s+(?P<doc>.*))?$"
)
KNOWN_FLAGS = frozenset(
    {"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"}
)


@dataclass(frozen=True)
class Param:
    """A declared key or argument: ``name``, ``[name]``, ``name...`` or ``[name...]``."""

    name: str
    doc: str = ""
    variadic: bool = False
    optional: bool = False

    @property
    def display(self) -> str:
        """As written in the header: ``[name...]`` is optional and variadic."""
        text = self.name + ("..." if self.variadic else "")
        return f"[{text}]" if self.optional else text


@dataclass(frozen=True)
class Signature:
    """How many keys (or args) a call may pass, from the declared params."""

    params: tuple[Param, ...]

    @property
    def minimum(self) -> int:
        return sum(1 for p in self.params if not p.optional)

    @property
    def maximum(self) -> int | None:
        """None: no upper bound (the last param is variadic)."""
        if self.params and self.params[-1].variadic:
            return None
        return len(self.params)

    def accepts(self, n: int) -> bool:
        return n >= self.minimum and (self.maximum is None or n <= self.maximum)

    def describe(self, noun: str) -> str:
        """``1 key (counter)``, ``no args``, ``1 to 2 args (a, [b])``, ``at least 1 arg
        (values...)``, ``any number of args ([ids...])``."""
        low, high = self.minimum, self.maximum
        if high is None:
            count = f"at least {_count(low, noun)}" if low else f"any number of {noun}s"
        elif low == high:
            count = _count(low, noun) if low else f"no {noun}s"
        else:
            count = f"{low} to {high} {noun}s"
        names = ", ".join(p.display for p in self.params)
        return f"{count} ({names})" if names else count


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Header:
    description: str
    keys: tuple[Param, ...] | None
    args: tuple[Param, ...] | None
    flags: tuple[str, ...]
    returns: str
    template: bool = False


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


def _param(tag: str, rest: str, declared: list[Param], where: str) -> Param:
    """One ``@key``/``@arg`` line, checked against the ones declared before it."""
    m = _PARAM_RE.match(rest)
    if m is None or bool(m["open"]) != bool(m["close"]):
        raise ScriptError(
            f"{where}: @{tag} needs a name (letters, digits, '_'), written name, [name], "
            "name... or [name...]"
        )
    param = Param(m["name"], (m["doc"] or "").strip(), bool(m["var"]), bool(m["open"]))
    if declared and declared[-1].variadic:
        raise ScriptError(f"{where}: only the last @{tag} may be variadic ('...')")
    if declared and declared[-1].optional and not param.optional:
        raise ScriptError(
            f"{where}: @{tag} {param.name} is required but follows the optional "
            f"{declared[-1].display} (optional ones come last)"
        )
    if any(p.name == param.name for p in declared):
        raise ScriptError(f"{where}: @{tag} {param.name} is declared twice")
    return param


#: a ``-- @tag rest`` line
TAG_RE = _TAG_RE
#: one ``@key``/``@arg`` line (``tag``, the text after the tag, the ones declared before it,
#: ``file:line`` for the error), as a script's header reads it
parse_param = _param


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
        target = keys if name == "key" else args
        target.append(_param(name, rest, target, f"{where}:{lineno}"))
    return Header(
        description=" ".join(desc),
        keys=tuple(keys) if tagged else None,
        args=tuple(args) if tagged else None,
        flags=flags,
        returns=returns,
        template=template,
    )
