"""The [bench] table of a spec: how the benchmark draws state and arguments.

Every catalogue operation declares one; a bad table is one line per problem naming
file:line and the field, like the rest of the spec; every value is a literal (nothing from
the table is evaluated).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import redis

from luapipe.bench.profile import profile_case
from luapipe.errors import SpecError
from luapipe.operations.benchprofile import write_flag
from luapipe.operations.spec import load_operation, parse_operation

from ..conftest import EXAMPLES_DIR

CATALOGUE = sorted((EXAMPLES_DIR / "operations").glob("*.toml"))

BASE = """name = "reserve"
description = "Reserve qty units."
keys = ["stock"]
returns = ["if(ok, 1, 0)", "left"]

[args]
qty = { type = "int", min = 1, max = 5 }
note = { type = "str", samples = ["a"] }

[[reads]]
name = "available"
cmd = "GET"
key = "stock"
as = "int"
default = "0"

[let]
ok = "available >= qty"
left = "if(ok, available - qty, available)"

[[writes]]
cmd = "DECRBY"
key = "stock"
args = ["qty"]
when = "ok"

[invariant]
description = "stock never below zero"
check = "available >= 0"
"""  # 29 lines: a [bench] table starts on line 30


def spec(bench: str) -> str:
    return BASE + "\n" + bench.strip() + "\n"


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as err:
        parse_operation(text, "s.toml")
    return err.value.problems


@pytest.mark.parametrize("path", CATALOGUE, ids=lambda p: p.stem)
def test_every_catalogue_operation_declares_a_profile(path: Path) -> None:
    op = load_operation(path)
    assert op.bench is not None, f"{path.name} has no [bench] table"
    assert op.bench.description
    assert 0.0 <= op.bench.spread.write_share <= 1.0
    assert op.wrote is not None  # the bench can tell from each reply whether it wrote


def test_the_reply_flag_is_inferred_from_the_guarded_write() -> None:
    ops = {p.stem: load_operation(p) for p in CATALOGUE}
    assert ops["reserve_stock"].wrote == "returns[1]"  # returns if(ok, 1, 0); DECRBY when ok
    assert ops["update_token"].wrote == "returns"  # returns len(item) > 0, the writes' when
    assert ops["incr_many"].wrote == "always"  # no write has a when
    assert ops["fetch_feed"].wrote == "never"  # no writes
    op = ops["reserve_stock"]
    assert write_flag(op.writes, op.returns[1:], True) is None  # "left" says nothing


def test_a_profile_is_parsed_into_draws() -> None:
    op = parse_operation(
        spec("""
[bench]
description = "plenty of stock"
write_share = 0.9
state = { stock = 1000000 }
args = { qty = { min = 2, max = 3 }, note = { samples = ["x", "y"] } }

[bench.hot]
renew = "refused"
state = { stock = 30 }
"""),
        "s.toml",
    )
    assert op.bench is not None and op.bench.hot is not None
    spread, hot = op.bench.spread, op.bench.hot
    assert (spread.write_share, spread.renew) == (0.9, "never")
    assert [(s.name, s.family, s.value) for s in spread.state] == [
        ("stock", "string", ("1000000",))
    ]
    qty = spread.arg("qty")
    assert qty is not None and (qty.lo, qty.hi, qty.fixed) == (2, 3, False)
    assert hot.write_share == 0.9 and hot.renew == "refused"  # inherited, overridden
    assert [s.value for s in hot.state] == [("30",)] and hot.arg("qty") == qty
    assert op.bench.for_contention("hot") is hot and op.bench.for_contention("zipf:1") is spread


BAD = {
    "unknown field": (
        "[bench]\nwrite_share = 1.0\nstat = { stock = 1 }",
        [(33, "bench.stat")],
        "unknown field",
    ),
    "missing share": ("[bench]\nrenew = 1", [(31, "bench.write_share")], "missing"),
    "share out of range": ("[bench]\nwrite_share = 1.5", [(32, "bench.write_share")], "0 to 1"),
    "share not a number": (
        '[bench]\nwrite_share = "all"',
        [(32, "bench.write_share")],
        "from 0 to 1",
    ),
    "bad renew": (
        '[bench]\nwrite_share = 1.0\nrenew = "sometimes"',
        [(33, "bench.renew")],
        '"never", "refused"',
    ),
    "renew with a state": (
        "[bench]\nwrite_share = 1.0\nrenew = 2\nstate = { stock = 5 }",
        [(33, "bench.renew")],
        "starts with every key missing",
    ),
    "bad wrote": (
        '[bench]\nwrite_share = 1.0\nwrote = "ok"',
        [(33, "bench.wrote")],
        'must be "returns" or "returns[N]"',
    ),
    "wrote out of range": (
        '[bench]\nwrite_share = 1.0\nwrote = "returns[3]"',
        [(33, "bench.wrote")],
        "does not name a returned value",
    ),
    "unknown key": (
        "[bench]\nwrite_share = 1.0\n[bench.state]\nstok = 5",
        [(34, "bench.state.stok")],
        "unknown key 'stok' (known: stock",
    ),
    "wrong family": (
        "[bench]\nwrite_share = 1.0\n[bench.state]\nstock = { zset = { a = 1 } }",
        [(34, "bench.state.stock")],
        "its commands use it as a string, not a zset",
    ),
    "bad state value": (
        "[bench]\nwrite_share = 1.0\n[bench.state]\nstock = { hash = {} }",
        [(34, "bench.state.stock")],
        "must be a number or string",
    ),
    "unknown arg": (
        "[bench]\nwrite_share = 1.0\n[bench.args]\nqyt = 1",
        [(34, "bench.args.qyt")],
        "unknown argument 'qyt' (known: note, qty)",
    ),
    "arg of the wrong type": (
        '[bench]\nwrite_share = 1.0\n[bench.args]\nqty = "two"',
        [(34, "bench.args.qty")],
        "'two' is not of type int",
    ),
    "min above max": (
        "[bench]\nwrite_share = 1.0\n[bench.args]\nqty = { min = 5, max = 1 }",
        [(34, "bench.args.qty")],
        "min <= max",
    ),
    "empty samples": (
        "[bench]\nwrite_share = 1.0\n[bench.args]\nnote = { samples = [] }",
        [(34, "bench.args.note")],
        "non-empty list",
    ),
    "unknown hot field": (
        "[bench]\nwrite_share = 1.0\n[bench.hot]\ndescription = 'x'",
        [(34, "bench.hot.description")],
        "unknown field",
    ),
    "two problems": (
        "[bench]\nwrite_share = 2\n[bench.args]\nqty = { min = 1 }",
        [(32, "bench.write_share"), (34, "bench.args.qty")],
        "0 to 1",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_bench_table_names_file_line_and_field(case: str) -> None:
    text, where, first = BAD[case]
    found = problems(spec(text))
    assert [p.split(": ")[0:2] for p in found] == [[f"s.toml:{n}", f] for n, f in where], found
    assert first in found[0]


def test_a_bench_that_is_not_a_table() -> None:
    assert problems("bench = 3\n" + BASE) == [
        "s.toml:1: bench: must be a table: [bench] write_share = 1.0"
    ]


def test_an_argument_the_invariant_uses_must_be_fixed() -> None:
    text = BASE.replace('check = "available >= 0"', 'check = "available >= qty"')
    found = problems(text + "\n[bench]\nwrite_share = 1.0\nargs = { qty = { min = 1, max = 2 } }\n")
    assert found == [
        "s.toml:33: bench.args.qty: the invariant uses qty, so the bench needs one fixed "
        "value for it"
    ]


def test_refused_renewal_needs_a_reply_flag() -> None:
    text = BASE.replace('returns = ["if(ok, 1, 0)", "left"]', 'returns = ["left"]')
    found = problems(text + '\n[bench]\nwrite_share = 1.0\nrenew = "refused"\n')
    assert [p.split(": ")[1] for p in found] == ["bench.wrote", "bench.renew"]


def test_a_read_only_operation_writes_nothing() -> None:
    text = (EXAMPLES_DIR / "operations" / "fetch_feed.toml").read_text()
    text = text.replace("write_share = 0.0", "write_share = 0.5")
    found = problems(text)
    assert len(found) == 1 and "bench.write_share: the operation has no writes" in found[0]


def test_table_values_are_data_never_code(r: redis.Redis) -> None:
    """A state value or argument sample that looks like code is stored as that text."""
    payload = "__import__('os').system('touch /tmp/luapipe-bench-x') or ']]..redis.call(1)'"
    op = parse_operation(
        spec(f"[bench]\nwrite_share = 1.0\nstate = {{ stock = {payload!r} }}\n"
             f"args = {{ note = {{ samples = [{payload!r}] }} }}"),
        "s.toml",
    )  # fmt: skip
    assert op.bench is not None
    case = profile_case(op, op.bench.spread, "luapipe:test:", random.Random(1))
    op.setup(r, case)
    assert r.get("luapipe:test:stock") == payload.encode()
    assert dict(case.args)["note"] == payload
    assert not Path("/tmp/luapipe-bench-x").exists()
