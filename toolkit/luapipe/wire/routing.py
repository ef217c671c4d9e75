"""Redis Cluster routing for the registry: which nodes exist, which node owns a call.

A plain ``redis.Redis`` is a one-node "cluster"; a ``redis.cluster.RedisCluster`` has every
primary and replica. Script caches are per node and not replicated, so deploy reaches all of
them; calls go to the primary that owns the slot of their keys. Keys of one call in
different slots are refused before anything is sent.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
import redis.cluster
from redis.exceptions import RedisClusterException

from luapipe.errors import CallArgumentError, CrossSlotError, ServerError
from luapipe.scripts.protocol import Redirect, ask_target

__all__ = [
    "Redirect",
    "all_nodes",
    "command_slot",
    "is_cluster",
    "node_by_address",
    "node_client",
    "on_slot_node",
    "reads_from_replicas",
    "refresh",
    "refresh_later",
    "slot_of",
]


def is_cluster(client: object) -> bool:
    return isinstance(client, redis.cluster.RedisCluster)


def all_nodes(client: Any) -> list[tuple[str, redis.Redis]]:
    """(name, client) for every node that may serve a script: primaries and replicas."""
    if not is_cluster(client):
        return [("", client)]
    nodes = sorted(client.get_nodes(), key=lambda n: (n.server_type != "primary", n.name))
    return [(n.name, client.get_redis_connection(n)) for n in nodes]


def _hint(keys: Sequence[Any], slots: dict[int, list[Any]]) -> str:
    shown = "; ".join(f"slot {s}: {', '.join(map(_text, ks))}" for s, ks in sorted(slots.items()))
    return (
        f"keys of one call must share a cluster slot ({shown}); give them a common hash tag, "
        f"e.g. {{order:42}}:stock and {{order:42}}:log"
    )


def _text(key: Any) -> str:
    return key.decode(errors="backslashreplace") if isinstance(key, bytes) else str(key)


def slot_of(client: Any, keys: Sequence[Any]) -> int | None:
    """The one slot of ``keys`` (None without keys); :class:`CrossSlotError` otherwise."""
    if not keys:
        return None
    slots: dict[int, list[Any]] = {}
    for k in keys:
        slots.setdefault(int(client.keyslot(k)), []).append(k)
    if len(slots) > 1:
        raise CrossSlotError(_hint(keys, slots))
    (slot,) = slots
    return slot


def command_slot(client: Any, args: Sequence[Any]) -> int | None:
    """Slot of a plain command queued in a cluster pipeline (None: any node will do)."""
    try:
        return int(client.determine_slot(*args))
    except RedisClusterException as exc:
        text = str(exc)
        if "same slot" in text or "CROSSSLOT" in text:
            raise CrossSlotError(f"{args[0]}: {text.splitlines()[0]}") from None
        if "Missing key" in text:
            return None
        raise CallArgumentError(
            f"cannot route {args[0]} in a cluster: {text.splitlines()[0]}"
        ) from None


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
    time.sleep(min(0.05 * 2**attempt, 1.0))
    with contextlib.suppress(redis.RedisError, OSError):  # a node is down mid-failover:
        refresh(client)  # the next attempt refreshes again


T = TypeVar("T")


def on_slot_node(
    client: Any,
    slot: int | None,
    run: Callable[[redis.Redis, bool], T],
    redirect_of: Callable[[Exception], str | None],
    *,
    attempts: int,
    what: str,
    read_only: bool = False,
) -> T:
    """``run(node, asking)`` on the node that owns ``slot``, again while it did not run.

    ``redirect_of(exc)`` says whether an exception proves the request did not run: the
    redirect reply's text (or "" for a connection refused before sending), else None and
    the exception is raised. An ``ASK`` goes at once to the node it names (``asking``: send
    ASKING first); any other redirect waits for the slot map to be re-read."""
    last: Exception | None = None
    ask: str | None = None
    for attempt in range(attempts):
        asked = node_by_address(client, ask) if ask is not None else None
        node = asked or node_client(client, slot, read_only=read_only)
        try:
            return run(node[1], asked is not None)
        except Exception as exc:
            redirect = redirect_of(exc)
            if redirect is None:
                raise
            last, ask = exc, ask_target(redirect)
        if ask is None:
            refresh_later(client, attempt)
    raise ServerError(f"no node would take {what} (slot {slot}): {last}")
