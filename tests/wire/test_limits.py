"""The smallest proto-max-bulk-len a value read before its call must fit (wire.limits:
what ``scripts call --arg-file`` reads a file no further than), through both drivers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import redis.cluster

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.wire import drivers
from luapipe.wire.limits import DEFAULT_LIMIT, bulk_limit, smallest_limit_steps

from ..drivers import Driver


@pytest.fixture(scope="module")
def small_bulk() -> Iterator[ServerProcess]:
    with EmbeddedRedis(["--proto-max-bulk-len", "3mb"]) as server:
        yield server


def _run(driver: Driver, client: object) -> tuple[int, str]:
    run = drivers.drive if driver.name == "sync" else drivers.drive_async
    found: tuple[int, str] = driver.run(run(smallest_limit_steps(), client))
    return found


def test_the_limit_and_where_it_was_read(driver: Driver, small_bulk: ServerProcess) -> None:
    client = driver.redis(small_bulk.port)
    assert _run(driver, client) == (3 * 1024 * 1024, f"127.0.0.1:{small_bulk.port}")


def test_where_config_is_not_allowed_the_default_applies(
    driver: Driver, small_bulk: ServerProcess
) -> None:
    admin = redis.Redis(port=small_bulk.port)
    admin.acl_setuser("noconfig", enabled=True, passwords=["+pw"], keys=["~*"],
                      commands=["+@all", "-config"])  # fmt: skip
    try:
        client = driver.redis(small_bulk.port, username="noconfig", password="pw")
        assert _run(driver, client)[0] == DEFAULT_LIMIT
    finally:
        admin.acl_deluser("noconfig")
        admin.close()


@pytest.mark.cluster
def test_a_cluster_gives_its_smallest(
    driver: Driver, rc: redis.cluster.RedisCluster, cluster: EmbeddedCluster
) -> None:
    port = cluster.ports[1]
    node = redis.Redis(port=port)
    node.config_set("proto-max-bulk-len", 2 * 1024 * 1024)
    try:
        assert _run(driver, driver.cluster(cluster.ports[0])) == (
            2 * 1024 * 1024,
            f"127.0.0.1:{port}",
        )
        assert bulk_limit(rc) == (2 * 1024 * 1024, f"127.0.0.1:{port}")
    finally:
        node.config_set("proto-max-bulk-len", DEFAULT_LIMIT)
        node.close()
