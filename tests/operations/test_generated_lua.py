"""The generated Lua as a person would write it: no helper closure built on a call that does
not use it, no unused local, nothing luacheck (luapipe's lint, and luacheck's own defaults)
finds, in the script and in the Function library alike.

The speed this buys is measured, not asserted: ``examples/bench/generated_vs_hand.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import redis

from luapipe.operations import generate
from luapipe.operations.spec import load_operation, parse_operation
from luapipe.operations.verify import verify
from luapipe.scripts.lint import lint_directory, lint_scripts
from luapipe.scripts.luacheck import run_luacheck
from luapipe.scripts.luaenv import BASE
from luapipe.scripts.script import LuaScript

from ..conftest import EXAMPLES_DIR, SCRIPTS_DIR
from .test_write_replies import REPLIES, forms_for

CATALOGUE = {
    p.stem: load_operation(p) for p in sorted((EXAMPLES_DIR / "operations").glob("*.toml"))
}

#: constructs the catalogue does not use: list args, each reads with a computed list and a
#: default that can fail, float conversions, staged writes (an `each` write whose argument
#: can fail), conditional writes with checked arguments, unused reads and lets
CONSTRUCTS = parse_operation(
    """
name = "constructs"
keys = ["k", "more..."]
returns = ["total", "if(flag, 1.5, 2.0)", "scores"]

[args]
n = "int"
f = "float"
b = "bool"
names = "list[str]"

[[reads]]
name = "values"
each = "map(names, x -> x .. ':')"
cmd = "HGET"
key = "k"
args = ["it"]
as = "int"
default = "n * 2"

[[reads]]
name = "scores"
cmd = "LRANGE"
key = "k"
args = ["0", "n"]
as = "float"

[[reads]]
name = "unread"
cmd = "GET"
key = "k"
as = "float"

[let]
total = "sum(values) + n"
flag = "b and f > 1.0"
spare = "n * 3"
idle = "len(names)"

[[writes]]
each = "more"
cmd = "INCRBY"
key = "it"
args = ["n * 1000"]

[[writes]]
cmd = "HSET"
key = "k"
args = ["'t'", "total - 1"]
when = "flag"
""",
    "constructs.toml",
)
OPS = {
    **CATALOGUE,
    "constructs": CONSTRUCTS,
    "replies": parse_operation(REPLIES, "replies.toml"),  # every kind of named write
}


def _findings(source: str, *, library: bool) -> list[str]:
    env = dict(BASE)
    if library:
        env["redis"] = (*BASE["redis"], "register_function")
    return [f"{f.line}:{f.col}: {f.code} {f.message}" for f in run_luacheck([source], env)[0]]


def test_luapipe_lint_finds_nothing_in_the_checked_in_generated_scripts() -> None:
    report = lint_directory(SCRIPTS_DIR)
    assert [str(i) for i in report.issues if "/op_" in i.location] == []


@pytest.mark.parametrize("name", sorted(OPS))
def test_script_and_library_lint_clean(name: str) -> None:
    op = OPS[name]
    script = LuaScript.from_source(f"op_{name}", op.lua_source, path=f"op_{name}.lua")
    assert [str(i) for i in lint_scripts([script])] == []
    assert _findings(op.function_source, library=True) == []


@pytest.mark.skipif(shutil.which("luacheck") is None, reason="luacheck not installed")
@pytest.mark.parametrize("name", sorted(OPS))
def test_luacheck_defaults_find_nothing_either(name: str, tmp_path: Path) -> None:
    """luacheck's own defaults (all checks, unused names starting with _ too) but the line
    length: no unused value, no uninitialised access, no shadowing."""
    op = OPS[name]
    (tmp_path / "s.lua").write_text(op.lua_source)
    globs = ["--globals", "redis", "KEYS", "ARGV", "--no-max-line-length", "--codes"]
    done = subprocess.run(
        ["luacheck", "--std", "lua51", *globs, str(tmp_path / "s.lua")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_helper_defined_is_called(name: str) -> None:
    """A script's top level runs on every EVALSHA: each helper defined there is a closure
    built per call, so only the ones the body calls (or they call) are defined."""
    op = OPS[name]
    for text in (op.lua_source, op.function_source):
        defined = re.findall(r"^local function (_\w+)\(", text, re.MULTILINE)
        assert len(defined) == len(set(defined))
        for helper in defined:
            rest = text.replace(f"local function {helper}(", "")
            assert re.search(rf"(?<![\w.]){helper}\(", rest), (name, helper)


def test_the_catalogue_builds_no_closure_per_call_but_coalesce() -> None:
    """What the benchmark compares with hand-written scripts: the checks are statements."""
    helpers = {n: generate.prelude(op) for n, op in CATALOGUE.items()}
    assert {n for n, text in helpers.items() if text} == {"leaderboard_submit"}
    assert helpers["leaderboard_submit"].startswith("local function _co(")
    for op in CATALOGUE.values():
        assert "function(" not in op.lua_source.split("\n-- @return")[1], op.name


def test_a_value_only_python_needs_is_read_and_checked_but_not_used() -> None:
    """transfer reads the destination balance for its invariant only: the Lua side still
    reads and checks it (NOTINT, OVERFLOW, as every form does) but never uses it, so
    luacheck has nothing to say (op_transfer.lua:79 drew W211 before)."""
    lua = CATALOGUE["transfer"].lua_source
    read, rest = lua.split("local v_ok")
    assert "local v_dst_bal = redis.call('GET', v_dst)" in read
    assert "NOTINT" in read.split("v_dst)")[1]
    assert "v_dst_bal" not in rest


def test_the_constructs_agree_in_every_form(client: redis.Redis) -> None:
    """What the statements replace (helpers, the command table) still means the same."""
    report = verify(CONSTRUCTS, client, cases=300, seed=3, forms=forms_for(client))
    assert report.ok, report.mismatch.describe() if report.mismatch else ""
    assert report.errors_agreed < report.cases  # most cases reach the writes


def test_many_names_and_temporaries_stay_under_luas_200_locals(r: redis.Redis) -> None:
    """Checked arithmetic computed into locals, staged write arguments: past the budget
    they go into one table and expressions stay whole, so the chunk still compiles."""
    lets = "".join(f'l{i} = "(vi + {i}) * (vi - {i}) + vi * {i}"\n' for i in range(140))
    writes = "".join(
        f'[[writes]]\ncmd = "HSET"\nkey = "k"\nargs = ["\'f{i}\'", "l{i} * 2"]\n'
        f'when = "l{i} * 3 > vi * 2"\n'
        for i in range(40)
    )
    spec = 'name = "big"\nkeys = ["k"]\nreturns = "l0 + l139"\n[args]\nvi = "int"\n[let]\n'
    op = parse_operation(spec + lets + writes, "big.toml")
    assert "local _st = {}" in op.lua_source
    seen = set()
    for form in ("script", "function", "naive"):
        r.delete("k")
        seen.add((op.run(r, form, keys={"k": "k"}, args={"vi": 3}), r.hlen("k")))
    assert seen == {(-18886, 5)}
