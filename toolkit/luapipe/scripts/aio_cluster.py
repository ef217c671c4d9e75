"""``redis.asyncio.cluster.RedisCluster``: route script calls and pipelines by key slot.

- A call goes to the primary that owns its keys' slot (keys in several slots are a
  :class:`CrossSlotError` before anything is sent; a keyless call goes to the default
  node). A redirect (MOVED, TRYAGAIN...) or a refused connection (failover) means it did
  not run: the slot map is refreshed and the call is sent to the new owner. An ASK (the
  slot is being migrated and the key has moved already) sends it at once to the node
  named, after ASKING; the slot map still names the old owner until the migration ends.
  The script cache is per node, so each node gets its own ``SCRIPT LOAD`` the first time
  (inline).
- A pipeline is split per node, each part one :class:`~luapipe.scripts.protocol.Plan` sent
  concurrently; results come back in queue order. A ``transaction=True`` pipeline must
  stay in one slot. Entries answered with a redirect (or a node that refused the
  connection) did not run: the map is refreshed and only they are sent again; those
  answered ASK go to the node named, after ASKING, grouped per node.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import redis.exceptions as rex
from redis.asyncio.cluster import ClusterNode, RedisCluster

from luapipe.errors import ConnectionFailed, CrossSlotError, ServerError, translate
from luapipe.scripts.aio import Moved, call_on, run_plan
from luapipe.scripts.protocol import Entry, Redirect, ScriptCall, ask_target
from luapipe.scripts.registry import REDIRECT_ATTEMPTS
from luapipe.scripts.script import Value
from luapipe.wire.aio import AsyncSession, open_connection
from luapipe.wire.routing import reads_from_replicas

T = TypeVar("T")

if TYPE_CHECKING:
    from luapipe.scripts.registry import ScriptRegistry

__all__ = [
    "cluster_call",
    "cluster_pipeline",
    "node_by_address",
    "node_session",
    "node_sessions",
    "on_slot_node_async",
]


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


def _node_for(client: RedisCluster, slot: int | None, *, read_only: bool = False) -> ClusterNode:
    """The slot's primary; for ``read_only`` (no-writes) scripts a replica where the client
    reads from replicas (see :func:`luapipe.wire.routing.node_client`)."""
    if slot is None:
        return client.get_default_node()
    nodes = client.nodes_manager.slots_cache.get(slot)
    if not nodes:
        raise ServerError(f"slot {slot} is not covered by the cluster")
    if read_only and reads_from_replicas(client):
        return client.nodes_manager.get_node_from_slot(
            slot, client.read_from_replicas, client.load_balancing_strategy
        )
    return nodes[0]


async def _refresh(client: RedisCluster) -> None:
    """Re-read the slot map; if a node cannot answer, the next attempt tries again."""
    with contextlib.suppress(rex.RedisError, OSError):  # a node is down mid-failover:
        await client.nodes_manager.initialize()  # the next attempt refreshes again


async def _refresh_later(client: RedisCluster, attempt: int) -> None:
    """Back off (a failover takes a moment) and re-read the slot map."""
    await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
    await _refresh(client)


async def node_by_address(client: RedisCluster, address: str) -> ClusterNode | None:
    """The node at ``host:port`` (named by an ASK redirect); None if the client does not
    know it even after re-reading the slot map (the twin of
    :func:`luapipe.wire.routing.node_by_address`)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return None
    node = client.get_node(host=host, port=int(port))
    if node is None:
        await _refresh(client)
        node = client.get_node(host=host, port=int(port))
    return node


async def on_slot_node_async(
    client: RedisCluster,
    slot: int | None,
    run: Callable[[ClusterNode, bool], Awaitable[T]],
    redirect_of: Callable[[Exception], str | None],
    *,
    attempts: int,
    what: str,
    read_only: bool = False,
) -> T:
    """The twin of :func:`luapipe.wire.routing.on_slot_node`: ``await run(node, asking)`` on the
    slot's node, again while ``redirect_of`` says it did not run; an ASK at once."""
    last: Exception | None = None
    ask: str | None = None
    for attempt in range(attempts):
        asked = await node_by_address(client, ask) if ask is not None else None
        try:
            return await run(asked or _node_for(client, slot, read_only=read_only), bool(asked))
        except Exception as exc:
            redirect = redirect_of(exc)
            if redirect is None:
                raise
            last, ask = exc, ask_target(redirect)
        if ask is None:  # ASK: go to the importing node now; else wait for the map
            await _refresh_later(client, attempt)
    raise ServerError(f"no node would take {what} (slot {slot}): {last}")


def _did_not_run(exc: Exception) -> str | None:
    """A redirect (its text) or a connection refused before sending (""): safe to retry."""
    if isinstance(exc, Moved):
        return str(exc)
    return "" if isinstance(exc, ConnectionFailed) else None


async def cluster_call(registry: ScriptRegistry, client: RedisCluster, call: ScriptCall) -> Any:
    """One script call on the node owning its slot; a redirect or a refused connection
    (it did not run) refreshes the slot map and sends it again. An ASK sends it at once to
    the node named, after ASKING (the map would name the migrating node again)."""
    await client.initialize()

    async def run(node: ClusterNode, asking: bool) -> Any:
        async with node_session(client, node) as s:
            return await call_on(registry, s, call, asking=asking)

    return await on_slot_node_async(
        client,
        _slot_of(client, call.keys, f"script {call.script.name!r}"),
        run,
        _did_not_run,
        attempts=REDIRECT_ATTEMPTS,
        what=f"script {call.script.name!r}",
        read_only=call.script.read_only,
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
    results: list[Any] = [None] * len(entries)
    totals = [0, 0]

    async def run(node: ClusterNode, indexes: list[int], asking: bool) -> None:
        """Run one node's part; entries answered with a redirect (they did not run) get a
        :class:`~luapipe.scripts.protocol.Redirect` result."""
        async with node_session(client, node) as s:
            plan = registry.plan([entries[i] for i in indexes], s.address, transaction=transaction)
            await run_plan(plan, s, asking=asking)
            totals[0] += s.round_trips
            totals[1] += plan.reloads
        for i, r in zip(indexes, plan.results, strict=True):
            results[i] = r

    pending = list(range(len(entries)))
    asks: dict[int, str] = {}  # entry -> the node an ASK named (its slot is migrating)
    for attempt in range(REDIRECT_ATTEMPTS):
        groups: dict[tuple[str, bool], tuple[ClusterNode, list[int]]] = {}
        for i in pending:
            asked = await node_by_address(client, asks[i]) if i in asks else None
            node = asked or _node_for(client, slots[i])
            groups.setdefault((node.name, asked is not None), (node, []))[1].append(i)
        outcomes = await asyncio.gather(
            *(run(node, idx, asking) for (_, asking), (node, idx) in groups.items()),
            return_exceptions=True,
        )
        for (_, idx), outcome in zip(groups.values(), outcomes, strict=True):
            if isinstance(outcome, ConnectionFailed):  # nothing was sent to that node
                for i in idx:
                    results[i] = Redirect(str(outcome))
            elif isinstance(outcome, BaseException):
                raise outcome
        pending = [i for i in pending if isinstance(results[i], Redirect)]
        if not pending:
            return results, totals[0], totals[1]
        asks = {i: a for i in pending if (a := results[i].ask) is not None}
        if len(asks) < len(pending):  # ASK goes on at once; other redirects wait for
            await _refresh_later(client, attempt)  # the new slot map
    for i in pending:
        results[i] = ServerError(
            f"redirected or refused {REDIRECT_ATTEMPTS} times; it did not run (slot {slots[i]})"
        )
    return results, totals[0], totals[1]
