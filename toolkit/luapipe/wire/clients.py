"""Which client is which: sync or asyncio, one server or a cluster (isinstance checks only)."""

from __future__ import annotations

from typing import TypeAlias

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from luapipe.errors import CallArgumentError, mask_url, printable_url

__all__ = [
    "AsyncClient",
    "SyncClient",
    "is_async_client",
    "is_cluster",
    "require_async_client",
    "require_sync",
    "require_sync_client",
]

SyncClient: TypeAlias = "redis.Redis | redis.cluster.RedisCluster"
AsyncClient: TypeAlias = "redis.asyncio.Redis | redis.asyncio.RedisCluster"

_ASYNC = (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
_SYNC = (redis.Redis, redis.cluster.RedisCluster)
_CLUSTER = (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)


_IS_ASYNC: dict[type, bool] = {}


def is_async_client(client: object) -> bool:
    """A ``redis.asyncio`` client (Redis or RedisCluster, fakeredis's async one too); False
    for a sync one. Anything else (a URL string, a connection pool...) is a
    :class:`CallArgumentError`: every public method that takes a client asks this first.

    Remembered per class: ``redis.asyncio.Redis`` derives from a typing Protocol, whose
    ``isinstance`` costs microseconds on every call."""
    kind = client.__class__
    found = _IS_ASYNC.get(kind)
    if found is not None:
        return found
    marked = getattr(kind, "luapipe_async", None)  # an auto-pipeline says which it wraps
    if isinstance(marked, bool):
        found = marked
    elif isinstance(client, _ASYNC):
        found = True
    elif isinstance(client, _SYNC):
        found = False
    else:
        # a URL is shown as printable_url shows it, before any cut (a cut URL hides nothing)
        text = repr(printable_url(client)) if isinstance(client, str) else mask_url(repr(client))
        shown = text if len(text) <= 60 else text[:57] + "..."
        hint = "; make one with redis.Redis.from_url(url)" if isinstance(client, str) else ""
        raise CallArgumentError(
            "expected a redis-py client (redis.Redis, redis.cluster.RedisCluster or their "
            f"redis.asyncio twins), got {type(client).__name__} {shown}{hint}"
        )
    _IS_ASYNC[kind] = found
    return found


def is_cluster(client: object) -> bool:
    """A cluster client, sync or asyncio (or an auto-pipeline over one)."""
    if getattr(type(client), "luapipe_autopipeline", False):
        return bool(getattr(client, "on_cluster", False))
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


def require_sync(client: object, what: str) -> None:
    """A :class:`CallArgumentError` unless ``client`` is a sync redis-py client (for the
    functions that have no asyncio twin: deploy, verify)."""
    if is_async_client(client):
        raise CallArgumentError(
            f"{what} needs a sync client (redis.Redis or redis.cluster.RedisCluster), got "
            f"{_kind(client)}"
        )


def require_sync_client(client: object, what: str, async_hint: str) -> None:
    """A one-line :class:`CallArgumentError` if ``client`` is a ``redis.asyncio`` one."""
    if is_async_client(client):
        raise CallArgumentError(
            f"{what} needs a sync client (redis.Redis or RedisCluster), got "
            f"{_kind(client)}; with a redis.asyncio client use {async_hint}"
        )
