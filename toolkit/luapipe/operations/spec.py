"""Operation specs: a TOML file -> a checked :class:`~luapipe.operations.operation.Operation`.

::

    name = "reserve_stock"
    description = "Reserve qty units if enough stock remains."
    keys = ["stock"]                        # in order; "ids..." = any number of keys
    returns = ["if(ok, 1, 0)", "left"]      # one expression, or a list (an array reply)

    [args]
    qty = { type = "int", min = 1, max = 5, doc = "units to reserve" }

    [[reads]]                               # run first, in order; may use earlier reads
    name = "available"
    cmd = "GET"
    key = "stock"                           # an expression (here: the key named stock)
    as = "int"                              # convert a string reply: int or float
    default = "0"                           # when the key is missing

    [let]                                   # the compute step, in order
    ok = "available >= qty"
    left = "if(ok, available - qty, available)"

    [[writes]]                              # after every read and let; optional when / each
    cmd = "DECRBY"
    key = "stock"
    args = ["qty"]
    when = "ok"
    # name = "after"                        # optional: names the reply, which only the
                                            # returns may use (int, bool, float or str?;
                                            # nil when not sent; a list with each; as =
                                            # "int" or "float" converts a str reply)

    [invariant]                             # optional: checked by the benchmark
    description = "stock never below zero"
    check = "available >= 0"                # a bool must hold; a number must be conserved

    [bench]                                 # optional: what the benchmark times (see
    write_share = 1.0                       # luapipe.operations.benchprofile)
    state = { stock = 1000000 }

Every problem is reported (not just the first) as ``file:line: field: message (hint)``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from luapipe.errors import SpecError
from luapipe.operations.benchspec import bench_section
from luapipe.operations.commands import READS, WRITES, write_reply
from luapipe.operations.expr.parse import BOOL, INT, STR, Literal, Type, list_of, parse_type
from luapipe.operations.model import Expr, Invariant, Let, Read, Write
from luapipe.operations.operation import Operation
from luapipe.operations.specbuild import (
    NAME_RE,
    Builder,
    args_section,
    expr_list,
    key_expr,
    keys_section,
    loop_env,
    string_field,
    table_list,
)

__all__ = ["load_operation", "load_operations", "parse_operation"]

_SURROGATE = re.compile("[\ud800-\udfff]")
READ_FIELDS = frozenset({"name", "cmd", "key", "args", "as", "default", "each"})
WRITE_FIELDS = frozenset({"cmd", "key", "args", "when", "each", "name", "as"})
#: arguments after the key (least, most; None = any): no write can name a second key
_ARITY: dict[str, tuple[int, int | None]] = {"SET": (1, None), "ZADD": (2, None)}
_ARITY |= dict.fromkeys(("HSET", "HMSET"), (2, None))
_ARITY |= dict.fromkeys(("INCR", "DECR", "GETDEL", "PERSIST", "DEL", "UNLINK"), (0, 0))
_ARITY |= dict.fromkeys(("ZPOPMIN", "ZPOPMAX", "LPOP", "RPOP"), (0, 1))
_ARITY |= dict.fromkeys(("SETNX", "GETSET", "INCRBY", "DECRBY", "INCRBYFLOAT", "APPEND"), (1, 1))
_ARITY |= dict.fromkeys(("EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"), (1, 2))
_ARITY |= dict.fromkeys(("HDEL", "ZREM", "LPUSH", "RPUSH", "LPUSHX", "RPUSHX"), (1, None))
_ARITY |= dict.fromkeys(("SADD", "SREM"), (1, None))
_ARITY |= dict.fromkeys(
    ("SETRANGE", "SETEX", "PSETEX", "HSETNX", "HINCRBY", "HINCRBYFLOAT", "ZINCRBY", "LSET"),
    (2, 2),
)
_ARITY |= dict.fromkeys(
    ("ZREMRANGEBYRANK", "ZREMRANGEBYSCORE", "ZREMRANGEBYLEX", "LTRIM", "LREM"), (2, 2)
)


def _write_arity(b: Builder, field: str, cmd: str, n: int) -> None:
    least, most = _ARITY.get(cmd, (0, None))
    pairs = cmd in ("HSET", "HMSET")
    if n < least or (most is not None and n > most) or (pairs and n % 2):
        want = (
            f"{least}"
            if least == most
            else f"{least} or more"
            if most is None
            else (f"{least} to {most}")
        )
        b.problem(
            f"{field}.args",
            f"{cmd} takes {want}{' (field/value pairs)' if pairs else ''} argument(s) "
            f"after the key, got {n}",
        )


def _reads(b: Builder, raw: Any) -> tuple[Read, ...]:
    out: list[Read] = []
    for field, data in table_list(b, "reads", raw, READ_FIELDS):
        cmd = str(data.get("cmd", "")).upper()
        if cmd not in READS:
            b.problem(f"{field}.cmd", f"unknown read command {cmd!r} (known: {', '.join(READS)})")
            if isinstance(data.get("name"), str):
                b.failed.add(data["name"])
            continue
        info = READS[cmd]
        each, env = loop_env(b, field, data)
        key, dynamic = key_expr(b, f"{field}.key", data.get("key"), env)
        args = expr_list(b, f"{field}.args", data.get("args", []), env)
        if isinstance(data.get("args", []), list) and len(args) != info.nargs:
            b.problem(f"{field}.args", f"{cmd} takes {info.nargs} argument(s) after the key")
        conv = data.get("as")
        reply = parse_type(info.reply.rstrip("?"))
        t = Type(reply.kind, reply.elem, info.reply.endswith("?"))
        if conv is not None:
            if conv not in ("int", "float") or STR not in (t.required, t.elem):
                b.problem(f"{field}.as", "only a str reply converts, to 'int' or 'float'")
            else:
                ct = parse_type(conv)
                t = list_of(ct) if t.kind == "list" else ct.optional
        default = None
        if "default" in data:
            default = b.expr(f"{field}.default", data["default"], env)
            if (
                default is not None
                and default.type != t.required
                and not (t.required.kind == "float" and default.type == INT)
            ):
                b.problem(f"{field}.default", f"must be of type {t.required}, got {default.type}")
            t = t.required
        if each is not None:
            if t.opt:
                b.problem(
                    f"{field}.default", "a read with 'each' needs a default (lists cannot hold nil)"
                )
            t = list_of(t.required) if t.kind != "list" else t
            if t.elem is not None and t.elem.kind == "list":
                b.problem(f"{field}.each", "a list reply cannot be read per item")
        nm = b.name(f"{field}.name", data.get("name"))
        if nm is None or key is None or any(a is None for a in args):
            if isinstance(data.get("name"), str):
                b.failed.add(data["name"])
            continue
        deps = [key, each, default, *args]
        level = max(b.level(e) for e in deps) + (
            1 if any(n in b.levels for e in deps if e for n in e.names) else 0
        )
        b.env[nm] = t
        b.levels[nm] = level
        out.append(
            Read(
                nm,
                cmd,
                key,
                tuple(a for a in args if a),
                conv,
                default,
                each,
                t,
                level,
                dynamic,
                info.reply,
            )
        )
    return tuple(out)


def _lets(b: Builder, raw: Any) -> tuple[Let, ...]:
    out: list[Let] = []
    if not isinstance(raw, dict):
        b.problem("let", 'must be a table: [let] ok = "available >= qty"')
    for key, text in raw.items() if isinstance(raw, dict) else []:
        e = b.expr(f"let.{key}", text)
        nm = b.name(f"let.{key}", key)
        if e is None:
            b.failed.add(key)
        if e and nm:
            if e.type.kind == "nil":
                b.problem(f"let.{key}", "is always nil")
            b.env[nm] = e.type
            out.append(Let(nm, e))
    return tuple(out)


def _writes(b: Builder, raw: Any) -> tuple[Write, ...]:
    out: list[Write] = []
    for field, data in table_list(b, "writes", raw, WRITE_FIELDS):
        cmd = str(data.get("cmd", "")).upper()
        if cmd not in WRITES:
            b.problem(f"{field}.cmd", f"unknown write command {cmd!r} (known: {', '.join(WRITES)})")
            continue
        each, env = loop_env(b, field, data)
        key, dynamic = key_expr(b, f"{field}.key", data.get("key"), env)
        args = expr_list(b, f"{field}.args", data.get("args", []), env)
        if isinstance(data.get("args", []), list):
            _write_arity(b, field, cmd, len(args))
        for a in args:
            if a is not None and (a.type.opt or a.type.kind not in ("int", "float", "str", "bool")):
                b.problem(
                    f"{field}.args",
                    f"{a.text!r} is a {a.type}; a command argument must be "
                    "a non-nil number, str or bool (hint: coalesce())",
                )
        when = b.expr(f"{field}.when", data["when"], env) if "when" in data else None
        if when is not None and when.type != BOOL:
            b.problem(f"{field}.when", f"must be a bool, got {when.type} (no truthiness)")
        named = _named(b, field, data, cmd, args, when is not None, each is not None)
        if key is not None and all(a is not None for a in args):
            out.append(Write(cmd, key, tuple(a for a in args if a), when, each, dynamic, *named))
    for w in out:
        if w.name is not None and w.type is not None:
            b.env[w.name] = w.type  # from here on: for the returns only
    return tuple(out)


def _named(
    b: Builder,
    field: str,
    data: dict[str, Any],
    cmd: str,
    args: list[Expr | None],
    when: bool,
    each: bool,
) -> tuple[str | None, str | None, str | None, Type | None]:
    """A named write's (name, reply kind, conversion, type); all None when unnamed, or
    when the name is refused (then it is failed: no cascade of errors where it is used)."""
    conv = data.get("as")
    if isinstance(data.get("name"), str):
        b.failed.add(data["name"])  # until it checks out
    if "name" not in data:
        if conv is not None:
            b.problem(f"{field}.as", 'converts a named write\'s reply (hint: name = "...")')
        return None, None, None, None
    nm = b.name(f"{field}.name", data["name"])
    words = [
        (
            a.node.value if isinstance(a.node, Literal) and isinstance(a.node.value, str) else None,
            a.type.kind,
        )
        for a in args
        if a is not None
    ]
    reply, why = write_reply(cmd, words)
    if reply is None:
        b.problem(f"{field}.name", why)
        return None, None, None, None
    t = parse_type(reply.rstrip("?"))
    t = t.optional if reply.endswith("?") else t
    if conv is not None:
        if conv not in ("int", "float") or reply != "str?":
            b.problem(
                f"{field}.as",
                f"only a str reply converts, to 'int' or 'float' ({cmd} replies {reply})",
            )
            return None, None, None, None
        t = parse_type(conv).optional
    if when:
        t = t.optional
    if each and t.opt:
        why = "the write has a when" if when else f"{cmd} may reply nil"
        b.problem(
            f"{field}.name",
            f"a named write with each replies a list, which cannot hold nil ({why})",
        )
        return None, None, None, None
    if nm is None:
        return None, None, None, None
    b.failed.discard(nm)
    return nm, reply, conv, list_of(t) if each else t


def _not_utf8(v: Any, field: str = "") -> str | None:
    """The field of the first string (or table key) that is not UTF-8, or None."""
    items: Any = ()
    if isinstance(v, str):
        return field if _SURROGATE.search(v) else None
    if isinstance(v, dict):
        for k in v:
            if _SURROGATE.search(k):
                return field or "file"
        items = ((f"{field}.{k}" if field else k, x) for k, x in v.items())
    elif isinstance(v, list):
        tables = field in ("reads", "writes")
        items = ((f"{field}[{i}]" if tables else field, x) for i, x in enumerate(v, start=1))
    for sub, x in items:
        found = _not_utf8(x, sub)
        if found is not None:
            return found
    return None


def _toml_line(text: str, exc: tomllib.TOMLDecodeError) -> int:
    """The line of a TOML syntax error; "at end of document" is the last non-blank line."""
    m = re.search(r"line (\d+)", str(exc))
    if m is not None:
        return int(m[1])
    if "end of document" in str(exc):
        return max(1, len(text.rstrip().splitlines()))
    return 1


def parse_operation(text: str, path: str = "<spec>") -> Operation:
    """Build and check an operation from TOML text; raises :class:`SpecError`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError([f"{path}:{_toml_line(text, exc)}: toml: {exc}"]) from None
    b = Builder(text, path)
    bad = _not_utf8(data)
    if bad is not None:  # bytes that are not UTF-8 (a file) or lone surrogates (a str)
        b.problem(bad, "not valid UTF-8 text")
        raise SpecError(b.problems)
    known = {
        "name",
        "description",
        "keys",
        "args",
        "reads",
        "let",
        "writes",
        "returns",
        "invariant",
        "bench",
    }
    for extra in sorted(set(data) - known):
        b.problem(extra, f"unknown field (known: {', '.join(sorted(known))})")
    name = string_field(b, data, "name")
    description = string_field(b, data, "description", False)
    if isinstance(data.get("name"), str) and not NAME_RE.fullmatch(name):
        b.problem("name", f"{name!r} is not a valid name (lower-case letters, digits, _)")
    raw_writes = data.get("writes")
    for i, w in enumerate(raw_writes if isinstance(raw_writes, list) else [], start=1):
        if isinstance(w, dict) and isinstance(w.get("name"), str):
            b.write_names.setdefault(w["name"], f"writes[{i}]")
    keys = keys_section(b, data.get("keys"))
    args = args_section(b, data.get("args", {}))
    reads = _reads(b, data.get("reads", []))
    lets = _lets(b, data.get("let", {}))
    before_writes = dict(b.env)  # what the invariant may use: no write's reply
    writes = _writes(b, data.get("writes", []))
    raw_ret = data.get("returns")
    as_tuple = isinstance(raw_ret, list)
    raw_rets = raw_ret if isinstance(raw_ret, list) else [] if raw_ret is None else [raw_ret]
    rets = [b.expr("returns", r) for r in raw_rets]
    if raw_ret is None:
        b.problem("returns", 'missing (hint: returns = "ok" or returns = ["ok", "left"])')
    used = {n for r in rets if r for n in r.names}
    for i, w in enumerate(writes, start=1):
        if w.name is not None and w.name not in used and rets and all(rets):
            b.problem(
                f"writes[{i}].name",
                f"{w.name!r} is never used: only returns may use a write's reply",
            )
    invariant = None
    inv = data.get("invariant")
    if inv is not None and not isinstance(inv, dict):
        b.problem("invariant", 'must be a table: [invariant] check = "available >= 0"')
    if isinstance(inv, dict):
        for extra in sorted(set(inv) - {"description", "check"}):
            b.problem(f"invariant.{extra}", "unknown field (known: check, description)")
        string_field(b, inv, "description", False, "invariant.")
        e = b.expr("invariant.check", inv["check"], before_writes) if "check" in inv else None
        if "check" not in inv:
            b.problem("invariant.check", 'missing (hint: check = "available >= 0")')
        if e and e.type not in (BOOL, INT, parse_type("float")):
            b.problem("invariant.check", f"must be a bool or a number, got {e.type}")
        if e:
            invariant = Invariant(str(inv.get("description") or e.text), e)
    bench = bench_section(
        b,
        data.get("bench"),
        keys=keys,
        args=args,
        reads=reads,
        writes=writes,
        returns=[r for r in rets if r],
        returns_tuple=as_tuple,
        invariant=invariant.check if invariant is not None else None,
    )
    if b.problems:
        raise SpecError(b.problems)
    return Operation(
        name=name,
        description=description,
        path=path,
        keys=keys,
        args=args,
        reads=reads,
        lets=lets,
        writes=writes,
        returns=tuple(r for r in rets if r),
        returns_tuple=as_tuple,
        invariant=invariant,
        bench=bench,
    )


def load_operation(path: str | Path) -> Operation:
    """Read and check one spec file; problems raise :class:`SpecError` (file:line: field)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise SpecError([f"{p}:1: file: cannot read: {exc.strerror}"]) from None
    return parse_operation(raw.decode("utf-8", "surrogateescape"), str(path))


def load_operations(paths: Sequence[str | Path]) -> list[Operation]:
    """Load several specs; every problem of every file is raised together."""
    ops: list[Operation] = []
    problems: list[str] = []
    names: dict[str, str] = {}
    for p in paths:
        try:
            op = load_operation(p)
        except SpecError as exc:
            problems += exc.problems
            continue
        if op.name in names:
            problems.append(f"{p}:1: name: {op.name!r} is also the name of {names[op.name]}")
        names[op.name] = str(p)
        ops.append(op)
    if problems:
        raise SpecError(problems)
    return ops
