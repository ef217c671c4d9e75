"""Compile a type-checked expression AST to Lua text and to Python text.

Both outputs call small runtime helpers with the same semantics (the Lua prelude in
``templates/prelude.lua.j2`` and :mod:`luapipe.runtime`). Names become ``v_<name>`` (Lua
locals, Python lambda parameters) or ``e['<name>']`` (Python environment); string
literals are escaped byte by byte, so spec text never becomes code.
"""

from __future__ import annotations

from luapipe.operations.expr.check import Types
from luapipe.operations.expr.parse import (
    FLOAT,
    INT,
    STR,
    Binary,
    Call,
    Index,
    Lambda,
    ListLit,
    Literal,
    Name,
    Node,
    Type,
    Unary,
)

__all__ = ["lua_expr", "lua_str", "lua_wire", "py_expr", "py_wire"]


def lua_str(text: str) -> str:
    """A Lua string literal: printable ASCII as is, every other byte as ``\\ddd`` (and the
    braces, so no ``{{``/``{%``/``{#`` of a template ever appears in generated Lua)."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        ch = chr(byte)
        if 32 <= byte < 127 and ch not in "\"\\'{}":
            out.append(ch)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


# Floor division and modulo, exact for every int within 2^53 (fmod is exact; the prelude's
# a - q * b rounds when q * b passes 2^53: 9007199254740991 % -3 gave -1, not -2).
_FLOORDIV = (
    "(function(a, b) if b == 0 then error('DIVZERO division by zero') end "
    "local r = math.fmod(a, b) local q = (a - r) / b "
    "if r ~= 0 and (r < 0) ~= (b < 0) then q = q - 1 r = r + b end return _ck("
)


class _Lua:
    def __init__(self, types: Types, known: dict[int, str] | None = None) -> None:
        self.types = types
        self.memo: dict[int, str] = dict(known or {})

    def t(self, node: Node) -> Type:
        return self.types[id(node)]

    def fmt(self, node: Node) -> str:
        """A number or str as a string (``..`` operand)."""
        code = self.c(node)
        if self.t(node) == INT:
            return f"string.format('%d', {code})"
        if self.t(node) == FLOAT:
            return f"string.format('%.17g', {code})"
        return code

    def c(self, node: Node) -> str:
        """The code of ``node``, compiled once (a parent may ask twice: linear, not 2^depth)."""
        code = self.memo.get(id(node))
        if code is None:
            code = self.memo[id(node)] = self._c(node)
        return code

    def _c(self, node: Node) -> str:
        if isinstance(node, Literal):
            v = node.value
            if v is None:
                return "nil"
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, str):
                return lua_str(v)
            return f"({v!r})"
        if isinstance(node, Name):
            return f"v_{node.name}"
        if isinstance(node, Unary):
            if node.op == "not":
                return f"(not {self.c(node.operand)})"
            value = node.operand.value if isinstance(node.operand, Literal) else None
            if isinstance(value, int | float) and not isinstance(value, bool) and value != 0:
                return f"({-value!r})"  # a constant; never -0 (see below)
            # a call, not '-x': Lua 5.1 folds '-0' into a constant that then replaces
            # every other 0 constant of the function (found by the hypothesis test)
            neg = f"_neg({self.c(node.operand)})"
            return f"_ck({neg})" if self.t(node) == INT else neg
        if isinstance(node, Binary):
            return self.binary(node)
        if isinstance(node, Index):
            return f"({self.c(node.target)})[{self.c(node.index)} + 1]"
        if isinstance(node, ListLit):
            return "({" + ", ".join(self.c(i) for i in node.items) + "})"  # never '{{'
        assert isinstance(node, Call)
        return self.call(node)

    def binary(self, node: Binary) -> str:
        op, a, b = node.op, self.c(node.left), self.c(node.right)
        t = self.t(node)
        if op in ("and", "or", "<", "<=", ">", ">=", "=="):
            return f"({a} {op} {b})"
        if op == "!=":
            return f"({a} ~= {b})"
        if op == "..":
            return f"({self.fmt(node.left)} .. {self.fmt(node.right)})"
        if op == "/":
            return f"_div({a}, {b})"
        if op in ("//", "%"):
            return f"{_FLOORDIV}{'q' if op == '//' else 'r'}) end)({a}, {b})"
        check = "_ck" if t == INT else "_fk"
        return f"{check}({a} {op} {b})"

    def call(self, node: Call) -> str:
        f, args = node.func, node.args
        if f in ("map", "filter"):
            lam = args[1]
            assert isinstance(lam, Lambda)
            body = self.c(lam.body)
            return f"_{f}({self.c(args[0])}, function(v_{lam.param}) return {body} end)"
        a = [self.c(x) for x in args]
        if f == "if":
            then_t = self.t(args[1])
            if then_t.kind not in ("bool", "nil") and not then_t.opt:
                return f"({a[0]} and {a[1]} or {a[2]})"
            return f"_if({a[0]}, function() return {a[1]} end, function() return {a[2]} end)"
        if f in ("min", "max"):
            return f"math.{f}({', '.join(a)})"
        if f == "abs":
            return f"math.abs({a[0]})"
        if f == "floor":
            return f"_ck(math.floor({a[0]}))" if self.t(args[0]) == FLOAT else a[0]
        if f == "len":
            return f"(#{a[0]})"
        if f == "str":
            return self.fmt(args[0])
        src = self.t(args[0])
        if f == "int":
            return {"str": f"_pint({a[0]})", "float": f"_trunc({a[0]})"}.get(src.kind, a[0])
        if f == "float":
            return f"_pflt({a[0]})" if src == STR else a[0]
        if f == "is_nil":
            return f"({a[0]} == nil)"
        if f == "coalesce":
            return f"_co({a[0]}, {a[1]})"
        if f == "sum":
            return f"_sum({a[0]}, {'true' if self.t(node) == INT else 'false'})"
        assert f == "contains"
        return f"_contains({a[0]}, {a[1]})"


def lua_expr(node: Node, types: Types, known: dict[int, str] | None = None) -> str:
    """The Lua code of ``node``; ``known`` gives the code of sub-nodes already computed
    (by ``id``: a local holding the value)."""
    return _Lua(types, known).c(node)


def lua_wire(code: str, t: Type) -> str:
    """Lua code turning a value of type ``t`` into its reply form (floats as strings)."""
    if t.kind == "nil":
        return "false"
    if t.kind == "list":
        assert t.elem is not None
        inner = lua_wire("x", t.elem)
        return code if inner == "x" else f"_map({code}, function(x) return {inner} end)"
    conv = {"float": f"string.format('%.17g', {code})", "bool": f"({code} and 1 or 0)"}.get(
        t.kind, code
    )
    if t.opt:
        if t.kind in ("int", "str"):
            return f"({code} or false)"  # nil -> false (a nil reply); 0 and '' are true in Lua
        return f"_wopt({code}, function(x) return {lua_wire('x', t.required)} end)"
    return conv


class _Py:
    def __init__(self, types: Types) -> None:
        self.types = types
        self.params: set[str] = set()
        self.memo: dict[int, str] = {}

    def t(self, node: Node) -> Type:
        return self.types[id(node)]

    def as_float(self, node: Node) -> str:
        code = self.c(node)
        t = self.t(node)
        if t.kind != "int":
            return code
        return f"_rt.flt({code})" if t.opt else f"float({code})"

    def coerce(self, node: Node, target: Type) -> str:
        return self.as_float(node) if target.kind == "float" else self.c(node)

    def fmt(self, node: Node) -> str:
        code = self.c(node)
        t = self.t(node)
        return f"str({code})" if t == INT else f"_rt.fmt({code})" if t == FLOAT else code

    def c(self, node: Node) -> str:
        """The code of ``node``, compiled once (a parent may ask twice: linear, not 2^depth)."""
        code = self.memo.get(id(node))
        if code is None:
            code = self.memo[id(node)] = self._c(node)
        return code

    def _c(self, node: Node) -> str:
        if isinstance(node, Literal):
            v = node.value
            return repr(v)
        if isinstance(node, Name):
            return f"v_{node.name}" if node.name in self.params else f"e[{node.name!r}]"
        if isinstance(node, Unary):
            return (
                f"(not {self.c(node.operand)})"
                if node.op == "not"
                else f"(-{self.c(node.operand)})"
            )
        if isinstance(node, Binary):
            return self.binary(node)
        if isinstance(node, Index):
            return f"_rt.idx({self.c(node.target)}, {self.c(node.index)})"
        if isinstance(node, ListLit):
            t = self.t(node)
            assert t.elem is not None
            return "[" + ", ".join(self.coerce(i, t.elem) for i in node.items) + "]"
        assert isinstance(node, Call)
        return self.call(node)

    def binary(self, node: Binary) -> str:
        op, a, b = node.op, self.c(node.left), self.c(node.right)
        t = self.t(node)
        if op in ("and", "or", "<", "<=", ">", ">=", "==", "!="):
            return f"({a} {op} {b})"
        if op == "..":
            return f"({self.fmt(node.left)} + {self.fmt(node.right)})"
        if op in ("/", "//", "%"):
            name = {"/": "div", "//": "idiv", "%": "imod"}[op]
            return f"_rt.{name}({a}, {b})"
        if t == INT:
            return f"_rt.ck({a} {op} {b})"
        return f"_rt.fk({self.as_float(node.left)} {op} {self.as_float(node.right)})"

    def call(self, node: Call) -> str:
        f, args = node.func, node.args
        if f in ("map", "filter"):
            lam = args[1]
            assert isinstance(lam, Lambda)
            self.params.add(lam.param)
            try:
                body = self.c(lam.body)
            finally:
                self.params.discard(lam.param)
            p = f"v_{lam.param}"
            if f == "map":
                return f"[{body} for {p} in {self.c(args[0])}]"
            return f"[{p} for {p} in {self.c(args[0])} if {body}]"
        t = self.t(node)
        if f == "if":
            return (
                f"({self.coerce(args[1], t)} if {self.c(args[0])} else {self.coerce(args[2], t)})"
            )
        if f in ("min", "max"):
            return f"{f}({', '.join(self.coerce(x, t) for x in args)})"
        a = [self.c(x) for x in args]
        if f == "abs":
            return f"abs({a[0]})"
        if f == "floor":
            return f"_rt.floor({a[0]})" if self.t(args[0]) == FLOAT else a[0]
        if f == "len":
            return f"_rt.length({a[0]})"
        if f == "str":
            return self.fmt(args[0])
        src = self.t(args[0])
        if f == "int":
            return {"str": f"_rt.pint({a[0]})", "float": f"_rt.trunc({a[0]})"}.get(src.kind, a[0])
        if f == "float":
            return f"_rt.pflt({a[0]})" if src == STR else self.as_float(args[0])
        if f == "is_nil":
            return f"_rt.is_nil({a[0]})"  # not `x is None`: a literal x would warn
        if f == "coalesce":
            code = f"_rt.co({a[0]}, {a[1]})"
            return f"float({code})" if t == FLOAT else code
        if f == "sum":
            return f"_rt.isum({a[0]})" if t == INT else f"_rt.fsum({a[0]})"
        assert f == "contains"
        return f"_rt.contains({a[0]}, {a[1]})"  # the list first, as in Lua (which error)


def py_expr(node: Node, types: Types) -> str:
    return _Py(types).c(node)


def py_wire(code: str, t: Type) -> str:
    """Python code turning a value of type ``t`` into its reply form (floats as strings)."""
    if t.kind == "nil":
        return "None"
    if t.kind == "list":
        assert t.elem is not None
        inner = py_wire("x", t.elem)
        return code if inner == "x" else f"[{inner} for x in {code}]"
    conv = {"float": f"_rt.fmt({code})", "bool": f"(1 if {code} else 0)"}.get(t.kind, code)
    if t.opt:
        return f"_rt.wopt({code}, lambda x: {py_wire('x', t.required)})"
    return conv
