"""Function calls during a slot migration (the shared 3-primary cluster): the importing
node lacks the library, so the call that ASK sends there heals there, after ASKING, inside
its MULTI; each call runs once, sync and asyncio."""

from __future__ import annotations

import pytest

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.scripts.registry import ScriptRegistry

from ..drivers import Driver
from ..wire.test_cluster_migration import (  # noqa: F401  (the fixture, by name)
    MOVED_KEY,
    NEW_KEY,
    STAYED_KEY,
    Migration,
    migration,
)
from .test_function_calls import COUNTERS, SOURCE

pytestmark = pytest.mark.cluster


@pytest.fixture
def lost_on_target(migration: Migration) -> Migration:  # noqa: F811
    """The library on the migrating slot's old owner, none on the importing node."""
    migration.source.function_load(SOURCE, replace=True)
    migration.target.function_flush()
    return migration


def test_a_call_asked_to_the_importing_node_heals_it_there(
    driver: Driver, lost_on_target: Migration, cluster: EmbeddedCluster
) -> None:
    m = lost_on_target
    reg = ScriptRegistry([], libraries=[COUNTERS])
    c = driver.cluster(cluster.ports[0])
    assert driver.run(reg.call(c, "bump", [MOVED_KEY], [1])) == 11  # ASK -> B, healed on B
    assert driver.run(reg.call(c, "bump", [MOVED_KEY], [1])) == 12
    assert driver.run(reg.call(c, "bump", [STAYED_KEY], [1])) == 21  # still A's
    assert m.on_target("GET", MOVED_KEY) == b"12" and m.source.get(STAYED_KEY) == b"21"
    assert m.target.function_list(library="counters")


def test_a_pipeline_asked_to_the_importing_node_heals_it_there(
    driver: Driver, lost_on_target: Migration, cluster: EmbeddedCluster
) -> None:
    m = lost_on_target
    reg = ScriptRegistry([], libraries=[COUNTERS])
    p = reg.pipeline(driver.cluster(cluster.ports[0]))
    p.call("bump", [MOVED_KEY], [1]).call("bump", [STAYED_KEY], [1])
    p.call("bump", [NEW_KEY], [1]).call("bump", [MOVED_KEY], [1])
    assert driver.run(p.execute()) == [11, 21, 1, 12]  # in order, each ran once
    assert m.on_target("MGET", MOVED_KEY, NEW_KEY) == [b"12", b"1"]
    assert m.source.get(STAYED_KEY) == b"21"
