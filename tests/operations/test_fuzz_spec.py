"""Fuzzing the spec parser and the expression compiler (hypothesis).

- No input produces anything but :class:`SpecError` (from the spec entry points) or
  :class:`ExprError` (from the expression parser/checker): random text, random bytes in a
  file, random TOML documents, catalogue specs with random fields replaced, random strings
  and random token sequences as expressions.
- A spec that checks out always generates Lua, a Function library and an importable Python
  module; random *valid* mutations of catalogue specs give the same replies and keyspace in
  the script and naive forms (``luapipe.verify`` on the real server).
- Random typed expressions over lists, lambdas, optionals and nil (what
  tests/operations/test_expr.py
  does not cover) give the same reply through real Redis (generated Lua) and Python.

Run with ``-s`` for the number of cases each fuzzer ran.
"""

from __future__ import annotations

import copy
import json
import math
import tomllib
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from luapipe.errors import LuapipeError, SpecError
from luapipe.operations.expr.check import check
from luapipe.operations.expr.lex import tokenize
from luapipe.operations.expr.parse import ExprError, parse, parse_type
from luapipe.operations.operation import Operation
from luapipe.operations.spec import load_operation, parse_operation
from luapipe.operations.verify import error_code, verify

from ..conftest import EXAMPLES_DIR

CATALOGUE = sorted((EXAMPLES_DIR / "operations").glob("*.toml"))
DOCS = [tomllib.loads(p.read_text()) for p in CATALOGUE]
RAN: Counter[str] = Counter()
FAST = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield
    print(f"\nfuzz cases run: {dict(RAN)}; total {sum(RAN.values())}")


def _generated(op: Operation) -> None:
    """Every generated text of a valid spec builds; the Python module compiles."""
    assert op.lua_source and op.function_source
    compile(op.python_source, f"<{op.name}>", "exec")


def _spec_or_error(text: str, path: str = "fuzz.toml") -> Operation | None:
    try:
        op = parse_operation(text, path)
    except SpecError as exc:
        assert exc.problems and all(p.startswith(f"{path}:") for p in exc.problems)
        assert all(len(p.splitlines()) == 1 for p in exc.problems), exc.problems  # one line
        return None
    _generated(op)
    return op


# -- TOML text and values ---------------------------------------------------------------


def toml_value(v: Any) -> str:
    """A TOML inline value (the fuzzers build documents from dicts)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return ("-inf" if v < 0 else "inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    assert isinstance(v, dict)
    return "{" + ", ".join(f"{toml_value(str(k))} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_doc(d: dict[str, Any]) -> str:
    return "".join(f"{toml_value(str(k))} = {toml_value(v)}\n" for k, v in d.items())


PLAUSIBLE = st.sampled_from(
    [
        "0", "1", "-1", "1.5", "", "x", "it", "ok", "qty", "stock", "src", "counters",
        "counters...", "nil", "true", "GET", "SET", "INCRBY", "HGET", "ZADD", "EXPIRE",
        "int", "float", "str", "bool", "list[str]", "list[int]", "available >= qty",
        "if(ok, 1, 0)", "len(counters)", "map(counters, x -> x .. ':d')", "'a' .. 1",
        "coalesce(int(x), 0)", "qty * 2", "not ok", "by", "amount > 0", "ids", "n",
    ]
)  # fmt: skip
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
SCALARS = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    TEXT,
    PLAUSIBLE,
)
VALUES = st.recursive(
    SCALARS,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.one_of(PLAUSIBLE, TEXT), kids, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    [
        "name",
        "description",
        "keys",
        "args",
        "reads",
        "let",
        "writes",
        "returns",
        "invariant",
        "cmd",
        "key",
        "as",
        "default",
        "each",
        "when",
        "check",
        "type",
        "min",
        "max",
        "doc",
        "samples",
        "key_prefix",
        "bogus",
        "Name",
    ]
)


@FAST
@given(st.text(max_size=300))
def test_random_text_is_a_spec_error_or_a_spec(text: str) -> None:
    RAN["random text -> parse_operation"] += 1
    _spec_or_error(text)


@FAST
@given(st.binary(max_size=200))
def test_random_bytes_in_a_file_are_a_spec_error_or_a_spec(tmp_path: Path, data: bytes) -> None:
    RAN["random bytes -> load_operation"] += 1
    spec = tmp_path / "fuzz.toml"
    spec.write_bytes(data)
    try:
        _generated(load_operation(spec))
    except SpecError as exc:
        assert all(p.startswith(f"{spec}:") for p in exc.problems)


@FAST
@given(st.dictionaries(st.one_of(FIELDS, TEXT), VALUES, max_size=9))
def test_random_documents_are_a_spec_error_or_a_spec(doc: dict[str, Any]) -> None:
    RAN["random TOML documents"] += 1
    text = toml_doc(doc)
    if "nan" not in text:  # the fuzzer writes the document it means (NaN != NaN)
        assert tomllib.loads(text) == doc
    _spec_or_error(text)


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A catalogue spec with 1 to 3 random changes: a field replaced, removed or added."""
    doc: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(DOCS)))
    for _ in range(draw(st.integers(1, 3))):
        node: Any = doc
        while True:
            if isinstance(node, dict) and node:
                slot: Any = draw(st.sampled_from(sorted(node)))
            elif isinstance(node, list) and node:
                slot = draw(st.integers(0, len(node) - 1))
            else:
                break
            child = node[slot]
            if isinstance(child, dict | list) and child and draw(st.integers(0, 2)):
                node = child
                continue
            action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
            if action == "replace":
                node[slot] = draw(st.one_of(PLAUSIBLE, VALUES))
            elif action == "delete":
                del node[slot]
            elif isinstance(node, dict):
                node[draw(FIELDS)] = draw(st.one_of(PLAUSIBLE, VALUES))
            else:
                node.append(draw(st.one_of(PLAUSIBLE, VALUES)))
            break
    return doc


def _reached(check: str, fuzz: Callable[[], None], at_least: int) -> None:
    """Run the fuzzer ``fuzz`` and require its main check (counted as ``RAN[check]``) to
    have run ``at_least`` times: a fuzzer whose inputs all fail early proves nothing.
    The floors are about a fifth of what a run reaches, so chance alone never trips
    them; a generator or parser that stops producing valid inputs does."""
    before = RAN[check]
    fuzz()
    reached = RAN[check] - before
    assert reached >= at_least, f"{check.strip()}: only {reached} cases reached the check"


VERIFIED = "  of which valid, verified script == naive"


@settings(max_examples=500, deadline=None)
@given(doc=mutated_specs())
def _fuzz_mutated_specs(r: redis.Redis, doc: dict[str, Any]) -> None:
    RAN["mutated catalogue specs"] += 1
    text = toml_doc(doc)
    # a path per text: specs that differ only in their name would otherwise generate the
    # same Lua (see test_same_body_different_names_both_run)
    op = _spec_or_error(text, f"fuzz-{zlib.crc32(text.encode())}.toml")
    if op is None:
        return
    r.flushall()  # keys an earlier example wrote (outside its namespace) must not leak in
    report = verify(op, r, cases=3, seed=7, forms=("script", "naive"))
    assert report.mismatch is None, toml_doc(doc) + report.mismatch.describe()
    assert (report.cases, report.forms) == (3, ("script", "naive")), report.summary()
    RAN[VERIFIED] += 1


def test_mutated_catalogue_specs_fail_cleanly_or_agree(r: redis.Redis) -> None:
    """A broken spec is a SpecError; one that still checks out gives the same replies and
    keyspace in the script form (real Redis) and the naive form (Python)."""
    _reached(VERIFIED, lambda: _fuzz_mutated_specs(r), at_least=8)


def test_same_body_different_names_both_run(r: redis.Redis) -> None:
    """Found by the mutation fuzzer: two specs that differ only in their name."""
    text = (CATALOGUE[0].parent / "rate_limit.toml").read_text()
    a = parse_operation(text.replace('name = "rate_limit"', 'name = "rl_a"'))
    b = parse_operation(text.replace('name = "rate_limit"', 'name = "rl_b"'))
    keys, args = {"counter": "c"}, {"limit": 5, "window": 10}
    assert a.run(r, "script", keys=keys, args=args) == [1, 4]
    assert b.run(r, "script", keys=keys, args=args) == [1, 3]


# -- expressions: random strings and token sequences ------------------------------------

ENV = {
    n: parse_type(t)
    for n, t in {
        "vi": "int",
        "vj": "int",
        "vf": "float",
        "vs": "str",
        "vb": "bool",
        "xs": "list[int]",
    }.items()
}
SPEC = """
name = "fuzz_probe"
keys = ["k"]
returns = {ret}
[args]
vi = "int"
vj = "int"
vf = "float"
vs = "str"
vb = "bool"
xs = "list[int]"
"""
ARGS = {"vi": 3, "vj": -2, "vf": 2.5, "vs": "7", "vb": True, "xs": [1, -4, 9]}
TOKENS = st.sampled_from(
    [
        "vi", "vj", "vf", "vs", "vb", "xs", "x", "y", "0", "1", "2", "-1", "2.5", "0.0",
        "9007199254740991", "'a'", "''", "'7'", "\"b\"", "true", "false", "nil",
        "+", "-", "*", "/", "//", "%", "..", "==", "!=", "<", "<=", ">", ">=", "and", "or",
        "not", "(", ")", "[", "]", ",", "->", "if", "min", "max", "abs", "floor", "len", "str",
        "int", "float", "coalesce", "is_nil", "map", "filter", "sum", "contains", "os",
        "__import__", ".", ";", "=", "{", "}", "#", "redis", "'\\n'", "'\\q'", "\\", "\"",
    ]
)  # fmt: skip


def _expression_or_error(text: str) -> bool:
    """True when ``text`` type-checks; otherwise it must be an ExprError with a column."""
    try:
        check(parse(text), ENV)
    except ExprError as exc:
        assert exc.col >= 0
        return False
    return True


def _outcome(op: Operation, client: redis.Redis, form: str) -> Any:
    try:
        return ("ok", op.run(client, form, keys={"k": "probe"}, args=ARGS))
    except LuapipeError as exc:
        return ("error", error_code(exc))


def _agree(r: redis.Redis, *exprs: str) -> None:
    op = parse_operation(SPEC.format(ret=toml_value(list(exprs))), "probe.toml")
    assert _outcome(op, r, "script") == _outcome(op, r, "naive"), exprs


@FAST
@given(st.text(max_size=60))
def test_random_strings_are_expression_errors(text: str) -> None:
    RAN["random strings -> expression parser"] += 1
    _expression_or_error(text)
    _spec_or_error(SPEC.format(ret=toml_value(text)))


AGREED = "  of which valid, run: Lua == Python"


@settings(max_examples=600, deadline=None)
@given(toks=st.lists(TOKENS, min_size=1, max_size=14))
def _fuzz_token_sequences(r: redis.Redis, toks: list[str]) -> None:
    RAN["random token sequences"] += 1
    text = " ".join(toks)
    if _expression_or_error(text):
        _agree(r, text)
        RAN[AGREED] += 1


def test_random_token_sequences_fail_cleanly_or_agree(r: redis.Redis) -> None:
    _reached(AGREED, lambda: _fuzz_token_sequences(r), at_least=3)


STILL_AGREED = "  of which still valid, run: Lua == Python"


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def _fuzz_mutated_expressions(r: redis.Redis, data: st.DataObject) -> None:
    RAN["mutated valid expressions"] += 1
    text = data.draw(st.sampled_from(sorted(LEAVES)).flatmap(lambda t: typed(t)))
    toks = [t.text for t in tokenize(text) if t.kind != "end"]
    i = data.draw(st.integers(0, len(toks) - 1))
    how = data.draw(st.sampled_from(["drop", "double", "swap", "replace"]))
    if how == "drop":
        del toks[i]
    elif how == "double":
        toks.insert(i, toks[i])
    elif how == "swap" and i + 1 < len(toks):
        toks[i], toks[i + 1] = toks[i + 1], toks[i]
    else:
        toks[i] = data.draw(TOKENS)
    mutated = " ".join(toks)
    if mutated.strip() and _expression_or_error(mutated):
        _agree(r, mutated)
        RAN[STILL_AGREED] += 1


def test_mutated_valid_expressions_fail_cleanly_or_agree(r: redis.Redis) -> None:
    """A valid expression with one token dropped, doubled, swapped or replaced."""
    _reached(STILL_AGREED, lambda: _fuzz_mutated_expressions(r), at_least=6)


@pytest.mark.parametrize(
    "text",
    [
        "(" * 5000 + "1" + ")" * 5000,
        "-" * 5000 + "1",
        "not " * 5000 + "true",
        " + ".join(["1"] * 5000),
        " .. ".join(["'a'"] * 5000),
        "[" * 3000 + "1" + "]" * 3000,
        "min(" + ", ".join(["1"] * 5000) + ")",
        "sum([" * 60 + "1" + "])" * 60,
        "'" + "a" * 100_000 + "'",
    ],
    ids=[
        "parens",
        "negations",
        "nots",
        "long sum",
        "long concat",
        "brackets",
        "wide min",
        "nested lists",
        "long string",
    ],
)
def test_huge_expressions_are_spec_errors_or_run(r: redis.Redis, text: str) -> None:
    """Nesting, width and length: a clean error naming the field, or Lua that runs."""
    RAN["huge expressions"] += 1
    op = _spec_or_error(SPEC.format(ret=toml_value(text)))
    if op is not None:
        assert _outcome(op, r, "script") == _outcome(op, r, "naive")


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("9007199254740991 % (-3)", -2),  # found by the typed fuzzer: Lua said -1
        ("9007199254740991 // (-3)", -3002399751580331),
        ("(-9007199254740991) % 3", 2),
        ("(-9007199254740991) // 7", -1286742750677285),
        ("(-7) % 3", 2),
        ("7 // (-2)", -4),
    ],
)
def test_floor_division_is_exact_near_2_53(r: redis.Redis, expr: str, value: int) -> None:
    op = parse_operation(SPEC.format(ret=toml_value([expr])), "probe.toml")
    for form in ("script", "function", "naive"):
        assert op.run(r, form, keys={"k": "probe"}, args=ARGS) == [value], form


def test_too_many_names_is_one_spec_error() -> None:
    lets = "".join(f'l{i} = "{i}"\n' for i in range(300))
    with pytest.raises(SpecError) as info:
        parse_operation(f'name = "w"\nkeys = ["k"]\nreturns = "1"\n[let]\n{lets}', "w.toml")
    assert len(info.value.problems) == 1 and "too many names" in info.value.problems[0]


# -- typed random expressions: lists, lambdas, optionals (beyond tests/operations/test_expr.py) ----

LEAVES: dict[str, list[str]] = {
    "int": ["0", "1", "-3", "7", "9007199254740991", "vi", "vj"],
    "float": ["0.5", "2.25", "0.1", "1000000.5", "vf"],
    "str": ["'a'", "''", "'x y'", "'12'", "'-3'", "'é'", "'\\n'", "vs"],
    "bool": ["true", "false", "vb"],
    "list[int]": ["xs", "[1, 2, 3]", "[0]", "[-5, 7]"],
    "list[str]": ["['a', 'b']", "['']", "['7', 'x']"],
    "int?": ["int(vs)", "xs[0]", "xs[5]", "nil"],
    "str?": ["['a'][0]", "['a'][1]", "nil"],
}


@st.composite
def typed(draw: st.DrawFn, t: str, depth: int = 3, params: tuple[str, ...] = ()) -> str:
    """A random expression of type ``t``; lambda parameters in ``params`` (ints)."""
    leaves = LEAVES[t] + (list(params) if t == "int" else [])
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(leaves))

    def sub(u: str) -> str:
        return draw(typed(u, depth - 1, params))

    if t == "int":
        choice = draw(st.integers(0, 10))
        if choice == 0:
            op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
            return f"({sub('int')} {op} {sub('int')})"
        if choice == 1:
            return f"len({sub(draw(st.sampled_from(['str', 'list[int]', 'list[str]'])))})"
        if choice == 2:
            return f"sum({sub('list[int]')})"
        if choice == 3:
            return f"coalesce({sub('int?')}, {sub('int')})"
        if choice == 4:
            return f"{draw(st.sampled_from(['min', 'max']))}({sub('int')}, {sub('int')})"
        if choice == 5:
            return f"if({sub('bool')}, {sub('int')}, {sub('int')})"
        if choice == 6:
            return f"floor({sub('float')})"
        if choice == 7:
            return f"int({sub('float')})"
        if choice == 8:
            return f"abs({sub('int')})"
        if choice == 9:
            return f"-({sub('int')})"
        return f"coalesce({sub('list[int]')}[{sub('int')}], -1)"
    if t == "float":
        choice = draw(st.integers(0, 3))
        if choice == 0:
            op = draw(st.sampled_from(["+", "-", "*", "/"]))
            return f"({sub(draw(st.sampled_from(['int', 'float'])))} {op} {sub('float')})"
        if choice == 1:
            return f"float({sub('int')})"
        if choice == 2:
            return f"coalesce(float({sub('str')}), {sub('float')})"
        return f"if({sub('bool')}, {sub('float')}, {sub('int')})"
    if t == "str":
        choice = draw(st.integers(0, 3))
        if choice == 0:
            other = sub(draw(st.sampled_from(["str", "int", "float"])))
            return f"({sub('str')} .. {other})"
        if choice == 1:
            return f"str({sub(draw(st.sampled_from(['int', 'float'])))})"
        if choice == 2:
            return f"coalesce({sub('str?')}, {sub('str')})"
        return f"if({sub('bool')}, {sub('str')}, {sub('str')})"
    if t == "bool":
        choice = draw(st.integers(0, 5))
        if choice == 0:
            op = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
            return f"({sub('int')} {op} {sub(draw(st.sampled_from(['int', 'float'])))})"
        if choice == 1:
            return f"({sub('bool')} {draw(st.sampled_from(['and', 'or']))} {sub('bool')})"
        if choice == 2:
            return f"(not {sub('bool')})"
        if choice == 3:
            return f"is_nil({sub(draw(st.sampled_from(['int?', 'str?'])))})"
        if choice == 4:
            return f"contains({sub('list[int]')}, {sub('int')})"
        return f"({sub('str?')} == {sub('str')})"
    if t in ("list[int]", "list[str]"):
        p = f"p{len(params)}"
        inner = typed("int", depth - 1, (*params, p))
        choice = draw(st.integers(0, 2))
        if choice == 0 and t == "list[int]":
            return f"map({sub('list[int]')}, {p} -> {draw(inner)})"
        if choice == 0:
            return f"map({sub('list[int]')}, {p} -> str({draw(inner)}))"
        if choice == 1 and t == "list[int]":
            return f"filter({sub('list[int]')}, {p} -> {draw(inner)} > {draw(inner)})"
        elem = "int" if t == "list[int]" else "str"
        return "[" + ", ".join(sub(elem) for _ in range(draw(st.integers(1, 3)))) + "]"
    if t == "int?":
        choice = draw(st.integers(0, 2))
        if choice == 0:
            return f"int({sub('str')})"
        if choice == 1:
            return f"{sub('list[int]')}[{sub('int')}]"
        return f"if({sub('bool')}, {sub('int')}, nil)"
    choice = draw(st.integers(0, 1))  # str?
    if choice == 0:
        return f"{sub('list[str]')}[{sub('int')}]"
    return f"if({sub('bool')}, nil, {sub('str')})"


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    exprs=st.lists(
        st.sampled_from(sorted(LEAVES)).flatmap(lambda t: typed(t)), min_size=1, max_size=4
    ),
    vi=st.sampled_from([0, 1, -1, 7, 2**53 - 1]),
    vs=st.sampled_from(["", "7", "-0", "x", "2.5", "1e3", "é"]),
    xs=st.sampled_from([[1], [0, -4, 9], [2**52, 2**52]]),
)
def test_typed_random_expressions_lua_and_python_agree(
    r: redis.Redis, exprs: list[str], vi: int, vs: str, xs: list[int]
) -> None:
    RAN["typed random expressions (lists, lambdas, nil)"] += 1
    op = parse_operation(SPEC.format(ret=toml_value(exprs)), "probe.toml")
    args = {**ARGS, "vi": vi, "vs": vs, "xs": xs}
    outcomes = []
    for form in ("script", "naive"):
        try:
            outcomes.append(("ok", op.run(r, form, keys={"k": "probe"}, args=args)))
        except LuapipeError as exc:
            outcomes.append(("error", error_code(exc)))
    assert outcomes[0] == outcomes[1], (exprs, args)
