"""Helpers for reading what the server really saw."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import redis
import redis.asyncio.cluster as acluster

if TYPE_CHECKING:
    from luapipe.bench.cluster import EmbeddedCluster

T = TypeVar("T")


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats, e.g. "evalsha")."""
    stats = client.info("commandstats")
    entry = stats.get(f"cmdstat_{command.lower()}")
    return int(entry["calls"]) if entry else 0


def reset_stats(client: redis.Redis) -> None:
    client.config_resetstat()


def arun(cluster: EmbeddedCluster, body: Callable[[acluster.RedisCluster], Awaitable[T]]) -> T:
    """``await body(client)`` on a fresh asyncio cluster client, closed afterwards."""

    async def main() -> T:
        client = acluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())
