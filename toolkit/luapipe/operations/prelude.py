"""The Python twin of the Lua prelude: helpers the generated Python calls, each mirroring a
helper of ``templates/prelude.lua.j2``. Generated modules reach them through
:mod:`luapipe.runtime` (the generated-code ABI); luapipe's own modules import them here.

Integers are exact within +-(2^53-1) (Lua numbers are doubles): beyond that every form fails
with ``OVERFLOW``. Floats must stay finite (``FLOAT``); division by zero is ``DIVZERO``.
Floats become strings with ``%.17g`` in both languages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

from luapipe.errors import OpError

__all__ = [
    "LIMIT",
    "OpError",
    "ck",
    "co",
    "contains",
    "div",
    "fail",
    "fk",
    "floor",
    "flt",
    "fmt",
    "fsum",
    "idiv",
    "idx",
    "imod",
    "is_nil",
    "isum",
    "length",
    "pflt",
    "pint",
    "rflt",
    "rint",
    "text",
    "trunc",
    "wopt",
]

LIMIT = 2**53
T = TypeVar("T")
_INT_RE = re.compile(r"0|-?[1-9][0-9]*")  # as Redis reads one: no "05", no "-0"
_FLT_RE = re.compile(r"-?[0-9]+(\.[0-9]*)?")


def fail(code: str, message: str) -> OpError:
    return OpError(f"{code} {message}")


def ck(x: int) -> int:
    if not -LIMIT < x < LIMIT:
        raise fail("OVERFLOW", "integer beyond 2^53-1")
    return x


def fk(x: float) -> float:
    if not math.isfinite(x):
        raise fail("FLOAT", "result is not a finite number")
    return x


def flt(x: int | None) -> float | None:
    return None if x is None else float(x)


def div(a: float, b: float) -> float:
    if b == 0:
        raise fail("DIVZERO", "division by zero")
    return fk(a / b)


def idiv(a: int, b: int) -> int:
    if b == 0:
        raise fail("DIVZERO", "division by zero")
    return a // b


def imod(a: int, b: int) -> int:
    return a - idiv(a, b) * b


def floor(x: float) -> int:
    return ck(math.floor(x))


def trunc(x: float) -> int:
    return ck(math.trunc(x))


def fmt(x: float) -> str:
    return "%.17g" % x  # noqa: UP031 (the same format string as the Lua side)


def text(value: Any) -> str:
    """A reply (bytes or str) as str; bytes that are not UTF-8 survive the round trip."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


def length(x: str | list[Any]) -> int:
    return len(x.encode("utf-8", "surrogateescape")) if isinstance(x, str) else len(x)


def pint(s: str | None) -> int | None:
    """``int(str)`` in the language: nil unless the whole text is an integer."""
    if s is None or not _INT_RE.fullmatch(s):
        return None
    if len(s.lstrip("-").lstrip("0")) > 20:
        raise fail("OVERFLOW", "integer beyond 2^53-1")
    return ck(int(s))


def pflt(s: str | None) -> float | None:
    if s is None or not _FLT_RE.fullmatch(s):
        return None
    return fk(float(s))


def rint(s: str | None) -> int | None:
    """A read declared ``as = "int"``: nil when missing, NOTINT when not an integer."""
    if s is None:
        return None
    v = pint(s)
    if v is None:
        raise fail("NOTINT", "a value read is not an integer")
    return v


def rflt(s: str | None) -> float | None:
    if s is None:
        return None
    v = pflt(s)
    if v is None:
        raise fail("NOTFLOAT", "a value read is not a number")
    return v


def is_nil(x: object) -> bool:
    """``is_nil(x)`` of the expression language (Lua's ``x == nil``)."""
    return x is None


def co(a: T | None, d: T) -> T:
    return d if a is None else a


def idx(xs: list[T], i: int) -> T | None:
    return xs[i] if 0 <= i < len(xs) else None


def isum(xs: list[int]) -> int:
    total = 0
    for x in xs:
        total = ck(total + x)
    return total


def fsum(xs: list[float]) -> float:
    total = 0.0
    for x in xs:
        total = fk(total + x)
    return total


def contains(xs: list[T], v: T) -> bool:
    """``contains(list, value)``; a function so the list is evaluated first, as in Lua."""
    return v in xs


def wopt(x: T | None, conv: Callable[[T], Any]) -> Any:
    return None if x is None else conv(x)
