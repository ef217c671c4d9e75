"""Operation specs: a TOML file -> a checked :class:`~luapipe.operation.Operation`.

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

    [invariant]                             # optional: checked by the benchmark
    description = "stock never below zero"
    check = "available >= 0"                # a bool must hold; a number must be conserved

Every problem is reported (not just the first) as ``file:line: field: message (hint)``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from luapipe.commands import READS, WRITES
from luapipe.errors import SpecError
from luapipe.expr import BOOL, INT, STR, ExprError, Type, list_of, parse, parse_type
from luapipe.operation import ArgSpec, Expr, Invariant, KeySpec, Let, Operation, Read, Write
from luapipe.typecheck import check

__all__ = ["load_operation", "load_operations", "parse_operation"]

NAME_RE = re.compile(r"[a-z_][a-z0-9_]*")
RESERVED = frozenset({"it", "e", "x", "and", "or", "not", "true", "false", "nil"})
_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"-]+)\s*\]\]?")
_FIELD = re.compile(r"^\s*([A-Za-z0-9_\"-]+)\s*=")


def _line_index(text: str) -> dict[str, int]:
    """``'reads[2].key'`` / ``'args.qty'`` / ``'name'`` -> line number."""
    found: dict[str, int] = {}
    section, counts = "", dict[str, int]()
    for no, line in enumerate(text.splitlines(), start=1):
        h = _HEADER.match(line)
        if h:
            name = h[1].replace('"', "")
            if line.lstrip().startswith("[["):
                counts[name] = counts.get(name, 0) + 1
                section = f"{name}[{counts[name]}]"
            else:
                section = name
            found.setdefault(section, no)
            continue
        f = _FIELD.match(line)
        if f:
            key = f[1].strip('"')
            path = f"{section}.{key}" if section else key
            found.setdefault(path, no)
    return found


class _Builder:
    def __init__(self, text: str, path: str) -> None:
        self.path = path
        self.lines = _line_index(text)
        self.problems: list[str] = []
        self.env: dict[str, Type] = {}
        self.levels: dict[str, int] = {}
        self.key_names: set[str] = set()
        self.failed: set[str] = set()  # names whose definition failed: no cascade errors

    def problem(self, field: str, message: str) -> None:
        line = self.lines.get(field)
        parts = field.split(".")
        while line is None and parts:
            parts.pop()
            line = self.lines.get(".".join(parts)) if parts else None
        self.problems.append(f"{self.path}:{line or 1}: {field}: {message}")

    def name(self, field: str, value: Any) -> str | None:
        if not isinstance(value, str) or not NAME_RE.fullmatch(value) or value in RESERVED:
            self.problem(field, f"{value!r} is not a valid name (lower-case letters, digits, _)")
            return None
        if value in self.env:
            self.problem(
                field,
                f"name {value!r} is already used (names are shared by keys, args, reads and lets)",
            )
            return None
        return value

    def expr(self, field: str, text: Any, env: dict[str, Type] | None = None) -> Expr | None:
        if isinstance(text, bool | int | float):
            text = str(text).lower()
        if not isinstance(text, str):
            self.problem(field, 'expected an expression in a string (hint: "qty * 2")')
            return None
        try:
            node = parse(text)
            t, types = check(node, env if env is not None else self.env)
        except ExprError as exc:
            m = re.match(r"unknown name '(\w+)'", str(exc))
            if m is None or m[1] not in self.failed:
                self.problem(field, f"{exc} at column {exc.col} in {text!r}")
            return None
        return Expr(text, node, t, types)

    def level(self, e: Expr | None) -> int:
        return 0 if e is None else max((self.levels.get(n, 0) for n in e.names), default=0)


def _str(b: _Builder, data: dict[str, Any], field: str, required: bool = True) -> str:
    v = data.get(field)
    if v is None and not required:
        return ""
    if not isinstance(v, str):
        b.problem(field, "missing or not a string")
        return ""
    return v


def _keys(b: _Builder, raw: Any) -> tuple[KeySpec, ...]:
    if not isinstance(raw, list) or not raw:
        b.problem("keys", 'needs a list of key names, e.g. keys = ["stock"]')
        return ()
    out: list[KeySpec] = []
    for i, item in enumerate(raw):
        doc = ""
        if isinstance(item, dict):
            doc, item = str(item.get("doc", "")), item.get("name")
        variadic = isinstance(item, str) and item.endswith("...")
        if variadic and i != len(raw) - 1:
            b.problem("keys", "only the last key may be variadic ('name...')")
        nm = b.name("keys", item[:-3] if variadic and isinstance(item, str) else item)
        if nm:
            b.env[nm] = list_of(STR) if variadic else STR
            b.key_names.add(nm)
            out.append(KeySpec(nm, doc, variadic))
    return tuple(out)


def _args(b: _Builder, raw: Any) -> tuple[ArgSpec, ...]:
    if not isinstance(raw, dict):
        b.problem("args", 'must be a table: [args] qty = { type = "int" }')
        return ()
    out: list[ArgSpec] = []
    for i, (key, spec) in enumerate(raw.items()):
        field = f"args.{key}"
        if isinstance(spec, str):
            spec = {"type": spec}
        if not isinstance(spec, dict):
            b.problem(field, "must be a type name or a table with type = ...")
            continue
        try:
            t = parse_type(str(spec.get("type", "")))
        except ExprError as exc:
            b.problem(field, f"{exc} (hint: int, float, str, bool, list[str], list[int])")
            continue
        if t.kind == "list" and i != len(raw) - 1:
            b.problem(field, "a list argument must be the last argument")
        unknown = set(spec) - {"type", "doc", "min", "max", "samples", "key_prefix"}
        if unknown:
            b.problem(field, f"unknown field(s) {', '.join(sorted(unknown))}")
        nm = b.name(field, key)
        if nm:
            b.env[nm] = t
            samples = tuple(spec.get("samples", ()))
            out.append(
                ArgSpec(
                    nm,
                    t,
                    str(spec.get("doc", "")),
                    spec.get("min"),
                    spec.get("max"),
                    samples,
                    bool(spec.get("key_prefix", False)),
                )
            )
    return tuple(out)


def _key_expr(b: _Builder, field: str, raw: Any, env: dict[str, Type]) -> tuple[Expr | None, bool]:
    e = b.expr(field, raw, env)
    if e is None:
        return None, False
    if e.type != STR:
        b.problem(field, f"a key must be a str, got {e.type}")
    static = isinstance(raw, str) and (raw.strip() in b.key_names or raw.strip() == "it")
    return e, not static


def _loop_env(b: _Builder, field: str, data: dict[str, Any]) -> tuple[Expr | None, dict[str, Type]]:
    if "each" not in data:
        return None, b.env
    each = b.expr(f"{field}.each", data["each"])
    if each is None or each.type.kind != "list" or each.type.opt:
        if each is not None:
            b.problem(f"{field}.each", f"needs a list, got {each.type}")
        return None, b.env
    assert each.type.elem is not None
    return each, {**b.env, "it": each.type.elem}


def _reads(b: _Builder, raw: Any) -> tuple[Read, ...]:
    out: list[Read] = []
    for i, data in enumerate(raw if isinstance(raw, list) else [], start=1):
        field = f"reads[{i}]"
        cmd = str(data.get("cmd", "")).upper()
        if cmd not in READS:
            b.problem(f"{field}.cmd", f"unknown read command {cmd!r} (known: {', '.join(READS)})")
            continue
        info = READS[cmd]
        each, env = _loop_env(b, field, data)
        key, dynamic = _key_expr(b, f"{field}.key", data.get("key"), env)
        args = [b.expr(f"{field}.args", a, env) for a in data.get("args", [])]
        if len(args) != info.nargs:
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
                b.problem(f"{field}.default", f"must be a {t.required}, got {default.type}")
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


def _lets(b: _Builder, raw: Any) -> tuple[Let, ...]:
    out: list[Let] = []
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


def _writes(b: _Builder, raw: Any) -> tuple[Write, ...]:
    out: list[Write] = []
    for i, data in enumerate(raw if isinstance(raw, list) else [], start=1):
        field = f"writes[{i}]"
        cmd = str(data.get("cmd", "")).upper()
        if cmd not in WRITES:
            b.problem(f"{field}.cmd", f"unknown write command {cmd!r} (known: {', '.join(WRITES)})")
            continue
        each, env = _loop_env(b, field, data)
        key, dynamic = _key_expr(b, f"{field}.key", data.get("key"), env)
        args = [b.expr(f"{field}.args", a, env) for a in data.get("args", [])]
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
        if key is not None and all(a is not None for a in args):
            out.append(Write(cmd, key, tuple(a for a in args if a), when, each, dynamic))
    return tuple(out)


def parse_operation(text: str, path: str = "<spec>") -> Operation:
    """Build and check an operation from TOML text; raises :class:`SpecError`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise SpecError([f"{path}:{m[1] if m else 1}: toml: {exc}"]) from None
    b = _Builder(text, path)
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
    }
    for extra in sorted(set(data) - known):
        b.problem(extra, f"unknown field (known: {', '.join(sorted(known))})")
    name = _str(b, data, "name")
    if name and not NAME_RE.fullmatch(name):
        b.problem("name", f"{name!r} is not a valid name (lower-case letters, digits, _)")
    keys = _keys(b, data.get("keys"))
    args = _args(b, data.get("args", {}))
    reads = _reads(b, data.get("reads", []))
    lets = _lets(b, data.get("let", {}))
    writes = _writes(b, data.get("writes", []))
    raw_ret = data.get("returns")
    as_tuple = isinstance(raw_ret, list)
    rets = [b.expr("returns", r) for r in (raw_ret if isinstance(raw_ret, list) else [raw_ret])]
    if raw_ret is None:
        b.problem("returns", 'missing (hint: returns = "ok" or returns = ["ok", "left"])')
    invariant = None
    inv = data.get("invariant")
    if isinstance(inv, dict):
        e = b.expr("invariant.check", inv.get("check"))
        if e and e.type not in (BOOL, INT, parse_type("float")):
            b.problem("invariant.check", f"must be a bool or a number, got {e.type}")
        if e:
            invariant = Invariant(str(inv.get("description", e.text)), e)
    if b.problems:
        raise SpecError(b.problems)
    return Operation(
        name=name,
        description=_str(b, data, "description", False),
        path=path,
        keys=keys,
        args=args,
        reads=reads,
        lets=lets,
        writes=writes,
        returns=tuple(r for r in rets if r),
        returns_tuple=as_tuple,
        invariant=invariant,
    )


def load_operation(path: str | Path) -> Operation:
    """Read and check one spec file; problems raise :class:`SpecError` (file:line: field)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([f"{p}:1: file: cannot read: {exc.strerror}"]) from None
    return parse_operation(text, str(path))


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
