"""asyncio: same semantics as the sync path, proved by what the server counted."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import fakeredis
import pytest
import redis
import redis.asyncio
from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser, _AsyncRESP3Parser

from luapipe.bench.server import ServerProcess
from luapipe.errors import CallArgumentError, OutcomeUnknown, ScriptRuntimeError
from luapipe.scripts import registry as aio
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..helpers import SLOW, calls, reset_stats

T = TypeVar("T")

COUNTER = LuaScript.from_source(
    "counted", "-- @key ran\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)
FAKE_NOSCRIPT = LuaScript.from_source(
    "liar", "-- @key ran\nredis.call('INCR', KEYS[1])\nreturn redis.error_reply('NOSCRIPT fake')\n"
)


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([COUNTER, FAKE_NOSCRIPT, SLOW])


Factory = Callable[..., redis.asyncio.Redis]


@pytest.fixture(params=["real", "fake"])
def aclient(request: pytest.FixtureRequest) -> Iterator[Factory]:
    """Builds async clients (inside the test's event loop) on the real server or fakeredis."""
    if request.param == "real":
        r: redis.Redis = request.getfixturevalue("r")
        kw = r.connection_pool.connection_kwargs
        yield lambda **extra: redis.asyncio.Redis(host=kw["host"], port=kw["port"], **extra)
    else:
        server = fakeredis.FakeServer(version=(7, 0))
        yield lambda **extra: fakeredis.FakeAsyncRedis(server=server, **extra)


def run(factory: Factory, body: Callable[[redis.asyncio.Redis], Awaitable[T]], **kw: Any) -> T:
    async def main() -> T:
        client = factory(**kw)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_call_loads_inline_then_evalsha_only(r: redis.Redis, reg: ScriptRegistry) -> None:
    kw = r.connection_pool.connection_kwargs

    async def body(c: redis.asyncio.Redis) -> list[Any]:
        return [await reg.call(c, "counted", keys=["a"], args=[2]) for _ in range(50)]

    reset_stats(r)
    factory: Factory = lambda **x: redis.asyncio.Redis(host=kw["host"], port=kw["port"], **x)  # noqa: E731
    assert run(factory, body) == list(range(2, 101, 2))
    assert calls(r, "script|load") == 1 and calls(r, "evalsha") == 50
    assert calls(r, "script|exists") == 0 and calls(r, "eval") == 0


@pytest.mark.parametrize("single", [False, True], ids=["pooled", "single-connection"])
def test_flushed_cache_runs_the_script_exactly_once(
    aclient: Factory, reg: ScriptRegistry, single: bool
) -> None:
    async def body(c: redis.asyncio.Redis) -> tuple[Any, ...]:
        first = await reg.call(c, "counted", keys=["a"], args=[1])
        await c.script_flush()
        second = await reg.call(c, "counted", keys=["a"], args=[1])
        return first, second, await c.get("a")

    assert run(aclient, body, single_connection_client=single) == (1, 2, b"2")


def test_scripts_own_noscript_error_is_not_a_reload(aclient: Factory, reg: ScriptRegistry) -> None:
    async def body(c: redis.asyncio.Redis) -> Any:
        with pytest.raises(ScriptRuntimeError, match="NOSCRIPT fake"):
            await reg.call(c, "liar", keys=["ran"])
        return await c.get("ran")

    assert run(aclient, body) == b"1"


def test_pipeline_results_in_queue_order(aclient: Factory, reg: ScriptRegistry) -> None:
    async def body(c: redis.asyncio.Redis) -> list[Any]:
        async with reg.pipeline(c) as p:
            p.call("counted", keys=["a"], args=[5]).incr("hits")
            p.hset("h", mapping={"f": "v"}).hgetall("h")
            p.zadd("z", {"m": 2.5}).zrange("z", 0, -1, withscores=True)
            return await p.execute()

    assert run(aclient, body, protocol=2) == [5, 1, 1, {b"f": b"v"}, 1, [(b"m", 2.5)]]


def test_pipeline_steady_state_is_one_round_trip(r: redis.Redis, reg: ScriptRegistry) -> None:
    kw = r.connection_pool.connection_kwargs

    async def body(c: redis.asyncio.Redis) -> list[int]:
        async with reg.pipeline(c) as p:
            await p.call("counted", keys=["a"], args=[1]).execute()  # warm: loads inline
            reset_stats(r)
            trips = []
            for _ in range(100):
                for _ in range(5):
                    p.call("counted", keys=["a"], args=[1]).incr("plain")
                await p.execute()
                trips.append(p.last_round_trips)
            return trips

    factory: Factory = lambda **x: redis.asyncio.Redis(host=kw["host"], port=kw["port"], **x)  # noqa: E731
    assert set(run(factory, body)) == {1}
    assert calls(r, "evalsha") == 500 and r.mget("a", "plain") == [b"501", b"500"]
    assert calls(r, "script|exists") == 0 and calls(r, "script|load") == 0


def test_pipeline_after_flush_resends_only_failed_calls(
    aclient: Factory, reg: ScriptRegistry
) -> None:
    async def body(c: redis.asyncio.Redis) -> tuple[Any, ...]:
        p = reg.pipeline(c)
        await p.call("counted", keys=["a"], args=[1]).incr("plain").execute()
        await c.script_flush()
        for _ in range(3):
            p.call("counted", keys=["a"], args=[1]).incr("plain")
        results = await p.execute()
        return results, p.last_reloads, p.last_round_trips, await c.mget("a", "plain")

    assert run(aclient, body) == ([2, 2, 3, 3, 4, 4], 3, 2, [b"4", b"4"])


def test_transaction_never_depends_on_the_cache(aclient: Factory, reg: ScriptRegistry) -> None:
    async def body(c: redis.asyncio.Redis) -> tuple[Any, ...]:
        await reg.call(c, "counted", keys=["a"], args=[1])  # known as cached...
        await c.script_flush()  # ...but gone
        async with reg.pipeline(c, transaction=True) as p:
            p.call("counted", keys=["a"], args=[10]).incr("plain").hgetall("none")
            return await p.execute(), await c.mget("a", "plain")

    assert run(aclient, body, protocol=2) == ([11, 1, {}], [b"11", b"1"])


def test_timeout_is_outcome_unknown_and_the_client_recovers(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    async def body(c: redis.asyncio.Redis) -> Any:
        await aio.load_async(reg, c)
        with pytest.raises(OutcomeUnknown, match="outcome unknown"):
            await reg.call(c, "slow", keys=["ran"], args=[300])
        await asyncio.sleep(0.35)
        return await reg.call(c, "counted", keys=["b"], args=[7])

    factory: Factory = lambda **x: redis.asyncio.Redis(  # noqa: E731
        host=redis_server.host, port=redis_server.port, socket_timeout=0.1, **x
    )
    assert run(factory, body) == 7
    assert r.get("ran") == b"1"  # ran once, never re-sent


@pytest.mark.parametrize("single", [False, True], ids=["pooled", "single-connection"])
def test_cancelled_call_is_not_resent_and_its_connection_is_dropped(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry, single: bool
) -> None:
    """asyncio.timeout cancels the call after the write: the script runs once, the caller
    hears it was cancelled, and the connection (with a reply still in flight) is not
    reused: the next call gets its own reply, not the slow script's."""

    async def body(c: redis.asyncio.Redis) -> tuple[Any, ...]:
        await aio.load_async(reg, c)
        with pytest.raises(TimeoutError) as caught:
            async with asyncio.timeout(0.1):
                await reg.call(c, "slow", keys=["ran"], args=[300])
        notes = getattr(caught.value.__context__, "__notes__", [])
        await asyncio.sleep(0.35)
        return notes, await reg.call(c, "counted", keys=["b"], args=[7]), await c.get("b")

    factory: Factory = lambda **x: redis.asyncio.Redis(  # noqa: E731
        host=redis_server.host, port=redis_server.port, single_connection_client=single, **x
    )
    notes, seven, stored = run(factory, body)
    assert seven == 7 and stored == b"7"
    assert any("outcome is unknown" in n for n in notes)
    assert r.get("ran") == b"1"


@pytest.mark.parametrize("single", [False, True], ids=["pooled", "single-connection"])
def test_connections_killed_while_idle_reconnect_before_sending(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry, single: bool
) -> None:
    """A failover between two calls (cache gone, sockets closed while the loop was busy) is
    a clean reconnect, not "outcome unknown": nothing had been sent on the dead socket."""

    async def body(c: redis.asyncio.Redis) -> tuple[Any, ...]:
        first = await reg.call(c, "counted", keys=["a"], args=[1])
        r.script_flush()
        r.client_kill_filter(_type="normal", skipme=True)  # blocks the loop: EOF not yet read
        second = await reg.call(c, "counted", keys=["a"], args=[1])
        return first, second

    reset_stats(r)
    factory: Factory = lambda **x: redis.asyncio.Redis(  # noqa: E731
        host=redis_server.host, port=redis_server.port, single_connection_client=single, **x
    )
    assert run(factory, body) == (1, 2)
    assert calls(r, "script|load") == 1 and calls(r, "eval") == 1  # recovered as EVAL, once
    assert r.get("a") == b"2"


def test_cancelled_transaction_is_not_rerun(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    async def body(c: redis.asyncio.Redis) -> Any:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1), reg.pipeline(c, transaction=True) as p:
                p.call("slow", keys=["ran"], args=[300]).incr("plain")
                await p.execute()
        await asyncio.sleep(0.35)
        async with reg.pipeline(c) as p:
            p.get("ran").get("plain")
            return await p.execute()

    factory: Factory = lambda **x: redis.asyncio.Redis(  # noqa: E731
        host=redis_server.host, port=redis_server.port, **x
    )
    assert run(factory, body) == [b"1", b"1"]  # the whole transaction ran once


PARSERS = {
    "resp2-python": {"protocol": 2, "parser_class": _AsyncRESP2Parser},
    "resp3-python": {"protocol": 3, "parser_class": _AsyncRESP3Parser},
    "resp2-hiredis": {"protocol": 2, "parser_class": _AsyncHiredisParser},
    "resp3-hiredis": {"protocol": 3, "parser_class": _AsyncHiredisParser},
}


@pytest.mark.parametrize("variant", sorted(PARSERS))
def test_every_protocol_and_parser(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry, variant: str
) -> None:
    async def body(c: redis.asyncio.Redis) -> tuple[Any, ...]:
        one = await reg.call(c, "counted", keys=["a"], args=[3])
        async with reg.pipeline(c) as p:
            p.call("counted", keys=["a"], args=[1]).zadd("z", {"m": 2.5})
            p.zrange("z", 0, -1, withscores=True).hgetall("none")
            piped = await p.execute()
        async with reg.pipeline(c, transaction=True) as p:
            p.call("counted", keys=["a"], args=[1]).zscore("z", "m")
            return one, piped, await p.execute()

    async def main() -> tuple[Any, ...]:
        pool = redis.asyncio.ConnectionPool(
            host=redis_server.host, port=redis_server.port, **PARSERS[variant]
        )
        c = redis.asyncio.Redis(connection_pool=pool)
        try:
            return await body(c)
        finally:
            await c.aclose()
            await pool.aclose()

    one, piped, tx = asyncio.run(main())
    assert one == 3 and tx == [5, 2.5]
    assert piped[:2] == [4, 1] and piped[3] == {}
    assert [tuple(x) for x in piped[2]] == [(b"m", 2.5)]


def test_status_load_flush(aclient: Factory, reg: ScriptRegistry) -> None:
    async def body(c: redis.asyncio.Redis) -> tuple[Any, ...]:
        before = (await aio.status_async(reg, c))[0].missing
        shas = await aio.load_async(reg, c)
        after = (await aio.status_async(reg, c))[0].missing
        await aio.flush_async(reg, c)
        flushed = (await aio.status_async(reg, c))[0].missing
        return before, shas["counted"], after, flushed

    before, sha, after, flushed = run(aclient, body)
    assert before == flushed == ("counted", "liar", "slow")
    assert sha == COUNTER.sha and after == ()


def test_sync_client_in_the_async_api_is_a_clear_error(r: redis.Redis, reg: ScriptRegistry) -> None:
    for fn in (aio.load_async, aio.status_async, aio.flush_async):
        with pytest.raises(CallArgumentError, match=r"needs a redis\.asyncio client"):
            asyncio.run(fn(reg, r))
    with pytest.raises(CallArgumentError, match=r"needs a redis.asyncio client.*reg\.call"):
        asyncio.run(aio.call_async(reg, r, "counted", ["a"], [1]))
    with pytest.raises(CallArgumentError, match=r"needs a redis\.asyncio client"):
        aio.AsyncScriptPipeline(reg, r)
    assert r.get("a") is None


def test_async_pipeline_in_a_plain_with_is_a_clear_error(reg: ScriptRegistry) -> None:
    client = fakeredis.FakeAsyncRedis()
    with pytest.raises(CallArgumentError, match=r"async with reg\.pipeline"), reg.pipeline(client):
        pass


def test_argument_errors_before_anything_is_sent(aclient: Factory, reg: ScriptRegistry) -> None:
    async def body(c: redis.asyncio.Redis) -> Any:
        with pytest.raises(CallArgumentError):
            await reg.call(c, "counted", keys=["a", "b"], args=[1])
        return await c.dbsize()

    assert run(aclient, body) == 0
