"""The thread auto-pipeline's link to one node: a sync connection of its own, driven by one
thread at a time (the caller that owns the link), outside the auto-pipeline's mutex.

A write goes out with ``socket.send`` counted, so a write that breaks halfway knows which
calls left whole (they may have run: :class:`~luapipe.errors.OutcomeUnknown`) and which did
not (the server waits for the rest of a call cut short, which never comes: sent again on a
new connection, then :class:`~luapipe.errors.ConnectionFailed`). Replies are read in order,
error replies as :class:`~luapipe.wire.replies.ReplyError` values.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from typing import Any

import redis.exceptions as rex

from luapipe.errors import ConnectionFailed, LuapipeError, translate
from luapipe.wire.autopipe.calls import Entry, NodeQueue
from luapipe.wire.autopipe.outcomes import lost_after_write
from luapipe.wire.autopipe.reading import REPLY_ERRORS, error_reply, not_enough_data, push_type
from luapipe.wire.replies import ReplyError, full_error_text
from luapipe.wire.sync import _stale

__all__ = ["ThreadLink", "lost_error", "reader", "send_counted"]


class ThreadLink:
    """One node's connection; ``owned`` while a thread writes or reads on it (that thread
    alone touches ``conn``). ``make(node)`` builds a new connection, not yet connected."""

    __slots__ = ("conn", "make", "node", "owned", "q", "refused")

    def __init__(self, q: NodeQueue, make: Callable[[str], Any]) -> None:
        self.q = q
        self.node = q.node
        self.make = make
        self.conn: Any = None
        self.owned = False
        #: writes refused in a row (nothing sent): the second one fails its callers
        self.refused = 0

    def connect(self) -> Any:
        """The connection, made anew if there is none or the server closed it while it
        sat idle (nothing was sent on it since)."""
        conn = self.conn
        if conn is not None:
            sock = getattr(conn, "_sock", None)
            if sock is not None:
                try:
                    stale = _stale(conn, sock)
                except (rex.RedisError, OSError):
                    stale = True
                if not stale:
                    return conn
            with contextlib.suppress(Exception):
                conn.disconnect()
        self.conn = None
        conn = self.make(self.node)
        once = getattr(conn, "connect_check_health", None)  # one attempt: nothing was sent
        if once is None:
            conn.connect()
        else:
            once(check_health=True, retry_socket_connect=False)
        self.conn = conn
        return conn

    def io(
        self, entries: list[Entry]
    ) -> tuple[list[list[Any]], list[Entry], list[Entry], BaseException | None, int]:
        """One write and its replies, outside the mutex: (replies of the entries answered,
        entries that may have run and lost their replies, entries provably not sent, the
        error, how many entries left whole)."""
        try:
            conn = self.connect()
        except (rex.RedisError, OSError, LuapipeError) as exc:
            self.refused = 1  # a new connection failed: nothing is sent again
            return [], [], entries, exc, 0
        sock = getattr(conn, "_sock", None)
        sent = len(entries)
        failure: BaseException | None = None
        if isinstance(sock, socket.socket):
            sent, failure = send_counted(sock, entries)
        else:  # an in-process fake: redis-py's own write (it runs them as it takes them)
            try:
                conn.send_packed_command(
                    [b"".join([e.packed for e in entries])], check_health=False
                )
            except Exception as err:
                failure = err  # how far it got is unknown: every one may have run
        for e in entries[:sent]:
            e.call.written += 1
        if failure is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()
            self.conn = None
            if sent:  # those may have run: their callers get OutcomeUnknown
                return [], entries[:sent], entries[sent:], failure, sent
            return [], [], entries, failure, 0
        replies: list[list[Any]] = []
        read = getattr(conn, "_luapipe_read", None)
        if read is None:
            read = conn._luapipe_read = reader(conn)
        try:
            for e in entries:
                replies.append([read() for _ in range(e.nwire)])
        except Exception as err:
            with contextlib.suppress(Exception):
                conn.disconnect()
            self.conn = None
            return replies, entries[len(replies) :], [], err, sent
        return replies, [], [], None, sent


def send_counted(sock: socket.socket, entries: list[Entry]) -> tuple[int, BaseException | None]:
    """Write the entries' bytes; (how many entries left whole, the error if any). An entry
    cut short never runs: the server waits for the rest of it, which never comes."""
    data = b"".join([e.packed for e in entries])
    view = memoryview(data)
    total = len(data)
    done = 0
    try:
        while done < total:
            done += sock.send(view[done:])
    except (TimeoutError, OSError) as exc:
        whole = 0
        end = 0
        for e in entries:
            end += len(e.packed)
            if end > done:
                break
            whole += 1
        return whole, exc
    return len(entries), None


def reader(conn: Any) -> Callable[[], Any]:
    """One reply per call, error replies as :class:`ReplyError` values."""
    parser: Any = getattr(conn, "_parser", None)
    hreader = getattr(parser, "_reader", None)
    real = isinstance(getattr(conn, "_sock", None), socket.socket)  # not an in-process fake
    if real and hreader is not None and hasattr(hreader, "gets"):
        more = not_enough_data()
        gets = hreader.gets
        fill = parser.read_from_socket
        push = push_type()

        def read_hiredis() -> Any:
            while True:
                reply = gets()
                while reply is more:
                    fill()
                    reply = gets()
                if push is not None and reply.__class__ is push:
                    continue
                if isinstance(reply, Exception):
                    return error_reply(reply)
                return reply

        return read_hiredis

    def read_generic() -> Any:
        try:
            return conn.read_response(disconnect_on_error=False)
        except REPLY_ERRORS as exc:
            return ReplyError(full_error_text(exc))

    return read_generic


def lost_error(node: str, exc: BaseException | None, *, sent: bool) -> Callable[[], LuapipeError]:
    def make() -> LuapipeError:
        if sent:
            return lost_after_write(node, exc)
        err = translate(exc, where=node, sent=False) if exc is not None else None
        if isinstance(err, ConnectionFailed):
            return err
        return ConnectionFailed(f"cannot reach {node} ({err}); nothing was sent")

    return make
