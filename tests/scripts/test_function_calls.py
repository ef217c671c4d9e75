"""Calling a library's functions on a real server, through both drivers (sync, asyncio):
FCALL in steady state; the exact "ERR Function not found" loads the library (never
REPLACE) and sends again in one MULTI; another live version is one error naming both SHAs;
transactions load inside MULTI; a runaway function is killed like a script."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.cli import main
from luapipe.errors import CallArgumentError, ScriptRuntimeError, ServerError
from luapipe.scripts.header import Param
from luapipe.scripts.library import FunctionLibrary, LuaFunction
from luapipe.scripts.registry import ScriptRegistry

from ..drivers import Driver
from ..helpers import calls, reset_stats

PATH = "scripts_lua/counters.lua"
SOURCE = """\
#!lua name=counters
redis.register_function('bump', function(keys, args)
  return redis.call('INCRBY', keys[1], args[1])
end)
redis.register_function{function_name = 'peek', flags = {'no-writes'},
  callback = function(keys, args) return redis.call('GET', keys[1]) end}
redis.register_function('oops', function(keys, args)
  redis.call('INCR', keys[1])
  error('Function not found')
end)
redis.register_function('liar', function(keys, args)
  redis.call('INCR', keys[1])
  return redis.error_reply('ERR Function not found')
end)
local function spin(keys, args)
  if keys[1] then redis.call('INCR', keys[1]) end
  local t = redis.call('TIME')
  local start = t[1] * 1000000 + t[2]
  repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= tonumber(args[1]) * 1000
  return 1
end
redis.register_function('spin', spin)
redis.register_function{function_name = 'spin_ro', callback = spin, flags = {'no-writes'}}
"""
K, A = (Param("k"),), (Param("n"),)
FUNCTIONS = [
    LuaFunction("bump", "counters", K, A, line=2),
    LuaFunction("peek", "counters", K, (), ("no-writes",), line=5),
    LuaFunction("oops", "counters", K, (), line=7),
    LuaFunction("liar", "counters", K, (), line=11),
    LuaFunction("spin", "counters", None, None, line=22),
    LuaFunction("spin_ro", "counters", None, None, ("no-writes",), line=23),
]
COUNTERS = FunctionLibrary.of("counters", SOURCE, FUNCTIONS, path=PATH)
#: another version of the library: its bump decrements, and it has no peek
OTHER = SOURCE.replace("INCRBY", "DECRBY").replace("'peek'", "'peek_v2'")


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([], libraries=[COUNTERS])


def library_code(r: redis.Redis, name: str = "counters") -> str | None:
    for lib in r.function_list(library=name, withcode=True):  # RESP2: flat lists
        info = dict(zip(lib[0::2], lib[1::2], strict=True))
        if info[b"library_name"] == name.encode():
            return str(info[b"library_code"].decode())
    return None


def test_a_call_is_one_fcall_and_a_missing_library_heals_once(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    c = driver.redis(redis_server.port)
    reset_stats(r)
    first = driver.run(reg.call(c, "bump", ["n"], [2]))  # not loaded yet: heals
    steady = [driver.run(reg.call(c, "bump", ["n"], [1])) for _ in range(5)]
    loads, multis = calls(r, "function|load"), calls(r, "multi")
    r.function_flush()  # behind the registry's back
    healed = driver.run(reg.call(c, "bump", ["n"], [10]))
    peeked = driver.run(reg.call(c, "peek", ["n"]))
    assert (first, steady, healed, peeked) == (2, [3, 4, 5, 6, 7], 17, b"17")
    assert (loads, multis) == (1, 1)  # the first call's heal; then FCALL alone
    assert calls(r, "function|load") == 2 and calls(r, "function|list") == 2
    assert calls(r, "fcall") == 1 + 1 + 5 + 1 + 1  # each not-found, then each run
    assert calls(r, "fcall_ro") == 1 and r.get("n") == b"17"
    assert library_code(r) == SOURCE


def test_a_functions_own_error_with_the_words_is_its_error_not_a_reload(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    """``error('Function not found')`` after a write reads "ERR user_function:9: Function
    not found script: oops ...": it ran and wrote. Matching the words anywhere would load
    and run it again."""
    r.function_load(SOURCE)
    c = driver.redis(redis_server.port)
    reset_stats(r)
    with pytest.raises(ScriptRuntimeError, match=rf"^{PATH}:9: Function not found \(function oops"):
        driver.run(reg.call(c, "oops", ["ran"]))
    assert r.get("ran") == b"1"  # ran once
    assert calls(r, "function|load") == 0 and calls(r, "multi") == 0


def test_a_function_replying_exactly_the_servers_text_runs_twice_never_more(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    r.function_load(SOURCE)
    c = driver.redis(redis_server.port)
    with pytest.raises(ScriptRuntimeError, match="function liar, library counters failed: ERR"):
        driver.run(reg.call(c, "liar", ["ran"]))
    assert r.get("ran") == b"2"  # it cannot be told from a missing function: once more


def test_another_live_version_is_one_error_naming_both_shas_and_is_never_replaced(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    """A rolling deploy (or a hand edit) put another version of `counters` live, without
    `peek`: the call did not run, and healing must not replace that version."""
    r.function_load(OTHER)
    other_sha = FunctionLibrary.of("counters", OTHER).sha
    c = driver.redis(redis_server.port)
    both = rf"code sha1 {other_sha}\), not the one in {PATH} \(code sha1 {COUNTERS.sha}\)"
    with pytest.raises(ServerError, match=both + r".*function 'peek' did not run"):
        driver.run(reg.call(c, "peek", ["k"]))
    pipe = reg.pipeline(c)
    pipe.call("peek", ["k"]).incr("plain")
    results = driver.run(pipe.execute(raise_on_error=False))
    assert isinstance(results[0], ServerError) and other_sha in str(results[0])
    assert results[1] == 1
    tx = reg.pipeline(c, transaction=True)
    tx.call("bump", ["t"], [1]).incr("tx")
    reset_stats(r)
    with pytest.raises(ServerError, match=both + ".*the transaction was not sent"):
        driver.run(tx.execute())
    assert calls(r, "multi") == 0 and r.get("tx") is None and r.get("t") is None
    assert library_code(r) == OTHER  # never replaced


def test_a_pipeline_resends_only_the_calls_that_did_not_run(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    c = driver.redis(redis_server.port)
    pipe = reg.pipeline(c)
    pipe.call("bump", ["a"], [1]).incr("plain").call("bump", ["b"], [2]).call("peek", ["a"])
    results = driver.run(pipe.execute())
    trips, reloads = pipe.last_round_trips, pipe.last_reloads
    pipe.call("bump", ["a"], [1]).incr("plain")
    again = driver.run(pipe.execute())
    trips2, reloads2 = pipe.last_round_trips, pipe.last_reloads
    assert results == [1, 1, 2, b"1"] and again == [2, 2]
    assert (trips, reloads) == (2, 3)  # FCALLs, then the three again in one MULTI
    assert (trips2, reloads2) == (1, 0)
    assert r.mget("a", "b", "plain") == [b"2", b"2", b"2"]


def test_a_transaction_loads_inside_multi_so_a_flush_never_splits_it(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    """An FCALL of a missing function inside MULTI fails alone at EXEC while the rest
    commits; FUNCTION LOAD queued ahead of it makes the library be there."""
    c = driver.redis(redis_server.port)
    tx = reg.pipeline(c, transaction=True)
    out = []
    trips = []
    for _ in range(3):
        r.function_flush()
        tx.call("bump", ["t"], [5]).incr("plain").call("peek", ["t"])
        out.append(driver.run(tx.execute()))
        trips.append(tx.last_round_trips)
    assert out == [[5, 1, b"5"], [10, 2, b"10"], [15, 3, b"15"]]
    assert trips == [2, 1, 1]  # the version check once, then MULTI ... EXEC alone
    assert r.mget("t", "plain") == [b"15", b"3"]


def test_a_transaction_whose_library_cannot_load_is_refused_before_multi(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    """`counters` is absent and another library owns one of its function names: its
    FUNCTION LOAD inside MULTI would fail at EXEC, and the FCALL with it, while the rest
    committed. The check before MULTI sees the owner and sends no MULTI."""
    r.function_load("#!lua name=squatter\nredis.register_function('OOPS', function() end)")
    c = driver.redis(redis_server.port)
    tx = reg.pipeline(c, transaction=True)
    tx.incr("plain").call("bump", ["t"], [1]).incr("plain")
    reset_stats(r)
    with pytest.raises(ServerError) as caught:
        driver.run(tx.execute())
    assert str(caught.value) == (
        f"library 'counters' ({PATH}) cannot be loaded on 127.0.0.1:{redis_server.port}: "
        "library 'squatter' already registers a function 'oops' (function names are global "
        "on a server); rename one of them; the transaction was not sent"
    )
    assert calls(r, "multi") == 0 and r.get("plain") is None and r.get("t") is None


def test_call_counts_are_checked_before_sending(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    c = driver.redis(redis_server.port)
    reset_stats(r)
    with pytest.raises(CallArgumentError, match="function 'bump'"):
        driver.run(reg.call(c, "bump", ["a", "b"], [1]))
    with pytest.raises(CallArgumentError, match="function 'bump'"):
        reg.pipeline(c).call("bump", ["a"], [])
    assert calls(r, "fcall") == 0


def test_fakeredis_is_enough_for_calls_and_healing(fake: redis.Redis) -> None:
    reg = ScriptRegistry([], libraries=[COUNTERS])
    assert reg.call(fake, "bump", ["n"], [2]) == 2
    fake.function_flush()
    with reg.pipeline(fake, transaction=True) as tx:
        tx.call("bump", ["n"], [1]).call("peek", ["n"])
        assert tx.execute() == [3, b"3"]
    fake.function_flush()
    with reg.pipeline(fake) as pipe:
        pipe.call("bump", ["n"], [1]).incr("x")
        assert pipe.execute() == [4, 1]


# -- scripts kill ------------------------------------------------------------------------
def _busy(r: redis.Redis, within: float = 5.0) -> None:
    """Wait until the server answers BUSY (a function is running)."""
    deadline = time.monotonic() + within
    while True:
        try:
            r.ping()
        except redis.exceptions.ResponseError as exc:
            if "BUSY" in str(exc):
                return
            raise
        assert time.monotonic() < deadline, "the function never started"
        time.sleep(0.005)


class Spinner:
    """Starts runaway function calls on their own threads; each is running when
    :meth:`start` returns (the server answers BUSY)."""

    def __init__(self, r: redis.Redis, url: str) -> None:
        self.r, self.url = r, url
        self.threads: list[threading.Thread] = []
        self.errors: list[Exception] = []

    def start(self, name: str, keys: list[str], ms: int) -> threading.Thread:
        reg = ScriptRegistry([], libraries=[COUNTERS])

        def run() -> None:
            try:
                reg.call(redis.Redis.from_url(self.url), name, keys, [ms])
            except Exception as exc:  # recorded for the assertions
                self.errors.append(exc)

        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)
        _busy(self.r)
        return t


@pytest.fixture
def spinner(r: redis.Redis, redis_server: ServerProcess) -> Iterator[Spinner]:
    r.config_set("busy-reply-threshold", 50)
    r.function_load(SOURCE)
    s = Spinner(r, redis_server.url)
    try:
        yield s
    finally:
        for t in s.threads:
            t.join()


def test_a_runaway_read_only_function_is_killed(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, spinner: Spinner
) -> None:
    t = spinner.start("spin_ro", [], 4000)
    t0 = time.monotonic()
    killed = driver.run(ScriptRegistry([]).kill(driver.redis(redis_server.port)))
    t.join()
    assert killed == [f"{redis_server.host}:{redis_server.port}"]
    assert time.monotonic() - t0 < 2
    assert [type(e) for e in spinner.errors] == [ScriptRuntimeError]
    assert "Script killed by user" in str(spinner.errors[0])
    assert driver.run(ScriptRegistry([]).kill(driver.redis(redis_server.port))) == []


def test_the_cli_kills_a_function_and_says_unkillable_once_it_wrote(
    r: redis.Redis, redis_server: ServerProcess, spinner: Spinner
) -> None:
    t = spinner.start("spin_ro", [], 4000)
    res = CliRunner().invoke(main, ["scripts", "kill", "--url", redis_server.url])
    t.join()
    assert res.exit_code == 0 and "killed the running script or function" in res.output
    t = spinner.start("spin", ["w"], 700)
    res = CliRunner().invoke(main, ["scripts", "kill", "--url", redis_server.url])
    assert res.exit_code == 1
    assert "UNKILLABLE: the script or function running on" in res.output
    t.join()
    assert r.get("w") == b"1"
    res = CliRunner().invoke(main, ["scripts", "kill", "--url", redis_server.url])
    assert (res.exit_code, res.output.strip()) == (0, "no script or function running")


def test_scripts_call_calls_a_function_of_a_library_file(
    r: redis.Redis, redis_server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "counters.lua").write_text(
        "#!lua name=counters\n-- @function bump\n-- @key k\n-- @arg n\n" + SOURCE.split("\n", 1)[1]
    )
    base = ["scripts", "call", "--dir", str(tmp_path), "--url", redis_server.url]
    res = CliRunner().invoke(main, [*base, "bump", "-k", "n", "-a", "3"])
    assert (res.exit_code, res.output) == (0, "3\n")  # healed: the library was not there
    res = CliRunner().invoke(main, [*base, "peek", "-k", "n"])
    assert (res.exit_code, res.output) == (0, "3\n")
    res = CliRunner().invoke(main, [*base, "bump", "-k", "n"])
    assert res.exit_code == 1 and "function 'bump' takes 1 arg" in res.output
    assert r.get("n") == b"3"


@pytest.fixture(scope="module")
def no_functions() -> Iterator[ServerProcess]:
    """A server that does not know FCALL, FCALL_RO or FUNCTION (renamed away, as on a
    managed service, or as a server older than 7.0 answers)."""
    disabled = [a for c in ("FCALL", "FCALL_RO", "FUNCTION") for a in ("--rename-command", c, "")]
    server = EmbeddedRedis(disabled)
    info = server.start()
    try:
        yield info
    finally:
        server.stop()


SECRET = "session:7c0ffee-secret-token"


def test_a_server_without_functions_is_one_line_without_the_calls_keys_or_args(
    driver: Driver, no_functions: ServerProcess, reg: ScriptRegistry, tmp_path: Path
) -> None:
    """The server's reply echoes the call ("unknown command 'FCALL', with args beginning
    with: 'bump' '1' '<key>' '<arg>'"): a key can be a session id, an arg a token."""
    c = driver.redis(no_functions.port)
    need = "Redis Functions need Redis 7.0 or later (or Valkey)"
    with pytest.raises(ServerError) as call:
        driver.run(reg.call(c, "bump", [SECRET], ["s3cr3t-arg"]))
    assert str(call.value) == (
        f"the server does not know FCALL: {need}, with FCALL not renamed or disabled; "
        "function bump, library counters did not run"
    )
    for transaction in (False, True):
        pipe = reg.pipeline(c, transaction=transaction)
        pipe.call("peek", [SECRET])
        with pytest.raises(ServerError) as piped:
            driver.run(pipe.execute())
        verb = "FUNCTION" if transaction else "FCALL_RO"  # a transaction checks first
        assert str(piped.value).startswith(f"the server does not know {verb}: {need}")
        assert SECRET not in str(piped.value)
    (tmp_path / "counters.lua").write_text(SOURCE)
    base = ["scripts", "call", "--dir", str(tmp_path), "--url", no_functions.url]
    res = CliRunner().invoke(main, [*base, "bump", "-k", SECRET, "-a", "s3cr3t-arg"])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("error: the server does not know FCALL: ")
    assert SECRET not in res.stderr and "s3cr3t-arg" not in res.stderr
