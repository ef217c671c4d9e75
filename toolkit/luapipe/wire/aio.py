"""The asyncio twin of :mod:`luapipe.wire.sync`: send a batch once, read every reply.

Same contract as the sync transport, on ``redis.asyncio`` connections:

- a failure before anything was written (connect, AUTH) is :class:`ConnectionFailed`;
- a write that fails halfway drops what it had not sent yet (it is never flushed later);
  for a request that runs only if it arrives whole (one command, MULTI ... EXEC) that proves
  nothing ran: :class:`ConnectionFailed`, as on the sync path;
- any other failure after the write (timeout, dropped connection) is
  :class:`OutcomeUnknown`: the connection is dropped and nothing is re-sent;
- a cancellation (``asyncio.timeout``, ``wait_for``, a cancelled task) after the write is
  re-raised as it is, with a note that the outcome is unknown; the connection is dropped,
  never returned to the pool with replies still unread.

Error replies come back in their slots as :class:`ReplyError` values.
"""

from __future__ import annotations

import asyncio
import inspect
import select
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis.asyncio
import redis.exceptions as rex
from redis.asyncio.cluster import ClusterNode, RedisCluster

from luapipe.errors import (
    ConnectionFailed,
    LuapipeError,
    OutcomeUnknown,
    redis_io_class,
    translate,
)
from luapipe.wire.replies import (
    Command,
    FakeFault,
    ReplyError,
    address_of,
    as_command,
    pack,
    whole_or_nothing,
    with_asking,
)

__all__ = [
    "AsyncSession",
    "acquire",
    "async_session",
    "node_for",
    "node_session",
    "open_connection",
]

_NET_ERRORS = (rex.ConnectionError, rex.TimeoutError, OSError)
T = TypeVar("T")


async def _write(conn: Any, packed: list[bytes]) -> None:
    """Write one packed batch. Like redis-py's ``send_packed_command`` without its per-write
    ``wait_for`` task (a tenth of a call's cost on Python 3.11): the socket timeout applies
    only when the kernel did not take every byte at once."""
    writer = getattr(conn, "_writer", None)
    transport = getattr(writer, "transport", None)
    if transport is None:  # not a stream transport (fakeredis): redis-py's own path
        await conn.send_packed_command(packed, check_health=False)
        return
    assert writer is not None
    if transport.is_closing():  # nothing written: safe for the caller to retry
        raise ConnectionFailed(f"connection to {address_of(conn)} closed before sending")
    writer.writelines(packed)
    if transport.is_closing():  # the socket refused the write: the transport dropped it
        raise _Cut("the connection failed while writing")
    if transport.get_write_buffer_size():
        try:
            async with asyncio.timeout(conn.socket_timeout):
                await writer.drain()
        except _NET_ERRORS as exc:
            if transport.get_write_buffer_size() or transport.is_closing():
                # Bytes are left unsent: drop them (close() would go on flushing them, and
                # the request would run after its caller was told the write failed).
                transport.abort()
                raise _Cut(str(exc).strip() or type(exc).__name__) from exc
            raise  # every byte reached the kernel: the request may run


class _Cut(Exception):
    """A write failed halfway and what was not sent yet never will be (as a failed
    ``sendall`` on a sync socket): a request that runs only if it arrives whole did not run.
    Never escapes this module."""


def _socket_stale(conn: Any) -> bool:
    """Whether the OS socket has bytes or EOF waiting while we expect nothing.

    The event loop may not have read a server's close yet (a failover while this task was
    busy), so redis-py's buffered ``can_read`` says nothing; one zero-timeout poll does.
    TLS sockets (which may carry session tickets) and fakeredis are left to redis-py.
    """
    transport = getattr(getattr(conn, "_writer", None), "transport", None)
    if transport is None or transport.get_extra_info("sslcontext") is not None:
        return False
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    cached = getattr(conn, "_luapipe_poller", None)
    if cached is None or cached[0] != sock.fileno():
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        cached = conn._luapipe_poller = (sock.fileno(), poller)
    return bool(cached[1].poll(0))


async def open_connection(conn: Any, *, pooled: bool = False) -> None:
    """Connect, or replace a connection the server closed while it sat idle (nothing sent).

    ``pooled``: redis-py's pool already connected it and checked its buffer.
    """
    if not conn.is_connected:
        await conn.connect()
        return
    try:
        stale = _socket_stale(conn) or (not pooled and await conn.can_read())
    except _NET_ERRORS:
        stale = True
    if stale:
        await conn.disconnect(nowait=True)
        await conn.connect()


class AsyncSession:
    """One connection held for one or more round trips."""

    __slots__ = ("address", "broken", "client", "conn", "parser", "pending", "round_trips")

    def __init__(self, client: Any, conn: Any, parser: Any = None) -> None:
        self.client = client
        self.conn = conn
        #: whose ``parse_response`` applies redis-py's callbacks (the node client in a cluster)
        self.parser = parser if parser is not None else client
        address = getattr(conn, "_luapipe_address", None)
        if address is None:
            address = conn._luapipe_address = address_of(conn)
        self.address: str = address
        self.round_trips = 0
        self.broken = False
        self.pending = False  # written, replies not all read: the socket is not reusable

    async def _send(self, packed: Any, *, all_or_nothing: bool = False, one: bool = False) -> None:
        """Write a batch. ``all_or_nothing``: the batch runs only if it arrives whole (see
        :func:`~luapipe.wire.replies.whole_or_nothing`), so a write cut short proves that
        nothing ran; ``one``: an in-process fake's exception is its reply (the twin of
        :meth:`luapipe.wire.sync.Session._send`)."""
        if self.broken:
            raise OutcomeUnknown(f"connection to {self.address} was lost earlier in this session")
        self.pending = True  # a write interrupted halfway may have reached the server
        try:
            await _write(self.conn, packed)
        except _Cut as exc:
            await self._lost()
            raise self._cut(exc, all_or_nothing) from exc
        except ConnectionFailed as exc:
            await self._lost()
            if self.round_trips:  # earlier steps of this operation ran: it may be partial
                raise OutcomeUnknown(
                    f"connection to {self.address} was closed after {self.round_trips} round "
                    f"trip(s) of this operation: those ran, the rest was not sent, so the "
                    f"outcome is unknown ({exc})"
                ) from exc
            raise
        except Exception as exc:  # an in-process fake runs the commands here: anything
            await self._lost()
            fault = FakeFault.of(exc) if one and not self.round_trips else None
            if fault is not None:
                self.round_trips += 1
                raise fault from exc
            raise translate(exc, where=self.address, sent=True) from exc
        except BaseException as exc:
            await self._cancelled(exc)
            raise
        self.round_trips += 1

    def _cut(self, exc: _Cut, all_or_nothing: bool) -> LuapipeError:
        like = redis_io_class(exc.__cause__ or exc)  # as the sync path: what redis-py raises
        if self.round_trips:  # earlier round trips of this operation ran
            return OutcomeUnknown(
                f"connection to {self.address} failed while sending round trip "
                f"{self.round_trips + 1} of this operation: the earlier ones ran, so the "
                f"outcome is unknown; nothing was re-sent ({exc})",
                like=like,
            )
        if all_or_nothing:
            return ConnectionFailed(
                f"connection to {self.address} failed while sending; the request did not "
                f"arrive whole, so nothing ran ({exc})",
                like=like,
            )
        return OutcomeUnknown(
            f"connection to {self.address} failed while sending; what was sent before may "
            f"have run: outcome unknown, it was not re-sent ({exc})",
            like=like,
        )

    async def _lost(self) -> None:
        self.broken = True
        await self.conn.disconnect(nowait=True)

    async def close_if_dirty(self) -> None:
        """Before the connection goes back: replies may be unread or a WATCH pending, so a
        socket in that state is closed, never reused as it is."""
        if self.pending or self.broken:
            await self.conn.disconnect(nowait=True)

    async def _cancelled(self, exc: BaseException) -> None:
        if isinstance(exc, asyncio.CancelledError):
            exc.add_note(
                f"luapipe: cancelled after the request was sent to {self.address}; "
                "the outcome is unknown and it was not re-sent"
            )
        await self._lost()

    async def send_one(self, args: tuple[Any, ...]) -> Any:
        """Fast path for one raw command: its raw reply, or a :class:`ReplyError`."""
        conn = self.conn
        if self.broken:
            raise OutcomeUnknown(f"connection to {self.address} was lost earlier in this session")
        packed = pack(conn.pack_command, *args)
        self.pending = True
        try:
            await _write(conn, packed)
            self.round_trips += 1
            reply = await conn.read_response()
        except rex.ResponseError as exc:
            reply = ReplyError.of(exc, self.address, args[0])
        except _Cut as exc:
            await self._lost()
            raise self._cut(exc, True) from exc
        except Exception as exc:  # lost, timed out, or a reply the parser cannot read
            await self._lost()
            fault = FakeFault.of(exc) if self.round_trips == 0 else None
            if fault is not None:  # an in-process fake raised while running the command
                self.round_trips += 1
                return fault.reply
            raise translate(exc, where=self.address, sent=True) from exc
        except BaseException as exc:
            await self._cancelled(exc)
            raise
        self.pending = False
        return reply

    async def execute(
        self,
        commands: Sequence[Command | Sequence[Any]],
        *,
        parse: bool = False,
        asking: bool = False,
    ) -> list[Any]:
        """One write, then every reply in order. Error replies are :class:`ReplyError`.

        ``asking``: this node was named by an ``ASK`` redirect (its slot is being imported);
        each command is sent after an ASKING (:func:`~luapipe.wire.sync.with_asking`), whose
        replies are left out."""
        if len(commands) == 1 and not (parse or asking):
            one = commands[0]
            if one.__class__ is tuple:  # the steady-state call: one raw command
                return [await self.send_one(one)]
        cmds = [as_command(c) for c in commands]
        if not cmds:
            return []
        whole = whole_or_nothing(cmds)
        keep: list[int] | None = None
        if asking:
            cmds, keep = with_asking(cmds)
        try:
            await self._send(
                pack(self.conn.pack_commands, [c.args for c in cmds]),
                all_or_nothing=whole,
                one=whole and cmds[0].name != "MULTI",
            )
        except FakeFault as fault:  # the replies of the harmless ones went with the fake's
            return [fault.reply] * len(cmds if keep is None else keep)  # connection
        replies: list[Any] = []
        try:
            for c in cmds:
                replies.append(await self._read(c, parse))
        except Exception as exc:  # lost, timed out, or a reply the parser cannot read
            await self._lost()
            raise translate(exc, where=self.address, sent=True) from exc
        except BaseException as exc:
            await self._cancelled(exc)
            raise
        self.pending = False
        return replies if keep is None else [replies[i] for i in keep]

    async def _read(self, cmd: Command, parse: bool) -> Any:
        try:
            if parse or cmd.parse:
                reply = await self.parser.parse_response(self.conn, cmd.name, **cmd.options)
                return await reply if inspect.isawaitable(reply) else reply
            return await self.conn.read_response()
        except rex.ResponseError as exc:
            return ReplyError.of(exc, self.address, cmd.name)


async def acquire(pool: Any) -> Any:
    """A connected pooled connection whose socket the server has not closed meanwhile."""
    try:
        conn = await pool.get_connection()
    except (rex.RedisError, OSError) as exc:
        raise translate(exc, where=_pool_address(pool), sent=False) from exc
    try:
        if _socket_stale(conn):
            await open_connection(conn, pooled=True)
    except BaseException as exc:
        await pool.release(conn)
        if isinstance(exc, rex.RedisError | OSError):
            raise translate(exc, where=_pool_address(pool), sent=False) from exc
        raise
    return conn


def _pool_address(pool: Any) -> str:
    kw = pool.connection_kwargs
    return f"{kw.get('host', kw.get('path', '?'))}:{kw.get('port', '')}".rstrip(":")


class async_session:  # lower case: used like a function, ``async with async_session(c) as s``
    """Hold one connection of a ``redis.asyncio.Redis`` (its pinned one if it has one)."""

    __slots__ = ("_client", "_lock", "_pool", "_session")

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._client = client
        self._pool: Any = None
        self._lock: asyncio.Lock | None = None

    async def __aenter__(self) -> AsyncSession:
        client = self._client
        if client.single_connection_client:
            await client.initialize()
            self._lock = client._single_conn_lock
            await self._lock.acquire()
            try:
                await open_connection(client.connection)
            except BaseException as exc:
                self._lock.release()
                if isinstance(exc, _NET_ERRORS):
                    where = address_of(client.connection)
                    raise translate(exc, where=where, sent=False) from exc
                raise
            self._session = AsyncSession(client, client.connection)
            return self._session
        pool = self._pool = client.connection_pool
        conn = await acquire(pool)
        self._session = AsyncSession(client, conn)
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
            if self._lock is not None:
                self._lock.release()
            elif self._pool is not None:
                await self._pool.release(s.conn)


class node_session:  # lower case: used like a function
    """Hold one connection of one node of a ``redis.asyncio.RedisCluster``."""

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
                raise translate(exc, where=node.name, sent=False) from exc
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


def node_for(client: RedisCluster, slot: int | None, *, read_only: bool = False) -> ClusterNode:
    """The slot's primary; for ``read_only`` (no-writes) requests a replica where the client
    reads from replicas, as redis-py routes its own reads."""
    if slot is None:
        return client.get_default_node()
    nodes = client.nodes_manager.slots_cache.get(slot)
    if not nodes:
        raise ConnectionFailed(f"slot {slot} is not covered by the cluster; nothing was sent")
    if read_only and (client.read_from_replicas or client.load_balancing_strategy):
        return client.nodes_manager.get_node_from_slot(
            slot, client.read_from_replicas, client.load_balancing_strategy
        )
    return nodes[0]
