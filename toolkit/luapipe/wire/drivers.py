"""The two drivers: they run I/O-free steps (:mod:`luapipe.wire.routing`) on a client.

:class:`Driver` (sync) and :class:`AsyncDriver` (asyncio) are twins, kept side by side and
line-aligned: each answers every request of the vocabulary on sessions it holds, one per
``(node, asking)`` for the whole run, and *throws* any :class:`~luapipe.errors.LuapipeError`
raised while answering (nothing sent, an unknown outcome, a cross-slot key, the cluster
hint) into the steps, which decide. On a plain client ``Refresh`` throws: a redirect becomes
the one :class:`~luapipe.errors.ServerError` naming the cluster client to use. When the
steps end with an error every held connection is dropped (a WATCH may be pending).

::

    value = drive(steps, client)                 # redis.Redis or RedisCluster
    value = await drive_async(steps, aclient)    # their redis.asyncio twins
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import redis
import redis.cluster
import redis.exceptions as rex
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

from luapipe.errors import ConnectionFailed, LuapipeError, ServerError, redis_class_of_reply
from luapipe.wire.aio import AsyncSession, async_session, node_for, node_session
from luapipe.wire.policy import CLUSTER_HINT
from luapipe.wire.replies import Redirect
from luapipe.wire.routing import (
    Locate,
    LocateMany,
    Nodes,
    Refresh,
    Release,
    Send,
    SendEach,
    Sleep,
    SlotsOf,
    Steps,
    command_slot_error,
    node_order,
)
from luapipe.wire.sync import Session, session

__all__ = ["AsyncDriver", "Driver", "drive", "drive_async"]

T = TypeVar("T")


def _node_name(client: Any, node: str) -> redis.Redis:
    """The node client of a cluster node named ``host:port``; the map is re-read once if
    the client does not know it (a node an ASK named)."""
    found = client.get_node(node_name=node)
    if found is None:
        with contextlib.suppress(redis.RedisError, OSError):
            client.nodes_manager.initialize()
        found = client.get_node(node_name=node)
    if found is None:
        raise ConnectionFailed(f"no node {node} in the cluster's slot map; nothing was sent")
    return client.get_redis_connection(found)  # type: ignore[no-any-return]


def _locate(client: Any, slot: int | None, read_only: bool) -> str:
    """The slot's primary; for ``read_only`` (no-writes) requests a replica where the client
    reads from replicas, as redis-py routes its own reads (the twin of ``aio.node_for``)."""
    if slot is None:
        return str(client.get_default_node().name)
    manager = client.nodes_manager
    try:
        if read_only and (client.read_from_replicas or client.load_balancing_strategy):
            node = manager.get_node_from_slot(
                slot,
                read_from_replicas=bool(client.read_from_replicas),
                load_balancing_strategy=client.load_balancing_strategy,
            )
        else:
            node = manager.get_node_from_slot(slot, read_from_replicas=False)
    except RedisClusterException as exc:  # no node has the slot (mid-failover): re-route
        raise ConnectionFailed(
            f"slot {slot} is not covered by the cluster; nothing was sent"
        ) from exc
    return str(node.name)


class Driver:
    """Runs :data:`~luapipe.wire.routing.Steps` on a sync client (see
    :mod:`luapipe.wire.routing` for the requests), holding one session per node (and per
    ``asking``) until the steps end or ask for :class:`~luapipe.wire.routing.Release`."""

    __slots__ = ("_held", "client", "cluster", "round_trips")

    def __init__(self, client: Any, held: Session | None = None) -> None:
        """``held``: a session of a plain client the caller holds (and releases)."""
        self.client = client
        self.cluster = isinstance(client, redis.cluster.RedisCluster)
        self._held: dict[tuple[str, bool], tuple[session | None, Session]] = {}
        if held is not None:
            self._held[held.address, False] = (None, held)
        #: round trips written by this driver so far
        self.round_trips = 0

    def run(self, steps: Steps[T]) -> T:
        failed = True
        try:
            request = next(steps)
            while True:
                try:
                    answer = self.answer(request)
                except LuapipeError as exc:  # thrown in: the steps decide what it means
                    request = steps.throw(exc)
                else:
                    request = steps.send(answer)
        except StopIteration as done:
            failed = False
            result: T = done.value
            return result
        finally:
            self.release(failed=failed)

    def answer(self, request: Any) -> Any:
        kind = request.__class__
        if kind is Send:
            return self.send(request)
        if kind is Locate:
            return self.locate(request.slot, request.read_only)
        if kind is SendEach:
            return self.send_each(request.parts)
        if kind is LocateMany:
            return [self.locate(s, False) for s in request.slots]
        if kind is Nodes:
            return self.nodes()
        if kind is SlotsOf:
            return [self.slot(args) for args in request.commands]
        if kind is Refresh:
            return self.refresh(request)
        if kind is Sleep:
            return time.sleep(request.seconds)
        if kind is Release:
            return self.release(failed=False)
        raise TypeError(f"not a request: {request!r}")

    # -- where --------------------------------------------------------------------------
    def _home(self) -> Session:
        """The one session of a plain client (its address is known once it is held)."""
        for s in self._held.values():
            return s[1]
        return self._open("", False, self.client)

    def locate(self, slot: int | None, read_only: bool) -> str:
        if not self.cluster:
            return self._home().address
        return _locate(self.client, slot, read_only)

    def nodes(self) -> list[str]:
        if not self.cluster:
            return [self._home().address]
        found = [(n.name, n.server_type == "primary") for n in self.client.get_nodes()]
        return node_order(found)

    def slot(self, args: tuple[Any, ...]) -> int | None:
        try:
            return int(self.client.determine_slot(*args))
        except RedisClusterException as exc:
            return command_slot_error(args, exc)

    def refresh(self, request: Refresh) -> None:
        cause = request.cause
        if not self.cluster:  # no slot map to re-read: the cause stands
            if isinstance(cause, Redirect):
                raise ServerError(
                    f"{cause}: this server is a cluster node; {CLUSTER_HINT}",
                    like=redis_class_of_reply(cause.text),
                )
            raise cause
        if isinstance(cause, Redirect) and cause.ask is not None:
            return  # the slot map still names the old owner until the migration ends
        time.sleep(request.delay)
        with contextlib.suppress(redis.RedisError, OSError):  # a node is down mid-failover:
            self.client.nodes_manager.initialize()  # the next attempt refreshes again

    # -- sending ------------------------------------------------------------------------
    def _open(self, node: str, asking: bool, client: Any) -> Session:
        cm = session(client)
        s = cm.__enter__()
        self._held[node or s.address, asking] = (cm, s)
        return s

    def _session(self, node: str, asking: bool) -> Session:
        held = self._held.get((node, asking))
        if held is not None and not held[1].broken:
            return held[1]
        if held is not None:
            del self._held[node, asking]
            if held[0] is not None:
                held[0].__exit__(None, None, None)
        if not self.cluster:
            if held is None and not asking and self._held:
                return self._home()
            return self._open(node, asking, self.client)
        return self._open(node, asking, _node_name(self.client, node))

    def send(self, request: Send) -> list[Any]:
        s = self._session(request.node, request.asking)
        before = s.round_trips
        try:
            return s.execute(request.batch, parse=request.parse, asking=request.asking)
        finally:
            self.round_trips += s.round_trips - before

    def _part(self, request: Send) -> Any:
        try:
            return self.send(request)
        except LuapipeError as exc:  # this node's part; the others are sent all the same
            return exc

    def send_each(self, parts: Sequence[Send]) -> list[Any]:
        return [self._part(p) for p in parts]

    def release(self, *, failed: bool) -> None:
        """Hand the held connections back (dropped if the steps failed: a WATCH may be set)."""
        held = self._held  # a session the caller holds stays, with the caller
        self._held = {key: h for key, h in held.items() if h[0] is None}
        exc = (LuapipeError, LuapipeError("steps failed"), None) if failed else (None, None, None)
        for cm, _ in held.values():
            if cm is not None:
                cm.__exit__(*exc)


def drive(steps: Steps[T], client: Any) -> T:
    """Run ``steps`` on a sync client (plain or cluster); returns their result."""
    return Driver(client).run(steps)


class AsyncDriver:
    """The asyncio twin of :class:`Driver`: the same requests, the same answers; a
    :class:`~luapipe.wire.routing.SendEach` is sent concurrently."""

    __slots__ = ("_held", "client", "cluster", "round_trips")

    def __init__(self, client: Any, held: AsyncSession | None = None) -> None:
        """``held``: a session of a plain client the caller holds (and releases)."""
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self._held: dict[tuple[str, bool], tuple[Any, AsyncSession]] = {}
        if held is not None:
            self._held[held.address, False] = (None, held)
        #: round trips written by this driver so far
        self.round_trips = 0

    async def run(self, steps: Steps[T]) -> T:
        failed = True
        try:
            if self.cluster:
                await self.client.initialize()
            request = next(steps)
            while True:
                try:
                    answer = await self.answer(request)
                except LuapipeError as exc:  # thrown in: the steps decide what it means
                    request = steps.throw(exc)
                else:
                    request = steps.send(answer)
        except StopIteration as done:
            failed = False
            result: T = done.value
            return result
        finally:
            await self.release(failed=failed)

    async def answer(self, request: Any) -> Any:
        kind = request.__class__
        if kind is Send:
            return await self.send(request)
        if kind is Locate:
            return await self.locate(request.slot, request.read_only)
        if kind is SendEach:
            return await self.send_each(request.parts)
        if kind is LocateMany:
            return [await self.locate(s, False) for s in request.slots]
        if kind is Nodes:
            return await self.nodes()
        if kind is SlotsOf:
            return [await self.slot(args) for args in request.commands]
        if kind is Refresh:
            return await self.refresh(request)
        if kind is Sleep:
            return await asyncio.sleep(request.seconds)
        if kind is Release:
            return await self.release(failed=False)
        raise TypeError(f"not a request: {request!r}")

    # -- where --------------------------------------------------------------------------
    async def _home(self) -> AsyncSession:
        """The one session of a plain client (its address is known once it is held)."""
        for s in self._held.values():
            return s[1]
        return await self._open("", False, async_session(self.client))

    async def locate(self, slot: int | None, read_only: bool) -> str:
        if not self.cluster:
            return (await self._home()).address
        return str(node_for(self.client, slot, read_only=read_only).name)

    async def nodes(self) -> list[str]:
        if not self.cluster:
            return [(await self._home()).address]
        found = [(n.name, n.server_type == "primary") for n in self.client.get_nodes()]
        return node_order(found)

    async def slot(self, args: tuple[Any, ...]) -> int | None:
        try:
            return int(await self.client._determine_slot(*args))
        except rex.RedisClusterException as exc:
            return command_slot_error(args, exc)

    async def refresh(self, request: Refresh) -> None:
        cause = request.cause
        if not self.cluster:  # no slot map to re-read: the cause stands
            if isinstance(cause, Redirect):
                raise ServerError(
                    f"{cause}: this server is a cluster node; {CLUSTER_HINT}",
                    like=redis_class_of_reply(cause.text),
                )
            raise cause
        if isinstance(cause, Redirect) and cause.ask is not None:
            return  # the slot map still names the old owner until the migration ends
        await asyncio.sleep(request.delay)
        with contextlib.suppress(rex.RedisError, OSError):  # a node is down mid-failover:
            await self.client.nodes_manager.initialize()  # the next attempt refreshes again

    # -- sending ------------------------------------------------------------------------
    async def _open(self, node: str, asking: bool, cm: Any) -> AsyncSession:
        s: AsyncSession = await cm.__aenter__()
        self._held[node or s.address, asking] = (cm, s)
        return s

    async def _node(self, node: str) -> ClusterNode:
        """A cluster node named ``host:port``; the map is re-read once if the client does
        not know it (a node an ASK named)."""
        found: ClusterNode | None = self.client.get_node(node_name=node)
        if found is None:
            with contextlib.suppress(rex.RedisError, OSError):
                await self.client.nodes_manager.initialize()
            found = self.client.get_node(node_name=node)
        if found is None:
            raise ConnectionFailed(f"no node {node} in the cluster's slot map; nothing was sent")
        return found

    async def _session(self, node: str, asking: bool) -> AsyncSession:
        held = self._held.get((node, asking))
        if held is not None and not held[1].broken:
            return held[1]
        if held is not None:
            del self._held[node, asking]
            if held[0] is not None:
                await held[0].__aexit__(None, None, None)
        if not self.cluster:
            if held is None and not asking and self._held:
                return await self._home()
            return await self._open(node, asking, async_session(self.client))
        return await self._open(node, asking, node_session(self.client, await self._node(node)))

    async def send(self, request: Send) -> list[Any]:
        s = await self._session(request.node, request.asking)
        before = s.round_trips
        try:
            return await s.execute(request.batch, parse=request.parse, asking=request.asking)
        finally:
            self.round_trips += s.round_trips - before

    async def _part(self, request: Send) -> Any:
        try:
            return await self.send(request)
        except LuapipeError as exc:  # this node's part; the others are sent all the same
            return exc

    async def send_each(self, parts: Sequence[Send]) -> list[Any]:
        if len(parts) == 1:
            return [await self._part(parts[0])]
        refused: list[LuapipeError | None] = []
        for p in parts:  # open sessions one by one: their keys must not race
            try:
                await self._session(p.node, p.asking)
                refused.append(None)
            except LuapipeError as exc:  # this node's part (nothing sent); the others go
                refused.append(exc)
        ready = [p for p, e in zip(parts, refused, strict=True) if e is None]
        outcomes = await asyncio.gather(*(self._part(p) for p in ready), return_exceptions=True)
        for outcome in outcomes:  # a luapipe error is that part's outcome, as on the sync path
            if isinstance(outcome, BaseException) and not isinstance(outcome, LuapipeError):
                raise outcome  # a bug, a cancel
        sent = iter(outcomes)
        return [next(sent) if e is None else e for e in refused]

    async def release(self, *, failed: bool) -> None:
        """Hand the held connections back (dropped if the steps failed: a WATCH may be set)."""
        held = self._held  # a session the caller holds stays, with the caller
        self._held = {key: h for key, h in held.items() if h[0] is None}
        for cm, s in held.values():
            if failed and cm is not None:  # a lent session: its caller decides
                s.broken = True  # close_if_dirty drops it
        for cm, _ in held.values():
            if cm is not None:
                await cm.__aexit__(None, None, None)


async def drive_async(steps: Steps[T], client: Any) -> T:
    """Run ``steps`` on a ``redis.asyncio`` client (plain or cluster); returns their result."""
    return await AsyncDriver(client).run(steps)
