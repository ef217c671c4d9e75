"""Checking a spec's ``[bench]`` table into a :class:`~luapipe.operations.benchprofile.
BenchProfile` (see that module for the format): every value a literal of the right kind,
every key and argument a declared one, one ``file:line: bench.<field>: message`` per
problem."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from luapipe.operations.benchprofile import (
    FLAG,
    ArgDraw,
    BenchDraw,
    BenchProfile,
    KeyInit,
    flag_of,
    write_flag,
)
from luapipe.operations.commands import READS, WRITES

if TYPE_CHECKING:
    from luapipe.operations.model import ArgSpec, Expr, KeySpec, Read, Write
    from luapipe.operations.specbuild import Builder

__all__ = ["BenchTable", "bench_section", "merged_draw"]

_FIELDS = ("description", "write_share", "wrote", "renew", "state", "args", "key_count", "hot")
_HOT_FIELDS = ("write_share", "renew", "state", "args", "key_count")
_FAMILY_OF = {"hash": "hash", "zset": "zset", "list": "list", "set": "set"}
MAX_KEYS = 1000


def _families(reads: Sequence[Read], writes: Sequence[Write]) -> dict[str, str]:
    out: dict[str, str] = {}
    steps = [(READS[r.cmd].family, r.key.text.strip()) for r in reads]
    steps += [(WRITES[w.cmd], w.key.text.strip()) for w in writes]
    for family, key in steps:
        if family != "any":
            out.setdefault(key, family)
    return out


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _fits(kind: str, elem: str | None, v: Any) -> bool:
    if kind == "list":
        return isinstance(v, list) and bool(v) and all(_fits(elem or "str", None, x) for x in v)
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**53
    if kind == "float":
        return _number(v)
    if kind == "bool":
        return isinstance(v, bool)
    return isinstance(v, str)


class _Section:
    """Checks one [bench] (or [bench.hot]) table against the operation's names."""

    def __init__(self, b: Builder, keys: Sequence[KeySpec], args: Sequence[ArgSpec]) -> None:
        self.b = b
        self.keys = {k.name: k for k in keys}
        self.args = {a.name: a for a in args}

    def share(self, field: str, v: Any, read_only: bool) -> float:
        if not _number(v) or not 0 <= v <= 1:
            self.b.problem(field, f"must be a number from 0 to 1 (a share of calls), not {v!r}")
            return 0.0
        if read_only and v != 0:
            self.b.problem(field, "the operation has no writes: its write share is 0")
        return float(v)

    def renew(self, field: str, v: Any, flag: str | None) -> str | int:
        if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1_000_000:
            return v
        if v in ("never", "refused"):
            if v == "refused" and flag_of(flag)[0] != "reply":
                self.b.problem(
                    field,
                    '"refused" needs to know from the reply whether a call wrote '
                    '(hint: wrote = "returns[1]")',
                )
            return str(v)
        self.b.problem(field, f'must be "never", "refused" or a whole number >= 1, not {v!r}')
        return "never"

    def state(self, field: str, raw: Any, families: Mapping[str, str]) -> tuple[KeyInit, ...]:
        if not isinstance(raw, dict):
            self.b.problem(field, "must be a table: key name = initial value")
            return ()
        out = []
        for name, v in raw.items():
            sub = f"{field}.{name}"
            prefix = self.args.get(name)
            if name not in self.keys and not (prefix is not None and prefix.key_prefix):
                known = ", ".join(sorted(self.keys)) or "none"
                self.b.problem(sub, f"unknown key {name!r} (known: {known}; or a key-prefix arg)")
                continue
            init = self._value(sub, name, v, prefix is not None)
            if init is None:
                continue
            want = families.get(name)
            if want is not None and init.family not in (want, "prefix"):
                self.b.problem(sub, f"its commands use it as a {want}, not a {init.family}")
                continue
            out.append(init)
        return tuple(out)

    def _value(self, field: str, name: str, v: Any, prefix: bool) -> KeyInit | None:
        if prefix:
            items = v.get("strings") if isinstance(v, dict) and len(v) == 1 else None
            if not isinstance(items, dict) or not all(_scalar(x) for x in items.values()):
                self.b.problem(field, 'a key-prefix arg takes { strings = { suffix = "value" } }')
                return None
            return KeyInit(name, "prefix", tuple((k, _text(x)) for k, x in items.items()))
        if _scalar(v):
            return KeyInit(name, "string", (_text(v),))
        if isinstance(v, dict) and len(v) == 1:
            ((kind, body),) = v.items()
            family = _FAMILY_OF.get(kind)
            if family in ("hash", "zset") and isinstance(body, dict) and body:
                if family == "zset" and all(_number(x) for x in body.values()):
                    return KeyInit(name, family, tuple((m, float(s)) for m, s in body.items()))
                if family == "hash" and all(_scalar(x) for x in body.values()):
                    return KeyInit(name, family, tuple((f, _text(x)) for f, x in body.items()))
            if (
                family in ("list", "set")
                and isinstance(body, list)
                and body
                and all(_scalar(x) for x in body)
                and len(body) <= MAX_KEYS
            ):
                return KeyInit(name, family, tuple(_text(x) for x in body))
        self.b.problem(
            field,
            "must be a number or string, or one of { hash = {field = value} }, "
            "{ zset = {member = score} }, { list = [...] }, { set = [...] } (not empty)",
        )
        return None

    def arg_draws(self, field: str, raw: Any) -> tuple[ArgDraw, ...]:
        if not isinstance(raw, dict):
            self.b.problem(field, "must be a table: arg name = value, { min, max } or { samples }")
            return ()
        out = []
        for name, v in raw.items():
            sub = f"{field}.{name}"
            spec = self.args.get(name)
            if spec is None:
                known = ", ".join(sorted(self.args)) or "none"
                self.b.problem(sub, f"unknown argument {name!r} (known: {known})")
                continue
            draw = self._draw(sub, spec, v)
            if draw is not None:
                out.append(draw)
        return tuple(out)

    def _draw(self, field: str, spec: ArgSpec, v: Any) -> ArgDraw | None:
        kind = spec.type.kind
        elem = spec.type.elem.kind if spec.type.elem is not None else None
        if not isinstance(v, dict):
            if _fits(kind, elem, v):
                return ArgDraw(spec.name, kind, tuple(v) if isinstance(v, list) else v)
            self.b.problem(field, f"{v!r} is not of type {spec.type}")
            return None
        if set(v) == {"samples"}:
            s = v["samples"]
            if isinstance(s, list) and s and all(_fits(kind, elem, x) for x in s):
                return ArgDraw(spec.name, kind, samples=tuple(_frozen(x) for x in s))
            self.b.problem(field, f"samples must be a non-empty list of {spec.type} values")
            return None
        if set(v) == {"min", "max"} and kind in ("int", "float"):
            lo, hi = v["min"], v["max"]
            if _fits(kind, None, lo) and _fits(kind, None, hi) and lo <= hi:
                return ArgDraw(spec.name, kind, lo=lo, hi=hi)
            self.b.problem(field, f"min and max must be {kind} values with min <= max")
            return None
        self.b.problem(
            field,
            "must be a value, { min = ..., max = ... } (numbers) or { samples = [...] }",
        )
        return None

    def key_count(self, field: str, raw: Any) -> tuple[tuple[str, int], ...]:
        if not isinstance(raw, dict):
            self.b.problem(field, "must be a table: variadic key name = how many keys")
            return ()
        out = []
        for name, n in raw.items():
            k = self.keys.get(name)
            if k is None or not k.variadic:
                self.b.problem(f"{field}.{name}", "only a variadic key ('name...') has a count")
            elif not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_KEYS):
                self.b.problem(f"{field}.{name}", f"must be a whole number from 1 to {MAX_KEYS}")
            else:
                out.append((name, n))
        return tuple(out)


def _scalar(v: Any) -> bool:
    return isinstance(v, str) or _number(v)


def _text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return str(v)


def _frozen(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def bench_section(
    b: Builder,
    raw: Any,
    *,
    keys: Sequence[KeySpec],
    args: Sequence[ArgSpec],
    reads: Sequence[Read],
    writes: Sequence[Write],
    returns: Sequence[Expr],
    returns_tuple: bool,
    invariant: Expr | None,
) -> BenchProfile | None:
    """The checked ``[bench]`` table, or None when the spec has none (problems go to ``b``)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        b.problem("bench", "must be a table: [bench] write_share = 1.0")
        return None
    for extra in sorted(set(raw) - set(_FIELDS)):
        b.problem(f"bench.{extra}", f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    flag = _flag(b, raw.get("wrote"), writes, returns, returns_tuple)
    sec = _Section(b, keys, args)
    families = _families(reads, writes)
    if "write_share" not in raw:
        b.problem("bench.write_share", "missing (hint: write_share = 1.0)")
    spread = _draw(sec, "bench", raw, flag, families, not writes)
    hot = None
    if "hot" in raw:
        h = raw["hot"]
        if not isinstance(h, dict):
            b.problem("bench.hot", "must be a table: [bench.hot] with state, args, renew...")
        else:
            for extra in sorted(set(h) - set(_HOT_FIELDS)):
                b.problem(f"bench.hot.{extra}", f"unknown field (known: {', '.join(_HOT_FIELDS)})")
            hot = _merged(spread, _draw(sec, "bench.hot", h, flag, families, not writes), h)
    for where, d in (("bench", spread), ("bench.hot", hot)):
        if d is not None and isinstance(d.renew, int) and d.state:
            b.problem(
                f"{where}.renew",
                "a copy renewed every N calls starts with every key missing; with a state, "
                'use renew = "refused" or "never"',
            )
    used = invariant.names if invariant is not None else frozenset()
    for where, d in (("bench.args", spread), ("bench.hot.args", hot)):
        for a in d.args if d is not None else ():
            inherited = d is hot and a in spread.args
            if a.name in used and not a.fixed and not inherited:
                b.problem(
                    f"{where}.{a.name}",
                    f"the invariant uses {a.name}, so the bench needs one fixed value for it",
                )
    description = raw.get("description", "")
    if not isinstance(description, str):
        b.problem("bench.description", "must be a string")
        description = ""
    return BenchProfile(spread, hot, description, flag)


def _flag(
    b: Builder, raw: Any, writes: Sequence[Write], returns: Sequence[Expr], as_tuple: bool
) -> str | None:
    inferred = write_flag(writes, returns, as_tuple)
    if raw is None:
        if inferred is None:
            b.problem(
                "bench.wrote",
                "cannot tell from the reply whether a call wrote; name the returned value "
                'that is 1 (or true) when it did (hint: wrote = "returns[1]")',
            )
        return inferred
    m = FLAG.fullmatch(raw) if isinstance(raw, str) else None
    if not writes:
        b.problem("bench.wrote", "the operation has no writes: nothing to tell")
        return "never"
    if m is None:
        b.problem("bench.wrote", f'must be "returns" or "returns[N]", not {raw!r}')
        return inferred
    n = int(m[1]) if m[1] else None
    if (n is None) == as_tuple or (n is not None and not 1 <= n <= len(returns)):
        shape = f"a list of {len(returns)} values" if as_tuple else "one value"
        b.problem("bench.wrote", f"{raw!r} does not name a returned value (returns is {shape})")
        return inferred
    e = returns[(n or 1) - 1] if returns else None
    if e is not None and e.type.kind not in ("bool", "int"):
        b.problem("bench.wrote", f"{raw!r} is a {e.type}; it must be a bool or an int (1 = wrote)")
    return str(raw)


def _draw(
    sec: _Section,
    where: str,
    raw: dict[str, Any],
    flag: str | None,
    families: Mapping[str, str],
    read_only: bool,
) -> BenchDraw:
    share = sec.share(f"{where}.write_share", raw.get("write_share", 0.0), read_only)
    renew = sec.renew(f"{where}.renew", raw.get("renew", "never"), flag)
    state = sec.state(f"{where}.state", raw.get("state", {}), families)
    args = sec.arg_draws(f"{where}.args", raw.get("args", {}))
    count = sec.key_count(f"{where}.key_count", raw.get("key_count", {}))
    return BenchDraw(share, renew, state, args, count)


def _merged(base: BenchDraw, over: BenchDraw, given: Mapping[str, Any]) -> BenchDraw:
    """``[bench.hot]``: the fields it gives replace the base's (state and args per name)."""
    state = {s.name: s for s in base.state} | {s.name: s for s in over.state}
    args = {a.name: a for a in base.args} | {a.name: a for a in over.args}
    count = dict(base.key_count) | dict(over.key_count)
    return BenchDraw(
        over.write_share if "write_share" in given else base.write_share,
        over.renew if "renew" in given else base.renew,
        tuple(state.values()),
        tuple(args.values()),
        tuple(count.items()),
    )


#: the checks of one table (state, renew, write share...), for the bench profile of a script
#: (:mod:`luapipe.bench.scriptprofile`): its keys are the script's, its args untyped
BenchTable = _Section
#: ``[hot]`` over the base table
merged_draw = _merged
