"""Fixtures: a real redis-server per session, a fresh fakeredis server per test.

``client`` runs one test body against both (``real`` and ``fake``); ``r`` is the real
server only; ``real_variant`` covers RESP2/RESP3 with and without hiredis.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.cluster
from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import SERVER_ENV, EmbeddedRedis, ServerProcess, find_redis_server

from .drivers import AsyncDriver, Driver, SyncDriver
from .engine_matrix import MARKER, on_every_engine
from .helpers import emptied_cluster_client

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = ROOT / "scripts_lua"
EXAMPLES_DIR = ROOT / "examples"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the engine matrix's tests (tests/engine_matrix.py): ``pytest -m engines``."""
    for item in items:
        if on_every_engine(item.nodeid):
            item.add_marker(MARKER)


def pytest_report_header(config: pytest.Config) -> str:
    """Which server binary the fixtures start (``LUAPIPE_REDIS_SERVER``, else PATH)."""
    return f"server: {find_redis_server()} (LUAPIPE_REDIS_SERVER={os.environ.get(SERVER_ENV, '')})"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ServerProcess]:
    server = EmbeddedRedis()
    try:
        yield server.start()
    finally:
        server.stop()


def _fresh(client: redis.Redis) -> redis.Redis:
    client.flushall()
    client.script_flush()
    client.function_flush()
    client.config_set("busy-reply-threshold", 5000)
    return client


@pytest.fixture
def r(redis_server: ServerProcess) -> Iterator[redis.Redis]:
    """A real server, emptied (keys, scripts, functions) before the test; RESP2, decoded."""
    client = redis.Redis(host=redis_server.host, port=redis_server.port, protocol=2)
    try:
        yield _fresh(client)
    finally:
        client.close()


@pytest.fixture
def fake() -> Iterator[redis.Redis]:
    """A fresh fakeredis server with Lua (version 7.0) for each test."""
    server = fakeredis.FakeServer(version=(7, 0))
    client = fakeredis.FakeRedis(server=server, protocol=2)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(params=["real", "fake"])
def client(request: pytest.FixtureRequest) -> redis.Redis:
    """The same test body against the real server and against fakeredis."""
    fixture: redis.Redis = request.getfixturevalue("r" if request.param == "real" else "fake")
    return fixture


_VARIANTS: dict[str, dict[str, Any]] = {
    "resp2-python": {"protocol": 2, "parser_class": _RESP2Parser},
    "resp3-python": {"protocol": 3, "parser_class": _RESP3Parser},
    "resp2-hiredis": {"protocol": 2, "parser_class": _HiredisParser},
    "resp3-hiredis": {"protocol": 3, "parser_class": _HiredisParser},
}


@pytest.fixture(params=sorted(_VARIANTS))
def real_variant(
    request: pytest.FixtureRequest, redis_server: ServerProcess
) -> Iterator[redis.Redis]:
    """The real server through each protocol and parser redis-py offers."""
    pool = redis.ConnectionPool(
        host=redis_server.host, port=redis_server.port, **_VARIANTS[request.param]
    )
    client = redis.Redis(connection_pool=pool)
    try:
        yield _fresh(client)
    finally:
        client.close()


@pytest.fixture(scope="session")
def cluster() -> Iterator[EmbeddedCluster]:
    """A real cluster of 3 primaries, shared by the session (test_cluster.py has its own
    3+3 cluster, because its failover test changes the topology)."""
    c = EmbeddedCluster(primaries=3, replicas=0).start()
    print(f"\ncluster of 3 primaries ready in {c.startup_seconds:.2f} s")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def rc(cluster: EmbeddedCluster) -> Iterator[redis.cluster.RedisCluster]:
    """A client on the shared cluster, every node emptied of keys, scripts and functions."""
    client = emptied_cluster_client(cluster)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def scripts_dir() -> Path:
    return SCRIPTS_DIR


@pytest.fixture(params=["sync", "asyncio"])
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    """Runs the test body with sync clients, then with ``redis.asyncio`` ones (see
    tests/drivers.py): behaviour that exists in both flavours is pinned once, so a drift
    between them fails a test."""
    d: Driver = SyncDriver() if request.param == "sync" else AsyncDriver()
    try:
        yield d
    finally:
        d.close_all()
