"""The auto-pipeline on a real cluster: one write per node, MOVED and ASK handled per entry
(the other entries of the same write are not touched), asyncio and threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis
import redis.asyncio.cluster as acluster
import redis.cluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.errors import CallArgumentError
from luapipe.scripts.registry import ScriptRegistry

from .test_cluster_migration import (
    COUNTER,
    MOVED_KEY,
    NEW_KEY,
    STAYED_KEY,
    Migration,
    _move_rest_and_assign,
    migration,  # noqa: F401 (the fixture)
)

pytestmark = pytest.mark.cluster


def keys_on_every_node(rc: redis.cluster.RedisCluster) -> list[str]:
    found: dict[str, str] = {}
    for i in range(1000):
        found.setdefault(rc.get_node_from_key(f"k{i}").name, f"k{i}")
        if len(found) == 3:
            return list(found.values())
    raise AssertionError("fewer than 3 primaries")


def arun(cluster: EmbeddedCluster, body: Any) -> Any:
    async def main() -> Any:
        client = acluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_cluster_entries_go_to_their_node_one_write_each(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    reg = ScriptRegistry([COUNTER])
    keys = keys_on_every_node(rc)

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        out = await asyncio.gather(
            *(reg.call(ap, "counted", keys=[k], args=[1]) for k in keys for _ in range(10)),
            *(ap.incr(f"{{{k}}}:plain") for k in keys),
        )
        writes = ap.writes
        await ap.aclose()
        return [out, writes]

    out, writes = arun(cluster, body)
    assert out[:30] == [n for _ in keys for n in range(1, 11)]
    assert out[30:] == [1, 1, 1]
    assert writes == 3  # one per node
    assert [int(rc.get(k) or 0) for k in keys] == [10, 10, 10]


def test_cluster_ask_and_moved_are_handled_per_entry(
    migration: Migration,  # noqa: F811 (the fixture)
    rc: redis.cluster.RedisCluster,
    cluster: EmbeddedCluster,
) -> None:
    reg = ScriptRegistry([COUNTER])
    other = next(k for k in keys_on_every_node(rc) if rc.keyslot(k) != migration.slot)

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        asked = await asyncio.gather(
            reg.call(ap, "counted", keys=[MOVED_KEY], args=[1]),  # ASK: on B already
            reg.call(ap, "counted", keys=[STAYED_KEY], args=[1]),  # still A's
            ap.incr(NEW_KEY),  # A sends a new key to B
            ap.incr(other),
        )
        _move_rest_and_assign(rc, migration.slot, migration.source, migration.target)
        moved = await asyncio.gather(  # the client's map still says A: MOVED, per entry
            reg.call(ap, "counted", keys=[STAYED_KEY], args=[1]),
            ap.incr(other),
            ap.incr(NEW_KEY),
        )
        await ap.aclose()
        return [asked, moved]

    threaded = luapipe.autopipeline(cluster.client())  # its slot map read before the move
    threaded.ping()
    asked, moved = arun(cluster, body)
    assert asked == [11, 21, 1, 1]
    assert moved == [22, 2, 2]
    # the thread flavour, with a map as stale: MOVED per call, each call once
    assert reg.call(threaded, "counted", keys=[STAYED_KEY], args=[1]) == 23
    assert threaded.incr(NEW_KEY) == 3 and threaded.incr(other) == 3
    threaded.close()


def test_cluster_threads_each_call_once(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    reg = ScriptRegistry([COUNTER])
    keys = keys_on_every_node(rc)
    ap = luapipe.autopipeline(cluster.client())
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(30):
                for k in keys:
                    reg.call(ap, "counted", keys=[k], args=[1])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ap.close()
    assert not errors
    assert [int(rc.get(k) or 0) for k in keys] == [240, 240, 240]


def test_cluster_commands_for_every_node_are_refused(cluster: EmbeddedCluster) -> None:
    async def body(client: Any) -> str:
        ap = luapipe.autopipeline(client)
        with pytest.raises(CallArgumentError) as info:
            await ap.flushall()
        await ap.aclose()
        return str(info.value)

    assert "several cluster nodes" in arun(cluster, body)


def _getkeys_asked(rc: redis.cluster.RedisCluster) -> int:
    """How many COMMAND GETKEYS the cluster's nodes answered since their stats were reset."""
    stats = rc.info("commandstats", target_nodes=redis.cluster.RedisCluster.ALL_NODES)
    return sum(
        int(node.get("cmdstat_command|getkeys", {}).get("calls", 0)) for node in stats.values()
    )


def test_cluster_movable_key_commands_keep_their_place(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    """A command whose keys move with its arguments applies before the calls issued after
    it: its keys come from the server's key specs without a round trip (ZUNIONSTORE, LMPOP,
    XREAD), or are asked of the server while it holds its place (SORT ... STORE, whose
    STORE key Redis 7.0's specs leave to the server's own code)."""
    rc.rpush("{t}s", 3, 1, 2)
    rc.config_resetstat(target_nodes=redis.cluster.RedisCluster.ALL_NODES)

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        out = [
            await asyncio.gather(ap.zunionstore("{t}d", ["{t}a"]), ap.zadd("{t}a", {"x": 1})),
            await asyncio.gather(ap.lmpop(1, "{t}l", direction="LEFT"), ap.rpush("{t}l", "v")),
            await asyncio.gather(ap.xread({"{t}x": "0"}), ap.xadd("{t}x", {"f": "v"})),
        ]
        out.append(_getkeys_asked(rc))
        out.append(await asyncio.gather(ap.sort("{t}s", store="{t}st"), ap.rpush("{t}s", 0)))
        await ap.aclose()
        return out

    zunion, lmpop, xread, asked, sort = arun(cluster, body)
    assert zunion == [0, 1] and rc.zcard("{t}d") == 0
    assert lmpop == [None, 1] and rc.lrange("{t}l", 0, -1) == [b"v"]
    assert xread[0] == []
    assert asked == 0  # found from the key specs: no round trip
    assert sort == [3, 4] and rc.lrange("{t}st", 0, -1) == [b"1", b"2", b"3"]
    assert _getkeys_asked(rc) == 1  # SORT's keys: asked of the server, once


def test_cluster_a_caller_leaving_while_its_keys_are_asked_for_lets_the_others_go(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    """The gate held while a call asks the server where its keys are opens when that
    caller gives up: the calls issued after it run, and it never does."""

    async def body(client: Any) -> list[Any]:
        ap = luapipe.autopipeline(client)
        await ap.ping()
        stuck = asyncio.Event()
        asked = asyncio.Event()

        async def never(args: tuple[Any, ...]) -> int | None:
            asked.set()
            await stuck.wait()
            raise AssertionError("not reached")

        ap._slot = never  # type: ignore[method-assign]
        sorting = asyncio.ensure_future(ap.sort("{t}s", store="{t}st"))
        await asked.wait()
        later = asyncio.ensure_future(ap.incr("{t}n"))
        await asyncio.sleep(0.05)
        held = later.done()
        sorting.cancel()
        done = await asyncio.wait_for(later, 5)
        await ap.aclose()
        return [held, done, sorting.cancelled()]

    rc.rpush("{t}s", 2, 1)
    held, done, cancelled = arun(cluster, body)
    assert held is False  # it waited behind the call asking for its keys...
    assert done == 1 and cancelled  # ...and ran once that caller left
    assert not rc.exists("{t}st")


def test_cluster_threads_find_movable_keys_without_asking(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    """The thread flavour uses the same key specs. (Its order needs no gate: a thread asks
    where its keys are before its call joins, and makes its next call after this one.)"""
    rc.config_resetstat(target_nodes=redis.cluster.RedisCluster.ALL_NODES)
    ap = luapipe.autopipeline(cluster.client())
    try:
        assert ap.zunionstore("{t}d", ["{t}a"]) == 0
        assert ap.zadd("{t}a", {"x": 1}) == 1
        assert ap.lmpop(2, "{t}k", "{t}l", direction="LEFT") is None
        assert ap.rpush("{t}l", "v") == 1
        assert ap.lmpop(2, "{t}k", "{t}l", direction="LEFT") == [b"{t}l", [b"v"]]
        assert _getkeys_asked(rc) == 0
    finally:
        ap.close()
