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

import contextlib
import select
import socket
import ssl
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import redis
import redis.cluster
import redis.exceptions as rex
from redis.exceptions import RedisClusterException

from luapipe.errors import ConnectionFailed, LuapipeError, OutcomeUnknown, ServerError, translate
from luapipe.wire.policy import CLUSTER_HINT
from luapipe.wire.replies import (
    ASKING,
    Command,
    Redirect,
    ReplyError,
    as_command,
    full_error_text,
    raise_for,
    whole_or_nothing,
    with_asking,
)
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

__all__ = [
    "ASKING",
    "Command",
    "Driver",
    "ReplyError",
    "Session",
    "address_of",
    "drive",
    "execute",
    "full_error_text",
    "raise_for",
    "session",
    "with_asking",
]

T = TypeVar("T")


def address_of(conn: Any) -> str:
    """``host:port`` (or the socket path) of a redis-py connection."""
    host = getattr(conn, "host", None)
    if host is not None:
        return f"{host}:{getattr(conn, 'port', '')}"
    return str(getattr(conn, "path", "") or "unknown")


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

    def _send(self, packed: Any, *, all_or_nothing: bool = False) -> None:
        """Write a batch. ``all_or_nothing``: the batch runs only if it arrives whole (one
        command, or MULTI ... EXEC), so a failed write proves that nothing ran."""
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
                    f"outcome is unknown (a WATCH on it is lost too) ({exc})"
                ) from None
            raise translate(exc, where=self.address, sent=False) from None
        try:
            conn.send_packed_command(packed, check_health=False)
        except (rex.RedisError, OSError) as exc:
            self._lost()
            if self.round_trips:  # earlier round trips of this operation ran
                raise OutcomeUnknown(
                    f"connection to {self.address} failed while sending round trip "
                    f"{self.round_trips + 1} of this operation: the earlier ones ran, so the "
                    f"outcome is unknown; nothing was re-sent ({str(exc).strip()})"
                ) from None
            if all_or_nothing:
                raise ConnectionFailed(
                    f"connection to {self.address} failed while sending; the request did not "
                    f"arrive whole, so nothing ran ({str(exc).strip()})"
                ) from None
            raise translate(exc, where=self.address, sent=True) from None
        self.round_trips += 1

    def _lost(self) -> None:
        self.broken = True
        self.conn.disconnect()

    def send_one(self, args: tuple[Any, ...]) -> Any:
        """Fast path for one raw command: its raw reply, or a :class:`ReplyError`."""
        conn = self.conn
        self._send(conn.pack_command(*args), all_or_nothing=True)
        try:
            return conn.read_response()
        except rex.ResponseError as exc:
            return ReplyError(full_error_text(exc))
        except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
            self._lost()
            raise translate(exc, where=self.address, sent=True) from None

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
        self._send(self.conn.pack_commands([c.args for c in cmds]), all_or_nothing=whole)
        replies: list[Any] = []
        try:
            for c in cmds:
                replies.append(self._read(c, parse))
        except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
            self._lost()
            raise translate(exc, where=self.address, sent=True) from None
        return replies

    def _read(self, cmd: Command, parse: bool) -> Any:
        try:
            if parse or cmd.parse:
                return self.client.parse_response(  # type: ignore[no-untyped-call]
                    self.conn, cmd.name, **cmd.options
                )
            return self.conn.read_response()
        except rex.ResponseError as exc:
            return ReplyError(full_error_text(exc))


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
            raise translate(exc, where=where.rstrip(":"), sent=False) from None
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


# -- the driver: runs I/O-free steps (luapipe.wire.routing) on held sessions ---------------
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
    if slot is None:
        return str(client.get_default_node().name)
    manager = client.nodes_manager
    if read_only and (client.read_from_replicas or client.load_balancing_strategy):
        node = manager.get_node_from_slot(
            slot,
            read_from_replicas=bool(client.read_from_replicas),
            load_balancing_strategy=client.load_balancing_strategy,
        )
    else:
        node = manager.get_node_from_slot(slot, read_from_replicas=False)
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
                raise ServerError(f"{cause}: this server is a cluster node; {CLUSTER_HINT}")
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
        held, self._held = self._held, {}
        exc = (LuapipeError, LuapipeError("steps failed"), None) if failed else (None, None, None)
        for cm, _ in held.values():
            if cm is not None:  # a session the caller holds stays with the caller
                cm.__exit__(*exc)


def drive(steps: Steps[T], client: Any) -> T:
    """Run ``steps`` on a sync client (plain or cluster); returns their result."""
    return Driver(client).run(steps)
