"""reg.load / status / call on a real server and on fakeredis (same bodies)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from luapipe.bench.server import ServerProcess
from luapipe.errors import (
    CallArgumentError,
    LuapipeError,
    ScriptRuntimeError,
    ServerError,
    UnknownScriptError,
)
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..conftest import SCRIPTS_DIR
from ..helpers import calls, reset_stats

COUNTER = LuaScript.from_source(
    "counted",
    "-- Count how often this script ran.\n-- @key ran\nreturn redis.call('INCR', KEYS[1])\n",
)
FAKE_NOSCRIPT = LuaScript.from_source(
    "fake_noscript",
    "-- @key ran\nredis.call('INCR', KEYS[1])\nreturn redis.error_reply('NOSCRIPT fake')\n",
)
BOOM = LuaScript.from_source(
    "boom", "-- @key k\nlocal x = 1\nerror('boom at line three')\n", path="scripts/boom.lua"
)


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([COUNTER, FAKE_NOSCRIPT, BOOM])


def test_load_returns_sha1_of_the_bytes(client: redis.Redis, reg: ScriptRegistry) -> None:
    shas = reg.load(client)
    assert shas["counted"] == hashlib.sha1(COUNTER.source.encode()).hexdigest()
    assert client.script_exists(*shas.values()) == [True, True, True]


def test_status_reports_missing_then_loaded(client: redis.Redis, reg: ScriptRegistry) -> None:
    (before,) = reg.status(client)
    assert before.missing == ("boom", "counted", "fake_noscript")
    reg.load(client)
    (after,) = reg.status(client)
    assert after.missing == ()


def test_call_runs_once_in_steady_state_and_after_flush(
    client: redis.Redis, reg: ScriptRegistry
) -> None:
    assert reg.call(client, "counted", keys=["ran"]) == 1  # not loaded yet: loaded inline
    assert reg.call(client, "counted", keys=["ran"]) == 2
    client.script_flush()
    assert reg.call(client, "counted", keys=["ran"]) == 3  # NOSCRIPT -> load -> once
    assert int(client.get("ran") or 0) == 3


def test_own_noscript_error_is_not_a_missing_script(
    client: redis.Redis, reg: ScriptRegistry
) -> None:
    reg.load(client)
    with pytest.raises(ScriptRuntimeError, match="NOSCRIPT fake"):
        reg.call(client, "fake_noscript", keys=["ran"])
    assert int(client.get("ran") or 0) == 1  # redis-py's Script would have run it twice


def test_runtime_error_names_file_and_line(client: redis.Redis, reg: ScriptRegistry) -> None:
    with pytest.raises(ScriptRuntimeError, match=r"scripts/boom\.lua:3: .*boom at line three"):
        reg.call(client, "boom", keys=["k"])


def test_unknown_name_and_wrong_counts_send_nothing(r: redis.Redis, reg: ScriptRegistry) -> None:
    reset_stats(r)
    with pytest.raises(UnknownScriptError):
        reg.call(r, "nope")
    with pytest.raises(CallArgumentError):
        reg.call(r, "counted", keys=[])
    with pytest.raises(CallArgumentError):
        reg.call(r, "counted", keys=["a"], args=["surplus"])
    assert calls(r, "evalsha") == 0 and calls(r, "script|load") == 0


def test_steady_state_call_is_one_evalsha(r: redis.Redis, reg: ScriptRegistry) -> None:
    reg.load(r)
    reset_stats(r)
    for _ in range(50):
        reg.call(r, "counted", keys=["ran"])
    assert calls(r, "evalsha") == 50
    assert calls(r, "script|load") == 0 and calls(r, "script|exists") == 0


def test_first_call_loads_inline(r: redis.Redis, reg: ScriptRegistry) -> None:
    reset_stats(r)
    reg.call(r, "counted", keys=["ran"])
    assert calls(r, "script|load") == 1 and calls(r, "evalsha") == 1


def test_replies_through_every_protocol_and_parser(real_variant: redis.Redis) -> None:
    reg = ScriptRegistry.from_directory(SCRIPTS_DIR)
    assert reg.call(real_variant, "rate_limit_fixed", keys=["rl"], args=[1, 60])[:2] == [1, 1]
    assert reg.call(real_variant, "rate_limit_fixed", keys=["rl"], args=[1, 60])[:2] == [0, 2]
    real_variant.script_flush()
    assert reg.call(real_variant, "check_and_decr", keys=["s"], args=[1]) == -1


def test_error_reply_from_server_is_luapipe_error(client: redis.Redis) -> None:
    reg = ScriptRegistry(
        [LuaScript.from_source("wrongtype", "-- @key k\nreturn redis.call('INCR', KEYS[1])\n")]
    )
    client.rpush("lst", "x")
    with pytest.raises(ServerError, match=r"WRONGTYPE|wrong kind"):
        reg.call(client, "wrongtype", keys=["lst"])


def test_redis_call_error_names_the_scripts_line(r: redis.Redis) -> None:
    """Redis 7 gives the line of a failed redis.call only in its trailer."""
    source = "-- @key k\nlocal a = 1\nreturn redis.call('INCR', KEYS[1])\n"
    reg = ScriptRegistry([LuaScript.from_source("wrongtype", source, path="lua/wrongtype.lua")])
    r.rpush("lst", "x")
    with pytest.raises(ScriptRuntimeError) as err:
        reg.call(r, "wrongtype", keys=["lst"])
    assert str(err.value).startswith("lua/wrongtype.lua:3: WRONGTYPE Operation against a key")
    assert "user_script" not in str(err.value) and str(err.value).endswith("(script wrongtype)")


def test_from_directory_default_is_bundled_library() -> None:
    assert (
        ScriptRegistry.from_directory().names()
        == ScriptRegistry.from_directory(SCRIPTS_DIR).names()
    )


def test_empty_directory_is_an_empty_registry(tmp_path: Path) -> None:
    assert ScriptRegistry.from_directory(tmp_path).names() == []


def test_single_connection_client_shared_by_threads(
    redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    """redis-py serialises a single-connection client with its lock; luapipe's sessions
    must take the same lock, or threads read each other's replies."""
    shared = redis.Redis(port=redis_server.port, single_connection_client=True)
    shared.delete(*(f"t{i}" for i in range(8)))
    wrong: list[tuple[int, int, Any]] = []

    def worker(t: int) -> None:
        for i in range(1, 301):
            got = reg.call(shared, "counted", keys=[f"t{t}"])
            if got != i:
                wrong.append((t, i, got))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert wrong == []
        assert [int(shared.get(f"t{t}") or 0) for t in range(8)] == [300] * 8
    finally:
        shared.close()


EXACT_NOSCRIPT = LuaScript.from_source(
    "exact_noscript",
    "-- @key ran\nredis.call('INCR', KEYS[1])\n"
    "return redis.error_reply('NOSCRIPT No matching script. Please use EVAL.')\n",
)


def test_own_error_with_the_servers_exact_noscript_text_runs_at_most_twice(
    r: redis.Redis,
) -> None:
    """Indistinguishable from a flushed cache, so one re-send as EVAL; its NOSCRIPT then is
    the script's own (EVAL is never answered NOSCRIPT), raised instead of another reload."""
    reg = ScriptRegistry([EXACT_NOSCRIPT])
    reg.load(r)
    with pytest.raises(ScriptRuntimeError, match="NOSCRIPT No matching script"):
        reg.call(r, "exact_noscript", keys=["ran"])
    assert r.get("ran") == b"2"  # was 8, with "did not run" in the error
    with reg.pipeline(r) as p:
        p.call("exact_noscript", keys=["p"]).call("exact_noscript", keys=["p"])
        results = p.execute(raise_on_error=False)
    assert all(isinstance(x, ScriptRuntimeError) for x in results)
    assert r.get("p") == b"4"


def test_errors_inside_a_running_script_are_runtime_errors_with_a_line(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """NOPERM on a redis.call, or a write in a no-writes script, happens after the lines
    before it ran: a ScriptRuntimeError at that line, never 'permission denied' (a
    connection-level error class the caller could take as safe to retry)."""
    setter = (
        "-- @key k\nredis.call('SET', KEYS[1], 'x')\nreturn redis.call('INCR', KEYS[1] .. 'n')\n"
    )
    sneaky = (
        "#!lua flags=no-writes\n-- @key k\nlocal v = redis.call('GET', KEYS[1])\n"
        "return redis.call('SET', KEYS[1], 'y')\n"
    )
    reg = ScriptRegistry(
        [
            LuaScript.from_source("setter", setter, path="s/setter.lua"),
            LuaScript.from_source("sneaky", sneaky, path="s/sneaky.lua"),
        ]
    )
    with pytest.raises(ScriptRuntimeError, match=r"^s/sneaky\.lua:4: .*(read-only|Write commands)"):
        reg.call(r, "sneaky", keys=["k"])
    r.execute_command("ACL", "SETUSER", "noincr", "on", ">pw", "~*", "+@all", "-incr")
    limited = redis.Redis(port=redis_server.port, username="noincr", password="pw")
    try:
        # Redis 7.0: "The user executing the script can't run this command or subcommand";
        # Redis 7.2, Valkey 8: "ACL failure in script: User noincr has no permissions to run
        # the 'incr' command"
        acl = r"(can't run this command|no permissions to run the 'incr' command)"
        with pytest.raises(ScriptRuntimeError, match=rf"^s/setter\.lua:3: .*{acl}"):
            reg.call(limited, "setter", keys=["k"])
        assert r.get("k") == b"x"  # line 2 ran before the refusal
    finally:
        limited.close()
        r.execute_command("ACL", "DELUSER", "noincr")


def test_a_refused_eval_does_not_mark_the_script_cached(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """After a flush the call is re-sent as EVAL; if the server refuses it before running
    (NOPERM here: this user may EVALSHA but not EVAL) the script was not cached, so the
    registry must not believe it is: the next call loads it inline and runs once."""
    reg = ScriptRegistry([COUNTER])
    reg.call(r, "counted", keys=["ran"])
    address = f"{redis_server.host}:{redis_server.port}"
    assert reg.known.has(address, COUNTER.sha)
    r.script_flush()
    r.execute_command(
        "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "+evalsha", "+script|load", "+incr"
    )
    limited = redis.Redis(
        host=redis_server.host, port=redis_server.port, username="noeval", password="pw"
    )
    try:
        with pytest.raises(LuapipeError, match="NOPERM"):
            reg.call(limited, "counted", keys=["ran"])
        assert not reg.known.has(address, COUNTER.sha)
        assert r.script_exists(COUNTER.sha) == [False]
        assert reg.call(limited, "counted", keys=["ran"]) == 2  # SCRIPT LOAD inline, once
    finally:
        limited.close()
        r.execute_command("ACL", "DELUSER", "noeval")
