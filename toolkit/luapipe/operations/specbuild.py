"""The spec checker's workbench: line numbers of TOML fields, the shared name scope, and
the keys/args sections. Used by :mod:`luapipe.operations.spec`."""

from __future__ import annotations

import keyword
import re
from typing import Any

from luapipe.operations.expr.check import check
from luapipe.operations.expr.parse import STR, ExprError, Type, list_of, parse, parse_type
from luapipe.operations.model import ArgSpec, Expr, KeySpec

__all__ = [
    "Builder",
    "args_section",
    "expr_list",
    "key_expr",
    "keys_section",
    "loop_env",
    "string_field",
    "table_list",
]

NAME_RE = re.compile(r"[a-z_][a-z0-9_]*")
MAX_NAMES = 150
_INDEX = re.compile(r"\[\d+\]$")
#: characters that would split one problem over several lines (str.splitlines breaks)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BREAKS = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")
#: a line of free text that the generated script's header parser would read as a tag
_DIRECTIVE = re.compile(r"^\s*(@\w+)", re.MULTILINE)
RESERVED = frozenset({"it", "e", "x", "and", "or", "not", "true", "false", "nil"})
#: names the generated Python cannot take as a keyword parameter: its keywords (a spec's
#: ``as`` made a module that does not compile) and the forms' own names (``client``)
GENERATED = (
    frozenset({k for k in keyword.kwlist if k.islower()} | {"client", "aclient", "_rt"}) - RESERVED
)
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


class Builder:
    def __init__(self, text: str, path: str) -> None:
        self.path = path
        self.lines = _line_index(text)
        self.problems: list[str] = []
        self.env: dict[str, Type] = {}
        self.levels: dict[str, int] = {}
        self.key_names: set[str] = set()
        self.failed: set[str] = set()  # names whose definition failed: no cascade errors
        #: names of write replies -> their write ("writes[2]"): only returns may use them
        self.write_names: dict[str, str] = {}

    def problem(self, field: str, message: str) -> None:
        line, at = self.lines.get(field), field
        while line is None and at:  # reads[2].key -> reads[2] -> reads
            shorter = _INDEX.sub("", at)
            at = shorter if shorter != at else at.rpartition(".")[0]
            line = self.lines.get(at)
        text = f"{self.path}:{line or 1}: {field}: {message}"
        self.problems.append(_BREAKS.sub(lambda m: repr(m[0])[1:-1], text))

    def name(self, field: str, value: Any) -> str | None:
        if (
            not isinstance(value, str)
            or not NAME_RE.fullmatch(value)
            or value in RESERVED
            or value in GENERATED
        ):
            if isinstance(value, str) and (
                value.lower() in RESERVED or value in ("None", "True", "False")
            ):
                self.problem(
                    field,
                    f"{value!r} is a reserved word, not allowed as a name "
                    f"(reserved: {', '.join(sorted(RESERVED))}, None, True, False)",
                )
            elif isinstance(value, str) and value in GENERATED:
                self.problem(
                    field,
                    f"{value!r} is a Python keyword or a name the generated module uses "
                    "(client, aclient, _rt): the generated forms take each key and arg as a "
                    "keyword parameter; pick another name",
                )
            else:
                self.problem(
                    field, f"{value!r} is not a valid name (lower-case letters, digits, _)"
                )
            return None
        if len(self.env) >= MAX_NAMES:  # each is a Lua local; Lua allows 200 per function
            if not any("too many names" in p for p in self.problems):
                self.problem(
                    field, f"too many names (keys, args, reads, lets: at most {MAX_NAMES})"
                )
            self.failed.add(value)
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
            if m is not None and m[1] in self.write_names and m[1] not in self.failed:
                self.problem(
                    field,
                    f"{m[1]!r} is the reply of {self.write_names[m[1]]}: only returns may use a "
                    "write's reply (the pipelined form has it after its write batch, the "
                    "transaction form after EXEC)",
                )
            elif m is None or m[1] not in self.failed:
                self.problem(field, f"{exc} at column {exc.col} in {excerpt(text, exc.col)}")
            return None
        return Expr(text, node, t, types)

    def level(self, e: Expr | None) -> int:
        return 0 if e is None else max((self.levels.get(n, 0) for n in e.names), default=0)


def excerpt(text: str, col: int, width: int = 60) -> str:
    """``text`` quoted, or for a long one about ``width`` characters around column ``col``
    (1-based) with its length, so an error stays one readable line."""
    if len(text) <= width + 20:
        return repr(text)
    start = max(0, min(col - 1 - width // 2, len(text) - width))
    part = ("..." if start else "") + text[start : start + width]
    part += "..." if start + width < len(text) else ""
    return f"{part!r} ({len(text)} characters)"


def directive_problem(v: str) -> str | None:
    """Why free text cannot go into a generated header comment, or None: a line that starts
    with ``@word`` would be read as a declaration (``-- @key evil`` adds a key)."""
    m = _DIRECTIVE.search(v)
    if m is None:
        return None
    return (
        f"a line starting with {m[1]!r} would be read as a header tag (@key, @arg, @return, "
        "@template) of the generated script; reword it"
    )


def prose(b: Builder, field: str, v: Any) -> str:
    """Free text (a description or doc): a string without control characters but tab and
    newline (it is copied into comments and docstrings of the generated code), and no line
    that starts with ``@`` (see :func:`directive_problem`)."""
    if not isinstance(v, str):
        b.problem(field, "must be a string")
        return ""
    bad = _CONTROL.search(v)
    if bad is not None:
        b.problem(field, f"control character {bad.group()!r} is not allowed in text")
        return ""
    why = directive_problem(v)
    if why is not None:
        b.problem(field, why)
        return ""
    return v


def string_field(
    b: Builder, data: dict[str, Any], field: str, required: bool = True, prefix: str = ""
) -> str:
    v = data.get(field)
    if v is None and not required:
        return ""
    if not isinstance(v, str):
        b.problem(prefix + field, "missing or not a string")
        return ""
    return prose(b, prefix + field, v)


def keys_section(b: Builder, raw: Any) -> tuple[KeySpec, ...]:
    if not isinstance(raw, list) or not raw:
        b.problem("keys", 'needs a list of key names, e.g. keys = ["stock"]')
        if isinstance(raw, str):
            b.failed.add(raw.removesuffix("..."))
        return ()
    out: list[KeySpec] = []
    for i, item in enumerate(raw):
        doc = ""
        if isinstance(item, dict):
            unknown = sorted(set(item) - {"name", "doc"})
            doc_ok = isinstance(item.get("doc", ""), str) and not _CONTROL.search(
                item.get("doc", "")
            )
            if unknown or not doc_ok:
                b.problem("keys", f'a key is {{ name = ..., doc = "..." }}, got {item!r}')
            elif (why := directive_problem(item.get("doc", ""))) is not None:
                b.problem(f"keys[{i + 1}].doc", why)
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


def args_section(b: Builder, raw: Any) -> tuple[ArgSpec, ...]:
    if not isinstance(raw, dict):
        b.problem("args", 'must be a table: [args] qty = { type = "int" }')
        return ()
    out: list[ArgSpec] = []
    for i, (key, spec) in enumerate(raw.items()):
        field = f"args.{key}"
        if isinstance(spec, str):
            spec = {"type": spec}
        b.failed.add(key)  # until it checks out: no "unknown name" where it is used
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
        if not _arg_domain(b, field, t, spec):
            continue
        nm = b.name(field, key)
        if nm:
            b.failed.discard(nm)
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


def _fits(kind: str, v: Any) -> bool:
    if isinstance(v, bool):
        return kind == "bool"
    return isinstance(v, {"int": int, "float": int | float, "str": str}.get(kind, bool))


def _arg_domain(b: Builder, field: str, t: Type, spec: dict[str, Any]) -> bool:
    """doc, min/max and samples fit the argument's type; False (and problems) if not."""
    elem = t.elem.kind if t.elem is not None else t.kind
    bad: list[tuple[str, str]] = []
    if not isinstance(spec.get("doc", ""), str) or _CONTROL.search(spec.get("doc", "")):
        bad.append(("doc", "must be a string without control characters"))
    elif (why := directive_problem(spec.get("doc", ""))) is not None:
        bad.append(("doc", why))
    for bound in ("min", "max"):
        if bound in spec and (elem not in ("int", "float") or not _fits(elem, spec[bound])):
            bad.append((bound, f"must be a number of the argument's type ({t})"))
    if not bad and "min" in spec and "max" in spec and spec["min"] > spec["max"]:
        bad.append(("min", "must not be greater than max"))
    samples = spec.get("samples", [])
    if not isinstance(samples, list) or not all(_fits(elem, v) for v in samples):
        bad.append(("samples", f"must be a list of {elem} values"))
    if not isinstance(spec.get("key_prefix", False), bool):
        bad.append(("key_prefix", "must be true or false"))
    for sub, message in bad:
        b.problem(f"{field}.{sub}", message)
    return not bad


def table_list(
    b: Builder, section: str, raw: Any, known: frozenset[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The tables of an array of tables (``[[reads]]``), each with known fields only."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        b.problem(section, f"must be an array of tables ([[{section}]])")
        return []
    out: list[tuple[str, dict[str, Any]]] = []
    for i, data in enumerate(raw, start=1):
        field = f"{section}[{i}]"
        if not isinstance(data, dict):
            b.problem(field, f"must be a table ([[{section}]] with fields)")
            continue
        unknown = sorted(set(data) - known)
        if unknown:
            b.problem(
                field, f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        out.append((field, data))
    return out


def expr_list(b: Builder, field: str, raw: Any, env: dict[str, Type]) -> list[Expr | None]:
    """A list of expressions (a command's args)."""
    if not isinstance(raw, list):
        b.problem(field, 'must be a list of expressions, e.g. args = ["qty"]')
        return [None]
    return [b.expr(field, a, env) for a in raw]


def key_expr(b: Builder, field: str, raw: Any, env: dict[str, Type]) -> tuple[Expr | None, bool]:
    e = b.expr(field, raw, env)
    if e is None:
        return None, False
    if e.type != STR:
        b.problem(field, f"a key must be a str, got {e.type}")
    static = isinstance(raw, str) and (raw.strip() in b.key_names or raw.strip() == "it")
    return e, not static


def loop_env(b: Builder, field: str, data: dict[str, Any]) -> tuple[Expr | None, dict[str, Type]]:
    if "each" not in data:
        return None, b.env
    each = b.expr(f"{field}.each", data["each"])
    if each is None or each.type.kind != "list" or each.type.opt:
        if each is not None:
            b.problem(f"{field}.each", f"needs a list, got {each.type}")
        return None, b.env
    assert each.type.elem is not None
    return each, {**b.env, "it": each.type.elem}
