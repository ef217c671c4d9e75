"""Every registry behaviour through both drivers: one test body, sync and asyncio.

The ``driver`` fixture (tests/drivers.py) runs each body with a sync and a ``redis.asyncio``
client; both must give the same values, the same errors and the same round trips, so a
drift between the two flavours fails here by default.
"""

from __future__ import annotations

import inspect
import re
import threading
import time
from typing import Any

import pytest
import redis
import redis.cluster

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import ServerProcess, free_port
from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    CrossSlotError,
    OutcomeUnknown,
    ScriptRuntimeError,
    ServerError,
)
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire import aio, drivers, sync

from ..drivers import Driver
from ..helpers import SLOW, calls, reset_stats

COUNTED = LuaScript.from_source(
    "counted", "-- @key k\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)
FAILS = LuaScript.from_source("fails", "-- @key k\nlocal x = nil\nreturn x.y\n")


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([COUNTED, FAILS, SLOW])


def test_load_status_call_flush_kill(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    c = driver.redis(redis_server.port)
    before = [s.missing for s in driver.run(reg.status(c))]
    shas = driver.run(reg.load(c))
    after = [s.missing for s in driver.run(reg.status(c))]
    first = driver.run(reg.call(c, "counted", ["n"], [2]))
    flushed = driver.run(reg.flush(c))
    missing = [s.missing for s in driver.run(reg.status(c))]
    again = driver.run(reg.call(c, "counted", ["n"], [3]))  # NOSCRIPT -> EVAL, once
    killed = driver.run(reg.kill(c))
    node = f"{redis_server.host}:{redis_server.port}"
    assert before == missing == [("counted", "fails", "slow")]
    assert shas == {"counted": COUNTED.sha, "fails": FAILS.sha, "slow": SLOW.sha}
    assert after == [()]
    assert (first, again) == (2, 5)
    assert flushed == [node] and killed == []
    assert r.get("n") == b"5"


def test_script_error_is_the_same_error(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    c = driver.redis(redis_server.port)
    with pytest.raises(ScriptRuntimeError, match=r"^fails:3: .*attempt to index"):
        driver.run(reg.call(c, "fails", ["k"]))


def test_pipeline_after_a_flush_resends_only_the_failed_calls_once(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    c = driver.redis(redis_server.port)
    driver.run(reg.load(c))
    r.script_flush()  # behind the registry's back: it still thinks they are cached
    reset_stats(r)
    pipe = reg.pipeline(c)
    pipe.call("counted", ["a"], [1]).incr("hits").call("counted", ["b"], [2])
    results = driver.run(pipe.execute())
    trips, reloads = pipe.last_round_trips, pipe.last_reloads
    pipe.call("counted", ["a"], [1]).incr("hits")
    driver.run(pipe.execute())
    trips2, reloads2 = pipe.last_round_trips, pipe.last_reloads
    assert results == [1, 1, 2]
    assert (trips, reloads) == (2, 2)  # one write, then the two NOSCRIPT'd calls as EVAL
    assert (trips2, reloads2) == (1, 0)  # steady state: one round trip, nothing re-sent
    assert r.mget("a", "b", "hits") == [b"2", b"2", b"2"]
    assert calls(r, "script|exists") == 0 and calls(r, "exists") == 0


def test_transaction_pipeline_sends_eval_inside_multi(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    c = driver.redis(redis_server.port)
    reset_stats(r)
    pipe = reg.pipeline(c, transaction=True)
    pipe.call("counted", ["t"], [5]).set("s", "x").get("s")
    results, trips = driver.run(pipe.execute()), pipe.last_round_trips
    assert results == [5, True, b"x"] and trips == 1
    assert calls(r, "eval") == 1 and calls(r, "evalsha") == 0 and calls(r, "exec") == 1


def test_plain_client_on_a_cluster_node_names_the_cluster_client(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    """A redirect reaches a plain client: the call did not run; both flavours raise the same
    ServerError naming the client to use (never a Redirect result, never another class)."""
    owner = rc.nodes_manager.get_node_from_slot(rc.keyslot("k")).port
    c = driver.redis(next(p for p in cluster.ports if p != owner))
    hint = r"^MOVED \d+ \S+: this server is a cluster node; use a cluster client"
    with pytest.raises(ServerError, match=hint) as raised:
        driver.run(reg.call(c, "counted", ["k"], [1]))
    assert _luapipe_names(raised.value) == {"ServerError", "LuapipeError"}  # nothing more
    pipe = reg.pipeline(c)
    pipe.call("counted", ["k"], [1]).call("counted", ["k"], [2])
    results = driver.run(pipe.execute(raise_on_error=False))
    assert [_luapipe_names(x) for x in results] == [{"ServerError", "LuapipeError"}] * 2
    assert all(re_match(hint, str(x)) for x in results)
    assert rc.get("k") is None


def test_cluster_call_and_pipeline_route_by_slot(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    keys = [f"key{i}" for i in range(12)]
    nodes = {rc.nodes_manager.get_node_from_slot(rc.keyslot(k)).name for k in keys}
    c = driver.cluster(cluster.ports[0])
    single = driver.run(reg.call(c, "counted", ["solo"], [7]))
    pipe = reg.pipeline(c)
    for k in keys:
        pipe.call("counted", [k], [1])
    pipe.incr("hits")
    first = driver.run(pipe.execute())
    trips = pipe.last_round_trips
    for k in keys:
        pipe.call("counted", [k], [1])
    second = driver.run(pipe.execute())
    trips2 = pipe.last_round_trips
    status = driver.run(reg.status(c))
    assert single == 7
    assert first == [1] * 12 + [1] and second == [2] * 12
    assert len(nodes) == 3 and trips == trips2 == 3  # one round trip per node, loads inline
    assert sorted(s.node for s in status) == sorted(f"127.0.0.1:{p}" for p in cluster.ports)
    assert all("counted" not in s.missing for s in status)


def test_cross_slot_keys_are_refused_before_sending(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    c = driver.cluster(cluster.ports[0])
    pipe = reg.pipeline(c, transaction=True)
    pipe.call("counted", ["a"], [1]).call("counted", ["b"], [1])
    with pytest.raises(CrossSlotError, match="one slot"):
        driver.run(pipe.execute())
    assert rc.get("a") is None and rc.get("b") is None


def test_a_timeout_after_sending_is_outcome_unknown_and_never_resent(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    c = driver.redis(redis_server.port, socket_timeout=0.1)
    driver.run(reg.load(c))
    try:
        with pytest.raises(OutcomeUnknown, match="outcome unknown"):
            driver.run(reg.call(c, "slow", ["ran"], [400]))
    finally:
        deadline = time.monotonic() + 10
        while True:  # wait for the script to end (the server answers BUSY until then)
            try:
                ran = r.get("ran")
                break
            except redis.exceptions.BusyLoadingError:  # pragma: no cover
                pass
            except redis.exceptions.ResponseError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    assert ran == b"1"


def test_nothing_listening_is_connection_failed(driver: Driver, reg: ScriptRegistry) -> None:
    c = driver.redis(free_port())
    with pytest.raises(ConnectionFailed, match="cannot connect"):
        driver.run(reg.call(c, "counted", ["k"], [1]))
    pipe = reg.pipeline(c)
    pipe.call("counted", ["k"], [1])
    with pytest.raises(ConnectionFailed, match="cannot connect"):
        driver.run(pipe.execute())


def test_the_two_transports_and_drivers_expose_the_same_methods() -> None:
    """Only the transports stay twins: their public surface must match, name for name."""

    def public(cls: type, *, aio_names: bool = False) -> set[str]:
        names = {n for n in dir(cls) if not n.startswith("_") or n in _DUNDERS}
        if aio_names:
            names = {_SYNC_NAME.get(n, n) for n in names}
        return names

    assert public(sync.Session) == public(aio.AsyncSession) - {
        "close_if_dirty",
        "parser",
        "pending",
    }
    assert public(drivers.Driver) == public(drivers.AsyncDriver, aio_names=True)
    assert public(sync.session) == public(aio.async_session, aio_names=True)
    assert set(inspect.signature(drivers.drive).parameters) == set(
        inspect.signature(drivers.drive_async).parameters
    )
    for twin, atwin in ((sync.Session, aio.AsyncSession), (drivers.Driver, drivers.AsyncDriver)):
        for name in public(twin) - _DUNDERS:
            if callable(getattr(twin, name)):  # the same parameters, name for name
                params = inspect.signature(getattr(twin, name)).parameters
                aparams = inspect.signature(getattr(atwin, name)).parameters
                assert [(p.name, p.kind) for p in params.values()] == [
                    (p.name, p.kind) for p in aparams.values()
                ], f"{twin.__name__}.{name}"


def _luapipe_names(exc: BaseException) -> set[str]:
    """luapipe's classes of ``exc`` (its errors also take redis-py's class for the same
    reply, through a subclass of the same name)."""
    return {c.__name__ for c in type(exc).__mro__ if c.__module__ == "luapipe.errors"}


def re_match(pattern: str, text: str) -> bool:
    return re.match(pattern, text) is not None


_DUNDERS = {"__enter__", "__exit__", "__aenter__", "__aexit__"}
_SYNC_NAME = {"__aenter__": "__enter__", "__aexit__": "__exit__"}


def test_concurrent_threads_share_a_single_connection_client(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    """Sync only (no asyncio twin): threads on one single-connection client never mix
    their replies, whichever path (fast or driven) a call takes."""
    c = redis.Redis(host=redis_server.host, port=redis_server.port, single_connection_client=True)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for n in range(50):
                assert reg.call(c, "counted", [f"t{i}"], [1]) == n + 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c.close()
    assert errors == []


def test_a_session_the_caller_holds_survives_release(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """The registry's fast path lends its session to the driver; a Release in the steps
    must not drop it: the steps go on on the caller's connection (an asyncio
    single-connection client would otherwise wait on the lock its caller holds)."""
    from luapipe.wire.routing import Locate, Release, Send, Steps

    c = redis.Redis(host=redis_server.host, port=redis_server.port)

    def steps() -> Steps[tuple[Any, Any]]:
        node = yield Locate(None)
        (first,) = yield Send([("CLIENT", "ID")], node)
        yield Release()
        node = yield Locate(None)
        (second,) = yield Send([("CLIENT", "ID")], node)
        return first, second

    out: list[Any] = []

    def work() -> None:
        with sync.session(c) as s:
            out.append(drivers.Driver(c, s).run(steps()))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the driver waited on the caller's own connection"
    ((first, second),) = out
    assert first == second
    c.close()


def test_transport_errors_keep_redis_py_s_cause(driver: Driver, reg: ScriptRegistry) -> None:
    """luapipe's error says what it means for the caller; the redis-py error that caused it
    stays attached (``raise ... from exc``) for whoever debugs it."""
    c = driver.redis(free_port())
    with pytest.raises(ConnectionFailed) as raised:
        driver.run(reg.call(c, "counted", ["k"], [1]))
    assert isinstance(raised.value.__cause__, redis.exceptions.ConnectionError | OSError)


@pytest.mark.cluster
def test_send_each_answers_each_part_with_its_replies_or_its_error(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    """``SendEach`` (routing's table): per part its replies, or the LuapipeError it raised,
    so one node's failure never hides what the others did. Part 2 cannot be packed
    (CallArgumentError after its node's session is open); part 3's node is not in the slot
    map (ConnectionFailed before its session opens). Part 1 ran and is answered."""
    from luapipe.wire.routing import Nodes, Send, SendEach, Steps

    def steps() -> Steps[list[Any]]:
        nodes: list[str] = yield Nodes()
        answers: list[Any] = yield SendEach(
            (
                Send([("ECHO", "one")], nodes[0]),
                Send([("ECHO", None)], nodes[1]),
                Send([("PING",)], "127.0.0.1:1"),
            )
        )
        return answers

    c = driver.cluster(cluster.ports[0])
    run = drivers.drive if driver.name == "sync" else drivers.drive_async
    first, second, third = driver.run(run(steps(), c))
    assert first == [b"one"]
    assert isinstance(second, CallArgumentError) and "nothing was sent" in str(second)
    assert isinstance(third, ConnectionFailed) and "127.0.0.1:1" in str(third)
