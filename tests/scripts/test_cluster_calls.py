"""Script calls and pipelines on a real 3-primary cluster, through both drivers (sync and
asyncio clients): routed by slot, each node loads once, every call runs exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.cluster as acluster
import redis.cluster

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import free_port
from luapipe.errors import CrossSlotError
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..drivers import Driver

pytestmark = pytest.mark.cluster

COUNTER = LuaScript.from_source(
    "counted", "-- @key ran\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)
TWO_KEYS = LuaScript.from_source(
    "pair",
    "-- @key a\n-- @key b\nreturn redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[2])\n",
)
# slots 15495, 3300, 7365, 11298, 15363, 3168: two keys on each of the three primaries
KEYS = ["a", "b", "c", "d", "e", "f"]


@pytest.fixture
def sync_nodes(cluster: EmbeddedCluster) -> Iterator[list[redis.Redis]]:
    nodes = [redis.Redis(port=p) for p in cluster.ports]
    for n in nodes:
        n.flushall()
        n.script_flush()
        n.config_resetstat()
    try:
        yield nodes
    finally:
        for n in nodes:
            n.close()


def stat(nodes: list[redis.Redis], command: str) -> list[int]:
    out = []
    for n in nodes:
        entry = n.info("commandstats").get(f"cmdstat_{command}")
        out.append(int(entry["calls"]) if entry else 0)
    return out


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([COUNTER, TWO_KEYS])


def _client(driver: Driver, cluster: EmbeddedCluster) -> Any:
    c = driver.cluster(cluster.ports[0])
    if driver.name == "asyncio":
        driver.run(c.initialize())
    return c


def _stale(c: Any, key: str) -> Any:
    """Point ``key``'s slot at another primary, as after a resharding the client missed."""
    slot = c.keyslot(key)
    owner = c.nodes_manager.slots_cache[slot][0]
    other = next(n for n in c.get_primaries() if n.name != owner.name)
    c.nodes_manager.slots_cache[slot] = [other]
    return other


def test_calls_route_by_slot_and_each_node_loads_once(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    c = _client(driver, cluster)
    got = [driver.run(reg.call(c, "counted", keys=[k], args=[1])) for _ in range(3) for k in KEYS]
    assert got == [1] * 6 + [2] * 6 + [3] * 6
    loads = stat(sync_nodes, "script|load")
    assert loads == [1, 1, 1]  # every node owns some of the keys, each loaded exactly once
    assert sum(stat(sync_nodes, "evalsha")) == 18


def test_flush_on_every_node_still_runs_each_call_once(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    c = _client(driver, cluster)
    for k in KEYS:
        driver.run(reg.call(c, "counted", keys=[k], args=[1]))
    for n in sync_nodes:  # behind the registry's back: it thinks they are still cached
        n.script_flush()
    assert [driver.run(reg.call(c, "counted", keys=[k], args=[1])) for k in KEYS] == [2] * 6
    assert stat(sync_nodes, "script|load") == [1, 1, 1]  # once per node, before the flush
    assert stat(sync_nodes, "eval") == [1, 1, 1]  # the first call after it: EVAL, once


def test_cross_slot_keys_are_refused_before_sending(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    c = _client(driver, cluster)
    with pytest.raises(CrossSlotError, match="hash tag"):
        driver.run(reg.call(c, "pair", keys=["a", "b"]))
    assert driver.run(reg.call(c, "pair", keys=["{u1}a", "{u1}b"])) == 2
    assert sum(stat(sync_nodes, "evalsha")) == 1


def test_pipeline_splits_per_node_and_keeps_order(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    p = reg.pipeline(_client(driver, cluster))
    for k in KEYS:
        p.call("counted", keys=[k], args=[2]).incr(f"plain-{k}")
    first = driver.run(p.execute())
    for k in KEYS:
        p.call("counted", keys=[k], args=[2])
    second = driver.run(p.execute())
    assert first == [2, 1] * 6 and second == [4] * 6
    assert p.last_round_trips == 3  # one per node (sent concurrently under asyncio)
    assert sum(stat(sync_nodes, "evalsha")) == 12 and stat(sync_nodes, "script|exists") == [0] * 3


def test_transaction_needs_one_slot(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    p = reg.pipeline(_client(driver, cluster), transaction=True)
    p.call("counted", keys=["a"], args=[1]).incr("b")
    with pytest.raises(CrossSlotError, match="one slot"):
        driver.run(p.execute())
    p.call("counted", keys=["{t}a"], args=[1]).incr("{t}b")
    assert driver.run(p.execute()) == [1, 1]
    assert sum(stat(sync_nodes, "exec")) == 1


def test_load_and_status_visit_every_node(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    c = _client(driver, cluster)
    driver.run(reg.load(c))
    assert [s.missing for s in driver.run(reg.status(c))] == [()] * 3
    assert stat(sync_nodes, "script|load") == [2, 2, 2]


def test_a_stale_slot_map_is_followed_and_the_call_runs_once(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    c = _client(driver, cluster)
    _stale(c, "a")
    assert driver.run(reg.call(c, "counted", keys=["a"], args=[5])) == 5
    assert sum(stat(sync_nodes, "evalsha")) == 1  # refused with MOVED (not run), then ran once
    assert sum(stat(sync_nodes, "script|load")) == 2  # loaded on the wrong node, then the owner


def test_pipeline_follows_a_stale_slot_map_and_runs_each_entry_once(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    c = _client(driver, cluster)
    _stale(c, "a")
    p = reg.pipeline(c)
    for k in KEYS:
        p.call("counted", keys=[k], args=[1]).incr(f"{{{k}}}plain")
    plain = driver.run(p.execute())
    p.call("counted", keys=["{a}t"], args=[1]).incr("{a}u")
    _stale(c, "a")  # stale again, for the transaction
    p.transaction = True
    tx = driver.run(p.execute())
    assert plain == [1, 1] * 6 and tx == [1, 1]
    assert sum(stat(sync_nodes, "evalsha")) == 6  # the redirected ones were refused, not run
    assert sum(stat(sync_nodes, "eval")) == 1  # the re-routed transaction ran once


def test_a_node_that_refuses_connections_is_routed_around(
    driver: Driver, cluster: EmbeddedCluster, sync_nodes: list[redis.Redis], reg: ScriptRegistry
) -> None:
    c = _client(driver, cluster)
    node_class = acluster.ClusterNode if driver.name == "asyncio" else redis.cluster.ClusterNode
    dead = node_class("127.0.0.1", free_port(), server_type="primary")
    c.nodes_manager.slots_cache[c.keyslot("b")] = [dead]  # as after a failover
    assert driver.run(reg.call(c, "counted", keys=["b"], args=[4])) == 4
    assert sum(stat(sync_nodes, "evalsha")) == 1
