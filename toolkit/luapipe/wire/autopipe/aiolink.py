"""The asyncio auto-pipeline's link to one node: one write in flight, replies in order.

:class:`AioLink` owns one connection of its own (made like the client's, never taken from
its pool). It writes everything queued for its node as one write when it is idle, reads the
replies in order (with hiredis, every reply of a chunk at once; otherwise one
``read_response`` each) and hands each to the scheduler before the next write can start,
so a call's re-send goes out ahead of later calls. A write that provably never left goes
out on a new connection once; a lost connection gives the write's callers
:class:`~luapipe.errors.OutcomeUnknown`; the client's ``socket_timeout`` is a watchdog over
the write's replies (not a timer per reply).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import redis.asyncio
import redis.exceptions as rex

from luapipe.errors import ConnectionFailed, LuapipeError, translate
from luapipe.wire.aio import _socket_stale
from luapipe.wire.autopipe.calls import Entry, NodeQueue
from luapipe.wire.autopipe.outcomes import lost_after_write
from luapipe.wire.autopipe.reading import REPLY_ERRORS, error_reply, not_enough_data, push_type
from luapipe.wire.replies import ReplyError, full_error_text

__all__ = ["AioLink", "copy_error"]

#: the links' tasks that are running (see :meth:`AioLink._spawn`)
_RUNNING: set[asyncio.Task[None]] = set()


class AioLink:
    """One node's connection: one write in flight at a time, replies read in order."""

    __slots__ = (
        "ap",
        "conn",
        "delayed",
        "entries",
        "expect",
        "flushing",
        "idx",
        "inflight",
        "node",
        "partial",
        "progress",
        "q",
        "reader",
        "refused",
        "timed_out",
        "watchdog",
    )

    def __init__(self, ap: Any, q: NodeQueue) -> None:
        self.ap = ap
        self.q = q
        self.node = q.node
        self.conn: Any = None
        self.reader: asyncio.Task[None] | None = None
        #: the write in flight: its entries, the current one, its replies so far
        self.inflight = False
        self.entries: list[Entry] = []
        self.idx = 0
        self.expect = 0
        self.partial: list[Any] = []
        #: a write is scheduled or a connection is being made
        self.flushing = False
        self.delayed = False
        self.watchdog: asyncio.TimerHandle | None = None
        self.progress = 0.0
        self.timed_out = False
        #: writes the socket refused in a row (nothing sent): the second one fails
        self.refused = 0

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in a task kept until it ends: the loop holds tasks only weakly, and
        one waiting for a handshake's reply without a timer is garbage to the collector
        (it destroyed a connection being made, and its callers waited for the next call)."""
        task = self.ap._loop.create_task(coro)
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)

    # -- writing -------------------------------------------------------------------------
    def kick(self) -> None:
        if self.inflight or self.flushing:
            return
        ap = self.ap
        ready = ap._ready
        if ready is not None and not ready and ap.max_delay is None:
            self.flush()
            return
        self.flushing = True
        ap._loop.call_soon(self._scheduled)

    def _scheduled(self) -> None:
        self.flushing = False
        ap = self.ap
        if ap.max_delay is not None and not self.delayed and len(self.q) > 1:
            self.delayed = True  # several callers wait: let more join, up to max_delay
            self.flushing = True
            ap._loop.call_later(ap.max_delay, self._scheduled)
            return
        self.delayed = False
        self.flush()

    def flush(self) -> None:
        if self.inflight or self.flushing or self.ap._closed or not self.q.entries:
            return
        conn = self.conn
        if conn is None or _socket_stale(conn) or not conn.is_connected:
            self.flushing = True  # (re)connect first: nothing has been written
            self._spawn(self._connect())
            return
        writer = getattr(conn, "_writer", None)
        transport = getattr(writer, "transport", None)
        if transport is None:  # not a stream transport (fakeredis): redis-py's own writes
            self.flushing = True
            self._spawn(self._flush_generic(conn))
            return
        entries = self.ap._sched.take(self.q)
        if not entries:
            return
        if transport.is_closing():  # nothing written: a new connection, then this write
            self.ap._sched.unwritten(self.q, entries)
            self._drop(conn)
            self.flush()
            return
        transport.write(
            entries[0].packed if len(entries) == 1 else b"".join([e.packed for e in entries])
        )
        if transport.is_closing():
            # The socket refused the write (send() raised): none of these bytes left, so
            # none of these calls ran; they go out on a new connection (once).
            self._drop(conn)
            if self.refused:  # the new connection refused it too: ConnectionFailed
                self.refused = 0
                self.ap._sched.lost(entries, _refused(self.node))
                return
            self.refused += 1
            self.ap._sched.unwritten(self.q, entries)
            self.flush()
            return
        self.refused = 0
        self._sent(entries, conn)

    def _sent(self, entries: list[Entry], conn: Any) -> None:
        ap = self.ap
        ap.writes += 1
        n = 0
        for e in entries:
            e.call.written += 1
            n += e.nwire
        ap.commands += n
        self.entries = entries
        self.inflight = True
        self.idx = 0
        self.expect = entries[0].nwire
        timeout = conn.socket_timeout
        if timeout:
            loop = self.ap._loop
            self.progress = loop.time()
            if self.watchdog is None:
                self.watchdog = loop.call_at(self.progress + timeout, self._check)
        if self.reader is None:
            self.reader = self.ap._loop.create_task(self._read(conn))

    async def _flush_generic(self, conn: Any) -> None:
        self.flushing = False
        entries = self.ap._sched.take(self.q)
        if not entries:
            return
        data = b"".join([e.packed for e in entries])
        self.inflight = True  # no other write meanwhile
        try:
            await conn.send_packed_command([data], check_health=False)
        except Exception as exc:
            self.inflight = False
            self._drop(conn)
            self._lost_written(entries, exc)
            return
        self.inflight = False
        self._sent(entries, conn)

    async def _connect(self) -> None:
        """A new connection for what is queued now. If it fails, those calls get
        ConnectionFailed (nothing was sent); the calls that joined while it was under way
        never saw it fail: they get an attempt of their own, one for all of them (so the
        attempts follow the waves of callers, never one per call)."""
        ap = self.ap
        old = self.conn
        self.conn = None
        if old is not None:
            self._drop(old)
        attempt = set(self.q.entries)  # the calls this attempt is made for
        try:
            conn = await ap._make_connection(self.node)
            await _connect_once(conn)
        except (rex.RedisError, OSError, LuapipeError) as exc:
            self.flushing = False
            err = translate(exc, where=self.node, sent=False)
            queued = self.q.entries
            failed = [e for e in queued if e in attempt and not e.call.cancelled]
            queued[:] = [e for e in queued if e not in attempt]
            ap._sched.lost(failed, lambda: copy_error(err))
            if queued and not ap._closed:  # joined meanwhile: a fresh attempt
                self.kick()
            return
        except BaseException:
            self.flushing = False
            raise
        self.flushing = False
        if ap._closed:
            await conn.disconnect(nowait=True)
            return
        self.conn = conn
        self.flush()

    def _drop(self, conn: Any) -> None:
        """Forget ``conn`` (closing it); its reader ends on its own."""
        if self.conn is conn:
            self.conn = None
        reader = self.reader
        self.reader = None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        writer = getattr(conn, "_writer", None)
        transport = getattr(writer, "transport", None)
        if transport is not None:
            transport.abort()
        self._spawn(_disconnect(conn))

    # -- reading -------------------------------------------------------------------------
    async def _read(self, conn: Any) -> None:
        try:
            parser = getattr(conn, "_parser", None)
            hreader = getattr(parser, "_reader", None)
            stream = getattr(parser, "_stream", None)
            real = getattr(getattr(conn, "_writer", None), "transport", None) is not None
            if real and hreader is not None and stream is not None and hasattr(hreader, "gets"):
                await self._read_hiredis(conn, hreader, stream)
            else:
                await self._read_generic(conn)
        except asyncio.CancelledError:
            if self.conn is conn and not self.ap._closed:  # not ours to end: lost
                self._lost(conn, OSError("the reader was cancelled"))
            raise
        except BaseException as exc:
            self._lost(conn, exc)

    async def _read_hiredis(self, conn: Any, hreader: Any, stream: Any) -> None:
        gets = hreader.gets
        feed = hreader.feed
        read = stream.read
        loop = self.ap._loop
        push = push_type()
        more = not_enough_data()
        while True:
            data = await read(65536)
            if not data:
                raise rex.ConnectionError("the server closed the connection")
            feed(data)
            self.progress = loop.time()
            while True:
                reply = gets()
                if reply is more:
                    break
                if push is not None and reply.__class__ is push:
                    continue
                if isinstance(reply, Exception):
                    reply = error_reply(reply)
                self._reply(conn, reply)

    async def _read_generic(self, conn: Any) -> None:
        read = conn.read_response
        kwargs: dict[str, Any] = {}
        if type(conn).read_response is redis.asyncio.connection.Connection.read_response:
            kwargs = {"timeout": math.inf, "disconnect_on_error": False}
        loop = self.ap._loop
        while True:
            try:
                reply = await read(**kwargs)
            except REPLY_ERRORS as exc:  # an error reply (LOADING too), not a lost connection
                reply = ReplyError(full_error_text(exc))
            self.progress = loop.time()
            self._reply(conn, reply)

    def _reply(self, conn: Any, reply: Any) -> None:
        if not self.inflight or conn is not self.conn:
            raise rex.InvalidResponse("a reply nobody asked for: the connection is out of step")
        entries = self.entries
        entry = entries[self.idx]
        sched = self.ap._sched
        # The reply is handed out before the next write can start: a call's re-send
        # (queued while its reply is handled) must go out ahead of later calls.
        if self.expect == 1 and entry.nwire == 1 and entry.keep is None:
            sched.answered_one(entry, reply)
            self._next()
            return
        self.partial.append(reply)
        self.expect -= 1
        if self.expect:
            return
        replies = self.partial
        self.partial = []
        if entry.keep is not None:
            replies = [replies[i] for i in entry.keep]
        sched.answered(entry, replies)
        self._next()

    def _next(self) -> None:
        if not self.inflight:  # lost meanwhile (a caller's code closed the link)
            return
        self.idx += 1
        if self.idx < len(self.entries):
            self.expect = self.entries[self.idx].nwire
            return
        self.inflight = False
        self.entries = []
        if self.q.entries:
            self.kick()

    def _check(self) -> None:
        self.watchdog = None
        conn = self.conn
        if not self.inflight or conn is None:
            return
        timeout = conn.socket_timeout
        now = self.ap._loop.time()
        if now - self.progress >= timeout:
            self.timed_out = True
            self._lost(conn, rex.TimeoutError(f"no reply within {timeout} s"))
            return
        self.watchdog = self.ap._loop.call_at(self.progress + timeout, self._check)

    def _lost(self, conn: Any, exc: BaseException) -> None:
        """The connection failed: whatever was written may have run (OutcomeUnknown, never
        re-sent); what waits in the queue goes out on a new connection."""
        if conn is not self.conn and self.conn is not None:
            return
        entries = self.entries[self.idx :] if self.inflight else []
        self.entries = []
        self.inflight = False
        self.partial = []
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        self._drop(conn)
        self._lost_written(entries, exc)
        if self.q.entries and not self.ap._closed:
            self.kick()

    def _lost_written(self, entries: Sequence[Entry], exc: BaseException) -> None:
        if not entries:
            return
        err = lost_after_write(self.node, exc)
        self.ap._sched.lost(entries, lambda: copy_error(err))


def _refused(node: str) -> Callable[[], LuapipeError]:
    def make() -> LuapipeError:
        return ConnectionFailed(
            f"connection to {node} refused the write twice (on a new connection too); "
            "nothing was sent"
        )

    return make


def copy_error(err: LuapipeError) -> LuapipeError:
    """A fresh instance per caller (a raised exception carries its own traceback)."""
    new = type(err).__new__(type(err), *err.args)
    new.__dict__.update(err.__dict__)
    Exception.__init__(new, *err.args)
    new.__cause__ = err.__cause__
    return new


async def _connect_once(conn: Any) -> None:
    """Connect and handshake once: redis-py's own retries (with backoff) would keep every
    queued caller waiting on a server that is down; nothing has been sent either way."""
    once = getattr(conn, "connect_check_health", None)
    if once is None:
        await conn.connect()
        return
    await once(check_health=True, retry_socket_connect=False)


async def _disconnect(conn: Any) -> None:
    with contextlib.suppress(Exception):
        await conn.disconnect(nowait=True)
