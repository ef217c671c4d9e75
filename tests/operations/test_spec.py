"""Spec errors (file:line: field: message), the generate command on bad specs, injection."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from luapipe.cli import main
from luapipe.errors import SpecError
from luapipe.operations.spec import load_operation, parse_operation

from ..conftest import EXAMPLES_DIR

CATALOGUE = sorted((EXAMPLES_DIR / "operations").glob("*.toml"))

BAD = """\
name = "bad_one"
keys = ["stock"]
returns = "ok"

[args]
qty = { type = "integer" }

[[reads]]
name = "available"
cmd = "GET"
key = "stock"

[[reads]]
name = "other"
cmd = "GET"
key = "stok"

[let]
ok = "if(available, 1, 0)"

[[writes]]
cmd = "EVAL"
key = "stock"
"""


def _problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_operation(text, "bad.toml")
    return info.value.problems


def test_catalogue_has_the_issue_operations() -> None:
    names = {p.stem for p in CATALOGUE}
    assert {
        "update_token",
        "incr_many",
        "fetch_feed",
        "reserve_stock",
        "transfer",
        "rate_limit",
        "sliding_window_rate_limit",
        "cas_update",
        "leaderboard_submit",
    } <= names


def test_every_problem_is_reported_with_file_line_and_field() -> None:
    problems = _problems(BAD)
    assert problems == [
        "bad.toml:6: args.qty: unknown type 'integer' (hint: int, float, str, bool, list[str], "
        "list[int])",
        "bad.toml:16: reads[2].key: unknown name 'stok' (known: available, stock) at column 1 "
        "in 'stok'",
        "bad.toml:19: let.ok: if() needs a bool (no truthiness: compare explicitly), got str? "
        "(use coalesce(x, default) for a value that may be nil) at column 4 in "
        "'if(available, 1, 0)'",
        "bad.toml:22: writes[1].cmd: unknown write command 'EVAL' (known: "
        + ", ".join(__import__("luapipe.operations.commands", fromlist=["WRITES"]).WRITES)
        + ")",
    ]


def test_toml_syntax_error_names_the_line() -> None:
    assert _problems('name = "x"\nkeys = [\n')[0].startswith("bad.toml:")


def test_analysis_flags() -> None:
    ops = {p.stem: load_operation(p) for p in CATALOGUE}
    assert ops["fetch_feed"].read_only and ops["fetch_feed"].dynamic_keys
    assert not ops["reserve_stock"].read_only and not ops["reserve_stock"].dynamic_keys
    assert ops["fetch_feed"].read_levels == 2 and ops["leaderboard_submit"].read_levels == 2
    assert ops["update_token"].round_trips("pipelined") == 1  # no reads: one round trip
    assert ops["update_token"].round_trips("transaction") == 1
    assert ops["reserve_stock"].round_trips("transaction") == 2
    assert ops["transfer"].invariant is not None and ops["transfer"].invariant.conserved
    assert ops["fetch_feed"].lua_source.startswith("#!lua flags=no-writes\n")
    assert "Dynamic keys" in ops["fetch_feed"].lua_source


def test_generate_bad_spec_exits_1_one_line_per_problem(tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(BAD)
    good = EXAMPLES_DIR / "operations" / "reserve_stock.toml"
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, ["generate", str(good), str(spec), "--out", str(out), "--py-out", str(out)]
    )
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("error: ") or ":" in line for line in lines)
    assert lines[0].startswith(f"error: {spec}:6: args.qty:")
    assert all(f"{spec}:" in line for line in lines)
    assert "Traceback" not in res.output
    assert not out.exists()  # nothing is written when any spec is bad


def test_generate_missing_file_exits_1(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["generate", str(tmp_path / "nope.toml")])
    assert res.exit_code == 1 and "nope.toml:1: file: cannot read" in res.output


# -- injection: spec text never becomes code ---------------------------------------------

INJECT = """\
name = "inject"
description = "x\\"\\"\\" + __import__('os').system('touch /tmp/pwned') + \\"\\"\\" ]] {{ 1 }} {%"
keys = [{ name = "k", doc = "\\n return redis.call('FLUSHALL') --" }]
returns = [
  "'\\\\'); redis.call(\\"FLUSHALL\\") --'",
  "'\\" + __import__(\\"os\\").getcwd() + \\"'",
  "v",
]

[args]
v = { type = "str", doc = "\\"\\"\\"); import os #" }

[[writes]]
cmd = "SET"
key = "k"
args = ["'end; redis.call(\\"FLUSHALL\\"); local x = 1 --'"]
"""


def test_injected_code_travels_as_data(r: redis.Redis, tmp_path: Path) -> None:
    op = parse_operation(INJECT, "inject.toml")
    r.set("bystander", "still here")
    payload = "'); redis.call('FLUSHALL') --"
    for form in op.forms:
        reply = op.run(r, form, keys={"k": "k"}, args={"v": payload})
        assert reply == [
            '\'); redis.call("FLUSHALL") --',
            '" + __import__("os").getcwd() + "',
            payload,
        ]
        assert r.get("bystander") == b"still here"
        assert r.get("k") == b'end; redis.call("FLUSHALL"); local x = 1 --'
    assert not Path("/tmp/pwned").exists()
    # the generated files are still one script and one importable module
    lines = op.lua_source.splitlines()  # one top-level return: the script's last line
    assert [line for line in lines if line.startswith("return ")] == [lines[-1]]
    assert "{{" not in op.lua_source and "{%" not in op.lua_source
    compile(op.python_source, "inject.py", "exec")


@pytest.mark.parametrize(
    "expr",
    [
        "os.execute('id')",
        "__import__('os')",
        "eval('1')",
        "redis.call('FLUSHALL')",
        "v; redis.call('x')",
        "(lambda: 1)()",
        "v.__class__",
    ],
)
def test_code_in_expressions_is_rejected(expr: str) -> None:
    text = f'name = "x"\nkeys = ["k"]\nreturns = {expr!r}\n[args]\nv = "str"\n'
    problems = _problems(text.replace("'", "'"))
    assert len(problems) == 1 and problems[0].startswith("bad.toml:3: returns: ")
