"""asyncio forms on ``redis.asyncio.cluster.RedisCluster``: the twin of
:mod:`luapipe.operations.clusterforms`.

The same step generators (:mod:`luapipe.operations.clientforms`,
:mod:`luapipe.operations.serverforms`) and the same I/O-free routing rules
(:func:`~luapipe.operations.clusterforms.group`, :func:`~luapipe.operations.clusterforms.settle`,
:func:`~luapipe.operations.clusterforms.plan_slot`); only the sending is async
(:mod:`luapipe.scripts.aio_cluster` node sessions):

- naive / pipelined: each command goes to the primary that owns its key's slot; a step
  whose keys live on several nodes is one round trip per node (sent concurrently), replies
  put back in the caller's order. Commands answered MOVED/ASK/TRYAGAIN/CLUSTERDOWN, or
  whose node refused the connection, did not run: the slot map is re-read and only they are
  sent again; those answered ASK (their slot is being migrated) go at once to the node
  named, after ASKING. Anything that may have run is never re-sent
  (:class:`~luapipe.errors.OutcomeUnknown`).
- transaction: WATCH/MULTI/EXEC on the node that owns the (one) slot of the declared keys.
- function: FCALL on the slot's node, the library loaded there on demand.
- script: ``reg.call`` (routed by :mod:`luapipe.scripts.aio_cluster`), in
  :mod:`luapipe.operations.aio_forms`.

Keys of an atomic form in different slots raise :class:`~luapipe.errors.CrossSlotError`
before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, TypeVar

from redis.asyncio.cluster import ClusterNode, RedisCluster

from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    ServerError,
)
from luapipe.operations import clientforms, serverforms
from luapipe.operations.clusterforms import ATTEMPTS, group, plan_slot, settle
from luapipe.operations.plan import Env, Plan, RunResult, drive_async
from luapipe.wire import sync as transport
from luapipe.wire._legacy import node_by_address_async as node_by_address
from luapipe.wire._legacy import on_slot_node_async
from luapipe.wire._legacy import refresh_later_async as _refresh_later
from luapipe.wire.aio import AsyncSession, node_session
from luapipe.wire.aio import node_for as _node_for
from luapipe.wire.policy import DEFAULT

T = TypeVar("T")

__all__ = [
    "AsyncRoutedSession",
    "execute_routed_async",
    "run_cluster_async",
    "transaction_async",
]


def _locate(client: RedisCluster, slot: int | None) -> tuple[str, ClusterNode]:
    node = _node_for(client, slot)
    return node.name, node


Route = tuple[str, bool]  # (node name, asking): one part of a routed batch


class _Held:
    """One held session per node (and per asking: an ASK part may be sent to a node at the
    same time as its own commands) for the length of a routed session."""

    def __init__(self, client: RedisCluster) -> None:
        self.client = client
        self.stack = contextlib.AsyncExitStack()
        self.sessions: dict[Route, AsyncSession] = {}

    async def get(self, node: ClusterNode, asking: bool) -> AsyncSession:
        s = self.sessions.get((node.name, asking))
        if s is None or s.broken:
            s = await self.stack.enter_async_context(node_session(self.client, node))
            self.sessions[node.name, asking] = s
        return s

    async def send(
        self, node: ClusterNode, cmds: list[tuple[Any, ...]], parse: bool, asking: bool
    ) -> tuple[list[Any], int]:
        """One node's part: (replies, round trips)."""
        s = await self.get(node, asking)
        before = s.round_trips
        out = await s.execute(cmds, parse=parse, asking=asking)
        return out, s.round_trips - before


async def _route(
    client: RedisCluster, cmds: list[tuple[Any, ...]], pending: list[int], asks: dict[int, str]
) -> dict[Route, tuple[ClusterNode, list[int]]]:
    """The ``pending`` commands grouped per node: those answered ASK (``asks``) to the node
    named, to be sent after ASKING; the others to the owner of their key's slot. An ASK
    naming a node the client cannot find is forgotten (routed by the slot map)."""
    asked: dict[int, ClusterNode] = {}
    for i in pending:
        if i not in asks:
            continue
        node = await node_by_address(client, asks[i])
        if node is None:
            del asks[i]
        else:
            asked[i] = node
    owned = [i for i in pending if i not in asked]
    groups = group(client, cmds, owned, lambda slot: _locate(client, slot))
    routes: dict[Route, tuple[ClusterNode, list[int]]] = {
        (name, False): part for name, part in groups.items()
    }
    for i, node in asked.items():
        routes.setdefault((node.name, True), (node, []))[1].append(i)
    return routes


async def execute_routed_async(
    client: RedisCluster,
    commands: Sequence[Sequence[Any]],
    *,
    parse: bool = False,
    held: _Held | None = None,
) -> tuple[list[Any], int]:
    """Send ``commands`` (one key each, at position 1) to the nodes that own their keys: one
    write per node, concurrently; ``(replies in order, round trips)``. Error replies are
    :class:`~luapipe.wire.sync.ReplyError` values."""
    cmds = [tuple(c) for c in commands]
    if held is None:
        await client.initialize()
        mine = _Held(client)
        async with mine.stack:
            return await execute_routed_async(client, cmds, parse=parse, held=mine)
    replies: list[Any] = [None] * len(cmds)
    pending = list(range(len(cmds)))
    asks: dict[int, str] = {}  # command -> the node an ASK named (its slot is migrating)
    trips = 0
    for attempt in range(ATTEMPTS):
        groups = await _route(client, cmds, pending, asks)
        outcomes = await asyncio.gather(
            *(
                held.send(node, [cmds[i] for i in idx], parse, asking)
                for (_, asking), (node, idx) in groups.items()
            ),
            return_exceptions=True,
        )
        retry: list[int] = []
        failure: BaseException | None = None
        for (_, idx), outcome in zip(groups.values(), outcomes, strict=True):
            if isinstance(outcome, ConnectionFailed):  # nothing was sent: route again
                retry.extend(idx)
            elif isinstance(outcome, BaseException):
                failure = failure or outcome
            else:
                out, n = outcome
                trips += n
                retry += settle(idx, out, replies, asks)
        if failure is not None:  # the other nodes' parts ran; nothing is re-sent
            raise failure
        if not retry:
            return replies, trips
        pending = sorted(retry)
        if any(i not in asks for i in pending):  # ASK goes on at once; the rest waits for
            await _refresh_later(client, attempt)  # the new slot map
    raise ServerError(f"no node would take {len(pending)} command(s) after {ATTEMPTS} attempts")


class AsyncRoutedSession(AsyncSession):
    """An :class:`~luapipe.wire.aio.AsyncSession` look-alike whose batches are routed
    per key; ``async with`` it (it holds a connection per node it has used)."""

    __slots__ = ("_held",)

    def __init__(self, client: RedisCluster) -> None:  # no connection of its own
        self.client = client
        self.conn = None
        self.parser = client
        self.address = "cluster"
        self.round_trips = 0
        self.broken = False
        self.pending = False
        self._held = _Held(client)

    async def __aenter__(self) -> AsyncRoutedSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._held.stack.__aexit__(exc_type, exc, tb)

    async def execute(
        self,
        commands: Sequence[transport.Command | Sequence[Any]],
        *,
        parse: bool = False,
        asking: bool = False,
    ) -> list[Any]:
        """Routed per command; ``asking`` is unused: an ASK is followed per command."""
        raw = [c.args if isinstance(c, transport.Command) else tuple(c) for c in commands]
        if not raw:
            return []
        replies, trips = await execute_routed_async(self.client, raw, parse=parse, held=self._held)
        self.round_trips += trips
        return replies

    async def send_one(self, args: tuple[Any, ...]) -> Any:
        return (await self.execute([args]))[0]


async def _on_slot_node(
    plan: Plan,
    client: RedisCluster,
    env: Env,
    run: Callable[[ClusterNode, bool], Awaitable[T]],
) -> T:
    """The twin of :func:`luapipe.operations.clusterforms._on_slot_node`."""
    return await on_slot_node_async(
        client,
        plan_slot(plan, client, env),  # CrossSlotError before sending
        run,
        what=repr(plan.name),
    )


async def run_cluster_async(
    plan: Plan, client: RedisCluster, form: str, env: Env, max_retries: int
) -> RunResult:
    """Run one bound call of ``plan`` in ``form`` (not ``script``: see
    :func:`luapipe.operations.aio_forms.script_async`) on the async cluster ``client``."""
    await client.initialize()
    if form == "function":

        async def function(node: ClusterNode, asking: bool) -> Any:
            async with node_session(client, node) as s:
                steps = serverforms.function_steps(plan, env, s.address)
                return await drive_async(steps, s, asking=asking)

        return RunResult(await _on_slot_node(plan, client, env, function), form, 1)
    if form == "transaction":

        async def transaction(node: ClusterNode, asking: bool) -> RunResult:
            return await transaction_async(
                plan, lambda: node_session(client, node), env, max_retries, asking=asking
            )

        return await _on_slot_node(plan, client, env, transaction)
    steps = clientforms.STEPS.get(form)
    if steps is None:
        raise CallArgumentError(f"unknown form {form!r} (naive, pipelined, transaction, function)")
    async with AsyncRoutedSession(client) as s:
        return RunResult(await drive_async(steps(plan, env), s), form, s.round_trips)


async def transaction_async(
    plan: Plan,
    open_session: Callable[[], AbstractAsyncContextManager[AsyncSession]],
    env: Env,
    max_retries: int,
    *,
    asking: bool = False,
) -> RunResult:
    """WATCH/MULTI/EXEC attempts, each on a session from ``open_session`` (one node)."""
    trips = 0
    for attempt in range(max_retries + 1):
        async with open_session() as s:
            try:
                steps = clientforms.transaction_steps(plan, dict(env))
                ok, ret = await drive_async(steps, s, asking=asking)
            except BaseException:
                # A WATCH may still be set on this connection: never hand it back as it is.
                await s.conn.disconnect(nowait=True)
                raise
            finally:
                trips += s.round_trips
        if ok:
            return RunResult(ret, "transaction", trips, attempt)
        await asyncio.sleep(DEFAULT.watch_delay(attempt))
    raise clientforms.aborted(plan, max_retries)
