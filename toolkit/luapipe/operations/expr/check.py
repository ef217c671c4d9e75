"""Static types for the expression language: what removes Lua/Python differences up front.

Conditions must be ``bool`` (so Lua's "0 and '' are true" never matters), arithmetic needs
non-nil numbers, ``..`` joins strings and numbers, ordering compares numbers only, and a
list never holds nil (a Lua table would stop at the first one).
"""

from __future__ import annotations

from collections.abc import Mapping

from luapipe.operations.expr.parse import (
    BOOL,
    FLOAT,
    INT,
    NIL,
    STR,
    Binary,
    Call,
    ExprError,
    Index,
    Lambda,
    ListLit,
    Literal,
    Name,
    Node,
    Type,
    Unary,
    list_of,
)

__all__ = ["Types", "check", "unify"]

Types = dict[int, Type]


def unify(a: Type, b: Type, col: int) -> Type:
    """The type of ``if(c, a, b)``: equal types, int/float -> float, T and nil -> T?."""
    if a.kind == "nil" and b.kind == "nil":
        return NIL
    if a.kind == "nil":
        return b.optional
    if b.kind == "nil":
        return a.optional
    opt = a.opt or b.opt
    if {a.kind, b.kind} <= {"int", "float"}:
        kind = "int" if a.kind == b.kind == "int" else "float"
        return Type(kind, None, opt)
    if a.required == b.required:
        return Type(a.kind, a.elem, opt)
    raise ExprError(f"branches have different types: {a} and {b}", col)


class _Checker:
    def __init__(self, env: Mapping[str, Type]) -> None:
        self.env = dict(env)
        self.types: Types = {}

    def need(self, node: Node, ok: bool, what: str) -> Type:
        t = self.types[id(node)]
        if not ok:
            hint = " (use coalesce(x, default) for a value that may be nil)" if t.opt else ""
            raise ExprError(f"{what}, got {t}{hint}", node.col)
        return t

    def num(self, node: Node, what: str) -> Type:
        t = self.visit(node)
        return self.need(node, t.numeric, f"{what} needs a number")

    def boolean(self, node: Node, what: str) -> Type:
        t = self.visit(node)
        return self.need(
            node, t == BOOL, f"{what} needs a bool (no truthiness: compare explicitly)"
        )

    def visit(self, node: Node) -> Type:
        known = self.types.get(id(node))
        if known is not None:  # a second look (list items): linear, not 2^depth
            return known
        t = self._visit(node)
        self.types[id(node)] = t
        return t

    def _visit(self, node: Node) -> Type:
        if isinstance(node, Literal):
            v = node.value
            if v is None:
                return NIL
            if isinstance(v, bool):
                return BOOL
            return INT if isinstance(v, int) else FLOAT if isinstance(v, float) else STR
        if isinstance(node, Name):
            if node.name not in self.env:
                known = ", ".join(sorted(self.env)) or "none"
                raise ExprError(f"unknown name '{node.name}' (known: {known})", node.col)
            return self.env[node.name]
        if isinstance(node, Unary):
            if node.op == "not":
                self.boolean(node.operand, "'not'")
                return BOOL
            return self.num(node.operand, "unary '-'")
        if isinstance(node, Binary):
            return self.binary(node)
        if isinstance(node, Index):
            t = self.visit(node.target)
            self.need(node.target, t.kind == "list" and not t.opt, "indexing needs a list")
            self.need(node.index, self.visit(node.index) == INT, "an index must be an int")
            assert t.elem is not None
            return t.elem.optional
        if isinstance(node, ListLit):
            elem = self.visit(node.items[0])
            for item in node.items:
                it = self.visit(item)
                self.need(item, it.kind in ("int", "float", "str") and not it.opt, "list items")
                elem = unify(elem, it, item.col)
            return list_of(elem)
        if isinstance(node, Call):
            return self.call(node)
        raise ExprError("a lambda 'x -> ...' is only allowed inside map() or filter()", node.col)

    def binary(self, node: Binary) -> Type:
        op = node.op
        if op in ("and", "or"):
            self.boolean(node.left, f"'{op}'")
            self.boolean(node.right, f"'{op}'")
            return BOOL
        if op in ("+", "-", "*", "/", "//", "%"):
            a = self.num(node.left, f"'{op}'")
            b = self.num(node.right, f"'{op}'")
            if op in ("//", "%"):
                self.need(node.left, a == INT, f"'{op}' needs ints")
                self.need(node.right, b == INT, f"'{op}' needs ints")
                return INT
            return FLOAT if op == "/" or FLOAT in (a, b) else INT
        if op == "..":
            for side in (node.left, node.right):
                t = self.visit(side)
                self.need(side, t in (INT, FLOAT, STR), "'..' joins strings and numbers")
            return STR
        if op in ("<", "<=", ">", ">="):
            self.num(node.left, f"'{op}'")
            self.num(node.right, f"'{op}'")
            return BOOL
        a, b = self.visit(node.left), self.visit(node.right)
        if a.kind == "list" or b.kind == "list":
            raise ExprError(f"'{op}' cannot compare lists", node.col)
        same = {a.kind, b.kind} <= {"int", "float"} or a.kind == b.kind
        if not (same or "nil" in (a.kind, b.kind)):
            raise ExprError(f"'{op}' compares {a} with {b}: always different", node.col)
        return BOOL

    def call(self, node: Call) -> Type:
        f, args = node.func, node.args
        arity = {"if": 3, "abs": 1, "floor": 1, "len": 1, "str": 1, "int": 1, "float": 1}
        arity |= {"coalesce": 2, "is_nil": 1, "map": 2, "filter": 2, "sum": 1, "contains": 2}
        if f in arity and len(args) != arity[f]:
            raise ExprError(f"{f}() takes {arity[f]} arguments, got {len(args)}", node.col)
        if f in ("map", "filter"):
            return self.loop(node)
        if any(isinstance(a, Lambda) for a in args):
            raise ExprError(f"{f}() does not take a lambda", node.col)
        if f == "if":
            self.boolean(args[0], "if()")
            return unify(self.visit(args[1]), self.visit(args[2]), node.col)
        if f in ("min", "max"):
            if not 2 <= len(args) <= 100:  # Lua: a call takes under 250 registers
                raise ExprError(f"{f}() takes 2 to 100 numbers, got {len(args)}", node.col)
            types = [self.num(a, f"{f}()") for a in args]
            return INT if all(t == INT for t in types) else FLOAT
        if f == "abs":
            return self.num(args[0], "abs()")
        if f == "floor":
            self.num(args[0], "floor()")
            return INT
        t = self.visit(args[0])
        if f == "len":
            self.need(
                args[0], (t == STR or t.kind == "list") and not t.opt, "len() needs a str/list"
            )
            return INT
        if f == "str":
            self.need(args[0], t in (INT, FLOAT, STR), "str() needs a number or str")
            return STR
        if f in ("int", "float"):
            self.need(args[0], t in (INT, FLOAT, STR), f"{f}() needs a number or str")
            return Type(f, None, t == STR)
        if f == "is_nil":
            return BOOL
        if f == "coalesce":
            d = self.visit(args[1])
            self.need(args[1], not d.opt and d.kind != "nil", "coalesce() default must not be nil")
            return unify(t.required, d, node.col).required
        if f == "sum":
            ok = t.kind == "list" and not t.opt and t.elem in (INT, FLOAT)
            self.need(args[0], ok, "sum() needs a list of numbers")
            assert t.elem is not None
            return t.elem
        # contains(list, value)
        self.need(args[0], t.kind == "list" and not t.opt, "contains() needs a list")
        v = self.visit(args[1])
        assert t.elem is not None
        self.need(
            args[1],
            not v.opt and (v == t.elem or {v.kind, t.elem.kind} <= {"int", "float"}),
            f"contains() needs a {t.elem}",
        )
        return BOOL

    def loop(self, node: Call) -> Type:
        lst, fn = node.args
        t = self.visit(lst)
        self.need(lst, t.kind == "list" and not t.opt, f"{node.func}() needs a list")
        if not isinstance(fn, Lambda):
            raise ExprError(f"{node.func}() needs a lambda like 'x -> x * 2'", fn.col)
        if fn.param in self.env:
            raise ExprError(f"lambda parameter '{fn.param}' shadows a name", fn.col)
        assert t.elem is not None
        self.env[fn.param] = t.elem
        try:
            body = self.visit(fn.body)
        finally:
            del self.env[fn.param]
        if node.func == "filter":
            self.need(fn.body, body == BOOL, "filter() needs a bool condition")
            return t
        ok = body.kind in ("int", "float", "str") and not body.opt
        self.need(fn.body, ok, "map() must give a non-nil number or str")
        return list_of(body)


def check(node: Node, env: Mapping[str, Type]) -> tuple[Type, Types]:
    """Type of ``node`` in ``env`` and the type of every sub-node (by ``id``)."""
    c = _Checker(env)
    return c.visit(node), c.types
