"""The asyncio auto-pipeline on a real server: shared writes, and every guarantee of
``reg.call`` per caller (order, at most once, OutcomeUnknown, re-send of what never left,
cancellation, the bound, what needs a connection of its own)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio

import luapipe
from luapipe.bench.server import EmbeddedRedis, ServerProcess, free_port
from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    OutcomeUnknown,
    ScriptRuntimeError,
)
from luapipe.scripts.calls import call_steps
from luapipe.scripts.libparse import parse_library
from luapipe.scripts.protocol import ScriptCall
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire.policy import DEFAULT
from luapipe.wire.routing import Locate, Send, Sleep, Steps

from ..drivers import kill_named, stopped
from ..helpers import SLOW, calls

T = TypeVar("T")

SETTER = LuaScript.from_source(
    "setter", "-- @key k\n-- @arg v\nreturn redis.call('SET', KEYS[1], ARGV[1])\n"
)
APPEND = LuaScript.from_source(
    "append", "-- @key log\n-- @arg item\nreturn redis.call('RPUSH', KEYS[1], ARGV[1])\n"
)
BOOM = LuaScript.from_source("boom", "return redis.error_reply('BOOM broke')\n")
LIBRARY = (
    "#!lua name=aplib\n"
    "redis.register_function('ap_set', function(keys, args) "
    "return redis.call('SET', keys[1], args[1]) end)\n"
)


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([SETTER, APPEND, BOOM, SLOW], libraries=[parse_library(LIBRARY)])


def arun(server: ServerProcess, body: Callable[[Any], Awaitable[T]], **kw: Any) -> T:
    """``await body(aclient)`` on a fresh ``redis.asyncio`` client, closed afterwards."""

    async def main() -> T:
        pool = redis.asyncio.ConnectionPool(host=server.host, port=server.port, **kw)
        client = redis.asyncio.Redis(connection_pool=pool)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


# -- shared writes --------------------------------------------------------------------------


def test_concurrent_calls_share_one_write(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    async def body(client: Any) -> tuple[list[Any], int]:
        ap = luapipe.autopipeline(client)
        calls_ = [reg.call(ap, "append", keys=[f"log{i % 4}"], args=[i]) for i in range(60)]
        cmds = [ap.incr("hits") for _ in range(4)]
        out = await asyncio.gather(*calls_, *cmds)
        await ap.aclose()
        return out, ap.writes

    out, writes = arun(redis_server, body)
    assert out[:60] == [i // 4 + 1 for i in range(60)]
    assert out[60:] == [1, 2, 3, 4]
    assert writes == 1  # 64 callers ready together: one write
    assert r.lrange("log0", 0, -1) == [str(i).encode() for i in range(0, 60, 4)]


def test_command_methods_return_what_the_client_returns(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    async def sequence(c: Any) -> list[Any]:
        out = [
            await c.set("s", "v"),
            await c.get("s"),
            await c.hset("h", mapping={"a": 1, "b": 2}),
            await c.hgetall("h"),
            await c.zadd("z", {"x": 1.5, "y": 2}),
            await c.zrange("z", 0, -1, withscores=True),
            await c.exists("nope"),
            await c.get("nope"),
            await c.set("s", "w", get=True),
            await c.ping(),
            await c.execute_command("GET", "s"),
        ]
        await c.flushall()
        return out

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        ours = await sequence(ap)
        await ap.aclose()
        return [ours, await sequence(client)]

    ours, theirs = arun(redis_server, body, decode_responses=True)
    assert ours == theirs
    assert ours[5] == [("x", 1.5), ("y", 2.0)]


# -- order ----------------------------------------------------------------------------------


def test_calls_apply_in_the_order_their_coroutines_started(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        first = await asyncio.gather(ap.set("k", 1), ap.incr("k"))
        return [first, await ap.get("k")]

    assert arun(redis_server, body) == [[True, 2], b"2"]


def test_order_holds_when_the_script_cache_was_just_flushed(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    """A script whose cache another client just flushed, then a command on the same key,
    in one write: the script still applies first (scripts travel as EVAL)."""

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        await reg.call(ap, "setter", keys=["warm"], args=[0])  # the script is cached
        r.script_flush()  # another client flushes every script
        out = await asyncio.gather(
            reg.call(ap, "setter", keys=["k"], args=[1]),
            ap.incr("k"),
            reg.call(ap, "setter", keys=["j"], args=[5]),
            ap.incrby("j", 10),
        )
        writes = ap.writes
        await ap.aclose()
        return [out, writes]

    out, writes = arun(redis_server, body)
    assert out == [b"OK", 2, b"OK", 15]
    assert writes == 2  # the warm-up, then the four together
    assert r.get("k") == b"2" and r.get("j") == b"15"


def test_order_holds_through_a_noscript_healed_by_steps(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    """Steps that send EVALSHA and heal a NOSCRIPT with EVAL (op.run's script form): the
    write ends after the EVALSHA (the hold), and the EVAL goes out before the INCR that
    was issued after it."""
    node = f"{redis_server.host}:{redis_server.port}"
    r.config_resetstat()

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        reg.known.add(node, SETTER.sha)  # we believe it cached; another client flushed it
        call = ScriptCall(SETTER, ("k",), (1,))
        out = await asyncio.gather(
            ap.run(call_steps(call, reg.known, DEFAULT, cluster=False)),
            ap.incr("k"),
            ap.incr("k"),
        )
        await ap.aclose()
        return out

    assert arun(redis_server, body) == [b"OK", 2, 3]
    assert r.get("k") == b"3"
    assert calls(r, "evalsha") == 1 and calls(r, "eval") == 1  # NOSCRIPT, then EVAL


def test_order_holds_through_function_not_found(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    """A function whose library another client just flushed, then commands on its key:
    the FCALL ends its write (the hold), its heal (load + call in one MULTI) goes out
    before the INCRs issued after it."""

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        await reg.call(ap, "ap_set", keys=["warm"], args=[0])  # the library is loaded
        r.function_flush()
        out = await asyncio.gather(
            reg.call(ap, "ap_set", keys=["k"], args=[7]), ap.incr("k"), ap.incr("k")
        )
        await ap.aclose()
        return out

    assert arun(redis_server, body) == [b"OK", 8, 9]
    threaded = luapipe.autopipeline(redis.Redis(host=redis_server.host, port=redis_server.port))
    r.function_flush()
    assert reg.call(threaded, "ap_set", keys=["t"], args=[1]) == b"OK"
    threaded.close()
    assert r.get("t") == b"1"


# -- at most once ---------------------------------------------------------------------------


def test_lost_connection_after_the_write_is_outcome_unknown_and_never_resent(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    """The server is frozen once the write is in its socket: every caller of that write gets
    OutcomeUnknown when the timeout hits; once thawed, each call ran exactly once."""

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        await ap.ping()  # connected
        with stopped(redis_server.pid):
            out = await asyncio.gather(
                *(reg.call(ap, "append", keys=["log"], args=[i]) for i in range(8)),
                return_exceptions=True,
            )
        after = await ap.incr("after")  # a new connection, no error
        await ap.aclose()
        return [*out, after]

    out = arun(redis_server, body, socket_timeout=0.3)
    assert all(isinstance(o, OutcomeUnknown) for o in out[:8]), out
    assert out[8] == 1
    assert r.lrange("log", 0, -1) == [str(i).encode() for i in range(8)]  # once each


def test_a_write_that_never_left_goes_out_on_a_new_connection(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    """The server closed the auto-pipeline's idle connection: the next write is found
    unsendable before anything leaves, so it goes out on a new connection, no error."""

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        await ap.ping()
        assert kill_named(r, "apkill") == 1
        out = await asyncio.gather(
            *(reg.call(ap, "append", keys=["log"], args=[i]) for i in range(5))
        )
        await ap.aclose()
        return out

    assert arun(redis_server, body, client_name="apkill") == [1, 2, 3, 4, 5]


def test_connection_failed_when_no_new_connection_can_be_made() -> None:
    port = free_port()

    async def body() -> list[Any]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=port)
        ap = luapipe.autopipeline(client)
        out = await asyncio.gather(ap.incr("k"), ap.get("k"), return_exceptions=True)
        await client.aclose()
        return out

    out = asyncio.run(body())
    assert all(isinstance(o, ConnectionFailed) and not isinstance(o, OutcomeUnknown) for o in out)


# -- one caller's trouble ---------------------------------------------------------------------


def _conn_ids(r: redis.Redis, name: str) -> list[int]:
    return [int(c["id"]) for c in r.client_list() if c.get("name") == name]


def test_cancelling_a_queued_call_sends_nothing_and_spares_the_rest(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        await ap.ping()
        before = _conn_ids(r, "apcancel")
        slow = asyncio.ensure_future(reg.call(ap, "slow", keys=["ran"], args=[200]))
        await asyncio.sleep(0.05)  # the slow call's write is in flight
        queued = [asyncio.ensure_future(ap.incr(f"q{i}")) for i in range(3)]
        await asyncio.sleep(0)  # they joined the queue behind it
        queued[1].cancel()
        out = await asyncio.gather(slow, *queued, return_exceptions=True)
        after = _conn_ids(r, "apcancel")
        await ap.aclose()
        return [out, before == after]

    out, same_connection = arun(redis_server, body, client_name="apcancel")
    assert out[0] == 1 and out[1] == 1 and out[3] == 1
    assert isinstance(out[2], asyncio.CancelledError)
    assert r.get("q1") is None  # never written, never ran
    assert same_connection


def test_a_timed_out_caller_leaves_the_others_and_the_connection(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        await ap.ping()
        before = _conn_ids(r, "aptimeout")

        async def impatient() -> Any:
            async with asyncio.timeout(0.05):
                return await reg.call(ap, "slow", keys=["ran"], args=[200])

        out = await asyncio.gather(
            impatient(), ap.incr("other"), reg.call(ap, "boom"), ap.incr("other"),
            return_exceptions=True,
        )  # fmt: skip
        out.append(await ap.incr("other"))
        out.append(before == _conn_ids(r, "aptimeout"))
        await ap.aclose()
        return out

    out = arun(redis_server, body, client_name="aptimeout")
    assert isinstance(out[0], TimeoutError)
    assert out[1] == 1 and isinstance(out[2], ScriptRuntimeError) and out[3] == 2
    assert out[4] == 3 and out[5] is True  # the same connection goes on
    assert r.get("ran") == b"1"  # the timed-out call ran (it was written), once


# -- the bound ------------------------------------------------------------------------------


def test_calls_beyond_the_bound_wait_their_turn(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client, max_in_flight=2)
        out = await asyncio.gather(*(ap.rpush("log", i) for i in range(6)))
        writes = ap.writes
        await ap.aclose()
        return [out, writes]

    out, writes = arun(redis_server, body)
    assert out == [1, 2, 3, 4, 5, 6]  # none refused, in order
    assert writes >= 3  # never more than two calls in flight
    assert r.lrange("log", 0, -1) == [str(i).encode() for i in range(6)]


# -- what needs a connection of its own -----------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("SELECT", 1),
        ("CLIENT", "SETNAME", "x"),
        ("WATCH", "k"),
        ("MULTI",),
        ("SUBSCRIBE", "ch"),
        ("AUTH", "pw"),
        ("SCRIPT", "DEBUG", "YES"),  # the next EVAL on it would start a debugging session
    ],
)
def test_connection_state_commands_are_refused_before_sending(
    r: redis.Redis, redis_server: ServerProcess, args: tuple[Any, ...]
) -> None:
    r.config_resetstat()

    async def body(client: Any) -> Exception:
        ap = luapipe.autopipeline(client)
        with pytest.raises(CallArgumentError) as info:
            await ap.execute_command(*args)
        await ap.aclose()
        return info.value

    err = arun(redis_server, body)
    assert "shares its connections" in str(err) and "nothing was sent" in str(err)
    assert calls(r, str(args[0])) == 0


def test_a_blocking_command_runs_on_a_connection_of_its_own(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)

        async def later() -> Any:
            await asyncio.sleep(0.05)
            return await ap.rpush("q", "x")

        out = await asyncio.gather(ap.blpop(["q"], timeout=2), later(), ap.incr("n"))
        await ap.aclose()
        return out

    assert arun(redis_server, body) == [(b"q", b"x"), 1, 1]  # as the client returns it


def test_scripts_admin_and_explicit_pipelines_take_the_auto_pipeline(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        loaded = await reg.load(ap)
        status = await reg.status(ap)
        async with reg.pipeline(ap) as pipe:
            pipe.call("append", keys=["log"], args=["a"]).incr("n")
            piped = await pipe.execute()
        await ap.aclose()
        return [sorted(loaded), not status[0].missing, piped]

    assert arun(redis_server, body) == [["append", "boom", "setter", "slow"], True, [1, 1]]


# -- every protocol and parser ----------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("parser", ["python", "hiredis"])
def test_every_protocol_and_parser(
    r: redis.Redis,
    reg: ScriptRegistry,
    redis_server: ServerProcess,
    protocol: int,
    parser: str,
) -> None:
    """Replies (values, errors, nested errors, parsed ones) read right with each of
    redis-py's parsers, asyncio and threads."""
    from redis._parsers import (
        _AsyncHiredisParser,
        _AsyncRESP2Parser,
        _AsyncRESP3Parser,
        _HiredisParser,
        _RESP2Parser,
        _RESP3Parser,
    )

    aparser = {"python": _AsyncRESP3Parser if protocol == 3 else _AsyncRESP2Parser}.get(
        parser, _AsyncHiredisParser
    )
    sparser = {"python": _RESP3Parser if protocol == 3 else _RESP2Parser}.get(
        parser, _HiredisParser
    )

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        out = await asyncio.gather(
            reg.call(ap, "append", keys=["log"], args=["a"]),
            ap.hset("h", mapping={"x": 1}),
            ap.hgetall("h"),
            reg.call(ap, "boom"),
            ap.lpush("h", 1),
            ap.zadd("z", {"m": 2.5}),
            ap.zrange("z", 0, -1, withscores=True),
            return_exceptions=True,
        )
        out.append(await client.zrange("z", 0, -1, withscores=True))  # as the client reads it
        await ap.aclose()
        return out

    out = arun(redis_server, body, protocol=protocol, parser_class=aparser)
    assert out[0] == 1 and out[1] == 1 and out[2] == {b"x": b"1"}
    assert isinstance(out[3], ScriptRuntimeError) and "BOOM" in str(out[3])
    assert isinstance(out[4], luapipe.ServerError) and "WRONGTYPE" in str(out[4])
    assert out[5] == 1 and out[6] == out[7] and out[7] in ([(b"m", 2.5)], [[b"m", 2.5]])
    pool = redis.ConnectionPool(
        host=redis_server.host, port=redis_server.port, protocol=protocol, parser_class=sparser
    )
    sync_ap = luapipe.autopipeline(redis.Redis(connection_pool=pool))
    assert reg.call(sync_ap, "append", keys=["log"], args=["b"]) == 2
    assert sync_ap.hgetall("h") == {b"x": b"1"}
    with pytest.raises(ScriptRuntimeError, match="BOOM"):
        reg.call(sync_ap, "boom")
    assert sync_ap.zrange("z", 0, -1, withscores=True) == out[7]
    sync_ap.close()


def test_fakeredis_clients_work_too(reg: ScriptRegistry) -> None:
    """fakeredis has no stream transport: redis-py's own writes and reads, same results."""
    import fakeredis

    server = fakeredis.FakeServer(version=(7, 0))

    async def body() -> list[Any]:
        ap = luapipe.autopipeline(fakeredis.FakeAsyncRedis(server=server))
        out = await asyncio.gather(
            *(reg.call(ap, "append", keys=["log"], args=[i]) for i in range(3)),
            ap.lpush("log", 1),
            return_exceptions=True,
        )
        await ap.aclose()
        return out

    out = asyncio.run(body())
    assert out[:3] == [1, 2, 3] and isinstance(out[3], int)
    sync_ap = luapipe.autopipeline(fakeredis.FakeRedis(server=server))
    assert reg.call(sync_ap, "append", keys=["log"], args=["x"]) == 5
    sync_ap.set("s", 1)
    with pytest.raises(luapipe.ServerError, match="WRONGTYPE"):
        sync_ap.lpush("s", 1)
    sync_ap.close()


# -- op.run through the auto-pipeline ---------------------------------------------------------


def test_every_operation_and_form_agrees_with_the_plain_client(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """``op.run(ap, form, ...)``: every catalogue operation in every form gives what the sync
    form gives from the same state (reply or error, round trips, WATCH retries, keyspace),
    through the asyncio auto-pipeline and the thread one."""
    import random

    from luapipe.operations.verify import dump, setup

    from ..operations.test_aio_forms import OPS, compare_all, sync_outcome

    sync = redis.Redis(host=redis_server.host, port=redis_server.port)
    ap = luapipe.autopipeline(redis.asyncio.Redis(host=redis_server.host, port=redis_server.port))
    agreed, errors = compare_all(sync, ap, cases=4)
    assert agreed == len(OPS) * 5 * 4 and 0 < errors < agreed / 2
    threaded = luapipe.autopipeline(redis.Redis(host=redis_server.host, port=redis_server.port))
    for name, op in OPS.items():
        rng = random.Random(name)
        for i in range(3):
            case = op.sample_case(rng, f"apt{i}:{name}:")
            for form in op.forms:
                setup(sync, case)
                want = (sync_outcome(op, sync, form, case), dump(sync, case.namespace))
                setup(sync, case)
                got = (sync_outcome(op, threaded, form, case), dump(sync, case.namespace))
                assert got == want, (name, form, i)
    threaded.close()
    sync.close()


def test_the_knobs_cap_a_write_and_wait_for_more_callers(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    async def body(client: Any) -> list[Any]:
        capped = luapipe.autopipeline(client, max_batch=2)
        out = await asyncio.gather(*(capped.incr("n") for _ in range(6)))
        waiting = luapipe.autopipeline(client, max_delay=0.05)
        await waiting.ping()
        first = asyncio.ensure_future(asyncio.gather(waiting.incr("m"), waiting.incr("m")))
        await asyncio.sleep(0.01)  # within max_delay: joins the same write
        late = await waiting.incr("m")
        await first
        writes = [capped.writes, waiting.writes]
        await capped.aclose()
        await waiting.aclose()
        return [out, late, writes]

    out, late, writes = arun(redis_server, body)
    assert out == [1, 2, 3, 4, 5, 6] and late == 3
    assert writes == [3, 2]  # 6 calls, 2 a write; the ping, then the three together


def test_a_closed_auto_pipeline_sends_nothing_and_one_loop_is_its_own(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
    ap = luapipe.autopipeline(client)

    async def first() -> Any:
        return await ap.incr("n")

    assert asyncio.run(first()) == 1
    with pytest.raises(CallArgumentError, match="event loop it first ran on"):
        asyncio.run(first())  # another loop

    async def closed() -> None:
        fresh = luapipe.autopipeline(client)
        await fresh.ping()
        await fresh.aclose()
        with pytest.raises(ConnectionFailed, match="closed"):
            await fresh.incr("n")

    asyncio.run(closed())
    sync_ap = luapipe.autopipeline(redis.Redis(host=redis_server.host, port=redis_server.port))
    sync_ap.close()
    with pytest.raises(ConnectionFailed, match="closed"):
        sync_ap.incr("n")
    assert r.get("n") == b"1"


def test_a_value_the_encoding_refuses_is_a_call_argument_error(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    """A str UTF-8 cannot encode (a lone surrogate) is the caller's CallArgumentError, as
    from ``reg.call`` on the client (hiredis's packer raised UnicodeEncodeError, which the
    auto-pipeline let through); the other callers go on."""

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        out = await asyncio.gather(
            ap.incr("n"),
            reg.call(ap, "append", keys=["log"], args=["\udcff"]),
            reg.call(ap, "ap_set", keys=["k"], args=["\udcff"]),
            ap.incr("n"),
            return_exceptions=True,
        )
        await ap.aclose()
        return out

    out = arun(redis_server, body)
    assert out[0] == 1 and out[3] == 2
    for err in out[1:3]:
        assert isinstance(err, CallArgumentError) and "nothing was sent" in str(err)
    sync_ap = luapipe.autopipeline(redis.Redis(host=redis_server.host, port=redis_server.port))
    with pytest.raises(CallArgumentError, match="nothing was sent"):
        reg.call(sync_ap, "append", keys=["log"], args=["\udcff"])
    sync_ap.close()
    assert r.exists("log", "k") == 0


def test_command_methods_that_read_the_clients_settings(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """redis-py methods that ask their client for its encoder or connection settings
    (``slowlog_get``, ``acl_setuser``, ``register_script``) work on both flavours (they raised
    AttributeError)."""

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        script = ap.register_script("return redis.call('INCR', KEYS[1])")
        out = [await ap.slowlog_get(), await ap.acl_setuser("ap_user"), await script(keys=["n"])]
        await ap.aclose()
        return out

    r.slowlog_reset()
    assert arun(redis_server, body, decode_responses=True) == [[], True, 1]
    r.slowlog_reset()
    ap = luapipe.autopipeline(redis.Redis(host=redis_server.host, port=redis_server.port))
    script = ap.register_script("return redis.call('INCR', KEYS[1])")
    assert [ap.slowlog_get(), ap.acl_setuser("ap_user2"), script(keys=["n"])] == [[], True, 2]
    ap.close()
    r.acl_deluser("ap_user", "ap_user2")


def test_a_blocking_xread_runs_apart_after_a_plain_one(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """The route of a command is remembered by its first word only where the words after
    it cannot change it: an ``XREAD ... BLOCK`` issued after a plain ``XREAD`` still runs on
    a connection of its own (it was sent on the shared one, holding up every caller)."""

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        await client.xadd("s", {"f": "v"}, id="1-1")
        await ap.execute_command("XREAD", "STREAMS", "s", "0")
        blocked = asyncio.ensure_future(
            ap.execute_command("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
        )
        await asyncio.sleep(0.05)
        try:
            meanwhile = await asyncio.wait_for(ap.incr("n"), 3)
        finally:
            await client.xadd("s", {"f": "w"}, id="2-1")  # ends the block either way
        woken = await blocked
        await ap.aclose()
        return [meanwhile, woken[0][1][0][0]]

    assert arun(redis_server, body) == [1, b"2-1"]
    ap = luapipe.autopipeline(redis.Redis(host=redis_server.host, port=redis_server.port))
    ap.execute_command("XREAD", "STREAMS", "s", "0")
    out: list[Any] = []
    reader = threading.Thread(
        target=lambda: out.append(ap.execute_command("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    )
    reader.start()
    time.sleep(0.05)
    incr = threading.Thread(target=lambda: out.append(ap.incr("n")))
    incr.start()
    incr.join(3)
    stuck = incr.is_alive()
    r.xadd("s", {"f": "x"}, id="3-1")
    reader.join(3)
    incr.join(3)
    ap.close()
    assert not stuck and out[0] == 2  # the INCR went by while the XREAD blocked


def test_closing_fails_calls_waiting_for_a_place_or_between_round_trips(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    """Calls that waited for a place, or were between round trips, when the auto-pipeline
    closed get ConnectionFailed and run nowhere (they raised AttributeError: the closed
    auto-pipeline had no packer left)."""

    def later() -> Steps[Any]:
        yield Sleep(0.1)
        node = yield Locate(None, False)
        (reply,) = yield Send([("INCR", "n")], node)
        return reply

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client, max_in_flight=4)
        await ap.ping()
        tasks = [asyncio.ensure_future(reg.call(ap, "slow", keys=["ran"], args=[300]))]
        tasks.append(asyncio.ensure_future(ap.run(later())))
        await asyncio.sleep(0.02)  # the slow call's write is in flight
        tasks += [asyncio.ensure_future(ap.incr("n")) for _ in range(5)]
        await asyncio.sleep(0.05)  # one sleeps in its steps, two queued, three wait a place
        await ap.aclose()
        return await asyncio.gather(*tasks, return_exceptions=True)

    out = arun(redis_server, body)
    assert isinstance(out[0], OutcomeUnknown)  # written: it ran
    assert all(isinstance(o, ConnectionFailed) and "closed" in str(o) for o in out[1:]), out
    assert r.get("n") is None and r.get("ran") == b"1"


@pytest.fixture(scope="module")
def small_bulk() -> Iterator[ServerProcess]:
    """A server of its own whose proto-max-bulk-len is Redis's smallest, 1 MB."""
    server = EmbeddedRedis(["--proto-max-bulk-len", "1mb"])
    try:
        yield server.start()
    finally:
        server.stop()


def test_a_value_over_the_servers_limit_is_refused_before_sending(
    reg: ScriptRegistry, small_bulk: ServerProcess
) -> None:
    """A key or argument longer than the server's proto-max-bulk-len is refused before
    sending, as on the client (``reg.call``) and in an explicit pipeline: sent, the
    server's protocol error closed the shared connection, and every call written after it
    got OutcomeUnknown though none of them ran."""
    big = "x" * (2 * 1024 * 1024)
    with redis.Redis(host=small_bulk.host, port=small_bulk.port) as r:
        r.flushall()

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        out = await asyncio.gather(
            ap.incr("n"),
            reg.call(ap, "append", keys=["log"], args=[big]),
            ap.incr("n"),
            reg.call(ap, "ap_set", keys=["k"], args=[big]),
            ap.incr("n"),
            ap.set("k", big),
            ap.incr("n"),
            return_exceptions=True,
        )
        await ap.aclose()
        return out

    out = arun(small_bulk, body)
    assert out[0::2] == [1, 2, 3, 4], out
    for err in out[1::2]:
        assert isinstance(err, CallArgumentError), out
        assert "proto-max-bulk-len" in str(err) and "nothing was sent" in str(err)
    assert "script 'append': args[0] (item)" in str(out[1])
    ap = luapipe.autopipeline(redis.Redis(host=small_bulk.host, port=small_bulk.port))
    for call in (
        lambda: reg.call(ap, "append", keys=["log"], args=[big]),
        lambda: ap.set("k", big),
    ):
        with pytest.raises(CallArgumentError, match="proto-max-bulk-len"):
            call()
    assert ap.incr("n") == 5
    ap.close()
    with redis.Redis(host=small_bulk.host, port=small_bulk.port) as r:
        assert r.exists("log", "k") == 0


def test_a_big_value_within_the_limit_keeps_its_place(
    reg: ScriptRegistry, small_bulk: ServerProcess
) -> None:
    """A value of 1 MB or more makes the call ask the server's limit first; the calls issued
    after it still apply after it (the question ends its write, as an FCALL does)."""
    value = "v" * (600 * 1024)  # under 1 MB, long enough to be asked about
    with redis.Redis(host=small_bulk.host, port=small_bulk.port) as r:
        r.flushall()

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        out = await asyncio.gather(
            reg.call(ap, "setter", keys=["a"], args=[value]),
            ap.append("a", "!"),
            ap.set("b", value),
            ap.append("b", "!"),
        )
        await ap.aclose()
        return [out[0], out[2], await client.strlen("a"), await client.strlen("b")]

    assert arun(small_bulk, body) == [b"OK", True, len(value) + 1, len(value) + 1]


def test_a_connection_being_made_survives_a_garbage_collection(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """The task making a link's connection is kept: asyncio holds only weak references to
    tasks, and one waiting on its handshake's reply (without a socket_timeout) is a cycle
    nothing else reaches, so a garbage collection destroyed it ("Task was destroyed but it
    is pending!") and the calls queued for that connection waited until some later call
    came along; seen under load in a drill of 100 tasks."""

    async def body(client: Any) -> Any:
        ap = luapipe.autopipeline(client)
        with stopped(redis_server.pid):  # the handshake waits for the frozen server
            call = asyncio.ensure_future(ap.incr("n"))
            await asyncio.sleep(0.05)
            gc.collect()
        try:
            return await asyncio.wait_for(call, 5)
        finally:
            await ap.aclose()

    assert arun(redis_server, body, socket_timeout=None) == 1  # no timer keeps it either
