"""deploy, --check, --prune and --rollback of Function libraries on a real server.

The server is shared by the session's tests and, in real life, by other teams: a library
that is not the directory's is never drift and never touched, whatever the command.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.cli import main
from luapipe.errors import CallArgumentError, ServerError
from luapipe.scripts import deploy as deploy_module
from luapipe.scripts.libdeploy import (
    check_libraries_steps,
    deploy_libraries_steps,
    rollback_libraries_steps,
)
from luapipe.scripts.libparse import parse_library
from luapipe.scripts.libstate import keeper_name, keeper_source, kept_code
from luapipe.scripts.registry import ScriptRegistry
from luapipe.wire import drivers
from luapipe.wire.routing import SendEach

from ..drivers import Driver
from ..helpers import calls

STOCK_V1 = (
    "#!lua name=stock\n"
    "-- @function stock_reserve\n-- @key units\n-- @arg qty\n"
    "redis.register_function('stock_reserve', function(keys, args)\n"
    "  return redis.call('DECRBY', keys[1], args[1])\nend)\n"
    "redis.register_function{function_name = 'stock_left', flags = {'no-writes'},\n"
    "  callback = function(keys) return redis.call('GET', keys[1]) end}\n"
)
#: v2 keeps both names but requires one more arg of one and drops a flag of the other
STOCK_V2 = STOCK_V1.replace("-- @arg qty\n", "-- @arg qty\n-- @arg order\n").replace(
    "flags = {'no-writes'},", "flags = {},"
)
HELLO = "#!lua name=hello\nredis.register_function('hello', function() return 'hi' end)\n"
OTHER = "#!lua name=other_team\nredis.register_function('other_team_f', function() end)\n"


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return {k.decode(): v for k, v in zip(flat[0::2], flat[1::2], strict=True)}


def code_of(r: redis.Redis, library: str) -> str | None:
    for lib in r.function_list(library=library, withcode=True):
        info = _pairs(lib)
        if info["library_name"].decode() == library:
            return str(info["library_code"].decode())
    return None


def loads(r: redis.Redis) -> int:
    return calls(r, "function|load")


@pytest.fixture
def url(redis_server: ServerProcess) -> str:
    return f"redis://{redis_server.host}:{redis_server.port}/0"


@pytest.fixture
def shared(r: redis.Redis) -> Iterator[redis.Redis]:
    """The server, with another team's library on it."""
    r.function_load(OTHER)
    yield r
    assert code_of(r, "other_team") == OTHER  # never touched, whatever the test did


def write(d: Path, files: dict[str, str | None]) -> Path:
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        if text is None:
            (d / name).unlink()
        else:
            (d / name).write_text(text)
    return d


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_deploy_loads_a_library_only_where_its_code_differs(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO, "n.lua": "return 1"})
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output
    assert code_of(shared, "stock") == STOCK_V1 and code_of(shared, "hello") == HELLO
    lock = json.loads((d / "luapipe.lock.json").read_text())
    assert lock["libraries"] == {
        "hello": parse_library(HELLO).sha,
        "stock": parse_library(STOCK_V1).sha,
    }
    assert lock["scripts"].keys() == {"n"}
    shared.config_resetstat()
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.exit_code == 0 and loads(shared) == 0  # the same code: nothing loaded
    assert "unchanged" in res.stdout.splitlines()[-1]
    write(d, {"stock.lua": STOCK_V2})
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output
    assert loads(shared) == 2  # the rollback copy, then stock; hello is left alone
    assert code_of(shared, "stock") == STOCK_V2
    assert kept_code(code_of(shared, keeper_name("stock")) or "") == STOCK_V1
    node = url.split("//")[1].split("/")[0]
    assert res.stderr.splitlines() == [  # old callers would break
        f"warning: signature: stock_reserve on {node} (args (qty) -> (qty, order): callers of "
        "the live version would break; give the new version a new name)",
        f"warning: signature: stock_left on {node} (flags [no-writes] -> []: callers of the "
        "live version would break; give the new version a new name)",
    ]


def test_check_reports_each_kind_of_drift_per_node_and_never_another_teams_library(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 0 and res.stdout.startswith("no drift: 0 scripts, 2 libraries")
    node = url.split("//")[1].split("/")[0]
    shared.function_delete("hello")  # a flushed node, a new shard
    shared.function_load(STOCK_V2, replace=True)  # changed by hand
    shared.function_load("#!lua name=squatter\nredis.register_function('hello', function() end)")
    write(d, {"gone.lua": "#!lua name=gone\nredis.register_function('gone_f', function() end)"})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 1  # 'hello' is taken
    gone = "#!lua name=gone\nredis.register_function('gone_f', function() end)"
    shared.function_load(gone)
    write(d, {"gone.lua": None})
    lock = json.loads((d / "luapipe.lock.json").read_text())
    lock["libraries"]["gone"] = parse_library(gone).sha
    (d / "luapipe.lock.json").write_text(json.dumps(lock))
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 1
    v1, v2 = parse_library(STOCK_V1).sha[:12], parse_library(STOCK_V2).sha[:12]
    assert res.stdout.splitlines() == [
        "removed: gone (in the lock, no such library)",
        f"missing: hello on {node} (library not loaded)",
        f"taken: hello on {node} (function of library 'hello' is registered by library 'squatter')",
        f"differs: stock on {node} (library code {v2} there, {v1} in the file)",
        f"signature: stock_reserve on {node} (args (qty, order) -> (qty): callers of the live "
        "version would break; give the new version a new name)",
        f"stale: gone on {node} (in the lock, no longer in the directory: deploy --prune "
        "deletes it)",
        f"drift: 6 differences (0 scripts, 2 libraries, nodes {node})",
    ]
    checked = json.loads(run("deploy", "--check", "--json", "--dir", str(d), "--url", url).stdout)
    assert {x["kind"] for x in checked["drift"]} == {
        "removed",
        "missing",
        "taken",
        "differs",
        "signature",
        "stale",
    }
    assert not any("other_team" in json.dumps(x) for x in checked["drift"])


def test_a_taken_function_name_refuses_the_deploy_before_anything_is_sent(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    shared.function_load("#!lua name=squatter\nredis.register_function('hello', function() end)")
    script = "return 'taken test'\n"
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO, "n.lua": script})
    shared.script_flush()
    shared.config_resetstat()
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("error: nothing deployed: a function name is taken: taken: hello")
    assert loads(shared) == 0 and code_of(shared, "stock") is None
    assert calls(shared, "script|load") == 0  # the scripts neither: nothing was sent
    assert shared.script_exists(hashlib.sha1(script.encode()).hexdigest()) == [False]
    assert not (d / "luapipe.lock.json").exists()
    shared.function_delete("squatter")


CASED = "#!lua name=cased\nredis.register_function('Cased_Get', function() return 1 end)\n"


def test_a_function_name_taken_in_another_case_is_taken(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "cased.lua": CASED})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    shared.function_delete("stock")  # flushed; then another team's library comes:
    shared.function_delete("cased")  # function names are case-insensitive on the server,
    # so FCALL stock_reserve would run its STOCK_RESERVE, and loading ours fails
    shared.function_load(
        "#!lua name=squatter\nredis.register_function('STOCK_RESERVE', function() end)\n"
        "redis.register_function('cased_get', function() end)"
    )
    shared.config_resetstat()
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert res.stderr.startswith(
        "error: nothing deployed: a function name is taken: taken: Cased_Get"
    )
    assert "; taken: stock_reserve on" in res.stderr
    assert loads(shared) == 0 and code_of(shared, "stock") is None
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    node = url.split("//")[1].split("/")[0]
    assert {
        f"taken: Cased_Get on {node} (function of library 'cased' is registered by library "
        "'squatter')",
        f"taken: stock_reserve on {node} (function of library 'stock' is registered by "
        "library 'squatter')",
    } <= set(res.stdout.splitlines())


def test_prune_deletes_only_the_libraries_the_lock_recorded_and_the_directory_dropped(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    write(d, {"stock.lua": STOCK_V2})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0  # keeps a copy of v1
    write(d, {"stock.lua": None})
    res = run("deploy", "--dir", str(d), "--url", url)  # without --prune: left, still locked
    assert res.exit_code == 0 and code_of(shared, "stock") == STOCK_V2
    assert "stock" in json.loads((d / "luapipe.lock.json").read_text())["libraries"]
    res = run("deploy", "--prune", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output
    node = url.split("//")[1].split("/")[0]
    assert f"{node}: deleted stock" in res.stdout.splitlines()
    assert code_of(shared, "stock") is None and code_of(shared, keeper_name("stock")) is None
    assert code_of(shared, "hello") == HELLO
    assert json.loads((d / "luapipe.lock.json").read_text())["libraries"].keys() == {"hello"}
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert (res.exit_code, res.stdout.splitlines()[-1]) == (
        0,
        f"no drift: 0 scripts, 1 library, nodes {node}",
    )


def test_prune_leaves_a_library_another_team_has_since_loaded_under_that_name(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    write(d, {"stock.lua": None})
    theirs = "#!lua name=stock\nredis.register_function('their_stock', function() end)\n"
    shared.function_load(theirs, replace=True)  # the name is free for us: another team's now
    node = url.split("//")[1].split("/")[0]
    detail = (
        f"(in the lock, no longer in the directory, but its code there "
        f"({parse_library(theirs).sha[:12]}) is neither the lock's "
        f"({parse_library(STOCK_V1).sha[:12]}) nor one luapipe loaded: another library of "
        "that name, so deploy --prune leaves it and drops the name from the lock)"
    )
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 1
    assert f"replaced: stock on {node} {detail}" in res.stdout.splitlines()
    res = run("deploy", "--prune", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output  # a deploy goes on: the library is not ours
    assert res.stderr == f"warning: replaced: stock on {node} {detail}\n"
    assert not any("deleted" in line for line in res.stdout.splitlines())
    assert code_of(shared, "stock") == theirs
    assert json.loads((d / "luapipe.lock.json").read_text())["libraries"].keys() == {"hello"}
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output  # no longer ours: no longer drift
    shared.function_delete("stock")


def test_prune_deletes_a_rolled_back_library_whose_code_differs_from_the_lock(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    write(d, {"stock.lua": STOCK_V2})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0  # the lock says v2
    assert run("deploy", "--rollback", "--dir", str(d), "--url", url).exit_code == 0
    assert code_of(shared, "stock") == STOCK_V1  # luapipe's own code, though not the lock's
    write(d, {"stock.lua": None})
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    node = url.split("//")[1].split("/")[0]
    assert f"stale: stock on {node} (in the lock, no longer in the directory: deploy --prune " \
        "deletes it)" in res.stdout.splitlines()  # fmt: skip
    res = run("deploy", "--prune", "--dir", str(d), "--url", url)
    assert res.exit_code == 0 and not res.stderr, res.output
    assert f"{node}: deleted stock" in res.stdout.splitlines()
    assert code_of(shared, "stock") is None and code_of(shared, keeper_name("stock")) is None


def test_rollback_loads_the_kept_code_back_from_the_server_itself(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    write(d, {"stock.lua": STOCK_V2})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    runner = tmp_path / "fresh-ci-runner"  # nothing of the first runner but the files
    shutil.copytree(d, runner)
    (runner / "luapipe.lock.json").unlink()
    node = url.split("//")[1].split("/")[0]
    res = run("deploy", "--rollback", "--dir", str(runner), "--url", url)
    assert res.exit_code == 0, res.output
    v1, v2 = parse_library(STOCK_V1).sha[:12], parse_library(STOCK_V2).sha[:12]
    assert res.stdout.splitlines() == [
        f"{node}: kept the code stock had ({v2}) in library luapipe_rollback_stock_kept",
        f"{node}: replaced stock {v2} -> {v1}",
        f"{node}: no previous code of hello kept; left as it is",
        f"rolled back stock (nodes {node})",
    ]
    assert code_of(shared, "stock") == STOCK_V1 and code_of(shared, "hello") == HELLO
    assert not (runner / "luapipe.lock.json").exists()  # the lock is left as it is
    res = run("deploy", "--rollback", "--dir", str(runner), "--url", url)  # undoes the first
    assert res.exit_code == 0 and code_of(shared, "stock") == STOCK_V2


def _lib(name: str, *functions: str) -> str:
    body = "".join(
        f"redis.register_function('{f}', function() return '{name}' end)\n" for f in functions
    )
    return f"#!lua name={name}\n{body}"


def test_a_function_moving_between_two_of_our_libraries_deploys_and_rolls_back(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    # 'up' moves from zed to alpha and 'down' from beta to yak: the library that gives a
    # function up goes first whatever the names' order, on deploy and on rollback
    v1 = {
        "alpha.lua": _lib("alpha", "a_own"),
        "zed.lua": _lib("zed", "z_own", "up"),
        "beta.lua": _lib("beta", "b_own", "down"),
        "yak.lua": _lib("yak", "y_own"),
    }
    v2 = {
        "alpha.lua": _lib("alpha", "a_own", "up"),
        "zed.lua": _lib("zed", "z_own"),
        "beta.lua": _lib("beta", "b_own"),
        "yak.lua": _lib("yak", "y_own", "down"),
    }
    d = write(tmp_path / "s", v1)
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    write(d, v2)
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    kinds = {line.split(":")[0] for line in res.stdout.splitlines()[:-1]}
    assert kinds == {"changed", "differs"}, res.output  # neither taken nor gone
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output
    assert not res.stderr  # no signature warning: the functions keep their signature
    assert (shared.fcall("up", 0), shared.fcall("down", 0)) == (b"alpha", b"yak")
    assert run("deploy", "--check", "--dir", str(d), "--url", url).exit_code == 0
    res = run("deploy", "--rollback", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output
    assert (shared.fcall("up", 0), shared.fcall("down", 0)) == (b"zed", b"beta")


def test_a_url_naming_a_replica_deploys_no_library_and_says_where_to_go(
    tmp_path: Path, shared: redis.Redis, redis_server: ServerProcess
) -> None:
    server = EmbeddedRedis(["--replicaof", redis_server.host, str(redis_server.port)])
    info = server.start()
    try:
        replica = redis.Redis(host=info.host, port=info.port)
        deadline = time.monotonic() + 10
        while replica.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "replica did not sync"
            time.sleep(0.05)
        d = write(tmp_path / "s", {"stock.lua": STOCK_V1})
        url = f"redis://{info.host}:{info.port}/0"
        for option in ("--rollback", None):
            res = run("deploy", *([option] if option else []), "--dir", str(d), "--url", url)
            assert res.exit_code == 1 and res.stderr.count("\n") == 1, res.output
            what = "rolled back" if option else "deployed"
            assert res.stderr == (
                f"error: no library {what}: {info.host}:{info.port} is a replica (of "
                f"{redis_server.host}:{redis_server.port}); Function libraries are loaded on "
                "a primary and replicate: use the primary's URL\n"
            )
        assert code_of(shared, "stock") is None and not (d / "luapipe.lock.json").exists()
        replica.close()
    finally:
        server.stop()


def test_a_live_library_that_is_not_utf8_is_read_replaced_and_rolled_back_byte_for_byte(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    """A same-named library loaded by hand with a Latin-1 comment ("caf\\xe9"): its SHA is
    that of its bytes, a call meets one clear error, deploy keeps it and rollback puts it
    back byte for byte (they raised UnicodeEncodeError)."""
    latin = b"#!lua name=stock\n-- caf\xe9\nredis.register_function('stock_old', function() end)\n"
    shared.function_load(latin)
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1})
    reg = ScriptRegistry.from_directory(d)
    with pytest.raises(ServerError, match=f"code sha1 {hashlib.sha1(latin).hexdigest()}"):
        reg.call(shared, "stock_left", keys=["units"])
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    lock = d / "luapipe.lock.json"
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 0 and lock.exists(), res.output
    res = run("deploy", "--rollback", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output
    flat = shared.function_list(library="stock", withcode=True)[0]
    assert dict(zip(flat[0::2], flat[1::2], strict=True))[b"library_code"] == latin
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    sha = hashlib.sha1(latin).hexdigest()[:12]
    assert f"(library code {sha} there, {parse_library(STOCK_V1).sha[:12]} in the file)" in (
        res.stdout
    )


def test_a_lock_written_before_libraries_stays_readable_and_byte_identical(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"n.lua": "return 1\n"})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    before = (d / "luapipe.lock.json").read_text()
    assert before == (
        '{\n  "version": 1,\n  "scripts": {\n    "n": "'
        + __import__("hashlib").sha1(b"return 1\n").hexdigest()
        + '"\n  }\n}\n'
    )
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    assert (d / "luapipe.lock.json").read_text() == before
    write(d, {"hello.lua": HELLO})
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 1 and res.stdout.splitlines()[0] == (
        "added: hello (library not in the lock file)"
    )
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    assert json.loads((d / "luapipe.lock.json").read_text())["libraries"] == {
        "hello": parse_library(HELLO).sha
    }


#: registers geo_peek only on a server newer than 7.0.0 (the test server is 7.0.x, x > 0):
#: the pattern of a library using a function only 7.2 has, under a version check
GEO = (
    "#!lua name=geo\n"
    "redis.register_function('geo_get', function(keys) return redis.call('GET', keys[1]) end)\n"
    "if redis.REDIS_VERSION_NUM > 0x070000 then\n"
    "  redis.register_function{function_name = 'geo_peek', flags = {'no-writes'},\n"
    "    callback = function(keys) return redis.call('GET', keys[1]) end}\n"
    "end\n"
)


def test_a_library_is_read_as_each_node_loads_it_with_that_nodes_redis_version(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    """The sandbox said 7.0.0 to every top level, so on a newer server a function it
    registers under a version check was missing from the file's functions: --check and
    deploy called it 'gone from the file' (callers would break) at every change."""
    d = write(tmp_path / "s", {"geo.lua": GEO})
    listed = json.loads(run("scripts", "list", "--json", "--dir", str(d)).stdout)
    assert [f["name"] for f in listed[0]["functions"]] == ["geo_get"]  # no server: 7.0.0
    assert listed[0]["read_at_redis_version"] == "7.0.0"
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    write(d, {"geo.lua": GEO + "-- v2\n"})
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    node = url.split("//")[1].split("/")[0]
    assert [line.split(" (")[0] for line in res.stdout.splitlines()[:-1]] == [
        "changed: geo",
        f"differs: geo on {node}",  # and no 'signature: geo_peek ... gone from the file'
    ]
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.exit_code == 0 and not res.stderr, res.output
    write(d, {"geo.lua": GEO.replace("flags = {'no-writes'}", "flags = {}")})
    res = run("deploy", "--check", "--dir", str(d), "--url", url)  # its flags are compared
    assert f"signature: geo_peek on {node} (flags [no-writes] -> []: callers" in res.stdout


def test_a_function_registered_only_on_newer_servers_is_declared_and_called(
    tmp_path: Path, shared: redis.Redis
) -> None:
    """Read without a server (7.0.0), a library's function under a version check was
    unknown: its @function block made the file BROKEN, and reg.call refused the name."""
    block = "-- @function geo_peek\n-- @key k\n"
    later = GEO.replace("if redis.REDIS_VERSION_NUM", block + "if redis.REDIS_VERSION_NUM")
    future = later.replace("geo_peek", "geo_next").replace("> 0x070000", ">= 0x630000")
    d = write(tmp_path / "s", {"geo.lua": later, "future.lua": future.replace("geo", "fut")})
    listed = run("scripts", "list", "--dir", str(d))
    assert listed.exit_code == 0, listed.output
    assert "  geo_peek           keys: k  args: -  [no-writes]  (newer servers only: under a " \
        "version check)" in listed.stdout.splitlines()  # fmt: skip
    reg = ScriptRegistry.from_directory(d)
    shared.set("g", "here")
    assert reg.call(shared, "geo_peek", keys=["g"]) == b"here"  # this server registers it
    with pytest.raises(CallArgumentError, match="takes 1 key"):
        reg.call(shared, "geo_peek")  # checked against its block
    node = f"{shared.connection_pool.connection_kwargs['host']}:"
    with pytest.raises(ServerError, match=r"registers no function 'fut_next' on " + node):
        reg.call(shared, "fut_next", keys=["g"])  # a server that old does not: one line


#: fails at load time on any server newer than 7.0.0 (the sandbox's own default)
NEWER_FAILS = (
    "#!lua name=fussy\nredis.register_function('fussy', function() return 1 end)\n"
    "if redis.REDIS_VERSION_NUM > 0x070000 then local _ = no_such_global end\n"
)


def test_a_library_a_nodes_version_refuses_is_refused_before_anything_is_sent(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    d = write(tmp_path / "s", {"hello.lua": HELLO})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    lock = (d / "luapipe.lock.json").read_text()
    write(d, {"fussy.lua": NEWER_FAILS, "hello.lua": HELLO + "-- v2\n", "n.lua": "return 1"})
    assert run("scripts", "list", "--dir", str(d)).exit_code == 0  # fine at 7.0.0
    shared.config_resetstat()
    res = run("deploy", "--dir", str(d), "--url", url)
    node = url.split("//")[1].split("/")[0]
    version = shared.info("server")["redis_version"]
    why = (
        f"a server with redis_version {version} refuses it: {d / 'fussy.lua'}:3: at load "
        "time: Script attempted to access nonexistent global variable 'no_such_global'"
    )
    assert (res.exit_code, res.stderr) == (1, f"error: nothing deployed: {node}: {why}\n")
    assert loads(shared) == 0 and calls(shared, "script|load") == 0
    assert code_of(shared, "hello") == HELLO and code_of(shared, "fussy") is None
    assert (d / "luapipe.lock.json").read_text() == lock
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert f"refused: fussy on {node} ({why})" in res.stdout.splitlines()


FUSSY = "#!lua name=fussy\nredis.register_function('fussy', function() return 1 end)\n"
#: another deploy's fussy, loaded between this deploy's read and its loads
RACER = FUSSY.replace("return 1", "return 'racer'")


def _racing(steps: Any, meanwhile: Any) -> Any:
    """``steps``, with ``meanwhile()`` run just before the first batch that changes a
    library (after every node was read and checked): another client acting in between."""
    reply = None
    while True:
        try:
            request = steps.send(reply)
        except StopIteration as stop:
            return stop.value
        parts = request.parts if isinstance(request, SendEach) else ()
        if meanwhile and any(
            c.args[:2] in (("FUNCTION", "LOAD"), ("FUNCTION", "DELETE"))
            for part in parts
            for c in part.batch
        ):
            meanwhile()
            meanwhile = None
        reply = yield request


@pytest.fixture
def racer(shared: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``racer()`` arms it: during the next deploy, another deploy loads its own 'fussy'
    between this one's read and its loads."""
    original = deploy_module.deploy_libraries_steps
    armed: list[bool] = []

    def race() -> None:
        if armed:
            armed.clear()
            shared.function_load(RACER)

    def racing(*args: Any, **kw: Any) -> Any:
        return _racing(original(*args, **kw), race)

    monkeypatch.setattr(deploy_module, "deploy_libraries_steps", racing)
    yield lambda: armed.append(True)
    assert code_of(shared, "fussy") == RACER  # put back: only what this deploy did
    shared.function_delete("fussy")


def test_a_deploy_refused_midway_puts_back_what_it_changed_and_says_so(
    tmp_path: Path, shared: redis.Redis, url: str, racer: Any
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1})
    assert run("deploy", "--dir", str(d), "--url", url).exit_code == 0
    lock = (d / "luapipe.lock.json").read_text()
    write(d, {"stock.lua": STOCK_V2, "fussy.lua": FUSSY})
    racer()
    res = run("deploy", "--dir", str(d), "--url", url)
    node = url.split("//")[1].split("/")[0]
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert res.stderr == (
        f"error: deploy failed on {node}: load fussy: ERR Library 'fussy' already exists; "
        f"put back the libraries it had changed on {node}\n"
    )
    assert code_of(shared, "stock") == STOCK_V1  # replaced, then put back
    assert code_of(shared, keeper_name("stock")) is None  # the copy it made is gone too
    assert (d / "luapipe.lock.json").read_text() == lock


def test_a_refused_first_load_still_puts_back_the_loads_the_server_went_on_with(
    tmp_path: Path, shared: redis.Redis, url: str, racer: Any
) -> None:
    d = write(tmp_path / "s", {"fussy.lua": FUSSY, "hello.lua": HELLO})
    racer()
    res = run("deploy", "--dir", str(d), "--url", url)  # fussy (refused), then hello (loaded)
    node = url.split("//")[1].split("/")[0]
    assert res.exit_code == 1
    assert res.stderr.endswith(f"; put back the libraries it had changed on {node}\n")
    assert code_of(shared, "hello") is None  # and the racer's fussy is left: see racer


def _steps(driver: Driver, client: Any, steps: Any) -> Any:
    if driver.name == "asyncio":
        return driver.run(drivers.drive_async(steps, client))
    return drivers.drive(steps, client)


def test_the_deploy_steps_run_alike_through_the_sync_and_asyncio_drivers(
    driver: Driver, shared: redis.Redis, redis_server: ServerProcess
) -> None:
    client = driver.redis(redis_server.port)
    v1, v2 = parse_library(STOCK_V1), parse_library(STOCK_V2)
    node = f"{redis_server.host}:{redis_server.port}"
    drift, nodes = _steps(driver, client, check_libraries_steps([v1]))
    assert ([str(x) for x in drift], nodes) == (
        [f"missing: stock on {node} (library not loaded)"],
        (node,),
    )
    done = _steps(driver, client, deploy_libraries_steps([v1]))
    assert [str(c) for c in done.changes] == [f"{node}: loaded stock {v1.sha[:12]} (new)"]
    done = _steps(driver, client, deploy_libraries_steps([v2]))
    assert [c.library for c in done.changes] == ["luapipe_rollback_stock_kept", "stock"]
    assert [w.kind for w in done.warnings] == ["signature", "signature"]
    back = _steps(driver, client, rollback_libraries_steps([v2]))
    assert [c.library for c in back.changes] == ["luapipe_rollback_stock_kept", "stock"]
    assert code_of(shared, "stock") == STOCK_V1
    with pytest.raises(ServerError, match="a function name is taken"):
        _steps(
            driver,
            client,
            deploy_libraries_steps([parse_library(OTHER.replace("other_team\n", "mine\n"))]),
        )


def test_the_rollback_copy_keeps_any_code_exactly() -> None:
    for code in ("", "a]]b", "x]=]y]==]z", "#!lua name=t\nreturn [[\n]]\n", "é\r\n\t\x00"):
        copy = keeper_source("lib", code)
        assert kept_code(copy) == code
        assert parse_library(copy).functions[0].flags == ("no-writes",)


def test_only_the_library_of_exactly_that_name_is_ours(
    tmp_path: Path, shared: redis.Redis, url: str
) -> None:
    """FUNCTION LIST LIBRARYNAME is a pattern, and a case-insensitive one on Redis 7.0:
    'stock' also lists another team's 'STOCK'."""
    upper = "#!lua name=STOCK\nredis.register_function('upper_team_f', function() end)\n"
    shared.function_load(upper)
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1})
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output
    node = url.split("//")[1].split("/")[0]
    assert f"{node}: loaded stock {parse_library(STOCK_V1).sha[:12]} (new)" in res.stdout
    assert code_of(shared, keeper_name("stock")) is None  # nothing of STOCK kept as ours
    assert code_of(shared, "STOCK") == upper
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 0, res.output
    assert run("deploy", "--rollback", "--dir", str(d), "--url", url).exit_code == 0
    assert code_of(shared, "STOCK") == upper and code_of(shared, "stock") == STOCK_V1


@pytest.mark.parametrize(
    ("before", "after", "breaks"),
    [
        ("-- @arg qty\n", "-- @arg qty\n-- @arg [note]\n", False),  # an optional arg more
        ("-- @arg qty\n", "-- @arg amount\n", False),  # renamed: positional, same count
        ("-- @arg qty\n", "-- @arg qty\n-- @arg order\n", True),  # one more required
        ("-- @arg qty\n-- @arg [note]\n", "-- @arg qty\n", True),  # two args refused now
        ("-- @arg ids...\n", "-- @arg ids\n-- @arg [more]\n", True),  # at most two now
        ("-- @arg qty\n", "-- @arg [qty...]\n", False),  # takes anything
    ],
)
def test_signature_drift_is_a_change_that_refuses_a_call_the_live_version_took(
    r: redis.Redis, before: str, after: str, breaks: bool
) -> None:
    r.function_load(STOCK_V1.replace("-- @arg qty\n", before))
    new = parse_library(STOCK_V1.replace("-- @arg qty\n", after))
    drift, _ = drivers.drive(check_libraries_steps([new]), r)
    assert [d.kind for d in drift] == ["differs", *(["signature"] if breaks else [])]


def test_a_rollback_copy_is_never_named_like_a_generated_library() -> None:
    """Generated function forms are ``luapipe_<op>_<10 hex>`` and collected by that
    pattern; a date-versioned library must not get a copy that looks like one."""
    generated = re.compile(r"^luapipe_[A-Za-z_][A-Za-z0-9_]*_[0-9a-f]{10}$")
    for library in ("orders_2024010100", "stock", "a_0123456789", "x"):
        assert not generated.match(keeper_name(library))
        assert keeper_name(library).startswith("luapipe_rollback_")


@pytest.mark.parametrize(
    ("libraries", "says"),
    [
        ('{"stock": "ABC"}', ":4: library 'stock': 'ABC' is not a lower-case sha1"),
        ('["stock"]', ':3: expected "libraries": {name: sha}'),
    ],
)
def test_a_bad_libraries_section_of_the_lock_names_its_line(
    tmp_path: Path, url: str, libraries: str, says: str
) -> None:
    d = write(tmp_path / "s", {"hello.lua": HELLO})
    body = libraries.replace("{", "{\n    ").replace("[", "[\n    ")
    text = '{\n  "version": 1, "scripts": {},\n  "libraries": ' + body + "\n}\n"
    (d / "luapipe.lock.json").write_text(text)
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert res.stderr.startswith(f"error: {d / 'luapipe.lock.json'}{says}"), res.stderr
