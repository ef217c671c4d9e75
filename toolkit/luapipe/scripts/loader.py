"""Find the scripts in a directory and render the ones that opt into Jinja2 templating.

- Every top-level ``*.lua`` file is a script named after its stem; files whose name starts
  with ``_`` are snippets for ``{% include %}`` and never scripts themselves.
- A file whose first line is ``#!lua name=<library>`` is a Redis Function library instead
  (:mod:`luapipe.scripts.libparse`): sent byte for byte, never a template.
- Templating is opt-in: a script is a Jinja2 template only when its header (the leading
  ``--`` comment block, after an optional ``#!lua`` line) has the line ``-- @template``::

      -- Clamp, then count.
      -- @template
      -- @key counter  the counter
      {% include '_clamp.lua' %}

  Every other file is read and sent byte for byte, even when it contains ``{{``, ``{%``
  or ``{#`` (``return {{1}}`` and ``local t = {{1, 2}}`` are valid Lua), so its SHA is
  ``sha1sum`` of the file. Snippets need no marker: they are rendered as part of the
  template that includes them.
- A template is rendered with the directory as include path and ``StrictUndefined``; lines
  of the rendered text are mapped back to the template (an ``{% include %}`` standing on its
  own line expands in place), so Lua errors name the template's line. The ``-- @template``
  line stays in the rendered text (a Lua comment), so the line numbers before it match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from luapipe.errors import ScriptError, ScriptSyntaxError
from luapipe.scripts.libparse import is_library, library_name_of, parse_library
from luapipe.scripts.library import FunctionLibrary
from luapipe.scripts.problems import ScriptProblem, raise_problems
from luapipe.scripts.script import LuaScript, name_of_file, parse_header, read_source

__all__ = ["DirectoryScan", "discover", "is_template", "load_file", "scan"]

_INCLUDE_LINE = re.compile(r"^\s*\{%-?\s*include\s+['\"](?P<name>[^'\"]+)['\"]\s*-?%\}\s*$")


def is_template(text: str) -> bool:
    """Whether the script's header opts into Jinja2 with a ``-- @template`` line."""
    try:
        return parse_header(text).template
    except ScriptError:
        return False


def _line_map(template: str, rendered: str, env: jinja2.Environment) -> list[int]:
    """Rendered line -> template line, exact for plain lines and standalone includes."""
    mapping: list[int] = []
    for lineno, line in enumerate(template.splitlines(), start=1):
        m = _INCLUDE_LINE.match(line)
        if m is not None:
            included = env.loader.get_source(env, m["name"])[0] if env.loader else ""
            # a snippet ending in a newline leaves an empty line before the next one
            mapping.extend([lineno] * max(1, len(included.split("\n"))))
        else:
            mapping.append(lineno)
    extra = len(rendered.splitlines()) - len(mapping)
    mapping.extend([mapping[-1] if mapping else 1] * max(0, extra))
    return mapping


def load_file(path: Path, env: jinja2.Environment | None = None) -> LuaScript:
    """One script file: plain (byte for byte) or, with ``-- @template``, rendered."""
    script = LuaScript.from_file(path)
    if not script.template:
        return script
    env = env or _environment(path.parent)
    try:
        rendered = env.from_string(script.source).render()
    except jinja2.TemplateSyntaxError as exc:
        raise ScriptSyntaxError(
            f"{path}:{exc.lineno}: template error: {exc.message}", path=str(path), line=exc.lineno
        ) from None
    except jinja2.TemplateError as exc:
        raise ScriptError(f"{path}: template error: {exc}") from None
    return LuaScript.from_source(
        name_of_file(path),
        rendered,
        path=str(path),
        line_map=_line_map(script.source, rendered, env),
        header_source=script.source,
    )


def _environment(directory: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # Lua source, not HTML
    )


@dataclass(frozen=True)
class DirectoryScan:
    """Every Lua file of a directory: the scripts and libraries that could be read, and
    why the others could not (bad name, header, encoding, template, a library that fails
    at load time)."""

    scripts: tuple[LuaScript, ...]
    problems: tuple[ScriptProblem, ...]
    libraries: tuple[FunctionLibrary, ...] = ()


def scan(directory: str | Path) -> DirectoryScan:
    """Read every top-level ``*.lua`` of ``directory`` (sorted by name), keeping going past
    broken files so that all of them are reported at once."""
    d = Path(directory)
    if not d.is_dir():
        raise ScriptError(f"{d}: no such scripts directory")
    env = _environment(d)
    scripts: list[LuaScript] = []
    libraries: list[FunctionLibrary] = []
    problems: list[ScriptProblem] = []
    for p in sorted(d.glob("*.lua")):
        if p.name.startswith("_"):
            continue
        name = name_of_file(p)
        library = False
        try:
            text = read_source(p)
            library = is_library(text)
            if library:
                name = _library_name(text, str(p)) or name
                libraries.append(parse_library(text, path=str(p)))
            else:
                scripts.append(load_file(p, env))
        except ScriptError as exc:
            problems.append(ScriptProblem.of(name, str(p), exc, library=library))
    return DirectoryScan(tuple(scripts), tuple(problems), tuple(libraries))


def _library_name(text: str, where: str) -> str | None:
    """The name a library file declares (None when its first line is itself broken)."""
    try:
        return library_name_of(text.split("\n", 1)[0].rstrip("\r"), where)
    except ScriptError:
        return None


def discover(directory: str | Path) -> list[LuaScript]:
    """All scripts in ``directory`` (top level, sorted by name); one error lists every file
    that cannot be read."""
    found = scan(directory)
    raise_problems(found.problems)
    return list(found.scripts)
