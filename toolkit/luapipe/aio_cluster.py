"""``redis.asyncio.cluster.RedisCluster``: route script calls and pipelines by key slot.

- A call goes to the primary that owns its keys' slot (keys in several slots are a
  :class:`CrossSlotError` before anything is sent; a keyless call goes to the default
  node). A redirect (MOVED, TRYAGAIN...) or a refused connection (failover) means it did
  not run: the slot map is refreshed and the call is sent to the new owner. The script
  cache is per node, so each node gets its own ``SCRIPT LOAD`` the first time (inline).
- A pipeline is split per node, each part one :class:`~luapipe.core.Plan` sent
  concurrently; results come back in queue order. A ``transaction=True`` pipeline must
  stay in one slot. Entries answered with a redirect (or a node that refused the
  connection) did not run: the map is refreshed and only they are sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis.exceptions as rex
from redis.asyncio.cluster import ClusterNode, RedisCluster

from luapipe.aio import Moved, call_on
from luapipe.aio_transport import AsyncSession, open_connection
from luapipe.core import Entry, ScriptCall
from luapipe.errors import ConnectionFailed, CrossSlotError, ServerError, translate
from luapipe.registry import REDIRECT_ATTEMPTS
from luapipe.script import Value
from luapipe.transport import ReplyError

if TYPE_CHECKING:
    from luapipe.registry import ScriptRegistry

__all__ = ["cluster_call", "cluster_pipeline", "node_session", "node_sessions"]


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
            await s.close_if_dirty()
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


async def _refresh_later(client: RedisCluster, attempt: int) -> None:
    """Back off (a failover takes a moment) and re-read the slot map."""
    await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
    with contextlib.suppress(rex.RedisError, OSError):  # a node is down mid-failover:
        await client.nodes_manager.initialize()  # the next attempt refreshes again


async def cluster_call(registry: ScriptRegistry, client: RedisCluster, call: ScriptCall) -> Any:
    """One script call on the node owning its slot; a redirect or a refused connection
    (it did not run) refreshes the slot map and sends it again."""
    await client.initialize()
    slot = _slot_of(client, call.keys, f"script {call.script.name!r}")
    last: Exception | None = None
    for attempt in range(REDIRECT_ATTEMPTS):
        try:
            node = _node_for(client, slot)
            async with node_session(client, node) as s:
                return await call_on(registry, s, call)
        except (Moved, ConnectionFailed) as exc:  # nothing ran on that node
            last = exc
            await _refresh_later(client, attempt)
    raise ServerError(f"no node would take script {call.script.name!r} (slot {slot}): {last}")


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
    results: list[Any] = [None] * len(entries)
    totals = [0, 0]

    async def run(node: ClusterNode, indexes: list[int]) -> list[int]:
        """Run one node's part; the indexes answered with a redirect (they did not run)."""
        async with node_session(client, node) as s:
            part = [entries[i] for i in indexes]
            plan = registry.plan(part, s.address, transaction=transaction)
            batch = plan.start()
            first = True
            redirected: list[int] = []
            while batch:
                replies = await s.execute(batch)
                if first:
                    redirected = _redirected(replies, len(part), transaction)
                    first = False
                batch = plan.feed(replies)
            totals[0] += s.round_trips
            totals[1] += plan.reloads
        for i, r in zip(indexes, plan.results, strict=True):
            results[i] = r
        return [indexes[j] for j in redirected]

    pending = list(range(len(entries)))
    for attempt in range(REDIRECT_ATTEMPTS):
        groups: dict[str, tuple[ClusterNode, list[int]]] = {}
        for i in pending:
            node = _node_for(client, slots[i])
            groups.setdefault(node.name, (node, []))[1].append(i)
        outcomes = await asyncio.gather(
            *(run(node, idx) for node, idx in groups.values()), return_exceptions=True
        )
        pending = []
        for (_, idx), outcome in zip(groups.values(), outcomes, strict=True):
            if isinstance(outcome, ConnectionFailed):  # nothing was sent to that node
                pending += idx
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                pending += outcome
        if not pending:
            return results, totals[0], totals[1]
        pending.sort()
        await _refresh_later(client, attempt)
    for i in pending:
        results[i] = ServerError(
            f"redirected or refused {REDIRECT_ATTEMPTS} times; it did not run (slot {slots[i]})"
        )
    return results, totals[0], totals[1]


def _redirected(replies: list[Any], entries: int, transaction: bool) -> list[int]:
    """Positions (in the part) of entries the first batch's replies redirected.

    Non-transactional: the entries are the last ``entries`` wire commands (inline SCRIPT
    LOADs come first). Transactional: a redirect while queueing aborts EXEC (EXECABORT),
    so nothing ran and the whole part is re-routed.
    """
    if transaction:
        queued = replies[1:-1]
        hit = any(isinstance(r, ReplyError) and r.is_redirect for r in queued)
        return list(range(entries)) if hit else []
    tail = replies[len(replies) - entries :]
    return [j for j, r in enumerate(tail) if isinstance(r, ReplyError) and r.is_redirect]
