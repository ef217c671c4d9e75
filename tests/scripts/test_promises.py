"""Script calls and pipelines never run twice (sync and asyncio alike, ``driver``).

On a cluster a call is routed again only when it provably did not run (a redirect, a
refused connection). A node frozen (SIGSTOP) after the request was written makes the call
time out: OutcomeUnknown, and when the node wakes the request runs exactly once. A
transaction whose EXEC reports a failed item has run (the other items committed): it is
never run again either.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis, ServerProcess

from ..drivers import Driver, drained, stopped, unwritable_size, warmed

COUNTER = luapipe.LuaScript.from_source(
    "counted", "-- @key ran\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)
#: runs (counts itself), then fails with an error text that looks like a missing script
LIAR = luapipe.LuaScript.from_source(
    "liar", "-- @key ran\nredis.call('INCR', KEYS[1])\nreturn redis.error_reply('NOSCRIPT fake')\n"
)


@pytest.fixture
def reg() -> luapipe.ScriptRegistry:
    return luapipe.ScriptRegistry([COUNTER, LIAR])


def _owner(cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster, key: str) -> EmbeddedRedis:
    port = rc.get_node_from_key(key).port
    return next(n for n in cluster.nodes if n.port == port)


def _drained(node: EmbeddedRedis) -> None:
    with redis.Redis(port=node.port) as admin:
        drained(admin, "victim")


def _frozen_client(driver: Driver, cluster: EmbeddedCluster) -> Any:
    return driver.cluster(cluster.ports[0], socket_timeout=0.25, client_name="victim")


@pytest.mark.cluster
def test_a_cluster_call_that_may_have_run_is_not_sent_again(
    driver: Driver,
    cluster: EmbeddedCluster,
    rc: redis.cluster.RedisCluster,
    reg: luapipe.ScriptRegistry,
) -> None:
    key = "{p}:n"
    node = _owner(cluster, rc, key)
    client = _frozen_client(driver, cluster)
    warmed(driver, lambda: reg.call(client, "counted", keys=["{p}:warm"], args=[1]))
    with stopped(node.pid), pytest.raises(luapipe.OutcomeUnknown, match="outcome unknown"):
        driver.run(reg.call(client, "counted", keys=[key], args=[1]))
    driver.close(client)
    _drained(node)
    assert rc.get(key) == b"1"  # the unknown call ran, once


def _queued(pipe: Any, *keys: str) -> Any:
    for key in keys:
        pipe.call("counted", keys=[key], args=[1])
    return pipe


def _elsewhere(rc: redis.cluster.RedisCluster, key: str) -> str:
    """A hash tag (``{o3}``) whose slot lives on another node than ``key``."""
    node = rc.get_node_from_key(key).name
    return next(f"{{o{i}}}" for i in range(1000) if rc.get_node_from_key(f"{{o{i}}}").name != node)


@pytest.mark.cluster
def test_a_cluster_pipeline_part_that_may_have_run_is_not_sent_again(
    driver: Driver,
    cluster: EmbeddedCluster,
    rc: redis.cluster.RedisCluster,
    reg: luapipe.ScriptRegistry,
) -> None:
    """One part per node; the frozen node's part times out. The other part is queued first,
    so the sync pipeline (one node after the other) has sent it too."""
    key = "{p}:n"
    tag = _elsewhere(rc, key)
    node = _owner(cluster, rc, key)
    pipe = reg.pipeline(_frozen_client(driver, cluster))
    warmed(driver, lambda: _queued(pipe, f"{tag}:warm", "{p}:warm").execute())
    pipe.call("counted", keys=[f"{tag}:n"], args=[1]).call("counted", keys=[key], args=[1])
    with stopped(node.pid), pytest.raises(luapipe.OutcomeUnknown, match="outcome unknown"):
        driver.run(pipe.execute())
    driver.close(pipe.client)
    _drained(node)
    assert (rc.get(f"{tag}:n"), rc.get(key)) == (b"1", b"1")


def _gone_owner(driver: Driver, client: Any, slot: int) -> None:
    """Make ``client``'s slot map name a node that has left the cluster as the owner of
    ``slot`` (a failover it has not seen yet): a request for it cannot be sent there, so
    nothing runs until the map is re-read."""
    if driver.name == "sync":
        gone: Any = redis.cluster.ClusterNode("127.0.0.1", 1, server_type="primary")
    else:
        gone = redis.asyncio.cluster.ClusterNode("127.0.0.1", 1, server_type="primary")
    client.nodes_manager.slots_cache[slot] = [gone]


@pytest.mark.cluster
def test_a_cluster_pipeline_part_that_was_not_sent_is_routed_again_alone(
    driver: Driver,
    cluster: EmbeddedCluster,
    rc: redis.cluster.RedisCluster,
    reg: luapipe.ScriptRegistry,
) -> None:
    """One part per node; the slot map names a departed node for one of them. That part
    was never sent (ConnectionFailed inside), so it is routed again once the map is re-read;
    the other part ran and keeps its result. Raising "nothing ran" for the whole pipeline
    would be a lie that invites running the other part twice."""
    key = "{p}:n"
    tag = _elsewhere(rc, key)
    client = driver.cluster(cluster.ports[0])
    pipe = reg.pipeline(client)
    warmed(driver, lambda: _queued(pipe, f"{tag}:warm", "{p}:warm").execute())
    _gone_owner(driver, client, rc.keyslot(key))
    pipe.call("counted", keys=[f"{tag}:n"], args=[1]).call("counted", keys=[key], args=[1])
    assert driver.run(pipe.execute()) == [1, 1]
    assert (rc.get(f"{tag}:n"), rc.get(key)) == (b"1", b"1")


@pytest.mark.cluster
def test_a_cluster_pipeline_whose_write_was_cut_is_not_sent_again(
    driver: Driver,
    cluster: EmbeddedCluster,
    rc: redis.cluster.RedisCluster,
    reg: luapipe.ScriptRegistry,
) -> None:
    """[call, SET big] to a frozen node: the call reached the node before the write of SET
    timed out, so the part may have run; routing it again would run the call twice."""
    key = "{p}:n"
    node = _owner(cluster, rc, key)
    pipe = reg.pipeline(_frozen_client(driver, cluster))
    big = b"x" * unwritable_size()
    # warmed with the big value too: a value of 1 MB or more first asks the node's
    # proto-max-bulk-len, remembered from then on, so the frozen write is the request itself
    warmed(driver, lambda: _queued(pipe, "{p}:warm").set("{p}:warm-big", big).execute())
    pipe.call("counted", keys=[key], args=[1]).set("{p}:big", big)
    with stopped(node.pid), pytest.raises(luapipe.OutcomeUnknown, match="outcome unknown"):
        driver.run(pipe.execute())
    driver.close(pipe.client)
    _drained(node)
    assert rc.get(key) == b"1"


@pytest.mark.parametrize("where", ["server", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_a_transaction_with_a_failed_item_is_not_run_again(
    driver: Driver, reg: luapipe.ScriptRegistry, request: pytest.FixtureRequest, where: str
) -> None:
    """EXEC ran every item; one failed (WRONGTYPE), one is a script whose error text looks
    like NOSCRIPT. The other items committed: the caller gets the first error, and nothing
    is re-sent (every counter moved once, EXEC ran once)."""
    if where == "server":
        server: ServerProcess = request.getfixturevalue("redis_server")
        admin: redis.Redis = request.getfixturevalue("r")
        client = driver.redis(server.port)
    else:
        cluster: EmbeddedCluster = request.getfixturevalue("cluster")
        rc: redis.cluster.RedisCluster = request.getfixturevalue("rc")
        admin = rc.get_redis_connection(rc.get_node_from_key("{t}"))  # the slot's node
        client = driver.cluster(cluster.ports[0])
    admin.set("{t}:str", "a string")
    admin.config_resetstat()
    pipe = reg.pipeline(client, transaction=True)
    pipe.call("counted", keys=["{t}:n"], args=[1]).hset("{t}:str", "f", "v").incr("{t}:plain")
    with pytest.raises(luapipe.ServerError, match="WRONGTYPE"):
        driver.run(pipe.execute())
    pipe.call("liar", keys=["{t}:liar"]).incr("{t}:plain")
    results = driver.run(pipe.execute(raise_on_error=False))
    assert isinstance(results[0], luapipe.ScriptRuntimeError) and "NOSCRIPT fake" in str(results[0])
    assert results[1] == 2
    assert [admin.get(f"{{t}}:{k}") for k in ("n", "liar", "plain")] == [b"1", b"1", b"2"]
    assert admin.info("commandstats")["cmdstat_exec"]["calls"] == 2
