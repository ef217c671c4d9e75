"""The function form through a rolling deploy: each version of a spec has its own library
and function (luapipe_<op>_<hash>), so two versions side by side never reload each other;
old versions are collected by ``luapipe functions gc``, which touches nothing else."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.server import ServerProcess
from luapipe.cli import main
from luapipe.operations.generate import function_name, generated_operation, library_name
from luapipe.operations.libraries import collect_generated, restore_library, snapshot_named
from luapipe.operations.operation import Operation
from luapipe.operations.spec import load_operation, parse_operation

from ..conftest import EXAMPLES_DIR
from ..drivers import Driver
from ..helpers import calls, reset_stats

SPEC = EXAMPLES_DIR / "operations" / "reserve_stock.toml"
V1: Operation = load_operation(SPEC)
V2: Operation = parse_operation(
    SPEC.read_text().replace('ok = "available >= qty"', 'ok = "available > qty"'), str(SPEC)
)
MINE = "#!lua name=mine\nredis.register_function('mine', function() return 1 end)\n"
#: named like luapipe's, but its code is not what the name's hash says: not ours
IMPOSTOR_NAME = "luapipe_reserve_stock_0123456789"
IMPOSTOR = (
    f"#!lua name={IMPOSTOR_NAME}\n"
    f"redis.register_function('{IMPOSTOR_NAME}', function() return 'x' end)\n"
)
BENCH = "#!lua name=luapipe_bench\nredis.register_function('luapipe_bench_x', function() end)\n"


def libraries(r: redis.Redis) -> set[str]:
    return {lib[1].decode() for lib in r.function_list()}  # RESP2: flat lists


def test_names_carry_the_code_and_are_recognised_from_it() -> None:
    n1, n2 = library_name(V1), library_name(V2)
    assert n1 != n2 and n1.startswith("luapipe_reserve_stock_") and len(n1) == 32
    assert function_name(V1) == n1 and V1.function_source.startswith(f"#!lua name={n1}\n")
    assert generated_operation(n1, V1.function_source) == "reserve_stock"
    assert generated_operation(n1, V2.function_source) is None  # another version's code
    assert generated_operation(n1, V1.function_source + " ") is None
    assert generated_operation(IMPOSTOR_NAME, IMPOSTOR) is None
    assert generated_operation("luapipe_bench", BENCH) is None


def test_two_versions_alternating_load_each_library_once(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess
) -> None:
    """Two application versions side by side during a rolling deploy: 100 alternating
    calls load each version's library once (one name per operation loaded with REPLACE
    took 100 loads, each a compile replicated and written to the AOF)."""
    c = driver.redis(redis_server.port)
    r.set("stock", 1000)
    reset_stats(r)
    got = []
    for i in range(100):
        op = V1 if i % 2 == 0 else V2
        got.append(driver.run(op.run(c, "function", keys={"stock": "stock"}, args={"qty": 1})))
    assert got == [[1, 1000 - i - 1] for i in range(100)]
    assert calls(r, "function|load") == 2  # each version once
    assert calls(r, "fcall") == 100 + 2  # the two first calls were not found, then ran
    assert libraries(r) == {library_name(V1), library_name(V2)}


def test_gc_deletes_only_luapipes_old_versions(r: redis.Redis) -> None:
    for op in (V1, V2):
        r.set("stock", 5)
        op.run(r, "function", keys={"stock": "stock"}, args={"qty": 1})
    for code in (MINE, IMPOSTOR, BENCH):
        r.function_load(code)
    everything = libraries(r)
    (dry,) = collect_generated(r, [library_name(V2)], dry_run=True)
    assert libraries(r) == everything
    (done,) = collect_generated(r, [library_name(V2)])
    assert dry.deleted == done.deleted == (library_name(V1),)
    assert done.kept == (library_name(V2),) and done.others == 3
    assert libraries(r) == everything - {library_name(V1)}
    (rest,) = collect_generated(r)
    assert rest.deleted == (library_name(V2),)
    assert libraries(r) == {"mine", IMPOSTOR_NAME, "luapipe_bench"}
    r.set("stock", 5)  # a process still on V1 reloads its library: never fatal
    assert V1.run(r, "function", keys={"stock": "stock"}, args={"qty": 1}) == [1, 4]


def test_gc_on_the_command_line(r: redis.Redis, redis_server: ServerProcess) -> None:
    """`functions gc SPEC` keeps the version the spec file generates now (V1 here)."""
    url = redis_server.url
    for op in (V1, V2):
        r.set("stock", 5)
        op.run(r, "function", keys={"stock": "stock"}, args={"qty": 1})
    r.function_load(MINE)
    node = url.split("//")[1].split("/")[0]
    res = CliRunner().invoke(main, ["functions", "gc", str(SPEC), "--url", url, "--dry-run"])
    assert res.exit_code == 0, res.output
    assert res.output == (
        f"{node}: would delete {library_name(V2)}; kept 1 current version; "
        "left 1 other library alone (not luapipe's)\n"
    )
    res = CliRunner().invoke(main, ["functions", "gc", "reserve_stock", "--url", url, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [
        {
            "node": node,
            "deleted": [library_name(V2)],
            "kept": [library_name(V1)],
            "others": 1,
            "unnamed": [],
        }
    ]
    res = CliRunner().invoke(main, ["functions", "gc", "--url", url])
    assert res.exit_code == 0 and f"deleted {library_name(V1)};" in res.output
    assert libraries(r) == {"mine"}


def test_gc_of_named_operations_leaves_the_others_current_libraries_alone(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """`functions gc reserve_stock` collects reserve_stock's old versions only: another
    operation's library (another service's, in use) is not luapipe's to delete then."""
    other = load_operation(EXAMPLES_DIR / "operations" / "incr_many.toml")
    for op in (V1, V2):
        r.set("stock", 5)
        op.run(r, "function", keys={"stock": "stock"}, args={"qty": 1})
    r.function_load(other.function_source)
    url = redis_server.url
    res = CliRunner().invoke(main, ["functions", "gc", str(SPEC), "--url", url])
    assert res.exit_code == 0, res.output
    assert f"deleted {library_name(V2)};" in res.output
    assert res.output.rstrip().endswith("(not luapipe's), 1 of luapipe's not named")
    assert libraries(r) == {library_name(V1), library_name(other)}
    (found,) = collect_generated(r, [library_name(V1)], only=["reserve_stock"])
    assert found.deleted == () and found.unnamed == (library_name(other),)


@pytest.mark.parametrize("name", ["nosuch"])
def test_gc_of_an_unknown_spec_is_one_line_and_deletes_nothing(
    r: redis.Redis, redis_server: ServerProcess, name: str
) -> None:
    V1.run(r, "function", keys={"stock": "stock"}, args={"qty": 1})
    url = redis_server.url
    res = CliRunner().invoke(main, ["functions", "gc", name, "--url", url])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and "unknown operation" in res.output
    assert libraries(r) == {library_name(V1)}


def test_gc_refused_by_the_server_is_one_line(r: redis.Redis, redis_server: ServerProcess) -> None:
    """A user without FUNCTION LIST (or a server without FUNCTION): one line, no
    traceback, no password."""
    r.acl_setuser(
        "no_functions", enabled=True, passwords=["+gc-secret"], keys=["~*"],
        commands=["+@all", "-function"],
    )  # fmt: skip
    try:
        url = f"redis://no_functions:gc-secret@{redis_server.host}:{redis_server.port}/0"
        res = CliRunner().invoke(main, ["functions", "gc", "--url", url])
    finally:
        r.acl_deluser("no_functions")
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    node = f"{redis_server.host}:{redis_server.port}"
    assert res.output.startswith(f"error: permission denied at {node}: the ACL user may not")
    assert "function|list" in res.output
    assert "gc-secret" not in res.output


def test_gc_leaves_a_library_whose_code_is_not_utf8_alone(r: redis.Redis) -> None:
    """A team's library named like luapipe's, its code with a Latin-1 byte (gc raised
    UnicodeEncodeError reading it)."""
    name = "luapipe_team_0123456789"
    r.function_load(
        f"#!lua name={name}\n-- caf".encode()
        + b"\xe9\n"
        + (f"redis.register_function('{name}', function() return 1 end)\n".encode())
    )
    found = collect_generated(r)
    assert [(c.deleted, c.others) for c in found] == [((), 1)]
    assert libraries(r) == {name}


def test_verify_and_bench_put_back_a_library_whose_code_is_not_utf8_byte_for_byte(
    r: redis.Redis,
) -> None:
    """restore_library (verify and bench put the function form's library back with it)
    reloaded code read as text, and raised UnicodeEncodeError on a Latin-1 byte."""
    name = "luapipe_team_0123456789"
    latin = (
        f"#!lua name={name}\n-- caf".encode()
        + b"\xe9\n"
        + f"redis.register_function('{name}', function() return 1 end)\n".encode()
    )
    r.function_load(latin)
    snapshot = snapshot_named(name, r)
    r.function_load(latin.replace(b"caf\xe9", b"cafe"), replace=True)  # what verify loads
    restore_library(snapshot)
    (listed,) = r.function_list(library=name, withcode=True)
    assert dict(zip(listed[0::2], listed[1::2], strict=True))[b"library_code"] == latin
    r.function_delete(name)
