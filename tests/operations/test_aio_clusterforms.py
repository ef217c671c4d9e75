"""Every form on ``redis.asyncio.cluster.RedisCluster`` agrees with the sync cluster path."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis.asyncio.cluster as acluster
import redis.cluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.errors import CrossSlotError, LuapipeError
from luapipe.operations.clustersafety import slot
from luapipe.operations.plan import RunResult

from ..helpers import arun

pytestmark = pytest.mark.cluster

ALL = ("naive", "pipelined", "transaction", "script", "function")
ATOMIC = ("transaction", "script", "function")
T = TypeVar("T")
Setup = Callable[[redis.cluster.RedisCluster], None]
Call = tuple[dict[str, Any], dict[str, Any]]


def _op(name: str) -> luapipe.Operation:
    return luapipe.load_operation(f"examples/operations/{name}.toml")


def snapshot(rc: redis.cluster.RedisCluster) -> dict[bytes, Any]:
    """Every key on every primary, read by type (the state a call left)."""
    out: dict[bytes, Any] = {}
    read: dict[bytes, Callable[[Any], Any]] = {
        b"string": rc.get,
        b"zset": lambda k: rc.zrange(k, 0, -1, withscores=True),
        b"hash": lambda k: sorted(rc.hgetall(k).items()),
        b"list": lambda k: rc.lrange(k, 0, -1),
        b"set": lambda k: sorted(rc.smembers(k)),
    }
    for key in rc.scan_iter(count=1000):
        kind = rc.type(key)
        out[key] = (kind, read[kind](key), rc.pttl(key) > 0)
    return dict(sorted(out.items()))


def outcome(run: Callable[[], RunResult]) -> tuple[Any, ...]:
    try:
        res = run()
    except LuapipeError as exc:
        return ("error", type(exc).__name__)
    return ("ok", res.value, res.round_trips, res.retries)


async def aoutcome(run: Awaitable[RunResult]) -> tuple[Any, ...]:
    try:
        res = await run
    except LuapipeError as exc:
        return ("error", type(exc).__name__)
    return ("ok", res.value, res.round_trips, res.retries)


def _feed(rc: redis.cluster.RedisCluster) -> None:
    rc.zadd("{f}:feed", {"1": 1, "2": 2, "3": 3})
    rc.set("{f}:item:3", "third")
    rc.set("{f}:item:1", "first")


CASES: dict[str, tuple[Setup, list[Call]]] = {
    "transfer": (
        lambda rc: rc.mset({"{t}:src": 10, "{t}:dst": 1}),
        [
            ({"src": "{t}:src", "dst": "{t}:dst"}, {"amount": 3}),
            ({"src": "{t}:src", "dst": "{t}:dst"}, {"amount": 20}),  # not enough: refused
            ({"src": "{t}:src", "dst": "{t}:new"}, {"amount": 7}),
        ],
    ),
    "reserve_stock": (
        lambda rc: rc.set("{s}:stock", 4),
        [({"stock": "{s}:stock"}, {"qty": q}) for q in (3, 2, 1)]
        + [({"stock": "{s}:none"}, {"qty": 1})],
    ),
    "fetch_feed": (
        _feed,
        [
            ({"feed": "{f}:feed"}, {"n": 2, "prefix": "{f}:item:"}),
            ({"feed": "{f}:feed"}, {"n": 5, "prefix": "{f}:item:"}),
            ({"feed": "{f}:empty"}, {"n": 1, "prefix": "{f}:item:"}),
        ],
    ),
    "incr_many": (
        lambda rc: rc.set("{c}:a", 5),
        [
            ({"counters": ["{c}:a", "{c}:b", "{c}:c"]}, {"by": 2}),
            ({"counters": ["{c}:b"]}, {"by": 3}),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_form_matches_the_sync_cluster_path(
    cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster, name: str
) -> None:
    op = _op(name)
    setup, calls = CASES[name]

    def fresh() -> None:
        """Keys and function libraries gone: each flavour's first function call pays the
        same load (libraries persist, so the second flavour would find it loaded)."""
        rc.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        for node in rc.get_primaries():
            rc.get_redis_connection(node).function_flush()
        setup(rc)

    async def body(a: acluster.RedisCluster) -> None:
        for form in ALL:
            fresh()
            want = [
                outcome(lambda k=k, g=g, f=form: op.run_detailed(rc, f, keys=k, args=g))
                for k, g in calls
            ]
            want_state = snapshot(rc)
            fresh()
            got = [await aoutcome(op.run_detailed(a, form, keys=k, args=g)) for k, g in calls]
            assert got == want, (name, form)
            assert snapshot(rc) == want_state, (name, form)
            assert want[0][0] == "ok", (name, form, want)
            assert await op.run(a, form, keys=calls[0][0], args=calls[0][1]) is not None

    arun(cluster, body)


def _data_commands(rc: redis.cluster.RedisCluster) -> set[str]:
    """Commands the primaries ran since the last CONFIG RESETSTAT, minus housekeeping."""
    seen: set[str] = set()
    for info in rc.info("commandstats", target_nodes=redis.cluster.RedisCluster.PRIMARIES).values():
        seen |= {k.removeprefix("cmdstat_") for k in info}
    return seen - {"info", "config|resetstat", "cluster|slots", "cluster|shards", "command"}


def test_cross_slot_keys_refuse_atomic_forms_before_sending(
    cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    transfer, incr = _op("transfer"), _op("incr_many")
    keys = {"src": "a:src", "dst": "b:dst"}
    counters = [f"n:{i}" for i in range(6)]
    assert slot("a:src") != slot("b:dst")
    owners = {rc.nodes_manager.get_node_from_slot(slot(k)).name for k in counters}
    assert len(owners) == 3  # the counters live on every primary

    async def body(a: acluster.RedisCluster) -> list[Any]:
        await a.initialize()
        rc.set("a:src", 10)
        rc.set("b:dst", 0)
        rc.config_resetstat(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        for form in ATOMIC:
            with pytest.raises(CrossSlotError, match="hash tag"):
                await transfer.run(a, form, keys=keys, args={"amount": 3})
            with pytest.raises(CrossSlotError):
                await incr.run(a, form, keys={"counters": counters}, args={"by": 1})
        assert _data_commands(rc) == set()  # nothing was sent
        out = [
            await transfer.run(a, f, keys=keys, args={"amount": 3}) for f in ("naive", "pipelined")
        ]
        res = await incr.run_detailed(a, "pipelined", keys={"counters": counters}, args={"by": 2})
        out.append((res.value, res.round_trips))
        assert {"get", "incrby"} <= _data_commands(rc)  # the check above can see
        return out

    assert arun(cluster, body) == [[1, 7], [1, 4], (6, 3)]  # pipelined: a round trip per node
    assert (rc.get("a:src"), rc.get("b:dst")) == (b"4", b"6")
    assert [rc.get(k) for k in counters] == [b"2"] * 6


def test_moved_replies_are_re_routed_and_run_once(
    cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    """A stale slot map: the commands answered MOVED did not run; only they are re-sent."""
    incr, transfer = _op("incr_many"), _op("transfer")
    counters = [f"n:{i}" for i in range(6)]
    pair = {"src": "{m}:src", "dst": "{m}:dst"}

    async def body(a: acluster.RedisCluster) -> list[Any]:
        await a.initialize()
        rc.config_resetstat(target_nodes=redis.cluster.RedisCluster.PRIMARIES)

        def misroute(key: str) -> None:
            cache = a.nodes_manager.slots_cache  # a new dict after each refresh
            owner = cache[slot(key)][0]
            cache[slot(key)] = [next(n for n in a.get_primaries() if n.name != owner.name)]

        out: list[Any] = []
        for form in ("naive", "pipelined"):
            misroute(counters[0])
            res = await incr.run_detailed(a, form, keys={"counters": counters}, args={"by": 1})
            out.append((form, res.value, res.round_trips))
        rc.set("{m}:src", 10)
        for form in ("function", "script"):
            misroute("{m}:src")
            out.append((form, await transfer.run(a, form, keys=pair, args={"amount": 3})))
        return out

    assert arun(cluster, body) == [
        ("naive", 6, 7),  # 6 INCRBYs, one of them sent twice (MOVED, then its owner)
        ("pipelined", 6, 4),  # one write per node, then the moved one again
        ("function", [1, 7]),
        ("script", [1, 4]),
    ]
    assert [rc.get(k) for k in counters] == [b"2"] * 6  # each ran exactly once per form
    assert (rc.get("{m}:src"), rc.get("{m}:dst")) == (b"4", b"6")
    errors = rc.info("errorstats", target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    assert sum(e.get("errorstat_MOVED", {}).get("count", 0) for e in errors.values()) == 4


def test_a_cancelled_call_is_never_re_sent(
    cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    """A write held up on one node (CLIENT PAUSE) and cancelled by a timeout: the outcome
    is unknown there, it is not re-sent, and the client keeps working."""
    incr = _op("incr_many")
    counters = [f"p:{i}" for i in range(6)]
    paused = rc.nodes_manager.get_node_from_slot(slot(counters[0]))
    kw: dict[str, Any] = {"keys": {"counters": counters}, "args": {"by": 1}}

    async def body(a: acluster.RedisCluster) -> int:
        await a.initialize()
        rc.get_redis_connection(paused).client_pause(300, all=False)  # writes wait
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(incr.run(a, "pipelined", **kw), 0.1)
        await asyncio.sleep(0.4)
        value: int = await incr.run(a, "pipelined", **kw)
        return value

    assert arun(cluster, body) == 6
    on_paused = [k for k in counters if slot(k) in _slots_of(rc, paused.name)]
    for k in counters:
        assert rc.get(k) in ((b"1", b"2") if k in on_paused else (b"2",)), k


def _slots_of(rc: redis.cluster.RedisCluster, name: str) -> set[int]:
    return {s for s, nodes in rc.nodes_manager.slots_cache.items() if nodes[0].name == name}
