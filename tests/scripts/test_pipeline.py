"""reg.pipeline: one round trip, no SCRIPT EXISTS, exactly-once after a flush, no partial commit."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from luapipe.errors import CallArgumentError, ScriptRuntimeError, ServerError
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..helpers import calls, reset_stats

COUNTER = LuaScript.from_source(
    "counted", "-- @key ran\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)
OTHER = LuaScript.from_source("other", "-- @key ran\nreturn redis.call('INCR', KEYS[1])\n")
FAILS = LuaScript.from_source("fails", "-- @key k\nredis.call('INCR', KEYS[1])\nerror('no')\n")


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([COUNTER, OTHER, FAILS])


def test_results_in_queue_order_with_redis_py_commands(
    client: redis.Redis, reg: ScriptRegistry
) -> None:
    with reg.pipeline(client) as pipe:
        pipe.call("counted", keys=["a"], args=[5])
        pipe.incr("hits")
        pipe.hset("h", mapping={"f": "v"})
        pipe.hgetall("h")
        pipe.zadd("z", {"m": 2.5})
        pipe.zrange("z", 0, -1, withscores=True)
        results = pipe.execute()
    assert results == [5, 1, 1, {b"f": b"v"}, 1, [(b"m", 2.5)]]


def test_steady_state_one_round_trip_no_script_exists(r: redis.Redis, reg: ScriptRegistry) -> None:
    pipe = reg.pipeline(r)
    for _ in range(3):  # warm: the first execute loads inline
        pipe.call("counted", keys=["a"], args=[1]).call("other", keys=["b"])
        pipe.execute()
    reset_stats(r)
    for _ in range(1000):
        for _ in range(5):
            pipe.call("counted", keys=["a"], args=[1]).call("other", keys=["b"])
        pipe.execute()
        assert pipe.last_round_trips == 1
    assert calls(r, "script|exists") == 0 and calls(r, "script|load") == 0
    assert calls(r, "evalsha") == 10_000


def test_unknown_scripts_load_inline_in_the_same_round_trip(
    r: redis.Redis, reg: ScriptRegistry
) -> None:
    reset_stats(r)
    with reg.pipeline(r) as pipe:
        pipe.call("counted", keys=["a"], args=[1]).call("counted", keys=["a"], args=[1])
        pipe.call("other", keys=["b"])
        assert pipe.execute() == [1, 2, 1]
        assert pipe.last_round_trips == 1
    assert calls(r, "script|load") == 2  # once per script, not per call


def test_flush_between_calls_resends_only_failed_script_calls(
    client: redis.Redis, reg: ScriptRegistry
) -> None:
    pipe = reg.pipeline(client)
    pipe.call("counted", keys=["a"], args=[1]).incr("plain").execute()  # now "known"
    client.script_flush()
    for _ in range(3):
        pipe.call("counted", keys=["a"], args=[1])
        pipe.incr("plain")
    results = pipe.execute()
    assert results == [2, 2, 3, 3, 4, 4]
    assert pipe.last_reloads == 3 and pipe.last_round_trips == 2
    assert int(client.get("a") or 0) == 4 and int(client.get("plain") or 0) == 4


def test_script_error_in_a_pipeline_keeps_other_results(
    client: redis.Redis, reg: ScriptRegistry
) -> None:
    with reg.pipeline(client) as pipe:
        pipe.incr("x").call("fails", keys=["k"]).incr("x")
        results = pipe.execute(raise_on_error=False)
    assert results[0] == 1 and results[2] == 2
    assert isinstance(results[1], ScriptRuntimeError)
    with reg.pipeline(client) as pipe, pytest.raises(ScriptRuntimeError, match="no"):
        pipe.call("fails", keys=["k"]).execute()


def test_transaction_never_partially_commits_after_a_flush(
    r: redis.Redis, reg: ScriptRegistry
) -> None:
    reg.load(r)  # the registry believes the scripts are cached...
    r.script_flush()  # ...but they are not
    with reg.pipeline(r, transaction=True) as pipe:
        pipe.incr("before").call("counted", keys=["a"], args=[1]).incr("after")
        assert pipe.execute() == [1, 1, 1]
        assert pipe.last_round_trips == 1
    assert r.get("a") == b"1" and r.get("before") == b"1" and r.get("after") == b"1"


def test_transaction_runs_scripts_as_eval_inside_multi(r: redis.Redis, reg: ScriptRegistry) -> None:
    reset_stats(r)
    with reg.pipeline(r, transaction=True) as pipe:
        pipe.call("counted", keys=["a"], args=[2]).hgetall("nothing")
        assert pipe.execute() == [2, {}]
    assert calls(r, "eval") == 1 and calls(r, "evalsha") == 0
    assert calls(r, "multi") == 1 and calls(r, "exec") == 1


def test_transaction_queue_error_aborts_everything(
    client: redis.Redis, reg: ScriptRegistry
) -> None:
    with reg.pipeline(client, transaction=True) as pipe:
        pipe.incr("x")
        pipe.execute_command("INCR")  # wrong arity: refused at queue time
        with pytest.raises(ServerError, match="nothing was applied"):
            pipe.execute()
    assert client.get("x") is None


def test_pipeline_over_every_protocol_and_parser(real_variant: redis.Redis) -> None:
    reg = ScriptRegistry([COUNTER])
    for transaction in (False, True):
        with reg.pipeline(real_variant, transaction=transaction) as pipe:
            pipe.call("counted", keys=["a"], args=[3]).set("s", "v").get("s")
            res = pipe.execute()
        assert res[0] in (3, 6) and res[1] is True and res[2] == b"v"


def test_empty_execute_sends_nothing(r: redis.Redis, reg: ScriptRegistry) -> None:
    reset_stats(r)
    assert reg.pipeline(r).execute() == []
    assert calls(r, "evalsha") == 0


@pytest.mark.parametrize("transaction", [False, True])
@pytest.mark.parametrize(
    "queue",
    [
        lambda p: p.execute_command("EXEC"),
        lambda p: p.execute_command("multi"),
        lambda p: p.execute_command("DISCARD"),
        lambda p: p.execute_command("WATCH", "a"),
        lambda p: p.watch("a"),  # a silent no-op stub in redis-py's command mixin
        lambda p: p.unwatch(),
        lambda p: p.multi(),
    ],
)
def test_transaction_control_is_refused_when_queued(
    r: redis.Redis, reg: ScriptRegistry, transaction: bool, queue: Any
) -> None:
    """A queued EXEC or MULTI would commit half the batch and shift every reply after it."""
    r.set("a", 0)
    with reg.pipeline(r, transaction=transaction) as p:
        p.incr("a")
        with pytest.raises(CallArgumentError, match="cannot be queued in a luapipe pipeline"):
            queue(p)
        assert p.execute() == [1]  # the rest of the queue is intact
    assert r.get("a") == b"1"
