"""The expression language of operation specs: tokenizer, parser and type checker.

One AST, a closed set of node types, compiled to Lua (:mod:`luapipe.compile_lua`) and to
Python (:mod:`luapipe.compile_py`). Nothing here evaluates spec text.

Grammar (lowest precedence first)::

    or      := and ('or' and)*
    and     := not ('and' not)*
    not     := 'not' not | cmp
    cmp     := concat (('=='|'!='|'<'|'<='|'>'|'>=') concat)?
    concat  := add ('..' concat)?
    add     := mul (('+'|'-') mul)*
    mul     := unary (('*'|'/'|'//'|'%') unary)*
    unary   := '-' unary | postfix
    postfix := atom ('[' or ']')*          # 0-based index, nil when out of range
    atom    := INT | FLOAT | STRING | true | false | nil | NAME | NAME '(' args ')'
             | '(' or ')' | '[' or (',' or)* ']'
    args    := arg (',' arg)* ;  arg := NAME '->' or | or

Conditions are typed ``bool`` (no truthiness), integers stay within +-(2^53-1) (else the
operation fails with ``OVERFLOW`` in every form), and floats are returned as strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from luapipe.operations.expr.lex import FUNCTIONS, KEYWORDS, LexError, Tok, tokenize, unescape

__all__ = [
    "BOOL",
    "FLOAT",
    "INT",
    "NIL",
    "STR",
    "Binary",
    "Call",
    "ExprError",
    "Index",
    "Lambda",
    "ListLit",
    "Literal",
    "Name",
    "Node",
    "Type",
    "Unary",
    "children",
    "list_of",
    "parse",
    "parse_type",
]

MAX_INT = 2**53 - 1
#: nesting levels an expression may have (the parser's recursion, Lua's syntax levels)
MAX_DEPTH = 40


class ExprError(ValueError):
    """A problem in one expression; ``col`` is the 1-based column."""

    def __init__(self, message: str, col: int = 0) -> None:
        super().__init__(message)
        self.col = col


@dataclass(frozen=True)
class Type:
    kind: str  # int float str bool nil list
    elem: Type | None = None
    opt: bool = False

    def __str__(self) -> str:
        base = f"list[{self.elem}]" if self.kind == "list" else self.kind
        return base + ("?" if self.opt and self.kind != "nil" else "")

    @property
    def required(self) -> Type:
        return Type(self.kind, self.elem, False)

    @property
    def optional(self) -> Type:
        return Type(self.kind, self.elem, True)

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float") and not self.opt


INT, FLOAT, STR, BOOL, NIL = Type("int"), Type("float"), Type("str"), Type("bool"), Type("nil")


def list_of(elem: Type) -> Type:
    return Type("list", elem)


def parse_type(text: str) -> Type:
    """``int``, ``float``, ``str``, ``bool`` or ``list[...]`` of those."""
    m = re.fullmatch(r"list\[(int|float|str)\]|(int|float|str|bool)", text.strip())
    if m is None:
        raise ExprError(f"unknown type {text!r}")
    return list_of(Type(m[1])) if m[1] else Type(m[2])


# ---------------------------------------------------------------- AST (the whitelist)


@dataclass(frozen=True)
class Node:
    col: int


@dataclass(frozen=True)
class Literal(Node):
    value: int | float | str | bool | None


@dataclass(frozen=True)
class Name(Node):
    name: str


@dataclass(frozen=True)
class Unary(Node):
    op: str  # '-' or 'not'
    operand: Node


@dataclass(frozen=True)
class Binary(Node):
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Call(Node):
    func: str
    args: tuple[Node, ...]


@dataclass(frozen=True)
class Lambda(Node):
    param: str
    body: Node


@dataclass(frozen=True)
class Index(Node):
    target: Node
    index: Node


@dataclass(frozen=True)
class ListLit(Node):
    items: tuple[Node, ...]


# ---------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(
                f"nested too deeply (more than {MAX_DEPTH} levels)", self.toks[self.i].col
            )

    def peek(self, *texts: str) -> bool:
        t = self.toks[self.i]
        return t.kind in ("op", "name") and t.text in texts

    def take(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, text: str) -> Tok:
        t = self.take()
        if t.text != text or t.kind not in ("op", "name"):
            found = t.text or "end of expression"
            raise ExprError(f"expected '{text}' but found '{found}'", t.col)
        return t

    def parse(self) -> Node:
        node = self.or_()
        t = self.toks[self.i]
        if t.kind != "end":
            raise ExprError(f"unexpected '{t.text}' after a complete expression", t.col)
        return node

    def or_(self) -> Node:
        self.enter()
        node = self.and_()
        while self.peek("or"):
            t = self.take()
            node = Binary(t.col, "or", node, self.and_())
        self.depth -= 1
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.peek("and"):
            t = self.take()
            node = Binary(t.col, "and", node, self.not_())
        return node

    def not_(self) -> Node:
        if self.peek("not"):
            t = self.take()
            self.enter()
            node = Unary(t.col, "not", self.not_())
            self.depth -= 1
            return node
        return self.cmp()

    def cmp(self) -> Node:
        node = self.concat()
        if self.peek("==", "!=", "<", "<=", ">", ">="):
            t = self.take()
            node = Binary(t.col, t.text, node, self.concat())
            if self.peek("==", "!=", "<", "<=", ">", ">="):
                raise ExprError("comparisons do not chain; use 'and'", self.toks[self.i].col)
        return node

    def concat(self) -> Node:
        node = self.add()
        if self.peek(".."):
            t = self.take()
            self.enter()
            node = Binary(t.col, "..", node, self.concat())
            self.depth -= 1
        return node

    def add(self) -> Node:
        node = self.mul()
        while self.peek("+", "-"):
            t = self.take()
            node = Binary(t.col, t.text, node, self.mul())
        return node

    def mul(self) -> Node:
        node = self.unary()
        while self.peek("*", "/", "//", "%"):
            t = self.take()
            node = Binary(t.col, t.text, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek("-"):
            t = self.take()
            self.enter()
            neg = Unary(t.col, "-", self.unary())
            self.depth -= 1
            return neg
        node = self.atom()
        while self.peek("["):
            t = self.take()
            idx = self.or_()
            self.expect("]")
            node = Index(t.col, node, idx)
        return node

    def atom(self) -> Node:
        t = self.take()
        if t.kind == "int":
            value = int(t.text)
            if value > MAX_INT:
                raise ExprError(f"integer {t.text} is beyond 2^53-1", t.col)
            return Literal(t.col, value)
        if t.kind == "float":
            return Literal(t.col, float(t.text))
        if t.kind == "str":
            return Literal(t.col, unescape(t.text[1:-1], t.col + 1))
        if t.kind == "name":
            if t.text in ("true", "false"):
                return Literal(t.col, t.text == "true")
            if t.text == "nil":
                return Literal(t.col, None)
            if t.text in KEYWORDS:
                raise ExprError(f"'{t.text}' cannot start an expression", t.col)
            if self.peek("("):
                return self.call(t)
            return Name(t.col, t.text)
        if t.text == "(":
            node = self.or_()
            self.expect(")")
            return node
        if t.text == "[":
            items = [self.or_()]
            while self.peek(","):
                self.take()
                items.append(self.or_())
            self.expect("]")
            return ListLit(t.col, tuple(items))
        raise ExprError(f"unexpected '{t.text or 'end of expression'}'", t.col)

    def call(self, name: Tok) -> Node:
        if name.text not in FUNCTIONS:
            known = ", ".join(sorted(FUNCTIONS))
            raise ExprError(f"unknown function '{name.text}' (known: {known})", name.col)
        self.expect("(")
        args: list[Node] = []
        if not self.peek(")"):
            while True:
                nxt = self.toks[min(self.i + 1, len(self.toks) - 1)]  # 'f(' at the end
                if self.toks[self.i].kind == "name" and nxt.text == "->":
                    p = self.take()
                    self.take()
                    args.append(Lambda(p.col, p.text, self.or_()))
                else:
                    args.append(self.or_())
                if not self.peek(","):
                    break
                self.take()
        self.expect(")")
        return Call(name.col, name.text, tuple(args))


def parse(text: str) -> Node:
    """Parse one expression; raises :class:`ExprError` with a column."""
    if not text.strip():
        raise ExprError("empty expression", 1)
    try:
        node = _Parser(text).parse()
    except LexError as exc:
        raise ExprError(str(exc), exc.col) from None
    deepest = _deepest(node)
    if deepest is not None:
        raise ExprError(f"nested too deeply (more than {MAX_DEPTH} levels)", deepest.col)
    return node


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Lambda):
        return (node.body,)
    if isinstance(node, Index):
        return (node.target, node.index)
    if isinstance(node, ListLit):
        return node.items
    return ()


def _deepest(root: Node) -> Node | None:
    """The first node below ``MAX_DEPTH`` levels (long chains like ``1+1+...``), or None."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return node
        stack.extend((c, depth + 1) for c in children(node))
    return None
