"""An expression of an operation as Lua statements: what the body computes before it uses it.

A script's top level runs on every ``EVALSHA``, so the body (:mod:`luapipe.operations.luabody`)
computes each sub-expression that can fail and is always evaluated into a local of its own,
in evaluation order (left to right, inside out): an ``if()`` as ``if``/``else``, checked
arithmetic (the 2^53 guard) as a statement with its guard inline, a value computed twice at
the top level once (``cse``). What cannot fail stays inline, as the expression compiler
(:mod:`luapipe.operations.expr.compile`) writes it. Temporaries are locals up to
:data:`MAX_LOCALS` (Lua allows 200 per function); past it they go into one table, and an
expression that would need more stays whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from luapipe.operations.expr.compile import lua_expr, lua_str
from luapipe.operations.expr.parse import (
    FLOAT,
    INT,
    Binary,
    Call,
    Index,
    ListLit,
    Literal,
    Name,
    Node,
    Unary,
)
from luapipe.operations.model import Expr, OperationModel
from luapipe.operations.prelude import fmt

__all__ = ["LIMIT", "MAX_LOCALS", "OVERFLOW", "LuaStatements", "can_fail"]

Known = dict[int, str]  # node id -> the local holding its value
_NAME = re.compile(r"[A-Za-z_]\w*")

LIMIT = "9007199254740992"
OVERFLOW = "error('OVERFLOW integer beyond 2^53-1')"
NOT_FINITE = "error('FLOAT result is not a finite number')"
#: a call of error() or of a prelude helper but the three that never raise: code that can
#: raise (everything else the compiler emits is arithmetic, comparisons, string.format and
#: indexing of typed values)
_RAISES = re.compile(r"(?<![\w.])(?!_co\(|_neg\(|_contains\()(?:_[a-z]+|error)\(")
#: locals of the body's top level, at most (Lua allows 200 per function)
MAX_LOCALS = 190


def can_fail(code: str) -> bool:
    """Whether Lua ``code`` from the expression compiler can raise."""
    return bool(_RAISES.search(code))


class _Out:
    """Lines of Lua, indented by block."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def otherwise(self) -> None:
        """The ``else`` of the innermost :meth:`block` (an ``if``)."""
        self.depth -= 1
        self("else")
        self.depth += 1

    @contextmanager
    def block(self, head: str) -> Iterator[None]:
        self(head)
        self.depth += 1
        yield
        self.depth -= 1
        self("end")


def _eager(node: Node) -> tuple[Node, ...]:
    """The sub-nodes Lua evaluates every time ``node`` is evaluated, in order."""
    if isinstance(node, Binary):
        return (node.left,) if node.op in ("and", "or") else (node.left, node.right)
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Index):
        return (node.target, node.index)
    if isinstance(node, ListLit):
        return node.items
    if isinstance(node, Call):
        return node.args[:1] if node.func in ("if", "map", "filter") else node.args
    return ()


def _checked(node: Node, e: Expr) -> bool:
    """+, - or * of numbers: a statement with its guard inline."""
    return (
        isinstance(node, Binary)
        and node.op in ("+", "-", "*")
        and e.types[id(node)] in (INT, FLOAT)
    )


def _statements(e: Expr) -> bool:
    """Whether ``e`` is computed as statements: an if() or checked arithmetic that can
    fail (else it is one expression)."""
    node = e.node
    top = (isinstance(node, Call) and node.func == "if") or _checked(node, e)
    return top and can_fail(lua_expr(node, e.types))


def _guard(target: str, number: object) -> str:
    if number == INT:
        return f"if {target} >= {LIMIT} or {target} <= -{LIMIT} then {OVERFLOW} end"
    return (
        f"if {target} ~= {target} or {target} == math.huge or {target} == -math.huge "
        f"then {NOT_FINITE} end"
    )


class LuaStatements:
    """Lines of Lua (``out``) for an operation's expressions, and the temporaries they
    need. :mod:`~luapipe.operations.luabody` builds the body on it."""

    def __init__(self, op: OperationModel) -> None:
        self.op = op
        self.out = _Out()
        self.int_args = {
            a.name: f"ARGV[{i}]"
            for i, a in enumerate(op.args, start=1)
            if a.type == INT  # checked canonical: its text is what string.format gives
        }
        self.temps = 0
        # temporaries the top level may declare: Lua allows 200 locals per function, and the
        # script's chunk holds the prelude's helpers (at most 15), the names (keys, args,
        # reads, lets, named writes) and _e, _r, _ret, _st; past it, temporaries go into one
        # table and expressions stay whole
        names = len(op.keys) + len(op.args) + len(op.reads) + len(op.lets) + len(op.writes)
        self.budget = max(0, MAX_LOCALS - 15 - names - 4)
        self.used = 0
        self.table = False  # whether `local _st = {}` (temporaries past MAX_LOCALS) exists
        self.cse: dict[str, str] = {}  # code computed at the top level -> its local

    # -- temporaries ----------------------------------------------------------------------
    def slot(self, prefix: str, value: str | None = None) -> str:
        """A new temporary (declared, with ``value`` if given): a local, or past
        :data:`MAX_LOCALS` a slot of one table."""
        self.temps += 1
        if self.out.depth > 0 or self.used < self.budget:
            self.used += self.out.depth == 0
            name = f"_{prefix}{self.temps}"
            self.out(f"local {name}" + (f" = {value}" if value is not None else ""))
            return name
        if not self.table:
            self.out("local _st = {}")
            self.table = True
        name = f"_st[{self.temps}]"
        if value is not None:
            self.out(f"{name} = {value}")
        return name

    # -- expressions ----------------------------------------------------------------------
    def value(self, e: Expr, node: Node | None = None, known: Known | None = None) -> str:
        """The code of ``node`` (default: ``e``'s), with every sub-expression that can fail
        and is always evaluated computed first into a local (an if() as if/else, checked
        arithmetic with its guard inline), in evaluation order."""
        node = e.node if node is None else node
        known = {} if known is None else known
        mark = (len(self.out.lines), self.used, self.temps, dict(self.cse), dict(known))
        self._hoist(node, e, known)
        if self.used > self.budget:  # too many locals: the expression stays whole
            del self.out.lines[mark[0] :]
            self.used, self.temps, self.cse = mark[1], mark[2], mark[3]
            known.clear()
            known.update(mark[4])
        return lua_expr(node, e.types, known)

    def _hoist(self, node: Node, e: Expr, known: Known) -> None:
        if id(node) in known:
            return
        for child in _eager(node):
            self._hoist(child, e, known)
        code = lua_expr(node, e.types, known)
        if not can_fail(code):
            return
        if code in self.cse:
            known[id(node)] = self.cse[code]
            return
        self.temps += 1
        self.used += self.out.depth == 0
        name = f"_t{self.temps}"
        if isinstance(node, Call) and node.func == "if":
            self.out(f"local {name}")
            self.assign(name, e, node, known)
        elif _checked(node, e):
            assert isinstance(node, Binary)
            t = e.types[id(node)]
            a, b = lua_expr(node.left, e.types, known), lua_expr(node.right, e.types, known)
            self.out(
                f"local {name} = {a} {node.op} {b}"
                + (" + 0" if t == INT and node.op == "*" else "")
            )
            self.out(_guard(name, t))
        else:
            self.out(f"local {name} = {code}")
        if self.out.depth == 0:
            self.cse[code] = name
        known[id(node)] = name

    def assign(
        self, target: str, e: Expr, node: Node | None = None, known: Known | None = None
    ) -> None:
        """``target = node`` as statements: if() as if/else, checked arithmetic inline."""
        out = self.out
        node = e.node if node is None else node
        known = {} if known is None else known
        if isinstance(node, Call) and node.func == "if":
            cond, then, other = node.args
            with out.block(f"if {self.value(e, cond, known)} then"):
                self.assign(target, e, then, dict(known))
                out.otherwise()
                self.assign(target, e, other, dict(known))
            return
        if _checked(node, e):
            assert isinstance(node, Binary)
            t = e.types[id(node)]
            a = self.value(e, node.left, known)
            b = self.value(e, node.right, known)
            out(f"{target} = {a} {node.op} {b}" + (" + 0" if node.op == "*" and t == INT else ""))
            out(_guard(target, t))
            return
        out(f"{target} = {self.value(e, node, known)}")

    def computed(self, prefix: str, e: Expr) -> str:
        """``e`` as a local (or the code itself when it is a name or a constant)."""
        node = e.node
        if _statements(e):
            name = self.slot(prefix)
            self.assign(name, e)
            return name
        code = self.value(e)
        if isinstance(node, Name | Literal) or not can_fail(code):
            return code
        return self.slot(prefix, code)

    def arg(self, e: Expr) -> str:
        """A command argument: a string as Redis receives it."""
        node = e.node
        if isinstance(node, Name) and node.name in self.int_args:
            return self.int_args[node.name]
        neg = isinstance(node, Unary) and node.op == "-"
        lit = node.operand if isinstance(node, Unary) and neg else node
        if isinstance(lit, Literal) and isinstance(lit.value, int | float | str):
            value = lit.value
            if isinstance(value, int) and not isinstance(value, bool) and e.type == INT:
                return lua_str(str(-value if neg else value))
            if isinstance(value, float) and value != 0:  # (as string.format('%.17g'))
                return lua_str(fmt(-value if neg else value))
            if isinstance(value, str) and not neg:
                return lua_str(value)
        code = self.value(e)
        kind = e.type.kind
        if kind == "int":
            return f"string.format('%d', {code})"
        if kind == "float":
            return f"string.format('%.17g', {code})"
        if kind == "bool":
            return f"({code} and '1' or '0')"
        return code

    def items(self, e: Expr) -> str:
        """A name for the list ``e`` (a local of its own when it is computed)."""
        code = self.value(e)
        return code if _NAME.fullmatch(code) else self.slot("l", code)
