"""Sending commands at most once: the one place that knows what may have reached the server.

redis-py's ``Redis.execute_command`` wraps every send in the client's ``Retry``, which
re-sends after a timeout or a dropped connection (it ran one script 11 times in our trial).
Here a batch of commands is written once on one connection and every reply is read:

- a failure *before* anything was written (connect, AUTH) is :class:`ConnectionFailed` and
  safe to retry by the caller;
- a failure *after* the write is :class:`OutcomeUnknown`: the connection is dropped and
  nothing is re-sent.

Error replies come back in their slots as :class:`ReplyError` values, never raised, so the
caller decides what a NOSCRIPT or a script error means. ``parse=True`` applies redis-py's
response callbacks (for commands queued through redis-py's command methods); raw replies
otherwise.
"""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Sequence
from typing import Any, TypeVar

import redis
import redis.cluster
import redis.exceptions as rex

from luapipe.errors import (
    ConnectionFailed,
    OutcomeUnknown,
    redis_io_class,
    translate,
)
from luapipe.wire.replies import (
    ASKING,
    Command,
    FakeFault,
    ReplyError,
    address_of,
    as_command,
    full_error_text,
    pack,
    raise_for,
    whole_or_nothing,
    with_asking,
)

__all__ = [
    "ASKING",
    "Command",
    "ReplyError",
    "Session",
    "address_of",
    "execute",
    "full_error_text",
    "pack",
    "raise_for",
    "session",
    "with_asking",
]

T = TypeVar("T")


def _stale(conn: Any, sock: Any) -> bool:
    """Whether the server closed this socket (or left bytes on it) while it sat in the pool.

    One zero-timeout poll on a poller cached per socket; TLS and fake sockets ask redis-py.
    """
    if isinstance(sock, ssl.SSLSocket) or not isinstance(sock, socket.socket):
        return bool(conn.can_read(timeout=0))  # TLS, or an in-process fake
    cached = getattr(conn, "_luapipe_poller", None)
    if cached is None or cached[0] is not sock:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        cached = (sock, poller)
        conn._luapipe_poller = cached
    return bool(cached[1].poll(0))


def _ready(conn: Any, *, reconnect: bool = True) -> None:
    """Connect, and replace a connection the server closed meanwhile (nothing sent yet).

    A pooled socket whose server restarted would swallow the request and then report EOF,
    which is indistinguishable from a crash mid-command; checking first keeps that case a
    clean reconnect. With ``reconnect=False`` (a session that already holds state on this
    connection, such as a WATCH) a closed socket is an error instead: a new connection
    would silently drop that state and, for example, let EXEC commit unwatched.
    """
    sock = getattr(conn, "_sock", None)
    if sock is None:
        if not reconnect:
            raise rex.ConnectionError("the connection was closed between round trips")
        conn.connect()
        return
    try:
        stale = _stale(conn, sock)
    except (rex.ConnectionError, rex.TimeoutError, OSError):
        stale = True
    if stale:
        conn.disconnect()
        if not reconnect:
            raise rex.ConnectionError(
                "the server closed the connection between round trips of one session"
            )
        conn.connect()


class Session:
    """A connection held for several round trips (WATCH ... MULTI/EXEC needs one)."""

    __slots__ = ("address", "broken", "client", "conn", "round_trips")

    def __init__(self, client: redis.Redis, conn: Any) -> None:
        self.client = client
        self.conn = conn
        address = getattr(conn, "_luapipe_address", None)
        if address is None:
            address = conn._luapipe_address = address_of(conn)
        self.address: str = address
        self.round_trips = 0
        self.broken = False

    def _send(self, packed: Any, *, all_or_nothing: bool = False, one: bool = False) -> None:
        """Write a batch. ``all_or_nothing``: the batch runs only if it arrives whole (one
        command, or MULTI ... EXEC), so a failed write proves that nothing ran. ``one``: one
        command after harmless ones, so an in-process fake's exception is its reply
        (:class:`~luapipe.wire.replies.FakeFault`)."""
        if self.broken:
            raise OutcomeUnknown(f"connection to {self.address} was lost earlier in this session")
        conn = self.conn
        try:
            _ready(conn, reconnect=self.round_trips == 0)
        except (rex.RedisError, OSError) as exc:
            self.broken = True
            if self.round_trips:  # earlier steps of this operation ran; it may be partial
                raise OutcomeUnknown(
                    f"connection to {self.address} was closed after {self.round_trips} round "
                    f"trip(s) of this operation: those ran, the rest was not sent, so the "
                    f"outcome is unknown (a WATCH on it is lost too) ({exc})",
                    like=redis_io_class(exc),
                ) from exc
            raise translate(exc, where=self.address, sent=False) from exc
        try:
            conn.send_packed_command(packed, check_health=False)
        except Exception as exc:  # an in-process fake runs the commands here: anything
            self._lost()
            if self.round_trips:  # earlier round trips of this operation ran
                raise OutcomeUnknown(
                    f"connection to {self.address} failed while sending round trip "
                    f"{self.round_trips + 1} of this operation: the earlier ones ran, so the "
                    f"outcome is unknown; nothing was re-sent ({str(exc).strip()})",
                    like=redis_io_class(exc),
                ) from exc
            if all_or_nothing and isinstance(exc, rex.RedisError | OSError):
                raise ConnectionFailed(
                    f"connection to {self.address} failed while sending; the request did not "
                    f"arrive whole, so nothing ran ({str(exc).strip()})",
                    like=redis_io_class(exc),
                ) from exc
            fault = FakeFault.of(exc) if one else None
            if fault is not None:
                self.round_trips += 1
                raise fault from exc
            raise translate(exc, where=self.address, sent=True) from exc
        self.round_trips += 1

    def _lost(self) -> None:
        self.broken = True
        self.conn.disconnect()

    def send_one(self, args: tuple[Any, ...]) -> Any:
        """Fast path for one raw command: its raw reply, or a :class:`ReplyError`."""
        conn = self.conn
        try:
            self._send(pack(conn.pack_command, *args), all_or_nothing=True, one=True)
        except FakeFault as fault:
            return fault.reply
        try:
            return conn.read_response()
        except rex.ResponseError as exc:
            return ReplyError.of(exc, self.address, args[0])
        except Exception as exc:  # lost, timed out, or a reply the parser cannot read
            self._lost()
            raise translate(exc, where=self.address, sent=True) from exc

    def execute(
        self,
        commands: Sequence[Command | Sequence[Any]],
        *,
        parse: bool = False,
        asking: bool = False,
    ) -> list[Any]:
        """One write, then every reply in order. Error replies are :class:`ReplyError`.

        ``asking``: this node was named by an ``ASK`` redirect (its slot is being imported);
        each command is sent after an ASKING, whose replies are left out."""
        if len(commands) == 1 and not (parse or asking):
            one = commands[0]
            if one.__class__ is tuple:  # the steady-state call: one raw command
                return [self.send_one(one)]
        cmds = [as_command(c) for c in commands]
        if not cmds:
            return []
        whole = whole_or_nothing(cmds)
        if asking:
            cmds, keep = with_asking(cmds)
            replies = self._write_read(cmds, parse, whole)
            return [replies[i] for i in keep]
        return self._write_read(cmds, parse, whole)

    def _write_read(self, cmds: list[Command], parse: bool, whole: bool) -> list[Any]:
        one = whole and cmds[0].name != "MULTI"
        try:
            self._send(
                pack(self.conn.pack_commands, [c.args for c in cmds]), all_or_nothing=whole, one=one
            )
        except FakeFault as fault:  # the replies of the harmless ones went with the fake's
            return [fault.reply] * len(cmds)  # connection: SCRIPT LOAD is sent again later
        replies: list[Any] = []
        try:
            for c in cmds:
                replies.append(self._read(c, parse))
        except Exception as exc:  # lost, timed out, or a reply the parser cannot read
            self._lost()
            raise translate(exc, where=self.address, sent=True) from exc
        return replies

    def _read(self, cmd: Command, parse: bool) -> Any:
        try:
            if parse or cmd.parse:
                return self.client.parse_response(  # type: ignore[no-untyped-call]
                    self.conn, cmd.name, **cmd.options
                )
            return self.conn.read_response()
        except rex.ResponseError as exc:
            return ReplyError.of(exc, self.address, cmd.name)


class session:  # lower case: used like a function, ``with session(client) as s``
    """Hold one connection of ``client`` (its pinned one for single-connection clients)."""

    __slots__ = ("_client", "_conn", "_lock", "_pool", "_session")

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._pool: Any = None
        self._lock: Any = None

    def __enter__(self) -> Session:
        client = self._client
        pinned = getattr(client, "connection", None)
        if pinned is not None:
            # Threads share the one connection: hold redis-py's own lock for the whole
            # session, or their writes and replies interleave.
            lock = self._lock = getattr(client, "single_connection_lock", None)
            if lock is not None:
                lock.acquire()
            self._session = Session(client, pinned)
            return self._session
        pool = self._pool = client.connection_pool
        try:
            conn = pool.get_connection()
        except (rex.RedisError, OSError) as exc:
            kw = pool.connection_kwargs
            where = f"{kw.get('host', kw.get('path', '?'))}:{kw.get('port', '')}"
            raise translate(exc, where=where.rstrip(":"), sent=False) from exc
        self._session = Session(client, conn)
        return self._session

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        conn = self._session.conn
        try:
            if exc_type is not None or self._session.broken:
                # The state of the connection is unknown (a WATCH may be pending): drop it.
                conn.disconnect()
        finally:
            if self._pool is not None:
                self._pool.release(conn)
            elif self._lock is not None:
                self._lock.release()


def execute(
    client: redis.Redis, commands: Sequence[Command | Sequence[Any]], *, parse: bool = False
) -> list[Any]:
    """Send ``commands`` in one round trip on one connection; see :class:`Session.execute`."""
    with session(client) as s:
        return s.execute(commands, parse=parse)
