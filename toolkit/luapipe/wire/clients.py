"""Which client is which: sync or asyncio, one server or a cluster (isinstance checks only)."""

from __future__ import annotations

from typing import TypeAlias

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from luapipe.errors import CallArgumentError

__all__ = [
    "AsyncClient",
    "SyncClient",
    "is_async_client",
    "is_cluster",
    "require_async_client",
    "require_sync_client",
]

SyncClient: TypeAlias = "redis.Redis | redis.cluster.RedisCluster"
AsyncClient: TypeAlias = "redis.asyncio.Redis | redis.asyncio.RedisCluster"

_ASYNC = (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
_CLUSTER = (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)


_IS_ASYNC: dict[type, bool] = {}


def is_async_client(client: object) -> bool:
    """A ``redis.asyncio`` client (Redis or RedisCluster, fakeredis's async one too).

    Remembered per class: ``redis.asyncio.Redis`` derives from a typing Protocol, whose
    ``isinstance`` costs microseconds on every call."""
    kind = client.__class__
    found = _IS_ASYNC.get(kind)
    if found is None:
        found = _IS_ASYNC[kind] = isinstance(client, _ASYNC)
    return found


def is_cluster(client: object) -> bool:
    """A cluster client, sync or asyncio."""
    return isinstance(client, _CLUSTER)


def _kind(client: object) -> str:
    return f"{type(client).__module__}.{type(client).__name__}"


def require_async_client(client: object, what: str, sync_hint: str) -> None:
    """A one-line :class:`CallArgumentError` unless ``client`` is a ``redis.asyncio`` one."""
    if not is_async_client(client):
        raise CallArgumentError(
            f"{what} needs a redis.asyncio client (redis.asyncio.Redis or RedisCluster), "
            f"got {_kind(client)}; with a sync client use {sync_hint}"
        )


def require_sync_client(client: object, what: str, async_hint: str) -> None:
    """A one-line :class:`CallArgumentError` if ``client`` is a ``redis.asyncio`` one."""
    if is_async_client(client):
        raise CallArgumentError(
            f"{what} needs a sync client (redis.Redis or RedisCluster), got "
            f"{_kind(client)}; with a redis.asyncio client use {async_hint}"
        )
