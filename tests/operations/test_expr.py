"""The expression language: parse/type errors a spec author sees, and Lua == Python.

The hypothesis test builds random typed expressions, wraps each in a one-line operation
spec and runs it through real Redis (the generated Lua, via EVALSHA) and through Python
(the naive form: no reads, no writes, so pure Python); the replies must be identical.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from luapipe.errors import LuapipeError
from luapipe.operations.expr.check import check
from luapipe.operations.expr.parse import ExprError, parse, parse_type
from luapipe.operations.spec import parse_operation
from luapipe.operations.verify import error_code

ENV = {
    n: parse_type(t)
    for n, t in {
        "i": "int",
        "j": "int",
        "f": "float",
        "s": "str",
        "b": "bool",
        "xs": "list[int]",
    }.items()
}


def _check(text: str) -> str:
    return str(check(parse(text), ENV)[0])


@pytest.mark.parametrize(
    ("text", "typ"),
    [
        ("i + j * 2", "int"),
        ("i / j", "float"),
        ("i // j % 3", "int"),
        ("s .. i .. f", "str"),
        ("if(b, i, f)", "float"),
        ("if(b, i, nil)", "int?"),
        ("int(s)", "int?"),
        ("coalesce(int(s), 0)", "int"),
        ("map(xs, x -> x * 2)", "list[int]"),
        ("filter(xs, x -> x > i)", "list[int]"),
        ("sum(map(xs, x -> float(x)))", "float"),
        ("xs[0]", "int?"),
        ("not b and i < j or contains(xs, 3)", "bool"),
        ("len(s) + len(xs)", "int"),
    ],
)
def test_types(text: str, typ: str) -> None:
    assert _check(text) == typ


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("if(i, 1, 2)", "needs a bool (no truthiness"),
        ("i and b", "needs a bool"),
        ("int(s) + 1", "use coalesce"),
        ("s < 'b'", "needs a number"),
        ("s == 1", "always different"),
        ("i +", "unexpected 'end of expression'"),
        ("os.execute('x')", "unexpected character '.'"),
        ("__import__('os')", "unknown function '__import__'"),
        ("eval(s)", "unknown function 'eval'"),
        ("nosuch + 1", "unknown name 'nosuch'"),
        ("1 < 2 < 3", "do not chain"),
        ("99999999999999999999", "beyond 2^53-1"),
        ("map(xs, i -> i)", "shadows"),
        ("'a\\q'", "unknown escape"),
    ],
)
def test_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=re.escape(message)):
        check(parse(text), ENV)


# -- Lua and Python agree on random expressions -------------------------------------------

_ints = st.sampled_from(["0", "1", "2", "7", "10", "100", "9007199254740991", "3"])
_floats = st.sampled_from(["0.5", "2.25", "0.1", "1.0", "1000000.5", "3.75"])
_strs = st.sampled_from(["'a'", "''", "'x y'", "'12'", "'-3'", "'1.5'", "'é'", "'0'"])


def _exprs() -> dict[str, st.SearchStrategy[str]]:
    def ext(children: Any) -> Any:
        i, f, s, b = children
        num = st.one_of(i, f)
        return (
            st.one_of(
                st.tuples(i, st.sampled_from(["+", "-", "*", "//", "%"]), i).map(" ".join),
                st.tuples(i, i).map(lambda t: f"min({t[0]}, {t[1]})"),
                st.tuples(i, i).map(lambda t: f"max({t[0]}, {t[1]})"),
                i.map(lambda x: f"abs(-({x}))"),
                f.map(lambda x: f"floor({x})"),
                f.map(lambda x: f"int({x})"),
                s.map(lambda x: f"len({x})"),
                st.tuples(b, i, i).map(lambda t: f"if({t[0]}, {t[1]}, {t[2]})"),
                st.tuples(s, i).map(lambda t: f"coalesce(int({t[0]}), {t[1]})"),
                st.tuples(i, i, i).map(lambda t: f"sum([{t[0]}, {t[1]}, {t[2]}])"),
                st.tuples(i, i).map(lambda t: f"coalesce([{t[0]}, 5][{t[1]}], -1)"),
            ),
            st.one_of(
                st.tuples(num, st.sampled_from(["+", "-", "*", "/"]), f).map(" ".join),
                i.map(lambda x: f"float({x})"),
                st.tuples(num, f).map(lambda t: f"max({t[0]}, {t[1]})"),
                st.tuples(b, f, i).map(lambda t: f"if({t[0]}, {t[1]}, {t[2]})"),
                st.tuples(s, f).map(lambda t: f"coalesce(float({t[0]}), {t[1]})"),
            ),
            st.one_of(
                st.tuples(s, st.one_of(s, i, f)).map(lambda t: f"{t[0]} .. {t[1]}"),
                num.map(lambda x: f"str({x})"),
                st.tuples(b, s, s).map(lambda t: f"if({t[0]}, {t[1]}, {t[2]})"),
            ),
            st.one_of(
                st.tuples(num, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), num).map(
                    " ".join
                ),
                st.tuples(s, st.sampled_from(["==", "!="]), s).map(" ".join),
                st.tuples(b, st.sampled_from(["and", "or"]), b).map(" ".join),
                b.map(lambda x: f"not {x}"),
                s.map(lambda x: f"is_nil(int({x}))"),
                st.tuples(i, i).map(lambda t: f"contains(map([1, 2, 3], x -> x * {t[0]}), {t[1]})"),
            ),
        )

    base = (
        st.one_of(_ints, st.just("vi"), st.just("vj")),
        st.one_of(_floats, st.just("vf")),
        st.one_of(_strs, st.just("vs")),
        st.one_of(st.sampled_from(["true", "false"]), st.just("vb")),
    )
    levels = [base]
    for _ in range(3):
        children = tuple(
            st.one_of(levels[-1][k], levels[0][k]).map(lambda x: f"({x})") for k in range(4)
        )
        levels.append(ext(children))
    return {
        k: st.one_of(*(lv[n] for lv in levels[1:]))
        for n, k in enumerate(["int", "float", "str", "bool"])
    }


EXPRS = _exprs()
SPEC = """
name = "expr_probe"
keys = ["k"]
returns = [{exprs}]
[args]
vi = "int"
vj = "int"
vf = "float"
vs = "str"
vb = "bool"
"""


def _outcome(op: Any, client: redis.Redis, form: str, args: dict[str, Any]) -> Any:
    try:
        return ("ok", op.run(client, form, keys={"k": "probe"}, args=args))
    except LuapipeError as exc:
        return ("error", error_code(exc))


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    exprs=st.tuples(EXPRS["int"], EXPRS["float"], EXPRS["str"], EXPRS["bool"]),
    vi=st.sampled_from([0, 1, -1, 3, 2**53 - 1, -(2**53 - 1), 10**6]),
    vj=st.sampled_from([0, 2, -7, 5]),
    vf=st.sampled_from([0.0, -0.0, 0.1, 2.5, -1e15, 1e300]),
    vs=st.sampled_from(["", "7", "-0", "abc", "2.5", "é"]),
    vb=st.booleans(),
)
def test_lua_and_python_agree(
    r: redis.Redis, exprs: tuple[str, ...], vi: int, vj: int, vf: float, vs: str, vb: bool
) -> None:
    text = SPEC.format(exprs=", ".join(repr(e) for e in exprs))
    op = parse_operation(text, "probe.toml")
    args = {"vi": vi, "vj": vj, "vf": vf, "vs": vs, "vb": vb}
    lua = _outcome(op, r, "script", args)
    py = _outcome(op, r, "naive", args)
    assert lua == py, (exprs, args)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0.1 + 0.2", "0.30000000000000004"),  # floats travel as %.17g strings
        ("3.99", "3.9900000000000002"),  # not truncated to 3 as a Lua number would be
        ("if(vi == 0, 1, 2)", 1),  # 0 is a value, not false
        ("if(len(vs) == 0, 'empty', vs)", "empty"),  # '' compared explicitly
        ("[1, 2, 3][0]", 1),  # 0-based in the language, 1-based in Lua
        ("coalesce(int(vs), -1)", -1),  # nil -> default, never false
        ("vi .. ''", "0"),
        ("9007199254740991 .. ''", "9007199254740991"),  # no %.14g rounding
    ],
)
def test_semantic_traps_are_handled(r: redis.Redis, expr: str, expected: Any) -> None:
    op = parse_operation(SPEC.format(exprs=repr(expr)), "probe.toml")
    args = {"vi": 0, "vj": 0, "vf": 0.0, "vs": "", "vb": False}
    for form in ("script", "function", "naive"):
        assert op.run(r, form, keys={"k": "probe"}, args=args) == [expected]


def test_overflow_is_an_error_in_every_form(r: redis.Redis) -> None:
    op = parse_operation(SPEC.format(exprs=repr("vi * 2")), "probe.toml")
    args = {"vi": 2**53 - 1, "vj": 0, "vf": 0.0, "vs": "", "vb": False}
    for form in ("script", "function", "naive"):
        assert _outcome(op, r, form, args) == ("error", "OVERFLOW")


def test_nil_in_the_middle_of_a_reply_does_not_truncate(r: redis.Redis) -> None:
    op = parse_operation(SPEC.format(exprs="'1', 'int(vs)', '3'"), "probe.toml")
    args = {"vi": 0, "vj": 0, "vf": 0.0, "vs": "x", "vb": False}
    for form in ("script", "function", "naive"):
        assert op.run(r, form, keys={"k": "probe"}, args=args) == [1, None, 3]
