"""The equivalence proof: every catalogue spec on a real server (500 cases) and fakeredis,
a broken form is caught and reported minimal and reproducible, never raised."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster
from click.testing import CliRunner

from luapipe.cli import main
from luapipe.operations import operation as operation_mod
from luapipe.operations import run as runner
from luapipe.operations.plan import Plan, plan_of
from luapipe.operations.spec import load_operation
from luapipe.operations.verify import verify

from ..conftest import EXAMPLES_DIR

SPECS = sorted((EXAMPLES_DIR / "operations").glob("*.toml"))


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_catalogue_verifies_500_cases_on_a_real_server(spec: Path, r: redis.Redis) -> None:
    op = load_operation(spec)
    report = verify(op, r, cases=500, seed=11)
    assert report.ok, report.mismatch.describe() if report.mismatch else ""
    assert report.cases == 500 and report.forms == op.forms
    assert 0 < report.errors_agreed < 500  # edge cases do reach the error paths
    assert r.dbsize() == 0  # verify cleans up its namespace


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_catalogue_verifies_on_fakeredis(spec: Path, fake: redis.Redis) -> None:
    report = verify(load_operation(spec), fake, cases=40, seed=5)
    assert report.ok, report.mismatch.describe() if report.mismatch else ""


def test_cases_are_reproducible_from_the_seed() -> None:
    op = load_operation(EXAMPLES_DIR / "operations" / "transfer.toml")
    a = [op.sample_case(random.Random(3), "ns:") for _ in range(3)]
    b = [op.sample_case(random.Random(3), "ns:") for _ in range(3)]
    assert a == b
    cases = [op.sample_case(random.Random(s), "ns:") for s in range(200)]
    assert any(not c.state for c in cases)  # all keys missing
    assert any(ks.type != "string" for c in cases for ks in c.state)  # wrong types
    assert any(ks.ttl for c in cases for ks in c.state)


def test_a_broken_form_is_reported_minimal_not_raised(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    plan = plan_of(op)
    # a classic port bug: '>' where the Lua has '>='
    broken = replace(
        plan, lets=((plan.lets[0][0], lambda e: e["available"] > e["qty"]), *plan.lets[1:])
    )
    monkeypatch.setattr(operation_mod, "plan_of", lambda _op: broken)
    report = verify(op, r, cases=300, seed=2)
    assert not report.ok and report.mismatch is not None
    m = report.mismatch
    assert (m.form_a, m.form_b) == ("naive", "script")  # the Python forms share the bug
    assert m.outcome_a != m.outcome_b
    assert len(m.case.state) <= 1  # shrunk to the key that matters
    text = m.describe()
    assert f"reproduce: luapipe verify {op.path} --seed 2" in text
    assert "<spec>" not in text
    assert "SET" in text or "(empty)" in text


def test_cli_verify_real_and_fake(tmp_path: Path) -> None:
    spec = str(EXAMPLES_DIR / "operations" / "cas_update.toml")
    res = CliRunner().invoke(main, ["verify", spec, "--fake", "--cases", "30", "--seed", "4"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("cas_update: ok: 30 cases x 5 forms")
    res = CliRunner().invoke(main, ["verify", spec, "--fake", "--url", "redis://x"])
    assert res.exit_code == 2


def test_cli_verify_mismatch_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = str(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    op = load_operation(spec)
    plan = plan_of(op)
    broken = replace(plan, returns=lambda e: [1 if e["ok"] else 0, e["left"] + 1])
    real_run = runner.run

    def run(p: Plan, client: redis.Redis, form: str, *a: Any, **k: Any) -> Any:
        return real_run(broken if form == "pipelined" else p, client, form, *a, **k)

    monkeypatch.setattr(runner, "run", run)
    res = CliRunner().invoke(main, ["verify", spec, "--fake", "--cases", "20"])
    assert res.exit_code == 1
    assert "MISMATCH" in res.output and "naive and pipelined disagree" in res.output
    assert f"reproduce: luapipe verify {spec} --seed 1 --cases " in res.output
    assert "<spec>" not in res.output


def _libraries(client: redis.Redis) -> dict[str, str]:
    out = {}
    for lib in client.execute_command("FUNCTION", "LIST", "WITHCODE"):
        info = dict(zip(lib[0::2], lib[1::2], strict=True))
        out[info[b"library_name"].decode()] = info[b"library_code"].decode()
    return out


MINE = "#!lua name=mine\nredis.register_function('mine', function() return 1 end)\n"


@pytest.mark.parametrize("client_kind", ["r", "fake"])
def test_verify_leaves_no_function_library_behind(
    request: pytest.FixtureRequest, client_kind: str
) -> None:
    client: redis.Redis = request.getfixturevalue(client_kind)
    client.execute_command("FUNCTION", "LOAD", MINE)
    op = load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    assert verify(op, client, cases=5, seed=1).ok
    assert _libraries(client) == {"mine": MINE}  # luapipe_reserve_stock deleted, mine kept


def test_verify_puts_back_a_library_it_replaced(r: redis.Redis) -> None:
    old = (
        "#!lua name=luapipe_reserve_stock\n"
        "redis.register_function('reserve_stock_old', function() return 'old' end)\n"
    )
    r.execute_command("FUNCTION", "LOAD", old)
    op = load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    assert verify(op, r, cases=5, seed=1).ok
    assert _libraries(r) == {"luapipe_reserve_stock": old}
    assert r.execute_command("FCALL", "reserve_stock_old", 0) == b"old"


def test_verify_cleans_up_after_an_error(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    from luapipe.operations import verify as verify_mod

    op = load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    real = verify_mod._compare
    calls = []

    def boom(*a: object, **k: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("interrupted")
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(verify_mod, "_compare", boom)
    with pytest.raises(RuntimeError, match="interrupted"):
        verify(op, r, cases=5, seed=1)
    assert _libraries(r) == {}
    assert r.dbsize() == 0


def test_cli_verify_against_a_url_leaves_the_server_as_it_was(
    r: redis.Redis, redis_server: object
) -> None:
    spec = str(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    url = f"redis://{r.connection_pool.connection_kwargs['host']}:"
    url += f"{r.connection_pool.connection_kwargs['port']}/0"
    res = CliRunner().invoke(main, ["verify", spec, "--url", url, "--cases", "5"])
    assert res.exit_code == 0, res.output
    assert _libraries(r) == {} and r.dbsize() == 0


def test_verify_keeps_its_signature() -> None:
    import inspect

    params = inspect.signature(verify).parameters
    assert list(params)[:4] == ["op", "client", "cases", "seed"]
    assert all(p.default is not inspect.Parameter.empty for p in list(params.values())[2:])


EVERYTHING = """
name = "everything"
description = "Every read command, loops over reads, conditional writes with expiry."
keys = ["h", "l", "s", "z", "t"]
returns = ["fields", "nums", "total", "big", "first", "member", "ranks", "flags", "sizes"]

[args]
f = { type = "str", samples = ["a", "b"] }
m = { type = "str", samples = ["a", "c", "1"] }
n = { type = "int", min = -2, max = 3 }
ttl = { type = "int", min = 100, max = 500 }

[[reads]]
name = "fields"
cmd = "HGETALL"
key = "h"

[[reads]]
name = "hv"
cmd = "HGET"
key = "h"
args = ["f"]

[[reads]]
name = "nums"
cmd = "LRANGE"
key = "l"
args = ["0", "n"]

[[reads]]
name = "first"
cmd = "LINDEX"
key = "l"
args = ["0"]

[[reads]]
name = "member"
cmd = "SISMEMBER"
key = "s"
args = ["m"]

[[reads]]
name = "zr"
cmd = "ZRANK"
key = "z"
args = ["m"]

[[reads]]
name = "zrr"
cmd = "ZREVRANK"
key = "z"
args = ["m"]

[[reads]]
name = "zs"
cmd = "ZSCORE"
key = "z"
args = ["m"]

[[reads]]
name = "low"
cmd = "ZRANGEBYSCORE"
key = "z"
args = ["'-inf'", "n"]

[[reads]]
name = "counts"
each = "[1, 2]"
cmd = "ZCOUNT"
key = "z"
args = ["'-inf'", "it * n"]

[[reads]]
name = "exists"
cmd = "EXISTS"
key = "t"

[[reads]]
name = "t_ttl"
cmd = "TTL"
key = "t"

[[reads]]
name = "hx"
cmd = "HEXISTS"
key = "h"
args = ["f"]

[[reads]]
name = "sizes0"
cmd = "HLEN"
key = "h"

[[reads]]
name = "sizes1"
cmd = "LLEN"
key = "l"

[[reads]]
name = "sizes2"
cmd = "SCARD"
key = "s"

[[reads]]
name = "sizes3"
cmd = "ZCARD"
key = "z"

[[reads]]
name = "sizes4"
cmd = "STRLEN"
key = "t"

[let]
total = "sum(map(filter(nums, x -> len(x) < 3), x -> coalesce(int(x), 0) * 2))"
big = "coalesce(zs, -1.5) * 2 + 0.25"
ranks = "[coalesce(zr, -1), coalesce(zrr, -1), len(low), sum(counts)]"
flags = "[if(member, 1, 0), if(exists, 1, 0), if(hx, 1, 0), t_ttl, if(contains(low, m), 7, 8)]"
sizes = "[sizes0, sizes1, sizes2, sizes3, sizes4, len(coalesce(hv, '')), len(fields)]"

[[writes]]
each = "filter(nums, x -> x != m)"
cmd = "SADD"
key = "s"
args = ["it"]

[[writes]]
cmd = "SETEX"
key = "t"
args = ["ttl", "str(big) .. '|' .. coalesce(first, '')"]
when = "not is_nil(first)"

[[writes]]
cmd = "HINCRBY"
key = "h"
args = ["f", "n"]
when = "n > 0"

[[writes]]
cmd = "RPUSH"
key = "l"
args = ["m", "str(total)"]

[[writes]]
cmd = "LTRIM"
key = "l"
args = ["0", "4"]

[[writes]]
cmd = "ZREM"
key = "z"
args = ["m"]
when = "member"
"""


def test_every_read_command_and_loop_agrees(r: redis.Redis, fake: redis.Redis) -> None:
    from luapipe.operations.spec import parse_operation

    op = parse_operation(EVERYTHING, "everything.toml")
    real = verify(op, r, cases=300, seed=21)
    assert real.ok, real.mismatch.describe() if real.mismatch else ""
    fake_report = verify(op, fake, cases=40, seed=22)
    assert fake_report.ok, fake_report.mismatch.describe() if fake_report.mismatch else ""


def test_verify_on_a_cluster_leaves_no_library_on_any_primary(
    rc: redis.cluster.RedisCluster,
) -> None:
    op = load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    assert verify(op, rc, cases=10, seed=1).ok
    for node in rc.get_primaries():
        assert _libraries(rc.get_redis_connection(node)) == {}, node.name


@pytest.mark.parametrize(
    "text",
    [
        "ERR value is not an integer or out of range",
        "ERR value is not an integer or out of range script: 0123abcd, on @user_script:7.",
        "scripts_lua/op_x.lua:12: ERR value is not an integer or out of range (script op_x)",
        "ERR value is not an integer or out of range (function luapipe_x_0123456789)",
    ],
)
def test_an_err_reads_the_same_whichever_form_raised_it(text: str) -> None:
    """The script form names its file and script around the server's text; verify compares
    what the error means, so naive and script agree on the same ERR (a fuzz case once
    reported them as disagreeing because of the '(script op_x)' trailer)."""
    from luapipe.errors import ScriptRuntimeError
    from luapipe.operations.verify import error_code

    assert error_code(ScriptRuntimeError(text)) == "ERR value is not an integer or out of range"
