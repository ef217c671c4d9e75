"""Random typed expressions in every place a spec holds one: a read's argument, lets (used
and unused), a write's ``when`` and arguments (with and without ``each``), the returns.

The generated Lua evaluates what can fail before the first write, checked arithmetic as
statements, and skips values it never uses (:mod:`luapipe.operations.luabody`); the Python
forms evaluate every expression in spec order. Both must give the same reply or the same
error, and leave the same keys, whichever expression fails first.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from luapipe.errors import LuapipeError
from luapipe.operations.operation import Operation
from luapipe.operations.spec import parse_operation
from luapipe.operations.verify import error_code

from .test_fuzz_spec import ARGS, toml_value, typed

FORMS = ("script", "function", "naive", "transaction")
SPEC = """
name = "fuzz_places"
keys = ["k", "others..."]
returns = [{ret}, "used"]
[args]
vi = "int"
vj = "int"
vf = "float"
vs = "str"
vb = "bool"
vz = "int"
xs = "list[int]"

[[reads]]
name = "got"
cmd = "HGET"
key = "k"
args = [{field}]

[let]
used = {used}
unused = {unused}

[[writes]]
cmd = "HSET"
key = "k"
args = [{field2}, {value}]
when = {when}

[[writes]]
each = "others"
cmd = "INCRBY"
key = "it"
args = [{by}]

[[writes]]
cmd = "HINCRBY"
key = "k"
args = ["'n'", {by2}]
"""
#: the same, the reply using the last write's: computed after the writes, in every form
LATE = SPEC.replace('"used"]', '"used", "counted + 0"]').replace(
    'cmd = "HINCRBY"', 'name = "counted"\ncmd = "HINCRBY"'
)


def _boom(text: str) -> str:
    """Every ``vj`` as ``vi // vz``: a DIVZERO wherever it is evaluated when vz is 0, so the
    order in which places are evaluated decides the outcome."""
    return text.replace("vj", "(vi // vz)")


def _outcome(op: Operation, r: redis.Redis, form: str, args: dict[str, Any]) -> Any:
    r.delete("fz:k", "fz:o1", "fz:o2")
    r.hset("fz:k", mapping={"a": "1", "7": "x"})
    r.set("fz:o2", "9007199254740990")
    try:
        got = ("ok", op.run(r, form, keys={"k": "fz:k", "others": ["fz:o1", "fz:o2"]}, args=args))
    except LuapipeError as exc:
        got = ("error", error_code(exc))
    return got, r.hgetall("fz:k"), r.mget("fz:o1", "fz:o2")


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    parts=st.fixed_dictionaries(
        {
            "ret": st.sampled_from(["int", "float", "str", "int?", "list[int]"]).flatmap(typed),
            "field": typed("str", 2),
            "used": typed("int"),
            "unused": st.sampled_from(["int", "float", "bool"]).flatmap(typed),
            "field2": typed("str", 2),
            "value": typed("int"),
            "when": typed("bool"),
            "by": typed("int", 2),
            "by2": typed("int", 2),
        }
    ),
    vi=st.sampled_from([0, 1, -1, 7, 2**53 - 1]),
    vs=st.sampled_from(["", "7", "a", "x"]),
    vz=st.sampled_from([0, 0, 1]),
    late=st.booleans(),
)
def test_expressions_in_every_place_agree_in_every_form(
    r: redis.Redis, parts: dict[str, str], vi: int, vs: str, vz: int, late: bool
) -> None:
    text = (LATE if late else SPEC).format(**{k: toml_value(_boom(v)) for k, v in parts.items()})
    op = parse_operation(text, "p.toml")
    args = {**ARGS, "vi": vi, "vs": vs, "vz": vz}
    seen = {form: _outcome(op, r, form, args) for form in FORMS}
    assert len({repr(v) for v in seen.values()}) == 1, (parts, args, seen)


@pytest.mark.parametrize(
    ("changed", "want"),
    [
        # an unused let that fails: every form fails, though the Lua side binds no local
        ({"unused": "vi // 0"}, "DIVZERO"),
        # the first failure in spec order wins: the let, before the write's argument
        ({"used": "9007199254740991 + vi", "value": "vi // 0"}, "OVERFLOW"),
        # the last write's argument fails: no write is sent, not even the first
        ({"by2": "vi // 0"}, "DIVZERO"),
        ({"by": "vi * 9007199254740991"}, "OVERFLOW"),  # in the `each` write
        # the reply fails: before any write too (it uses no write's reply)
        ({"ret": "vi // 0"}, "DIVZERO"),
        # a branch that is not taken is not evaluated, in Lua either
        ({"used": "if(vb, 1, vi // 0)", "ret": "if(vi > 0, vi, vi // 0)"}, None),
    ],
)
def test_the_first_failure_in_spec_order_wins(
    r: redis.Redis, changed: dict[str, str], want: str | None
) -> None:
    _first_failure(r, SPEC, changed, want, written=False)


def test_a_reply_that_uses_a_write_fails_after_the_writes(r: redis.Redis) -> None:
    _first_failure(r, LATE, {"ret": "vi // 0"}, "DIVZERO", written=True)


def _first_failure(
    r: redis.Redis, spec: str, changed: dict[str, str], want: str | None, written: bool
) -> None:
    parts = {
        "ret": "1",
        "field": "'a'",
        "used": "1",
        "unused": "1",
        "field2": "'a'",
        "value": "2",
        "when": "true",
        "by": "1",
        "by2": "1",
    }
    parts |= changed
    op = parse_operation(spec.format(**{k: toml_value(v) for k, v in parts.items()}), "p.toml")
    for form in FORMS:
        got, kept, others = _outcome(op, r, form, {**ARGS, "vi": 2, "vz": 0})
        if want is None:
            assert got[0] == "ok", (form, got)
            continue
        assert got == ("error", want), form
        if written:
            assert kept == {b"a": b"2", b"7": b"x", b"n": b"1"}, form
            assert others == [b"1", b"9007199254740991"], form
        else:
            assert kept == {b"a": b"1", b"7": b"x"}, form
            assert others == [None, b"9007199254740990"], form
