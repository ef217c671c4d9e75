"""The Lua statements of an operation: what the script and the function run on every call.

Written as a person writes a careful script, because a script's top level runs on every
``EVALSHA``: arguments and read replies are parsed and checked in place; checked arithmetic
(the 2^53 guard) is a statement, not a call; a value the Lua side never uses is never bound
to a local; each write is one ``redis.pcall`` whose error is kept until every write was
attempted. Only what has no statement form calls a prelude helper (``_co`` for coalesce,
``_div``, ``_map``, ...), and the prelude defines only the helpers used
(:func:`luapipe.operations.generate.prelude`).

The order is every form's (see :mod:`luapipe.operations.steps`): arguments, the reads (each
converted before the next), the compute step, the write commands built (everything that can
fail is evaluated before the first write is sent), the reply when it uses no write's reply,
every write attempted and the first error returned; then the replies of named writes are
converted and, when it uses them, the reply is built. Within an expression, everything that
can fail is evaluated in Lua's (and Python's) order, left to right and inside out: how an
expression becomes statements (what can fail computed first into locals, the temporaries) is
:mod:`luapipe.operations.luastatements`, which the body is built on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from luapipe.operations.expr.compile import lua_expr, lua_wire
from luapipe.operations.expr.parse import FLOAT, INT, Name
from luapipe.operations.luastatements import (
    _NAME,
    LIMIT,
    OVERFLOW,
    LuaStatements,
    _guard,
    _statements,
    can_fail,
)

# importable from here before the expression code moved out: kept
from luapipe.operations.luastatements import MAX_LOCALS as MAX_LOCALS
from luapipe.operations.luastatements import NOT_FINITE as NOT_FINITE
from luapipe.operations.luastatements import Known as Known
from luapipe.operations.model import Expr, OperationModel, Read, Write

__all__ = ["COUNTERS", "can_fail", "lua_body"]

_INT = "'^%-?[1-9]%d*$'"
_FLT = "'^%-?%d+%.?%d*$'"
NOT_INT = "error('NOTINT a value read is not an integer')"
#: write commands whose integer reply is a counter's value, which may pass 2^53
COUNTERS = frozenset({"INCR", "INCRBY", "DECR", "DECRBY", "HINCRBY"})
#: after a pcall into _r: keep the first error's message
KEEP = "if type(_r) == 'table' and _r.err and not _e then _e = tostring(_r.err) end"


class _Body(LuaStatements):
    def __init__(self, op: OperationModel) -> None:
        super().__init__(op)
        self.live = _live_names(op)
        self.first = True  # no write attempted yet

    # -- keys and args --------------------------------------------------------------------
    def keys(self) -> None:
        out = self.out
        for i, k in enumerate(self.op.keys, start=1):
            if k.name not in self.live:
                continue
            if k.variadic and i == 1:
                out(f"local v_{k.name} = KEYS")
            elif k.variadic:
                out(f"local v_{k.name} = {{}}")
                out(f"for i = {i}, #KEYS do v_{k.name}[#v_{k.name} + 1] = KEYS[i] end")
            else:
                out(f"local v_{k.name} = KEYS[{i}]")

    def args(self) -> None:
        out = self.out
        for i, a in enumerate(self.op.args, start=1):
            bad = f"error('ERR argument {a.name} is not valid')"
            var = f"v_{a.name}"
            if a.type.kind == "list":
                assert a.type.elem is not None
                out(f"local {var} = {{}}")
                with out.block(f"for i = {i}, #ARGV do"):
                    out("local _s = ARGV[i]")
                    self.parse_arg("_s", a.type.elem.kind, bad)
                    out(f"{var}[#{var} + 1] = _s")
                continue
            out(f"local {var} = ARGV[{i}]")
            self.parse_arg(var, a.type.kind, bad)

    def parse_arg(self, var: str, kind: str, bad: str) -> None:
        out = self.out
        if kind == "int":
            canonical = f"({var} == '0' or string.match({var}, {_INT}))"
            out(f"if {var} == nil or not {canonical} then {bad} end")
            out(f"{var} = tonumber({var})")
            out(f"if {var} >= {LIMIT} or {var} <= -{LIMIT} then {OVERFLOW} end")
        elif kind == "float":
            out(f"if {var} ~= nil then {var} = tonumber({var}) end")
            out(f"if {var} == nil then {bad} end")
        elif kind == "bool":
            out(f"if {var} == '1' then {var} = true")
            out(f"elseif {var} == '0' then {var} = false else {bad} end")
        else:
            out(f"if {var} == nil then {bad} end")

    # -- reads ----------------------------------------------------------------------------
    def read(self, r: Read) -> None:
        out = self.out
        live = r.name in self.live
        if r.each is None:
            self.read_value(r, f"v_{r.name}", live)
            return
        items = self.items(r.each)
        if live:
            out(f"local v_{r.name} = {{}}")
        with out.block(f"for i = 1, #{items} do"):
            out(f"local v_it = {items}[i]")
            self.read_value(r, "_s", live)
            if live:
                out(f"v_{r.name}[i] = _s")

    def read_value(self, r: Read, var: str, live: bool) -> None:
        """The read's reply as a new local ``var``, converted (checked only, and unbound when
        not ``live``). A default is evaluated after the conversion, as coalesce() does:
        inline (only when the reply is missing) when it cannot fail."""
        out = self.out
        call = (
            "redis.call("
            + ", ".join([repr(r.cmd), self.value(r.key), *map(self.arg, r.args)])
            + ")"
        )
        default = lua_expr(r.default.node, r.default.types) if r.default is not None else None
        inline = default if default is not None and not can_fail(default) else None
        if r.reply in ("bool", "int") or (r.reply == "list[str]" and not r.conv):
            value = f"({call} == 1)" if r.reply == "bool" else call
            out(f"local {var} = {value}" if live else call)
        elif r.reply == "list[str]":
            out(f"local {var} = {call}")
            with out.block(f"for j = 1, #{var} do"):
                out(f"local _v = {var}[j]")
                self.convert(r.conv or "", "_v", NOT_INT)
                if live:
                    out(f"{var}[j] = _v")
        elif r.conv is None and r.reply in ("str?", "int?"):
            out(f"local {var} = {call} or {inline or 'nil'}" if live else call)
        else:  # a str? with a conversion, or a float? (a score): converted when present
            out(f"local {var} = {call}")
            with out.block(f"if {var} then"):
                self.convert(r.conv or "score", var, NOT_INT)
                if live:
                    out.otherwise()
                    out(f"{var} = {inline or 'nil'}")
        if r.default is None or inline is not None:
            return
        default = self.value(r.default)  # evaluated after the reply is converted
        if live and r.reply in ("str?", "int?", "float?"):
            default = default if _NAME.fullmatch(default) else self.slot("d", default)
            out(f"if {var} == nil then {var} = {default} end")
        else:
            out(f"local _ = {default}")

    def convert(self, conv: str, var: str, not_int: str) -> None:
        """A string ``var`` as ``conv``: int, float, or a score (as Redis formats one)."""
        out = self.out
        if conv == "int":
            out(f"if not ({var} == '0' or string.match({var}, {_INT})) then {not_int} end")
            out(f"{var} = tonumber({var})")
            out(f"if {var} >= {LIMIT} or {var} <= -{LIMIT} then {OVERFLOW} end")
        elif conv == "float":
            out(
                f"if not string.match({var}, {_FLT}) then "
                "error('NOTFLOAT a value read is not a number') end"
            )
            out(f"{var} = tonumber({var})")
            out(_guard(var, FLOAT))
        else:
            out(f"{var} = tonumber({var})")

    # -- the compute step -----------------------------------------------------------------
    def let(self, name: str, e: Expr) -> None:
        if name in self.live:
            if _statements(e):
                self.out(f"local v_{name}")
                self.assign(f"v_{name}", e)
            else:
                self.out(f"local v_{name} = {self.value(e)}")
        elif can_fail(lua_expr(e.node, e.types)):
            code = self.value(e)
            if not _NAME.fullmatch(code):  # (else already computed, checked, into a local)
                self.out(f"local _ = {code}")

    # -- writes ---------------------------------------------------------------------------
    def writes(self) -> None:
        """Build every write (what can fail first), attempt each, return the first error;
        then the named replies and the reply.

        The first error's message is kept (``_e``) and returned with redis.error_reply: on
        Redis the same reply as returning pcall's table. (On fakeredis 2.40 with lupa 2.8 a
        pcall error's message can be another error's text whenever it is read: that is
        the fake's, and verify rechecks it, see :mod:`luapipe.operations.fakequirks`.)"""
        out = self.out
        staged = [self.stage(j, w) for j, w in enumerate(self.op.writes, start=1)]
        early = not self.op.late_returns and any(
            can_fail(lua_expr(r.node, r.types)) for r in self.op.returns
        )
        ret = self.reply() if early else None
        out("local _e, _r")
        for w, plan in zip(self.op.writes, staged, strict=True):
            self.attempt(w, *plan)
        out("if _e then return redis.error_reply(_e) end")
        for w in self.op.writes:
            if w.name is not None and w.name in self.live:
                self.convert_reply(w)
        out(f"return {ret if ret is not None else self.reply()}")

    def stage(self, j: int, w: Write) -> tuple[str | None, list[str], str | None]:
        """Before any write is sent: (when, command parts, staged commands). Where an
        expression of the write can fail it is evaluated now (into locals, or for a write
        with ``each`` into a list of commands); otherwise at the write."""
        out = self.out
        exprs = [x for x in (w.key, *w.args, w.when, w.each) if x is not None]
        if not any(can_fail(lua_expr(x.node, x.types)) for x in exprs):
            when = lua_expr(w.when.node, w.when.types) if w.when is not None else None
            return when, [lua_expr(w.key.node, w.key.types), *map(self.arg, w.args)], None
        if w.each is not None:  # the commands of every item, built now, sent later
            items = self.items(w.each)
            staged = self.slot("w", "{}")
            with out.block(f"for i = 1, #{items} do"):
                out(f"local v_it = {items}[i]")
                when = self.value(w.when) if w.when is not None else None
                with out.block(f"if {when} then") if when else _flat():
                    cmd = (
                        "{"
                        + ", ".join([repr(w.cmd), self.value(w.key), *map(self.arg, w.args)])
                        + "}"
                    )
                    out(f"{staged}[#{staged} + 1] = {cmd}")
            return None, [], staged
        if w.when is None:
            return None, [self.computed_part(w.key), *map(self.computed_arg, w.args)], None
        when = self.value(w.when)
        if can_fail(when):
            when = self.slot("c", when)
        pure = [not can_fail(lua_expr(x.node, x.types)) for x in (w.key, *w.args)]
        parts = [
            self.value(x) if ok and x is w.key else self.arg(x) if ok else self.slot("a")
            for x, ok in zip((w.key, *w.args), pure, strict=True)
        ]
        with out.block(f"if {when} then"):
            for i, (x, ok) in enumerate(zip((w.key, *w.args), pure, strict=True)):
                if not ok:
                    out(f"{parts[i]} = {self.value(x) if i == 0 else self.arg(x)}")
        return when, parts, None

    def computed_part(self, e: Expr) -> str:
        code = self.value(e)
        return code if not can_fail(code) or isinstance(e.node, Name) else self.slot("a", code)

    def computed_arg(self, e: Expr) -> str:
        code = self.arg(e)
        return code if not can_fail(code) else self.slot("a", code)

    def attempt(self, w: Write, when: str | None, parts: list[str], staged: str | None) -> None:
        out = self.out
        named = w.name is not None and w.name in self.live
        var = f"v_{w.name}" if named else "_r"
        unset = "" if self.first else " and not _e"  # (no earlier write: _e is nil)
        keep = f"if type({var}) == 'table' and {var}.err{unset} then _e = tostring({var}.err) end"
        self.first = False
        if staged is not None:
            if named:
                out(f"local {var} = {{}}")
            with out.block(f"for i = 1, #{staged} do"):
                out(f"_r = redis.pcall(unpack({staged}[i]))")
                out(KEEP)
                if named:
                    out(f"{var}[i] = _r")
            return
        call = "redis.pcall(" + ", ".join([repr(w.cmd), *parts]) + ")"
        if w.each is not None:
            items = self.items(w.each)
            if named:
                out(f"local {var} = {{}}")
            with out.block(f"for i = 1, #{items} do"):
                out(f"local v_it = {items}[i]")
                with out.block(f"if {when} then") if when else _flat():
                    out(f"_r = {call}")
                    out(KEEP)
                    if named:
                        out(f"{var}[i] = _r")
            return
        if when is None:
            out(f"{'local ' if named else ''}{var} = {call}")
            out(keep)
            return
        if named:
            out(f"local {var}")
        with out.block(f"if {when} then"):
            out(f"{var} = {call}")
            out(keep)

    def convert_reply(self, w: Write) -> None:
        """A named write's reply (no error: checked before) as its declared type."""
        out = self.out
        var = f"v_{w.name}"
        if w.each is None:
            self.reply_value(w, var, optional=w.when is not None)
        elif w.reply != "int" or w.cmd in COUNTERS:  # (a list of plain ints is as it came)
            with out.block(f"for i = 1, #{var} do"):
                out(f"local _v = {var}[i]")
                self.reply_value(w, "_v", optional=False)
                out(f"{var}[i] = _v")

    def reply_value(self, w: Write, var: str, optional: bool) -> None:
        out = self.out
        if w.reply == "str?":
            if w.conv is None:
                out(f"{var} = {var} or nil")
                return
            with out.block(f"if {var} then"):
                self.convert(w.conv, var, NOT_INT)
                out.otherwise()
                out(f"{var} = nil")
            return
        if w.reply == "bool":
            line = f"{var} = ({var} ~= false)" if w.cmd == "SET" else f"{var} = ({var} == 1)"
        elif w.reply == "float":
            line = f"{var} = tonumber({var})"
        elif w.reply == "int" and w.cmd in COUNTERS:
            line = _guard(var, INT)
        else:
            return
        if optional:
            with out.block(f"if {var} ~= nil then"):
                out(line)
        else:
            out(line)

    # -- the reply ------------------------------------------------------------------------
    def reply(self) -> str:
        """The reply's code; each part that can fail computed first, into locals."""
        op = self.op
        rets = [lua_wire(self.computed("ret", r), r.type) for r in op.returns]
        return "{" + ", ".join(rets) + "}" if op.returns_tuple else rets[0]


@contextmanager
def _flat() -> Iterator[None]:
    yield


def _live_names(op: OperationModel) -> set[str]:
    """The names the Lua code reads: what writes, returns and reads use, and the lets (or
    keys and args) those use in turn; a let that can fail is evaluated even when unused."""
    live: set[str] = set()
    for w in op.writes:
        for x in (w.key, *w.args, w.when, w.each):
            if x is not None:
                live |= x.names
    for r in op.returns:
        live |= r.names
    for rd in op.reads:
        for x in (rd.key, *rd.args, rd.each, rd.default):
            if x is not None:
                live |= x.names
    for let in reversed(op.lets):
        if let.name in live or can_fail(lua_expr(let.expr.node, let.expr.types)):
            live |= let.expr.names
    return live


def lua_body(op: OperationModel) -> str:
    """The statements shared by the script and the function (KEYS/ARGV in, reply out)."""
    body = _Body(op)
    body.keys()
    body.args()
    for r in op.reads:
        body.read(r)
    for let in op.lets:
        body.let(let.name, let.expr)
    if op.writes:
        body.writes()
    else:
        body.out(f"return {body.reply()}")
    return "\n".join(body.out.lines) + "\n"
