"""The registry on a real 3-primary, 3-replica cluster: deploy, route, pipeline, failover."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio.cluster as acluster
import redis.cluster
from click.testing import CliRunner
from redis.cluster import LoadBalancingStrategy

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.cli import main
from luapipe.errors import CrossSlotError
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..conftest import SCRIPTS_DIR
from ..helpers import emptied_cluster_client

pytestmark = pytest.mark.cluster

COUNTER = LuaScript.from_source(
    "counted", "-- @key ran\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)
TWO_KEYS = LuaScript.from_source(
    "pair",
    "-- @key a\n-- @key b\nreturn redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[2])\n",
)


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
    return ScriptRegistry([COUNTER, TWO_KEYS])


def keys_on_distinct_nodes(rc: redis.cluster.RedisCluster) -> list[str]:
    """One key per primary."""
    found: dict[str, str] = {}
    for i in range(1000):
        key = f"k{i}"
        found.setdefault(rc.get_node_from_key(key).name, key)
        if len(found) == 3:
            break
    return list(found.values())


def test_load_reaches_every_node_including_replicas(
    rc: redis.cluster.RedisCluster, reg: ScriptRegistry
) -> None:
    reg.load(rc)
    status = reg.status(rc)
    assert len(status) == 6 and all(not s.missing for s in status)
    for node in rc.get_nodes():
        assert rc.get_redis_connection(node).script_exists(COUNTER.sha) == [True]


def test_call_routes_by_slot_and_recovers_on_the_owning_node(
    rc: redis.cluster.RedisCluster, reg: ScriptRegistry
) -> None:
    keys = keys_on_distinct_nodes(rc)
    for key in keys:
        assert reg.call(rc, "counted", keys=[key], args=[1]) == 1
    owner = rc.get_redis_connection(rc.get_node_from_key(keys[0]))
    owner.script_flush()  # the node that owns the slot lost its cache
    assert reg.call(rc, "counted", keys=[keys[0]], args=[1]) == 2
    assert owner.script_exists(COUNTER.sha) == [True]
    assert [int(rc.get(k) or 0) for k in keys] == [2, 1, 1]


def test_cross_slot_keys_are_refused_before_sending(
    rc: redis.cluster.RedisCluster, reg: ScriptRegistry
) -> None:
    a, b = keys_on_distinct_nodes(rc)[:2]
    with pytest.raises(CrossSlotError, match=r"slot \d+: .*hash tag"):
        reg.call(rc, "pair", keys=[a, b])
    assert rc.get(a) is None and rc.get(b) is None
    assert reg.call(rc, "pair", keys=["{user:1}:a", "{user:1}:b"]) == 2


def test_pipeline_groups_per_node_in_caller_order(
    rc: redis.cluster.RedisCluster, reg: ScriptRegistry
) -> None:
    keys = keys_on_distinct_nodes(rc)
    pipe = reg.pipeline(rc)
    for _ in range(2):
        for k in keys:
            pipe.call("counted", keys=[k], args=[10])
            pipe.incr(f"plain:{k}")
        results = pipe.execute()
    assert results == [20, 2, 20, 2, 20, 2]
    assert pipe.last_round_trips == 3  # one per node in steady state
    # a flush on one node between executes: only its script calls are re-sent
    rc.get_redis_connection(rc.get_node_from_key(keys[1])).script_flush()
    for k in keys:
        pipe.call("counted", keys=[k], args=[1])
    assert pipe.execute() == [21, 21, 21]
    assert pipe.last_reloads == 1


def test_transaction_needs_one_slot(rc: redis.cluster.RedisCluster, reg: ScriptRegistry) -> None:
    a, b = keys_on_distinct_nodes(rc)[:2]
    with reg.pipeline(rc, transaction=True) as pipe:
        pipe.call("counted", keys=[a], args=[1]).incr(b)
        with pytest.raises(CrossSlotError, match="transaction=True needs every key in one slot"):
            pipe.execute()
    with reg.pipeline(rc, transaction=True) as pipe:
        pipe.call("counted", keys=["{t}x"], args=[5]).incr("{t}y").get("{t}x")
        assert pipe.execute() == [5, 1, b"5"]


def test_cli_detects_the_cluster(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    lock = tmp_path / "lock.json"
    base = ["deploy", "--dir", str(SCRIPTS_DIR), "--url", cluster.url, "--lock", str(lock)]
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[-1].count("127.0.0.1:") == 6
    replica = next(n for n in rc.get_nodes() if n.server_type == "replica")
    rc.get_redis_connection(replica).script_flush()
    res = CliRunner().invoke(
        main,
        [
            "deploy",
            "--dir",
            str(SCRIPTS_DIR),
            "--url",
            cluster.url,
            "--lock",
            str(lock),
            "--check",
            "--json",
        ],
    )
    assert res.exit_code == 1
    drift = json.loads(res.output)["drift"]
    assert {d["node"] for d in drift} == {replica.name}


def test_cluster_flag_forces_the_client_kind(cluster: EmbeddedCluster) -> None:
    status = ["scripts", "status", "--dir", str(SCRIPTS_DIR), "--url", cluster.url, "--json"]
    detected = CliRunner().invoke(main, status)
    single = CliRunner().invoke(main, ["--no-cluster", *status])
    assert len(json.loads(detected.output)) == 6  # every node
    assert len(json.loads(single.output)) == 1  # only the node named in the URL


PEEK = LuaScript.from_source(
    "peek", "#!lua flags=no-writes\n-- @key k\nreturn redis.call('GET', KEYS[1])\n"
)


def _ran(rc: redis.cluster.RedisCluster, node: Any, command: str) -> int:
    entry = rc.get_redis_connection(node).info("commandstats").get(f"cmdstat_{command}")
    return int(entry["calls"]) if entry else 0


def test_read_only_scripts_read_from_replicas_when_the_client_does(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    """A client built with a replicas load-balancing strategy sends a no-writes script to
    a replica of its slot (READONLY connection, loaded there on demand), as redis-py does
    with GET; writing scripts and clients that read from primaries stay on the primary."""
    reg = ScriptRegistry([PEEK, COUNTER])
    key = "{ro}:k"
    rc.set(key, "v")
    primary = rc.get_node_from_key(key)
    rc.get_redis_connection(primary).execute_command("WAIT", 1, 5000)  # on the replica too
    replicas = [n for n in rc.get_nodes() if n.server_type == "replica"]
    before = {n.name: _ran(rc, n, "evalsha_ro") for n in [primary, *replicas]}
    ro = cluster.client(load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN_REPLICAS)
    try:
        assert [reg.call(ro, "peek", keys=[key]) for _ in range(5)] == [b"v"] * 5
        served = {n.name: _ran(rc, n, "evalsha_ro") - before[n.name] for n in replicas}
        assert sum(served.values()) == 5 and _ran(rc, primary, "evalsha_ro") == before[primary.name]
        assert reg.call(ro, "counted", keys=[key + "n"], args=[1]) == 1  # writes: primary
        assert rc.get(key + "n") == b"1"
    finally:
        ro.close()
    assert reg.call(rc, "peek", keys=[key]) == b"v"  # a default client reads the primary
    assert _ran(rc, primary, "evalsha_ro") == before[primary.name] + 1


def test_async_read_only_scripts_read_from_replicas_too(
    rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    reg = ScriptRegistry([PEEK])
    key = "{ro}:k"
    rc.set(key, "v")
    primary = rc.get_node_from_key(key)
    rc.get_redis_connection(primary).execute_command("WAIT", 1, 5000)
    replicas = [n for n in rc.get_nodes() if n.server_type == "replica"]
    before = sum(_ran(rc, n, "evalsha_ro") for n in replicas)
    on_primary = _ran(rc, primary, "evalsha_ro")

    async def body() -> list[Any]:
        ro = acluster.RedisCluster(
            host="127.0.0.1",
            port=cluster.ports[0],
            load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN_REPLICAS,
        )
        try:
            return [await reg.call(ro, "peek", keys=[key]) for _ in range(4)]
        finally:
            await ro.aclose()

    assert asyncio.run(body()) == [b"v"] * 4
    assert sum(_ran(rc, n, "evalsha_ro") for n in replicas) == before + 4
    assert _ran(rc, primary, "evalsha_ro") == on_primary


def test_failover_keeps_calls_working_and_nothing_runs_twice(
    rc: redis.cluster.RedisCluster, reg: ScriptRegistry, cluster: EmbeddedCluster
) -> None:
    """Runs last in this module: it swaps a primary and its replica."""
    key = keys_on_distinct_nodes(rc)[0]
    reg.load(rc)
    old_primary = rc.get_node_from_key(key)
    replica = next(
        n
        for n in rc.get_nodes()
        if n.server_type == "replica"
        and rc.get_redis_connection(n).info("replication")["master_port"] == old_primary.port
    )
    rc.get_redis_connection(replica).script_flush()  # the replica never had the scripts
    calls = 0
    for _ in range(20):
        reg.call(rc, "counted", keys=[key], args=[1])
        calls += 1
    rc.get_redis_connection(replica).execute_command("CLUSTER", "FAILOVER")
    deadline = time.monotonic() + 15
    while rc.get_redis_connection(replica).info("replication")["role"] != "master":
        assert time.monotonic() < deadline, "failover did not happen"
        reg.call(rc, "counted", keys=[key], args=[1])
        calls += 1
        time.sleep(0.01)
    for _ in range(20):
        reg.call(rc, "counted", keys=[key], args=[1])
        calls += 1
    new_primary = rc.get_redis_connection(replica)
    assert int(new_primary.get(key) or 0) == calls  # every call ran exactly once
    assert new_primary.script_exists(COUNTER.sha) == [True]  # loaded there on demand
