"""The tokenizer of the expression language (grammar: :mod:`luapipe.operations.expr.parse`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FUNCTIONS", "KEYWORDS", "LexError", "Tok", "tokenize", "unescape"]


class LexError(ValueError):
    def __init__(self, message: str, col: int = 0) -> None:
        super().__init__(message)
        self.col = col


_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r\n]+)
      | (?P<float>[0-9]+\.[0-9]+)
      | (?P<int>[0-9]+)
      | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>->|\.\.|//|==|!=|<=|>=|[-+*/%<>()\[\],])""",
    re.VERBOSE,
)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}
KEYWORDS = frozenset({"and", "or", "not", "true", "false", "nil"})
FUNCTIONS = frozenset(
    {"if", "min", "max", "abs", "floor", "len", "str", "int", "float", "coalesce", "is_nil"}
    | {"map", "filter", "sum", "contains"}
)


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str
    col: int


def unescape(body: str, col: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise LexError(f"unknown escape '\\{nxt}' (use \\n \\t \\\\ \\' \\\")", col + i)
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def tokenize(text: str) -> list[Tok]:
    toks: list[Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        bad = _CONTROL.search(m.group()) if m is not None and m.lastgroup == "str" else None
        if bad is not None:  # raw control bytes would break generated comments and modules
            raise LexError(
                f"control character {bad.group()!r} in a string (use \\n or \\t)",
                pos + bad.start() + 1,
            )
        if m is None:
            raise LexError(f"unexpected character {text[pos]!r}", pos + 1)
        kind = m.lastgroup or ""
        if kind != "ws":
            toks.append(Tok(kind, m.group(), pos + 1))
        pos = m.end()
    toks.append(Tok("end", "", len(text) + 1))
    return toks
