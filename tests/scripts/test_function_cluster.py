"""A library's functions on a real 3-primary, 3-replica cluster, through both drivers:
routed by slot, healed on the primary of a node that lost its libraries (never on a
replica), atomic transactions, and a coordinated failover mid-run with exact counts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio.cluster as acluster
import redis.cluster
from redis.cluster import LoadBalancingStrategy

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis
from luapipe.scripts.registry import ScriptRegistry

from ..drivers import Driver
from ..helpers import emptied_cluster_client
from .test_function_calls import COUNTERS, SOURCE

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    c = EmbeddedCluster(primaries=3, replicas=1)
    c.start()
    print(f"\ncluster of 6 nodes ready in {c.startup_seconds:.1f} s")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def rc(cluster: EmbeddedCluster) -> Iterator[redis.cluster.RedisCluster]:
    client = emptied_cluster_client(cluster)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([], libraries=[COUNTERS])


def keys_per_primary(rc: redis.cluster.RedisCluster) -> dict[str, str]:
    """One key per primary: {node name: key}."""
    found: dict[str, str] = {}
    for i in range(1000):
        found.setdefault(rc.get_node_from_key(f"k{i}").name, f"k{i}")
        if len(found) == 3:
            return found
    raise AssertionError("keys do not reach every primary")


def primary(rc: redis.cluster.RedisCluster, name: str) -> redis.Redis:
    node = rc.get_node(node_name=name)
    assert node is not None
    return rc.get_redis_connection(node)  # type: ignore[no-any-return]


def loads(node: redis.Redis) -> int:
    entry = node.info("commandstats").get("cmdstat_function|load")
    return int(entry["calls"]) if entry else 0


def test_calls_route_by_slot_and_a_node_that_lost_its_library_heals_alone(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    keys = keys_per_primary(rc)
    for name in keys:
        primary(rc, name).function_load(SOURCE)
    lost = sorted(keys)[0]
    primary(rc, lost).function_flush()  # a flushed node (its replica follows)
    for name in keys:
        primary(rc, name).config_resetstat()
    c = driver.cluster(cluster.ports[0])
    got = [driver.run(reg.call(c, "bump", [k], [1])) for _ in range(3) for k in keys.values()]
    assert got == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert {n: loads(primary(rc, n)) for n in keys} == {n: int(n == lost) for n in keys}
    # a pipeline across the three nodes after another node lost its library
    second = sorted(keys)[1]
    primary(rc, second).function_flush()
    pipe = reg.pipeline(c)
    for k in keys.values():
        pipe.call("bump", [k], [10]).call("peek", [k])
    assert driver.run(pipe.execute()) == [13, b"13"] * 3
    assert pipe.last_reloads == 2  # only the two calls on the flushed node went again
    # one MULTI (and FUNCTION LOAD) per call healed: its own slot, never CROSSSLOT
    healed = {lost: 1, second: 2}
    assert {n: loads(primary(rc, n)) for n in keys} == {n: healed.get(n, 0) for n in keys}


def test_a_pipeline_heals_calls_of_many_slots_on_one_node(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    """Twenty calls of twenty slots, all on a node without the library: a cluster checks
    a MULTI's keys as one request, so healing them in one MULTI would be CROSSSLOT."""
    node = rc.get_primaries()[0]
    keys = [k for k in (f"s{i}" for i in range(500)) if rc.get_node_from_key(k) == node][:20]
    assert len({rc.keyslot(k) for k in keys}) == 20
    pipe = reg.pipeline(driver.cluster(cluster.ports[0]))
    for k in keys:
        pipe.call("bump", [k], [1])
    assert driver.run(pipe.execute()) == [1] * 20
    assert pipe.last_reloads == 20
    assert [rc.get(k) for k in keys] == [b"1"] * 20


def test_read_only_calls_go_to_replicas_and_heal_on_the_primary(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    """FCALL_RO goes to a replica; there "not found" loads the library on the slot's
    primary (a replica refuses writes: READONLY) and runs the call there."""
    key = "{ro}:k"
    rc.set(key, "v")
    owner = rc.get_node_from_key(key)
    for node in rc.get_nodes():
        rc.get_redis_connection(node).config_resetstat()
    ro = driver.cluster(
        cluster.ports[0], load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN_REPLICAS
    )
    first = driver.run(reg.call(ro, "peek", [key]))  # nowhere yet: healed on the primary
    own = rc.get_redis_connection(owner)
    own.execute_command("WAIT", 1, 5000)  # the library and key reach the replica
    assert own.info("commandstats")["cmdstat_fcall_ro"]["calls"] == 1
    replicas = [n for n in rc.get_nodes() if n.server_type == "replica"]
    before = sum(_ran(rc, n) for n in replicas)
    later = [driver.run(reg.call(ro, "peek", [key])) for _ in range(4)]
    assert first == b"v" and later == [b"v"] * 4
    assert sum(_ran(rc, n) for n in replicas) == before + 4  # served by the replica
    assert own.info("commandstats")["cmdstat_fcall_ro"]["calls"] == 1


def _ran(rc: redis.cluster.RedisCluster, node: redis.cluster.ClusterNode) -> int:
    entry = rc.get_redis_connection(node).info("commandstats").get("cmdstat_fcall_ro")
    return int(entry["calls"]) if entry else 0


def test_a_transaction_on_one_slot_heals_inside_multi(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    c = driver.cluster(cluster.ports[0])
    tx = reg.pipeline(c, transaction=True)
    out = []
    for _ in range(2):
        for node in rc.get_primaries():
            rc.get_redis_connection(node).function_flush()
        tx.call("bump", ["{t}:n"], [2]).incr("{t}:plain").call("peek", ["{t}:n"])
        out.append(driver.run(tx.execute()))
    assert out == [[2, 1, b"2"], [4, 2, b"4"]]


def test_asyncio_calls_from_many_tasks_heal_one_library_per_node(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    """Fifty tasks call at once on a cluster without the library: every call runs once;
    concurrent heals race on FUNCTION LOAD, and 'already exists' is harmless."""

    async def body() -> list[int]:
        c = acluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
        try:
            return list(
                await asyncio.gather(
                    *(reg.call(c, "bump", [f"{{a}}:{i % 3}"], [1]) for i in range(150))
                )
            )
        finally:
            await c.aclose()

    got = asyncio.run(body())
    assert sorted(got) == sorted(list(range(1, 51)) * 3)
    assert [int(rc.get(f"{{a}}:{i}") or 0) for i in range(3)] == [50, 50, 50]


def _ids_known(nodes: list[redis.Redis], node_id: str) -> bool:
    return all(node_id in n.execute_command("CLUSTER", "NODES").decode() for n in nodes)


def _give_slot(
    primaries: list[redis.Redis], nodes: list[redis.Redis], slot: int, owner: redis.Redis
) -> None:
    """``slot`` (empty) to ``owner``, told to every primary, owner first; then wait until
    every node agrees."""
    owner_id = owner.execute_command("CLUSTER", "MYID").decode()
    for n in [owner, *(n for n in primaries if n is not owner)]:
        n.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner_id)
    deadline = time.monotonic() + 15
    while not all(
        any(int(s[0]) <= slot <= int(s[1]) and s[2][2].decode() == owner_id
            for s in n.execute_command("CLUSTER", "SLOTS"))
        for n in nodes
    ):  # fmt: skip
        assert time.monotonic() < deadline, "the cluster did not agree on the slot's owner"
        time.sleep(0.05)


def test_a_new_primary_joined_with_a_bare_meet_gets_the_library_from_the_first_call(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    """Servers do not copy libraries to a node that joins with CLUSTER MEET (redis-cli
    --cluster add-node does, so it is not used here): the first call on its slot heals it,
    sync and asyncio alike."""
    for node in rc.get_primaries():
        rc.get_redis_connection(node).function_load(SOURCE)  # deployed before the join
    key = "{newshard}:n"
    slot = int(rc.keyslot(key))
    old = rc.get_redis_connection(rc.get_node_from_key(key))
    new = EmbeddedRedis(
        ["--cluster-enabled", "yes", "--cluster-config-file", "nodes-new.conf",
         "--cluster-node-timeout", "2000"]
    )  # fmt: skip
    info = new.start()
    joined = redis.Redis(host=info.host, port=info.port)
    nodes = [rc.get_redis_connection(n) for n in rc.get_nodes()]
    primaries = [rc.get_redis_connection(n) for n in rc.get_primaries()]
    new_id = joined.execute_command("CLUSTER", "MYID").decode()
    try:
        joined.execute_command("CLUSTER", "MEET", "127.0.0.1", cluster.ports[0])
        deadline = time.monotonic() + 15
        while (
            not _ids_known([*nodes, joined], new_id)
            or len(joined.execute_command("CLUSTER", "NODES").decode().splitlines())
            < len(nodes) + 1
        ):
            assert time.monotonic() < deadline, "the new node never joined"
            time.sleep(0.05)
        _give_slot([*primaries, joined], [*nodes, joined], slot, joined)
        assert joined.function_list() == []  # a bare MEET copies nothing
        c = cluster.client()
        try:
            assert reg.call(c, "bump", [key], [1]) == 1  # healed on the new primary
        finally:
            c.close()
        assert joined.function_list(library="counters")
        joined.function_flush()

        async def later() -> int:
            a = acluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
            try:
                return int(await reg.call(a, "bump", [key], [1]))
            finally:
                await a.aclose()

        assert asyncio.run(later()) == 2
        assert joined.get(key) == b"2" and joined.function_list(library="counters")
    finally:
        joined.delete(key)
        _give_slot([*primaries, joined], [*nodes, joined], slot, old)
        for n in nodes:
            n.execute_command("CLUSTER", "FORGET", new_id)
        joined.close()
        new.stop()


def test_a_coordinated_failover_mid_run_runs_every_call_once(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, reg: ScriptRegistry
) -> None:
    """Runs last in this module (twice: once per driver): it swaps a primary and its
    replica. Each call returns the counter it made: a call run twice would skip a value."""
    key = "{fo}:n"
    old, replica = _primary_and_replica(rc, key)
    # during a coordinated failover the old primary holds its clients until the replica
    # has taken over; a short timeout there would be an honest OutcomeUnknown
    c = driver.cluster(cluster.ports[0], socket_timeout=10)
    values = [driver.run(reg.call(c, "bump", [key], [1])) for _ in range(20)]
    promoted = rc.get_redis_connection(replica)
    promoted.execute_command("CLUSTER", "FAILOVER")
    asked = time.monotonic()
    deadline = asked + 20
    while promoted.info("replication")["role"] != "master":
        assert time.monotonic() < deadline, "failover did not happen"
        values.append(driver.run(reg.call(c, "bump", [key], [1])))
        if time.monotonic() - asked > 4:  # a manual failover that timed out: ask again
            promoted.execute_command("CLUSTER", "FAILOVER")
            asked = time.monotonic()
    values += [driver.run(reg.call(c, "bump", [key], [1])) for _ in range(20)]
    pipe = reg.pipeline(c)
    for _ in range(10):
        pipe.call("bump", [key], [1])
    values += driver.run(pipe.execute())
    assert values == list(range(1, len(values) + 1))  # each ran exactly once, in order
    assert int(promoted.get(key) or 0) == len(values)
    assert promoted.function_list(library="counters")  # replicated: no reload needed
    demoted = rc.get_redis_connection(old)
    while demoted.info("replication").get("master_link_status") != "up":  # settled
        assert time.monotonic() < deadline + 15, "the old primary never followed"
        time.sleep(0.05)


def _primary_and_replica(
    rc: redis.cluster.RedisCluster, key: str
) -> tuple[redis.cluster.ClusterNode, redis.cluster.ClusterNode]:
    """The primary of ``key``'s slot and its replica, once the cluster agrees on them."""
    deadline = time.monotonic() + 15
    while True:
        rc.nodes_manager.initialize()
        owner = rc.get_node_from_key(key)
        for n in rc.get_nodes():
            info = rc.get_redis_connection(n).info("replication")
            if info["role"] == "slave" and info["master_port"] == owner.port:
                return owner, n
        assert time.monotonic() < deadline, "no replica follows the slot's primary"
        time.sleep(0.05)
