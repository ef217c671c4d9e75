"""Lua source as tokens (Pygments' Lua lexer): comments and strings are never code.

Two questions are answered from the tokens:

- :func:`indexes`: every ``KEYS[n]``/``ARGV[n]`` with a literal ``n`` (not ``t.KEYS[n]``,
  not inside ``--[[ ... ]]`` or a string);
- :func:`key_arguments`: the first argument of every ``redis.call``/``redis.pcall`` (or
  ``server.*``, or a local alias such as ``local rcall = redis.call``) whose command takes
  a key there, and whether that key comes from ``KEYS``.

The second is deliberately conservative: a key is reported as undeclared only when it is
certainly built from string literals, ``ARGV`` and locals that are themselves built so;
anything it cannot follow (function parameters, calls of unknown functions) is left alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from pygments.lexers import LuaLexer
from pygments.token import Comment, Keyword, Name, Number, Operator, String, Token, _TokenType
from pygments.token import is_token_subtype as _is

__all__ = ["KeyUse", "Origin", "Tok", "indexes", "key_arguments", "tokens"]


@dataclass(frozen=True)
class Tok:
    kind: str  # "name", "keyword", "string", "number", "op"
    text: str
    line: int
    col: int


@functools.cache
def _lexer() -> LuaLexer:
    return LuaLexer(stripnl=False, ensurenl=False)


def _kind(ttype: _TokenType) -> str | None:
    if _is(ttype, Comment) or _is(ttype, Token.Text) or _is(ttype, Token.Whitespace):
        return None
    if _is(ttype, String):
        return "string"
    if _is(ttype, Number):
        return "number"
    if _is(ttype, Keyword) or _is(ttype, Operator.Word):
        return "keyword"
    if _is(ttype, Name):
        return "name"
    return "op"


def tokens(source: str) -> list[Tok]:
    """The code tokens of ``source`` (comments and whitespace dropped; one token per string
    literal), with 1-based line and column."""
    out: list[Tok] = []
    line, col = 1, 1
    previous: str | None = None
    for ttype, text in _lexer().get_tokens(source):
        kind = _kind(ttype)
        if kind == "string" and previous == "string" and out:
            last = out[-1]
            out[-1] = Tok("string", last.text + text, last.line, last.col)
        elif kind is not None:
            if kind == "op":  # the lexer may glue punctuation: "(...)", "};"
                out.extend(Tok("op", m[0], line, col + m.start()) for m in _OP.finditer(text))
            else:
                out.append(Tok(kind, text, line, col))
        previous = kind if kind is not None else previous if _is(ttype, String) else None
        newlines = text.count("\n")
        if newlines:
            line += newlines
            col = len(text) - text.rfind("\n")
        else:
            col += len(text)
    return out


_OP = re.compile(r"\.\.\.|\.\.|==|~=|<=|>=|::|\S")


def _is_field(toks: list[Tok], i: int) -> bool:
    return i > 0 and toks[i - 1].kind == "op" and toks[i - 1].text in (".", ":")


def indexes(toks: list[Tok]) -> Iterator[tuple[Tok, int]]:
    """``(KEYS-or-ARGV token, n)`` for every ``KEYS[n]``/``ARGV[n]`` with a literal n."""
    for i, tok in enumerate(toks[:-3]):
        if tok.kind != "name" or tok.text not in ("KEYS", "ARGV") or _is_field(toks, i):
            continue
        bracket, number, close = toks[i + 1 : i + 4]
        if bracket.text == "[" and number.kind == "number" and close.text == "]":
            try:
                yield tok, int(number.text, 0)
            except ValueError:
                continue


class Origin(Enum):
    KEYS = "KEYS"  # derived from KEYS (maybe with a suffix: counted as declared)
    UNDECLARED = "undeclared"  # built only from literals and ARGV
    UNKNOWN = "unknown"  # cannot tell


@dataclass(frozen=True)
class KeyUse:
    """The key argument of one ``redis.call`` (``command`` lower case)."""

    command: str
    line: int
    col: int
    origin: Origin


_API = ("redis", "server")
_CALLS = ("call", "pcall")
#: functions whose result is built only from their arguments (so follow the arguments)
_TRANSPARENT = frozenset(
    {"tostring", "tonumber", "string.format", "string.sub", "string.lower", "string.upper"}
    | {"cjson.decode", "cmsgpack.unpack", "unpack"}
)
_NEUTRAL_NAMES = frozenset({"ARGV", "nil", "true", "false", "and", "or", "not"})


def _aliases(toks: list[Tok]) -> set[str]:
    """Names bound to the call functions: ``local rcall = redis.call``."""
    found = set()
    for i in range(len(toks) - 4):
        a, eq, api, dot, fn = toks[i : i + 5]
        if (
            a.kind == "name"
            and eq.text == "="
            and api.text in _API
            and dot.text == "."
            and fn.text in _CALLS
            and (i + 5 >= len(toks) or toks[i + 5].text != "(")
        ):
            found.add(a.text)
    return found


def _call_sites(toks: list[Tok]) -> Iterator[int]:
    """Index of the ``(`` of every call of the call API (or an alias)."""
    aliases = _aliases(toks)
    for i, tok in enumerate(toks):
        if tok.text != "(" or i == 0:
            continue
        if (toks[i - 1].text in aliases and not _is_field(toks, i - 1)) or (
            i >= 3
            and toks[i - 1].text in _CALLS
            and toks[i - 2].text == "."
            and toks[i - 3].text in _API
            and not _is_field(toks, i - 3)
        ):
            yield i


def _arguments(toks: list[Tok], open_paren: int) -> list[list[Tok]]:
    """The comma-separated arguments of the call whose ``(`` is at ``open_paren``."""
    args: list[list[Tok]] = [[]]
    depth = 0
    for tok in toks[open_paren + 1 :]:
        if tok.text in ("(", "{", "["):
            depth += 1
        elif tok.text in (")", "}", "]"):
            if depth == 0:
                break
            depth -= 1
        elif tok.text == "," and depth == 0:
            args.append([])
            continue
        args[-1].append(tok)
    return [a for a in args if a]


def key_arguments(toks: list[Tok], key_first: frozenset[str]) -> list[KeyUse]:
    """The first argument of each call of a command in ``key_first`` (commands whose first
    argument is a key), with where it comes from."""
    defs = _definitions(toks)
    uses = []
    for paren in _call_sites(toks):
        args = _arguments(toks, paren)
        if len(args) < 2 or len(args[0]) != 1 or args[0][0].kind != "string":
            continue
        command = args[0][0].text.strip("'\"").lower()
        if command not in key_first:
            continue
        first = args[1][0]
        uses.append(KeyUse(command, first.line, first.col, _origin(args[1], defs, 0)))
    return uses


def _definitions(toks: list[Tok]) -> dict[str, list[list[Tok] | None]]:
    """name -> the right-hand sides assigned to it (the rest of the line after ``=``), or
    None where it is bound in a way not followed (a parameter, a ``for ... in`` variable)."""
    defs: dict[str, list[list[Tok] | None]] = {}
    for i, tok in enumerate(toks):
        if tok.kind != "name" or _is_field(toks, i) or (i and toks[i - 1].text == ","):
            continue
        names, j = [tok.text], i + 1  # a name list: a, b, c
        while j + 1 < len(toks) and toks[j].text == "," and toks[j + 1].kind == "name":
            names.append(toks[j + 1].text)
            j += 2
        after = toks[j].text if j < len(toks) else ""
        rhs: list[Tok] | None
        if after == "=":
            rhs = _rest_of_line(toks, j + 1)
        elif after == "in" or (after == ")" and _is_parameter_list(toks, i)):
            rhs = None
        else:
            continue
        for name in names:
            defs.setdefault(name, []).append(rhs)
    return defs


def _is_parameter_list(toks: list[Tok], i: int) -> bool:
    """Whether the name at ``i`` opens ``function f(a, b)`` / ``function(a, b)``."""
    if i < 2 or toks[i - 1].text != "(":
        return False
    k = i - 2
    while k > 0 and (toks[k].kind == "name" or toks[k].text in (".", ":")):
        k -= 1
    return toks[k].text == "function"


def _rest_of_line(toks: list[Tok], start: int) -> list[Tok]:
    if start >= len(toks):
        return []
    line = toks[start].line
    out = []
    for tok in toks[start:]:
        if tok.line != line or tok.text == ";":
            break
        out.append(tok)
    return out


def _origin(expr: list[Tok], defs: dict[str, list[list[Tok] | None]], depth: int) -> Origin:
    if depth > 6 or not expr:
        return Origin.UNKNOWN
    if any(t.kind == "name" and t.text == "KEYS" for t in expr):
        return Origin.KEYS
    if any(t.text == "{" for t in expr):  # a table: filled later, not followed
        return Origin.UNKNOWN
    seen_unknown = False
    i = 0
    while i < len(expr):
        tok = expr[i]
        if tok.kind != "name" or _is_field(expr, i) or tok.text in _NEUTRAL_NAMES:
            i += 1
            continue
        chain, end = _dotted(expr, i)
        if end < len(expr) and expr[end].text == "(":
            if chain not in _TRANSPARENT:
                return Origin.UNKNOWN
            i = end + 1
            continue
        origins = [
            Origin.UNKNOWN if rhs is None else _origin(rhs, defs, depth + 1)
            for rhs in defs.get(tok.text, [None])
        ]
        if Origin.KEYS in origins:
            return Origin.KEYS
        seen_unknown = seen_unknown or Origin.UNKNOWN in origins
        i = end
    return Origin.UNKNOWN if seen_unknown else Origin.UNDECLARED


def _dotted(expr: list[Tok], i: int) -> tuple[str, int]:
    """``a.b.c`` starting at ``i``: the dotted name and the index after it."""
    parts = [expr[i].text]
    j = i + 1
    while j + 1 < len(expr) and expr[j].text == "." and expr[j + 1].kind == "name":
        parts.append(expr[j + 1].text)
        j += 2
    return ".".join(parts), j
