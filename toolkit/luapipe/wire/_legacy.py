"""The slot-routing loops the generated forms still use (operations.clusterforms and
operations.aio_clusterforms), until those run on the drivers as steps (issue 12, "routed
forms"). New code uses :mod:`luapipe.wire.routing` and the drivers instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions as rex

from luapipe.errors import ServerError
from luapipe.wire import routing
from luapipe.wire.aio import node_for
from luapipe.wire.clients import is_cluster
from luapipe.wire.policy import DEFAULT, RetryPolicy, did_not_run
from luapipe.wire.replies import Redirect

__all__ = [
    "is_cluster",
    "node_by_address",
    "node_by_address_async",
    "node_client",
    "on_slot_node",
    "on_slot_node_async",
    "refresh_later",
    "refresh_later_async",
    "slot_of",
]


def slot_of(client: Any, keys: Sequence[Any]) -> int | None:
    return routing.slot_of(keys)


def node_client(
    client: Any, slot: int | None, *, read_only: bool = False
) -> tuple[str, redis.Redis]:
    """The primary that owns ``slot`` (the default node when None). ``read_only`` (a
    ``no-writes`` script): a replica of the slot where the client reads from replicas
    (``read_from_replicas=True`` or a ``load_balancing_strategy``), as redis-py routes
    its own read commands; its connections send READONLY."""
    if not is_cluster(client):
        return "", client
    if slot is None:
        node = client.get_default_node()
    elif read_only and reads_from_replicas(client):
        node = client.nodes_manager.get_node_from_slot(
            slot,
            read_from_replicas=bool(client.read_from_replicas),
            load_balancing_strategy=client.load_balancing_strategy,
        )
    else:
        node = client.nodes_manager.get_node_from_slot(slot, read_from_replicas=False)
    return node.name, client.get_redis_connection(node)


def reads_from_replicas(client: Any) -> bool:
    """Whether a cluster client was built to send reads to replicas."""
    return bool(
        getattr(client, "read_from_replicas", False)
        or getattr(client, "load_balancing_strategy", None)
    )


def node_by_address(client: Any, address: str) -> tuple[str, redis.Redis] | None:
    """The node at ``host:port`` (named by an ASK redirect); None if the client does not
    know it even after re-reading the slot map."""
    host, _, port = address.rpartition(":")
    if not is_cluster(client) or not port.isdigit():
        return None
    node = client.get_node(host=host, port=int(port))
    if node is None:
        refresh(client)
        node = client.get_node(host=host, port=int(port))
    return None if node is None else (node.name, client.get_redis_connection(node))


def refresh(client: Any) -> None:
    """Re-read the slot map after a redirect or a failover."""
    if is_cluster(client):
        client.nodes_manager.initialize()


def refresh_later(client: Any, attempt: int) -> None:
    """Back off (a failover takes a moment) and re-read the slot map."""
    time.sleep(DEFAULT.refresh_delay(attempt))
    with contextlib.suppress(redis.RedisError, OSError):  # a node is down mid-failover:
        refresh(client)  # the next attempt refreshes again


T = TypeVar("T")


def on_slot_node(
    client: Any,
    slot: int | None,
    run: Callable[[redis.Redis, bool], T],
    *,
    what: str,
    read_only: bool = False,
    policy: RetryPolicy = DEFAULT,
) -> T:
    """``run(node, asking)`` on the node that owns ``slot``, again while it did not run
    (:func:`luapipe.wire.policy.did_not_run`). An ``ASK`` goes at once to the node it names
    (``asking``: send ASKING first); any other redirect waits for the slot map."""
    last: Exception | None = None
    ask: str | None = None
    for attempt in range(policy.redirects):
        asked = node_by_address(client, ask) if ask is not None else None
        node = asked or node_client(client, slot, read_only=read_only)
        try:
            return run(node[1], asked is not None)
        except Exception as exc:
            cause = did_not_run(exc)
            if cause is None:
                raise
            last, ask = exc, (cause.ask if isinstance(cause, Redirect) else None)
        if ask is None:
            refresh_later(client, attempt)
    raise ServerError(f"no node would take {what} (slot {slot}): {last}")


async def _refresh_async(client: redis.asyncio.cluster.RedisCluster) -> None:
    """Re-read the slot map; if a node cannot answer, the next attempt tries again."""
    with contextlib.suppress(rex.RedisError, OSError):  # a node is down mid-failover:
        await client.nodes_manager.initialize()  # the next attempt refreshes again


async def refresh_later_async(client: redis.asyncio.cluster.RedisCluster, attempt: int) -> None:
    """Back off (a failover takes a moment) and re-read the slot map."""
    await asyncio.sleep(DEFAULT.refresh_delay(attempt))
    await _refresh_async(client)


async def node_by_address_async(
    client: redis.asyncio.cluster.RedisCluster, address: str
) -> redis.asyncio.cluster.ClusterNode | None:
    """The node at ``host:port`` (named by an ASK redirect); None if the client does not
    know it even after re-reading the slot map (the twin of
    :func:`luapipe.wire.routing.node_by_address`)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return None
    node = client.get_node(host=host, port=int(port))
    if node is None:
        await _refresh_async(client)
        node = client.get_node(host=host, port=int(port))
    return node


async def on_slot_node_async(
    client: redis.asyncio.cluster.RedisCluster,
    slot: int | None,
    run: Callable[[redis.asyncio.cluster.ClusterNode, bool], Awaitable[T]],
    *,
    what: str,
    read_only: bool = False,
    policy: RetryPolicy = DEFAULT,
) -> T:
    """The twin of :func:`on_slot_node`: ``await run(node, asking)`` on the slot's node,
    again while it did not run; an ASK at once."""
    last: Exception | None = None
    ask: str | None = None
    for attempt in range(policy.redirects):
        asked = await node_by_address_async(client, ask) if ask is not None else None
        try:
            return await run(asked or node_for(client, slot, read_only=read_only), bool(asked))
        except Exception as exc:
            cause = did_not_run(exc)
            if cause is None:
                raise
            last, ask = exc, (cause.ask if isinstance(cause, Redirect) else None)
        if ask is None:  # ASK: go to the importing node now; else wait for the map
            await refresh_later_async(client, attempt)
    raise ServerError(f"no node would take {what} (slot {slot}): {last}")
