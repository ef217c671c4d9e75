"""``redis.asyncio.cluster.RedisCluster``: route script calls and pipelines by key slot.

- A call goes to the primary that owns its keys' slot (keys in several slots are a
  :class:`CrossSlotError` before anything is sent; a keyless call goes to the default
  node). A ``MOVED`` reply means it did not run: the slot map is refreshed and the call is
  sent to the new owner (at most :data:`MAX_REDIRECTS` times). The script cache is per
  node, so each node gets its own ``SCRIPT LOAD`` the first time (inline, same write).
- A pipeline is split per node, each part one :class:`~luapipe.core.Plan` sent
  concurrently; results come back in queue order. A ``transaction=True`` pipeline must
  stay in one slot. A command answered ``MOVED`` in a pipeline did not run; its slot holds
  a :class:`ServerError` and the slot map is refreshed for the next execute.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis.exceptions as rex
from redis.asyncio.cluster import ClusterNode, RedisCluster

from luapipe.aio import Moved, call_on, run_plan
from luapipe.aio_transport import AsyncSession, open_connection
from luapipe.core import Entry, ScriptCall
from luapipe.errors import CrossSlotError, LuapipeError, ServerError, translate
from luapipe.script import Value

if TYPE_CHECKING:
    from luapipe.registry import ScriptRegistry

__all__ = ["cluster_call", "cluster_pipeline", "node_session", "node_sessions"]

MAX_REDIRECTS = 3


class node_session:  # lower case: used like a function
    """Hold one connection of one cluster node."""

    __slots__ = ("_client", "_conn", "_node", "_session")

    def __init__(self, client: RedisCluster, node: ClusterNode) -> None:
        self._client = client
        self._node = node

    async def __aenter__(self) -> AsyncSession:
        node = self._node
        conn = self._conn = node.acquire_connection()
        try:
            await open_connection(conn)
        except BaseException as exc:
            node.release(conn)
            if isinstance(exc, rex.RedisError | OSError):
                raise translate(exc, where=node.name, sent=False) from None
            raise
        self._session = AsyncSession(self._client, conn, parser=node)
        return self._session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        s = self._session
        try:
            if s.pending or s.broken:
                await s.conn.disconnect(nowait=True)
        finally:
            self._node.release(s.conn)


async def node_sessions(client: RedisCluster) -> list[node_session]:
    """Every node, replicas too: caches are per node and a replica may be promoted."""
    await client.initialize()
    return [node_session(client, n) for n in client.get_nodes()]


def _slot_of(client: RedisCluster, keys: tuple[Value, ...], what: str) -> int | None:
    slots = {client.keyslot(k) for k in keys}
    if len(slots) > 1:
        raise CrossSlotError(
            f"the keys of {what} hash to different cluster slots ({sorted(slots)}); "
            "use a hash tag such as {user42}:a and {user42}:b"
        )
    return slots.pop() if slots else None


def _node_for(client: RedisCluster, slot: int | None) -> ClusterNode:
    if slot is None:
        return client.get_default_node()
    nodes = client.nodes_manager.slots_cache.get(slot)
    if not nodes:
        raise ServerError(f"slot {slot} is not covered by the cluster")
    return nodes[0]


async def cluster_call(registry: ScriptRegistry, client: RedisCluster, call: ScriptCall) -> Any:
    """One script call on the node owning its slot; MOVED -> refresh the map and re-route."""
    await client.initialize()
    slot = _slot_of(client, call.keys, f"script {call.script.name!r}")
    for _ in range(MAX_REDIRECTS):
        node = _node_for(client, slot)
        try:
            async with node_session(client, node) as s:
                return await call_on(registry, s, call)
        except Moved:  # nothing ran on that node
            await client.nodes_manager.initialize()
    raise ServerError(
        f"script {call.script.name!r} was redirected (MOVED) {MAX_REDIRECTS} times; it did not "
        "run (is the cluster resharding?)"
    )


async def _entry_slot(client: RedisCluster, entry: Entry) -> int | None:
    if isinstance(entry, ScriptCall):
        return _slot_of(client, entry.keys, f"script {entry.script.name!r}")
    try:
        return int(await client._determine_slot(*entry.args))
    except rex.RedisClusterException as exc:
        if "CROSSSLOT" in str(exc) or "different slots" in str(exc):
            raise CrossSlotError(f"{entry.name}: {exc}") from None
        raise ServerError(f"{entry.name}: {exc}") from None


async def cluster_pipeline(
    registry: ScriptRegistry, client: RedisCluster, entries: list[Entry], *, transaction: bool
) -> tuple[list[Any], int, int]:
    """Run ``entries`` split per node; (results in queue order, round trips, reloads)."""
    await client.initialize()
    slots = [await _entry_slot(client, entry) for entry in entries]
    if transaction:
        used = sorted({s for s in slots if s is not None})
        if len(used) > 1:
            raise CrossSlotError(
                f"a transaction on a cluster needs every key in one slot; its keys hash to "
                f"slots {used} (use one hash tag for every key); nothing was sent"
            )
        slots = [used[0] if used else None] * len(entries)
    groups: dict[str, tuple[ClusterNode, list[int]]] = {}
    for i, slot in enumerate(slots):
        node = _node_for(client, slot)
        groups.setdefault(node.name, (node, []))[1].append(i)
    results: list[Any] = [None] * len(entries)
    totals = [0, 0]

    async def run(node: ClusterNode, indexes: list[int]) -> None:
        async with node_session(client, node) as s:
            plan = registry.plan([entries[i] for i in indexes], s.address, transaction=transaction)
            await run_plan(plan, s)
            totals[0] += s.round_trips
            totals[1] += plan.reloads
        for i, r in zip(indexes, plan.results, strict=True):
            results[i] = r

    outcomes = await asyncio.gather(
        *(run(node, idx) for node, idx in groups.values()), return_exceptions=True
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    if any(isinstance(r, LuapipeError) and str(r).startswith("MOVED ") for r in results):
        await client.nodes_manager.initialize()
    return results, totals[0], totals[1]
