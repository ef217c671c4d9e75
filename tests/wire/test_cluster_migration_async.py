"""The asyncio twin of test_cluster_migration.py: calls during a slot migration on a
``redis.asyncio.cluster.RedisCluster``.

The source node A answers ``ASK <slot> B`` for keys already moved; the call must go to B
once, right after ``ASKING``, or it fails until the migration ends (the slot map still says
A). Same fixture: the slot of ``{luapipe-migration}`` half-way from A to B, MOVED_KEY (10)
on B, STAYED_KEY (20) on A, NEW_KEY nowhere.
"""

from __future__ import annotations

from typing import Any, TypeVar

import pytest
import redis.asyncio.cluster as acluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.scripts.registry import ScriptRegistry

from ..helpers import arun
from . import test_cluster_migration as sync_migration
from .test_cluster_migration import COUNTER, MOVED_KEY, NEW_KEY, STAYED_KEY, Migration

pytestmark = pytest.mark.cluster
migration = sync_migration.migration  # the same fixture (pytest finds it here by name)
T = TypeVar("T")


def test_call_follows_ask_to_the_importing_node(
    migration: Migration, cluster: EmbeddedCluster
) -> None:
    reg = ScriptRegistry([COUNTER])

    async def body(a: acluster.RedisCluster) -> list[Any]:
        return [
            await reg.call(a, "counted", keys=[MOVED_KEY], args=[1]),  # loaded on B, ran once
            await reg.call(a, "counted", keys=[MOVED_KEY], args=[1]),  # steady state
            await reg.call(a, "counted", keys=[STAYED_KEY], args=[1]),  # still A's
            await reg.call(a, "counted", keys=[NEW_KEY], args=[5]),  # created on B
        ]

    assert arun(cluster, body) == [11, 12, 21, 5]
    assert migration.on_target("MGET", MOVED_KEY, NEW_KEY) == [b"12", b"5"]
    assert migration.source.get(STAYED_KEY) == b"21"


def test_pipeline_follows_ask_per_call(migration: Migration, cluster: EmbeddedCluster) -> None:
    reg = ScriptRegistry([COUNTER])

    async def body(a: acluster.RedisCluster) -> list[Any]:
        async with reg.pipeline(a) as p:
            p.call("counted", keys=[MOVED_KEY], args=[1])
            p.call("counted", keys=[STAYED_KEY], args=[1])
            p.call("counted", keys=[NEW_KEY], args=[1])
            p.call("counted", keys=[MOVED_KEY], args=[1])
            results: list[Any] = await p.execute()
            return results

    assert arun(cluster, body) == [11, 21, 1, 12]  # in the caller's order, each ran once
    assert migration.on_target("MGET", MOVED_KEY, NEW_KEY) == [b"12", b"1"]
    assert migration.source.get(STAYED_KEY) == b"21"


def test_transaction_pipeline_follows_ask(migration: Migration, cluster: EmbeddedCluster) -> None:
    """All the keys are on B: A refuses the queued call (EXECABORT, nothing ran); it is
    sent again as ASKING, MULTI ... EXEC on B."""
    reg = ScriptRegistry([COUNTER])

    async def body(a: acluster.RedisCluster) -> list[Any]:
        async with reg.pipeline(a, transaction=True) as p:
            p.call("counted", keys=[MOVED_KEY], args=[1])
            p.incr(MOVED_KEY)
            results: list[Any] = await p.execute()
            return results

    assert arun(cluster, body) == [11, 12]
    assert migration.on_target("GET", MOVED_KEY) == b"12"


def test_generated_form_follows_ask_per_command(
    migration: Migration, cluster: EmbeddedCluster
) -> None:
    """incr_many (one INCRBY per counter) routed per command: the moved and the new key
    go to B after ASKING, the stayed key to A; each INCRBY runs once per form."""
    op = luapipe.load_operation("examples/operations/incr_many.toml")
    keys = {"counters": [MOVED_KEY, STAYED_KEY, NEW_KEY]}

    async def body(a: acluster.RedisCluster) -> list[Any]:
        return [await op.run(a, form, keys=keys, args={"by": 1}) for form in ("naive", "pipelined")]

    assert arun(cluster, body) == [3, 3]
    assert migration.on_target("MGET", MOVED_KEY, NEW_KEY) == [b"12", b"2"]
    assert migration.source.get(STAYED_KEY) == b"22"


@pytest.mark.parametrize("form", sync_migration.RATE_LIMIT.forms)
def test_every_generated_form_follows_ask(
    migration: Migration, cluster: EmbeddedCluster, form: str
) -> None:
    """The async twin of the sync test: each form, on a key A no longer has, runs on B."""
    key = f"{sync_migration.TAG}:arl:{form}"
    args = {"limit": 3, "window": 30}

    async def body(a: acluster.RedisCluster) -> list[Any]:
        op = sync_migration.RATE_LIMIT
        return [await op.run(a, form, keys={"counter": key}, args=args) for _ in range(2)]

    assert arun(cluster, body) == [[1, 2], [1, 1]]
    assert migration.on_target("GET", key) == b"2"  # two calls, each ran once, on B
