"""A directory of scripts as one Redis Function library (``luapipe functions build``).

Each script that can run as a function unchanged (:mod:`luapipe.scripts.convert`) becomes
one function of the library, its code verbatim inside ``function(KEYS, ARGV) ... end``;
its keys, args and flags come from its header. The others are listed with the reason, and
stay scripts.

The library is versioned as the generated function form is (:mod:`luapipe.scripts.versioned`):
it is called ``luapipe_<base>_<hash of its code>`` and every function
``luapipe_<base>_<hash>_<script>``, so two versions of an application, each with its own
build, run side by side and never run each other's code; ``luapipe functions gc`` collects
the old ones (never a team's own library). A :class:`BuiltLibrary` also maps each line of
its code back to the script's own file and line, so an error raised by a function names
the script's ``file:line`` exactly as the script's error would.

The text depends only on the scripts (names, code, headers) and the base name, never on
where the directory is, so ``functions build`` and ``ScriptRegistry.from_directory(dir,
functions="app")`` arrive at the same names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from luapipe.errors import ScriptError
from luapipe.scripts.compiler import compile_text
from luapipe.scripts.convert import (
    Unconverted,
    body_of,
    conversion_problem,
    function_flags,
    function_suffix,
)
from luapipe.scripts.library import FunctionLibrary, LuaFunction, library_sha
from luapipe.scripts.script import LuaScript
from luapipe.scripts.versioned import BASE_NAME, hole, versioned_name

__all__ = ["BuiltLibrary", "Unconverted", "build_library", "check_base"]

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("luapipe.scripts", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,  # Lua source
)
_CALLBACK = "callback = function(KEYS, ARGV)"


@dataclass(frozen=True)
class _FunctionSource:
    """One built function's part of the library, as the error reader sees a script: the
    library's lines outside the function blanked (so the lines an error can come from are
    the function's), each line mapped to the script's own file and line."""

    name: str
    path: str | None
    source: str
    library: BuiltLibrary

    def file_line(self, line: int) -> str:
        return self.library.file_line(line)


@dataclass(frozen=True)
class BuiltLibrary(FunctionLibrary):
    """A Function library built from scripts (``origin="built"``).

    ``scripts`` maps each script name to its function name; ``skipped`` are the scripts
    left out, each with its reason; ``base`` is the name the library was built as
    (``app`` for ``luapipe_app_<hash>``)."""

    base: str = ""
    scripts: tuple[tuple[str, str], ...] = ()
    skipped: tuple[Unconverted, ...] = ()
    #: per line of the code: (the script's file, its line), or None for the library's own
    origins: tuple[tuple[str, int] | None, ...] = field(default=(), repr=False)
    #: (function name, first line, last line of its body in the code)
    spans: tuple[tuple[str, int, int], ...] = field(default=(), repr=False)

    def function_of(self, script: str) -> LuaFunction | None:
        """The function the script ``script`` became (None: it was not converted)."""
        for name, fn in self.scripts:
            if name == script:
                return self.function(fn)
        return None

    def file_line(self, line: int) -> str:
        """The script's ``file:line`` for a line of a function's body; the library's own
        place for the rest."""
        found = self.origins[line - 1] if 0 < line <= len(self.origins) else None
        if found is None:
            return f"{self.path or self.name}:{line}"
        return f"{found[0]}:{found[1]}"

    def error_source(self, function: str) -> Any:
        """What the error reader reads for an error of ``function``: its script's lines."""
        for name, first, last in self.spans:
            if name == function:
                lines = self.source.split("\n")
                kept = [t if first <= n <= last else "" for n, t in enumerate(lines, 1)]
                origin = self.origins[first - 1]
                path = origin[0] if origin else self.path
                return _FunctionSource(self.name, path, "\n".join(kept), self)
        return self

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        out.update(
            base=self.base,
            scripts={s: f for s, f in self.scripts},
            skipped=[u.as_dict() for u in self.skipped],
        )
        return out


def check_base(base: str) -> str:
    """A built library's base name: letters, digits and ``_``, not starting with a digit."""
    if not isinstance(base, str) or not BASE_NAME.match(base):
        raise ScriptError(
            f"invalid library name {base!r}: letters, digits and '_', not starting with a digit"
        )
    return base


@dataclass(frozen=True)
class _Entry:
    script: LuaScript
    suffix: str
    body: str
    first: int  # the script line the body starts on
    flags: tuple[str, ...]


def _wrapped_problem(body: str, first: int) -> str | None:
    """Why the body does not compile inside a function (``...`` at its top level...)."""
    text = compile_text(f"return function(KEYS, ARGV)\n{body}end")
    if text is None:
        return None
    head = text.split(":", 2)
    if len(head) == 3 and head[1].isdigit():
        line = int(head[1]) - 1 + first - 1
        return f"line {line} does not compile as a function's body: {head[2].strip()}"
    return f"does not compile as a function's body: {text.splitlines()[0]}"


def _entries(scripts: Iterable[LuaScript]) -> tuple[list[_Entry], list[Unconverted]]:
    entries: list[_Entry] = []
    skipped: list[Unconverted] = []
    taken: dict[str, str] = {}
    for script in sorted(scripts, key=lambda s: s.name):
        body, first = body_of(script)
        reason = conversion_problem(script) or _wrapped_problem(body, first)
        suffix = function_suffix(script.name)
        # the server's function names are case-insensitive: 'Foo' and 'foo' are one name
        # there (FCALL of one runs the other; Redis 7.0 crashes deleting such a library)
        if reason is None and suffix.lower() in taken:
            reason = (
                f"its function name would end in {suffix!r}, as {taken[suffix.lower()]!r}'s "
                "does (function names hold letters, digits and '_' only, and the server "
                "reads them case-insensitively): rename one"
            )
        if reason is not None:
            skipped.append(Unconverted(script.name, script.path, reason))
            continue
        taken[suffix.lower()] = script.name
        entries.append(_Entry(script, suffix, body, first, function_flags(script)))
    return entries, skipped


def _render(name: str, base: str, entries: list[_Entry], skipped: list[Unconverted]) -> str:
    functions = [
        {
            "name": f"{name}_{e.suffix}",
            "script": e.script.name,
            "file": Path(e.script.path).name if e.script.path else f"{e.script.name}.lua",
            "description": " ".join(e.script.description.split()),
            "key_lines": [f"{p.display} {p.doc}".strip() for p in e.script.keys or ()],
            "arg_lines": [f"{p.display} {p.doc}".strip() for p in e.script.args or ()],
            "returns": " ".join(e.script.returns.split()),
            "flags": ", ".join(f"'{f}'" for f in e.flags),
            "body": e.body,
        }
        for e in entries
    ]
    text = _ENV.get_template("built.lua.j2").render(
        library=name, base=base, functions=functions, skipped=skipped
    )
    assert text.endswith("end}\n"), "a built library ends with its last function"
    return text


def _placement(
    text: str, name: str, entries: list[_Entry]
) -> tuple[list[tuple[str, int] | None], list[tuple[str, int, int]], list[int]]:
    """Per line of ``text`` the script file and line it holds (None: the library's own),
    each function's body lines, and the line registering each function."""
    lines = text.split("\n")
    origins: list[tuple[str, int] | None] = [None] * len(lines)
    spans: list[tuple[str, int, int]] = []
    registered: list[int] = []
    at = 0
    for e in entries:
        fn = f"{name}_{e.suffix}"
        head = f"redis.register_function{{function_name = '{fn}', "
        while not (lines[at].startswith(head) and lines[at].endswith(_CALLBACK)):
            at += 1
        registered.append(at + 1)
        size = e.body.count("\n")
        where = e.script.path or f"{e.script.name}.lua"
        for k in range(size):
            mapped = e.script.file_line(e.first + k).rsplit(":", 1)[1]
            origins[at + 1 + k] = (where, int(mapped))
        spans.append((fn, at + 2, at + 1 + size))
        at += 1 + size
    return origins, spans, registered


def build_library(
    scripts: Iterable[LuaScript], base: str, *, path: str | None = None
) -> BuiltLibrary:
    """The library ``luapipe_<base>_<hash>`` holding every script that can run as a
    function; ``path`` is where it is (or will be) written, for messages.

    A :class:`ScriptError` when no script can be converted (a library needs a function)."""
    check_base(base)
    entries, skipped = _entries(scripts)
    if not entries:
        why = "; ".join(f"{u.name}: {u.reason}" for u in skipped) or "there are no scripts"
        raise ScriptError(f"no script can be built into library {base!r}: {why}")
    name = versioned_name(base, _render(hole(base), base, entries, skipped))
    text = _render(name, base, entries, skipped)
    origins, spans, registered = _placement(text, name, entries)
    functions = tuple(
        LuaFunction(
            name=f"{name}_{e.suffix}",
            library=name,
            keys=e.script.keys,
            args=e.script.args,
            flags=e.flags,
            description=e.script.description,
            line=line,
            returns=e.script.returns,
        )
        for e, line in zip(entries, registered, strict=True)
    )
    return BuiltLibrary(
        name=name,
        source=text,
        sha=library_sha(text),
        functions=functions,
        path=path,
        description=f"the scripts built into library {base}",
        origin="built",
        base=base,
        scripts=tuple((e.script.name, f"{name}_{e.suffix}") for e in entries),
        skipped=tuple(skipped),
        origins=tuple(origins),
        spans=tuple(spans),
    )
