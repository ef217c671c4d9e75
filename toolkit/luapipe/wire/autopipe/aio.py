"""The asyncio flavour of the auto-pipeline: one connection per node, futures to wait on.

:class:`AsyncAutoPipeline` wraps a ``redis.asyncio`` client (Redis or RedisCluster). Calls
join the scheduler (:mod:`~luapipe.wire.autopipe.schedule`) when their coroutine starts;
each node's link writes everything queued as one write when it is idle (no write of its
own in flight), reads the replies in order and hands each to the scheduler, which resumes
that call's steps or resolves its future. What only this flavour does:

- **when to write**: at once if nothing else is ready to run on the event loop (one caller
  alone pays no extra loop turn), else after the tasks that are ready have run, so that
  everything they issue joins the same write (never a timer, unless ``max_delay`` is set);
- **reading**: with hiredis, every reply of a chunk is parsed in one go; with redis-py's
  pure-Python parsers (and fakeredis), one ``read_response`` per reply;
- **timeouts**: the client's ``socket_timeout`` bounds the wait for a write's replies (a
  watchdog, not one timer per reply); past it the connection is dropped and the write's
  callers get :class:`~luapipe.errors.OutcomeUnknown`;
- **waiting**: each call's future; a request the scheduler hands back (``Refresh``,
  ``Sleep``, ``SlotsOf``) is answered in the caller's own task, so a slot map re-read or a
  backoff never stalls the other callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio
import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncCoreCommands

from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    LuapipeError,
    OutcomeUnknown,
    ServerError,
    translate,
)
from luapipe.wire.aio import _socket_stale, node_for
from luapipe.wire.autopipe.commands import (
    command_recover,
    finisher,
    one_command,
    route_of,
)
from luapipe.wire.autopipe.packing import Packer
from luapipe.wire.autopipe.schedule import (
    Call,
    Entry,
    NodeQueue,
    Recover,
    Router,
    Scheduler,
)
from luapipe.wire.drivers import drive_async
from luapipe.wire.policy import CLUSTER_HINT, DEFAULT, RetryPolicy
from luapipe.wire.replies import Command, Redirect, ReplyError, full_error_text
from luapipe.wire.routing import (
    Refresh,
    Release,
    Sleep,
    SlotsOf,
    Steps,
    command_slot_error,
    node_order,
)

__all__ = ["AsyncAutoPipeline"]

_NET = (rex.ConnectionError, rex.TimeoutError, OSError)
_running_loop = asyncio.get_running_loop


class _Slow:
    """A request handed back to the caller's task."""

    __slots__ = ("request",)

    def __init__(self, request: Any) -> None:
        self.request = request


class _AioCall(Call):
    __slots__ = ("fut",)

    def __init__(self, fut: asyncio.Future[Any]) -> None:  # Call's fields, set inline
        self.seq = 0
        self.steps = None
        self.args = None
        self.finish = None
        self.recover = None
        self.cancelled = False
        self.written = 0
        self.answers = None
        self.missing = 0
        self.fut = fut

    def resolve(self, value: Any) -> None:
        if not self.fut.done():
            self.fut.set_result(value)

    def fail(self, exc: BaseException) -> None:
        if not self.fut.done():
            self.fut.set_exception(exc)

    def slow(self, request: Any) -> None:
        if not self.fut.done():
            self.fut.set_result(_Slow(request))


class _PlainRouter(Router):
    def __init__(self, name: str) -> None:
        self.name = name

    def locate(self, slot: int | None, read_only: bool) -> str:
        return self.name

    def nodes(self) -> list[str]:
        return [self.name]


class _ClusterRouter(Router):
    def __init__(self, client: RedisCluster) -> None:
        self.client = client

    def locate(self, slot: int | None, read_only: bool) -> str:
        return str(node_for(self.client, slot, read_only=read_only).name)

    def nodes(self) -> list[str]:
        found = [(n.name, n.server_type == "primary") for n in self.client.get_nodes()]
        return node_order(found)


def _address(kwargs: dict[str, Any]) -> str:
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


class _Link:
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

    def __init__(self, ap: AsyncAutoPipeline, q: NodeQueue) -> None:
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
            self.ap._loop.create_task(self._connect())
            return
        writer = getattr(conn, "_writer", None)
        transport = getattr(writer, "transport", None)
        if transport is None:  # not a stream transport (fakeredis): redis-py's own writes
            self.flushing = True
            self.ap._loop.create_task(self._flush_generic(conn))
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
        ap = self.ap
        old = self.conn
        self.conn = None
        if old is not None:
            self._drop(old)
        try:
            conn = await ap._make_connection(self.node)
            await _connect_once(conn)
        except (rex.RedisError, OSError, LuapipeError) as exc:
            self.flushing = False
            err = translate(exc, where=self.node, sent=False)
            entries = [e for e in self.q.entries if not e.call.cancelled]
            self.q.entries.clear()
            ap._sched.lost(entries, lambda: _copy(err))
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
        self.ap._loop.create_task(_disconnect(conn))

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
        push = _push_type()
        more = _not_enough_data()
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
                    if isinstance(reply, rex.InvalidResponse):
                        raise reply
                    reply = ReplyError(full_error_text(reply))
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
            except rex.ResponseError as exc:
                reply = ReplyError(full_error_text(exc))
            except rex.BusyLoadingError as exc:  # a reply (LOADING), not a lost connection
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
        err = translate(exc, where=self.node, sent=True)
        if not isinstance(err, OutcomeUnknown):
            err = OutcomeUnknown(
                f"connection to {self.node} failed after the request was sent ({err}); "
                "outcome unknown, it was not re-sent"
            )
        self.ap._sched.lost(entries, lambda: _copy(err))


def _cancelled(call: Call, exc: BaseException) -> None:
    """The caller gave up: the call leaves the queue if it was never written (it did not
    run); if it was, its reply is read and dropped. Nothing else is touched."""
    call.cancelled = True
    if call.written:
        exc.add_note(
            "luapipe: cancelled after the request was sent; the outcome is unknown "
            "and it was not re-sent"
        )


def _refused(node: str) -> Callable[[], LuapipeError]:
    def make() -> LuapipeError:
        return ConnectionFailed(
            f"connection to {node} refused the write twice (on a new connection too); "
            "nothing was sent"
        )

    return make


def _copy(err: LuapipeError) -> LuapipeError:
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


def _not_enough_data() -> Any:
    """What redis-py's hiredis reader returns while a reply is incomplete."""
    from redis._parsers import hiredis as parsers

    return getattr(parsers, "NOT_ENOUGH_DATA", False)


_PUSH: list[Any] = []


def _push_type() -> Any:
    if not _PUSH:
        try:
            import hiredis

            _PUSH.append(getattr(hiredis, "PushNotification", None))
        except ImportError:  # pragma: no cover - hiredis is what this path reads with
            _PUSH.append(None)
    return _PUSH[0]


class AsyncAutoPipeline(AsyncCoreCommands):
    """Concurrent calls from many tasks share round trips: see :mod:`luapipe.wire.autopipe`.

    Every redis-py command method (``await ap.get(k)``, ``ap.incr``...) goes through
    :meth:`execute_command`; ``reg.call(ap, ...)`` and ``op.run(ap, ...)`` take it as a
    client."""

    luapipe_autopipeline = True
    luapipe_async = True
    _event_dispatcher: Any = None  # redis-py's command mixins declare it

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        *,
        max_in_flight: int = 1024,
        max_batch: int | None = None,
        max_delay: float | None = None,
        policy: RetryPolicy = DEFAULT,
    ) -> None:
        if max_in_flight < 1:
            raise CallArgumentError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.client = client
        self.on_cluster = isinstance(client, RedisCluster)
        self.policy = policy
        self.max_in_flight = max_in_flight
        self.max_delay = max_delay
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._ready: Any = None
        self._links: dict[str, _Link] = {}
        self._active = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._refreshing: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[Any] | None = None
        self._packer: Packer = None  # type: ignore[assignment]  # set by _start
        self._routes: dict[Any, str] = {}
        #: writes (round trips) so far, on all nodes, and the commands they carried
        self.writes = 0
        self.commands = 0
        if self.on_cluster:
            router: Router = _ClusterRouter(client)  # type: ignore[arg-type]
        else:
            router = _PlainRouter(_address(client.connection_pool.connection_kwargs))  # type: ignore[union-attr]
        self._sched = Scheduler(router, self._kick, self._pack_many, max_batch)
        self._sched.callbacks = client.response_callbacks

    # -- the calls -----------------------------------------------------------------------
    async def call(
        self,
        args: tuple[Any, ...],
        *,
        slot: int | None = None,
        read_only: bool = False,
        finish: Callable[[Any], Any] | None = None,
        recover: Recover | None = None,
        hold: Any = None,
    ) -> Any:
        """One command for ``slot``'s node: its reply (``finish(reply)``) if a value, else
        ``recover(node, reply)``'s steps carry on (an error, a redirect, a lost write).
        ``hold``: what ``recover`` heals if the server refuses the command as not loaded
        (e.g. ``("function", name)``): nothing issued later joins its write."""
        if self._packer is None or self._loop is not _running_loop():
            await self._start()
        call = _AioCall(self._loop.create_future())
        if self._active >= self.max_in_flight or self._waiting:
            await self._admit()
        self._active += 1
        try:
            sched = self._sched
            sched.join(call)
            call.args = args
            call.finish = finish
            call.recover = recover
            packed = self._packer.one(args)
            try:
                node = sched.router.locate(slot, read_only)
            except LuapipeError as exc:
                sched.recover(call, None, exc)
            else:
                sched.send_one(call, node, packed, hold)
            try:
                out = await call.fut
            except asyncio.CancelledError as exc:
                _cancelled(call, exc)
                raise
            if out.__class__ is _Slow:  # a request for this task to answer: the steps go on
                return await self._wait(call, out)
            return out
        finally:
            self._active -= 1
            if self._waiting:
                self._leave(0)

    async def run(self, steps: Steps[Any]) -> Any:
        """Run any steps (a form, a pipeline's plans): their Sends share the writes."""
        if self._packer is None or self._loop is not _running_loop():
            await self._start()
        call = _AioCall(self._loop.create_future())
        if self._active >= self.max_in_flight or self._waiting:
            await self._admit()
        self._active += 1
        try:
            self._sched.join(call)
            self._sched.start(call, steps)
            return await self._wait(call)
        finally:
            self._leave()

    async def run_counted(self, steps: Steps[Any]) -> tuple[Any, int]:
        """:meth:`run`, and the round trips this call's steps took."""
        if self._packer is None or self._loop is not _running_loop():
            await self._start()
        call = _AioCall(self._loop.create_future())
        if self._active >= self.max_in_flight or self._waiting:
            await self._admit()
        self._active += 1
        try:
            self._sched.join(call)
            self._sched.start(call, steps)
            return await self._wait(call), call.written
        finally:
            self._leave()

    async def dedicated(self, steps: Steps[Any]) -> Any:
        """Run ``steps`` on connections of their own from the client's pool (what needs
        connection state or blocks): the ordinary asyncio driver."""
        return await drive_async(steps, self.client)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """A redis-py command through the auto-pipeline: what the client's method returns."""
        if self._packer is None or self._loop is not _running_loop():
            await self._start()
        head = args[0]
        route = self._routes.get(head) if not options else None
        if route is None:
            flag = self.client.command_flags.get(head) if self.on_cluster else None  # type: ignore[union-attr]
            route = route_of(args, options, flag)
            if not options:
                self._routes[head] = route
        slot = await self._slot(args) if self.on_cluster else None
        if route == "dedicated":
            cmd = Command(tuple(args), options, parse=True)
            return await self.dedicated(one_command(cmd, slot, self.policy))
        finish = finisher(self._sched.callbacks, args, options)
        recover = command_recover(args, slot, self.policy, finish, options)
        return await self.call(args, slot=slot, finish=finish, recover=recover)

    # -- waiting -------------------------------------------------------------------------
    async def _wait(self, call: _AioCall, out: Any = None) -> Any:
        """The call's outcome; requests handed back meanwhile are answered here."""
        try:
            while True:
                if out is None:
                    out = await call.fut
                if out.__class__ is not _Slow:
                    return out
                call.fut = self._loop.create_future()
                try:
                    answer = await self._answer(out.request)
                except LuapipeError as exc:
                    self._sched.advance(call, exc, True)
                else:
                    self._sched.advance(call, answer, False)
                out = None
        except asyncio.CancelledError as exc:
            _cancelled(call, exc)
            raise

    async def _answer(self, request: Any) -> Any:
        kind = request.__class__
        if kind is Refresh:
            return await self._refresh(request)
        if kind is Sleep:
            return await asyncio.sleep(request.seconds)
        if kind is SlotsOf:
            return [await self._slot(tuple(a)) for a in request.commands]
        if kind is Release:
            raise CallArgumentError(
                "these steps hold connections between round trips, which an auto-pipeline "
                "shares: run them on the client itself"
            )
        raise TypeError(f"not a request: {request!r}")

    async def _refresh(self, request: Refresh) -> None:
        cause = request.cause
        if not self.on_cluster:  # no slot map to re-read: the cause stands
            if isinstance(cause, Redirect):
                raise ServerError(f"{cause}: this server is a cluster node; {CLUSTER_HINT}")
            raise _copy(cause)
        if isinstance(cause, Redirect) and cause.ask is not None:
            return
        await asyncio.sleep(request.delay)
        task = self._refreshing
        if task is None or task.done():
            task = self._refreshing = self._loop.create_task(self._reinitialize())
        await asyncio.shield(task)

    async def _reinitialize(self) -> None:
        with contextlib.suppress(rex.RedisError, OSError):
            await self.client.nodes_manager.initialize()  # type: ignore[union-attr]

    async def _slot(self, args: tuple[Any, ...]) -> int | None:
        try:
            return int(await self.client._determine_slot(*args))  # type: ignore[union-attr]
        except rex.RedisClusterException as exc:
            return command_slot_error(args, exc)

    async def _admit(self) -> None:
        """Wait for a place (FIFO: calls keep their order while they wait)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiting.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # admitted, then cancelled: pass it on
                self._active -= 1
                self._leave(0)
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(fut)
            raise
        self._active -= 1  # counted by _leave on its behalf; the caller counts it again

    def _leave(self, done: int = 1) -> None:
        self._active -= done
        waiting = self._waiting
        while waiting and self._active < self.max_in_flight:
            fut = waiting.popleft()
            if not fut.done():
                self._active += 1
                fut.set_result(None)

    # -- links ---------------------------------------------------------------------------
    def _kick(self, q: NodeQueue) -> None:
        link = self._links.get(q.node)
        if link is None:
            link = self._links[q.node] = _Link(self, q)
        link.kick()

    def _pack_many(self, batch: Sequence[Sequence[Any]]) -> bytes:
        return self._packer.many(batch)

    async def _start(self) -> None:
        """Bind to the running loop and (a cluster) read the slot map, once: the first
        callers all wait for the same start, and go on in the order they came."""
        if self._closed:
            raise ConnectionFailed("the auto-pipeline was closed; nothing was sent")
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            raise CallArgumentError(
                "an auto-pipeline serves the event loop it first ran on; make one per loop"
            )
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._ready = getattr(self._loop, "_ready", None)
        client: Any = self.client
        if not self.on_cluster:
            pool = client.connection_pool
            self._packer = Packer(pool.connection_class(**pool.connection_kwargs))
            return
        starting = self._starting
        if starting is None:
            starting = self._starting = self._loop.create_task(client.initialize())
        try:
            await asyncio.shield(starting)
        except BaseException:
            if starting.done():  # it failed: the next call tries again
                self._starting = None
            raise
        if self._packer is None:
            node = client.get_default_node()
            self._packer = Packer(node.connection_class(**node.connection_kwargs))

    async def _make_connection(self, node: str) -> Any:
        client = self.client
        if not self.on_cluster:
            pool = client.connection_pool  # type: ignore[union-attr]
            return pool.connection_class(**pool.connection_kwargs)
        found = client.get_node(node_name=node)  # type: ignore[union-attr]
        if found is None:
            with contextlib.suppress(rex.RedisError, OSError):
                await client.nodes_manager.initialize()  # type: ignore[union-attr]
            found = client.get_node(node_name=node)  # type: ignore[union-attr]
        if found is None:
            raise ConnectionFailed(f"no node {node} in the cluster's slot map; nothing was sent")
        return found.connection_class(**found.connection_kwargs)

    # -- closing -------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the auto-pipeline's own connections (not the client's). Calls still
        queued get ConnectionFailed; those written get OutcomeUnknown."""
        self._closed = True
        self._packer = None  # type: ignore[assignment]  # the next call finds it closed
        for link in list(self._links.values()):
            queued = [e for e in link.q.entries if not e.call.cancelled]
            link.q.entries.clear()
            self._sched.lost(
                queued,
                lambda: ConnectionFailed("the auto-pipeline was closed; nothing was sent"),
            )
            conn = link.conn
            if conn is not None:
                link._lost(conn, rex.ConnectionError("the auto-pipeline was closed"))
        self._links.clear()

    async def __aenter__(self) -> AsyncAutoPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
