"""An operation's bench profile: how ``luapipe bench`` draws its state and arguments.

``verify`` samples edge cases on purpose (missing keys, wrong types, exhausted stock); a
benchmark must time the path the operation exists for. The ``[bench]`` table of a spec says
what that path looks like::

    [bench]
    description = "a shop with plenty of stock: every reservation goes through"
    write_share = 1.0          # the share of calls meant to take the write path (0 to 1)
    wrote = "returns[1]"       # the returned value that is 1 (or true) when a call wrote;
                               # inferred when a return value is if(<when>, 1, 0) or <when>
    renew = "never"            # "never", "refused" (a fresh copy of the case after a call
                               # that did not write) or N (a fresh copy every N calls)
    [bench.state]              # initial value per key; a key not listed starts missing
    stock = 1000000            # a string; { hash = {...} }, { zset = {...} }, { list = [...] },
                               # { set = [...] }; a key-prefix arg: { strings = {suffix = value} }
    [bench.args]               # per call: a value, { min, max } or { samples = [...] }
    qty = { min = 1, max = 5 }
    [bench.hot]                # --contention hot: overrides of write_share, renew, state, args
    state = { stock = 20 }     # e.g. stock at the boundary, so racing forms oversell
    renew = "refused"

Everything here is a literal: nothing from a spec is evaluated. The table is checked by
:mod:`luapipe.operations.benchspec`: problems are reported as ``file:line: bench.<field>:
message`` like the rest of the spec.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["FLAG", "ArgDraw", "BenchDraw", "BenchProfile", "KeyInit", "flag_of", "write_flag"]

#: how a spec names the returned value that says a call wrote
FLAG = re.compile(r"returns(?:\[(\d+)\])?")


@dataclass(frozen=True)
class ArgDraw:
    """How one argument is drawn for each call: a fixed value, a range or samples."""

    name: str
    kind: str  # int float str bool list
    value: Any = None
    lo: float | int | None = None
    hi: float | int | None = None
    samples: tuple[Any, ...] = ()

    @property
    def fixed(self) -> bool:
        return not self.samples and self.lo is None

    def draw(self, rng: random.Random) -> Any:
        if self.samples:
            v = self.samples[rng.randrange(len(self.samples))]
            return list(v) if isinstance(v, tuple) else v
        if self.lo is not None and self.hi is not None:
            if self.kind == "int":
                return rng.randint(int(self.lo), int(self.hi))
            return round(rng.uniform(float(self.lo), float(self.hi)), 3)
        return list(self.value) if isinstance(self.value, tuple) else self.value

    def describe(self) -> str:
        if self.samples:
            return "one of " + ", ".join(map(str, self.samples))
        if self.lo is not None:
            return f"{self.lo} to {self.hi}"
        return str(list(self.value) if isinstance(self.value, tuple) else self.value)


@dataclass(frozen=True)
class KeyInit:
    """The initial value of one key (or, for a key-prefix argument, of keys under it)."""

    name: str
    family: str  # string hash zset list set; "prefix": strings under a key-prefix argument
    value: tuple[Any, ...]

    def describe(self) -> str:
        if self.family == "string":
            return str(self.value[0])
        return f"{self.family} of {len(self.value)}"


@dataclass(frozen=True)
class BenchDraw:
    """What one contention mode draws: state, arguments, renewal and the declared share."""

    write_share: float
    renew: str | int = "never"  # "never", "refused" or calls per copy
    state: tuple[KeyInit, ...] = ()
    args: tuple[ArgDraw, ...] = ()
    key_count: tuple[tuple[str, int], ...] = ()

    def arg(self, name: str) -> ArgDraw | None:
        return next((a for a in self.args if a.name == name), None)


@dataclass(frozen=True)
class BenchProfile:
    spread: BenchDraw
    hot: BenchDraw | None = None
    description: str = ""
    wrote: str | None = None  # "returns", "returns[N]", "always", "never"; None: unknown

    def for_contention(self, contention: str) -> BenchDraw:
        return self.hot if contention == "hot" and self.hot is not None else self.spread


class _Text(Protocol):  # an Expr of luapipe.operations.model (which imports this module)
    @property
    def text(self) -> str: ...


class _Guarded(Protocol):  # a Write of the model
    @property
    def when(self) -> _Text | None: ...


def write_flag(
    writes: Sequence[_Guarded], returns: Sequence[_Text], returns_tuple: bool
) -> str | None:
    """How to tell from a reply that a call wrote: ``"always"`` (no write has a ``when``),
    ``"never"`` (no writes), ``"returns"``/``"returns[N]"`` (a returned value that is the
    first conditional write's ``when``, or ``if(when, 1, 0)``), else None."""
    if not writes:
        return "never"
    guarded = [w.when for w in writes if w.when is not None]
    if not guarded:
        return "always"
    when = _squash(guarded[0].text)
    for i, r in enumerate(returns, start=1):
        if _squash(r.text) in (when, f"if({when},1,0)"):
            return f"returns[{i}]" if returns_tuple else "returns"
    return None


def flag_of(wrote: str | None) -> tuple[str, int | None]:
    """``("always"|"never"|"reply"|"unknown", index or None)`` of a ``wrote`` text."""
    if wrote in ("always", "never"):
        return wrote, None
    m = FLAG.fullmatch(wrote or "")
    if m is None:
        return "unknown", None
    return "reply", int(m[1]) - 1 if m[1] else None


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)
