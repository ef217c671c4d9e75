"""The asyncio flavour of the auto-pipeline: futures to wait on, one link per node.

:class:`AsyncAutoPipeline` wraps a ``redis.asyncio`` client (Redis or RedisCluster). Calls
join the scheduler (:mod:`~luapipe.wire.autopipe.schedule`) when their coroutine starts;
each node's :class:`~luapipe.wire.autopipe.aiolink.AioLink` writes whatever is queued there
when it is idle and hands the replies to the scheduler, which resumes each call's steps or
resolves its future. What only this flavour does:

- **when to write**: at once if nothing else is ready to run on the event loop (one caller
  alone pays no extra loop turn), else after the tasks that are ready have run, so that
  everything they issue joins the same write (never a timer, unless ``max_delay`` is set);
- **waiting**: each call's future; a request the scheduler hands back (``Refresh``,
  ``Sleep``, ``SlotsOf``) is answered in the caller's own task, so a slot map re-read or a
  backoff never stalls the other callers; a cancelled caller's call leaves the queue if it
  was never written, or its reply is read and dropped
  (:mod:`~luapipe.wire.autopipe.aiowait`, :class:`AsyncAutoPipeline`'s base
  :class:`~luapipe.wire.autopipe.aiowait.AsyncWaiting`);
- **the bound**: at most ``max_in_flight`` calls; the next ones wait their turn in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio
import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncCoreCommands

from luapipe.errors import CallArgumentError, ConnectionFailed, translate
from luapipe.wire.aio import node_for
from luapipe.wire.autopipe.aiolink import AioLink
from luapipe.wire.autopipe.aiowait import AsyncWaiting, _AioCall, _cancelled, _Slow
from luapipe.wire.autopipe.calls import NodeQueue, Recover
from luapipe.wire.autopipe.commands import (
    command_recover,
    finisher,
    looked_up,
    one_command,
    route_for,
    sized_command,
)
from luapipe.wire.autopipe.keyspecs import LOOKUP
from luapipe.wire.autopipe.outcomes import closed as _closed
from luapipe.wire.autopipe.packing import Packer
from luapipe.wire.autopipe.routers import KeyRouter, PlainRouter, Router, address
from luapipe.wire.autopipe.schedule import Scheduler
from luapipe.wire.drivers import drive_async
from luapipe.wire.limits import BulkLimits, might_exceed
from luapipe.wire.policy import DEFAULT, RetryPolicy
from luapipe.wire.replies import Command
from luapipe.wire.routing import Steps, command_slot_error
from luapipe.wire.values import check_values

__all__ = ["AsyncAutoPipeline"]

_running_loop = asyncio.get_running_loop


class _ClusterRouter(KeyRouter):
    def locate(self, slot: int | None, read_only: bool) -> str:
        return str(node_for(self.client, slot, read_only=read_only).name)

    def own_slot(self, args: Sequence[Any]) -> int | None:
        # redis-py's rule for a command it knows and need not ask about: no I/O, so its
        # coroutine ends at the first step
        running = self.client._determine_slot(*args)
        try:
            running.send(None)
        except StopIteration as done:
            return int(done.value)
        except rex.RedisClusterException as exc:
            return command_slot_error(args, exc)
        except rex.DataError as exc:
            raise translate(exc) from exc
        running.close()
        raise RuntimeError(f"redis-py waited for I/O to find the keys of {args[0]}")


# redis-py's own async command mixins disagree on command_info's signature; mypy only
# notices once a class has a second base (as in scripts/pipeline.py).
class AsyncAutoPipeline(AsyncWaiting, AsyncCoreCommands):  # type: ignore[misc]
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
        self._links: dict[str, AioLink] = {}
        self._active = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._refreshing: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[Any] | None = None
        self._packer: Packer = None  # type: ignore[assignment]  # set by _start
        self._routes: dict[Any, str] = {}
        #: each node's proto-max-bulk-len, once a big value made it ask
        self.limits = BulkLimits()
        #: writes (round trips) so far, on all nodes, and the commands they carried
        self.writes = 0
        self.commands = 0
        if self.on_cluster:
            router: Router = _ClusterRouter(client)
        else:
            router = PlainRouter(address(client.connection_pool.connection_kwargs))  # type: ignore[union-attr]
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
            if self._closed:  # closed while this call waited for a place
                raise _closed()
            packed = self._packer.one(args)
            self._sched.submit(
                call,
                args,
                packed,
                slot=slot,
                read_only=read_only,
                finish=finish,
                recover=recover,
                hold=hold,
            )
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
            if self._closed:
                raise _closed()
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
            if self._closed:
                raise _closed()
            self._sched.join(call)
            self._sched.start(call, steps)
            return await self._wait(call), call.written
        finally:
            self._leave()

    def get_encoder(self) -> Any:
        """The client's encoder: redis-py's command methods ask for it (``acl_setuser``,
        ``register_script``)."""
        return self.client.get_encoder()

    def get_connection_kwargs(self) -> dict[str, Any]:
        """The client's connection settings: redis-py's ``slowlog_get`` reads them."""
        kwargs: dict[str, Any] = self.client.get_connection_kwargs()
        return kwargs

    async def dedicated(self, steps: Steps[Any]) -> Any:
        """Run ``steps`` on connections of their own from the client's pool (what needs
        connection state or blocks): the ordinary asyncio driver."""
        return await drive_async(steps, self.client)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """A redis-py command through the auto-pipeline: what the client's method returns."""
        check_values(f"command {args[0]}", "args", args[1:])  # not at pack time, unnamed
        if self._packer is None or self._loop is not _running_loop():
            await self._start()
        route = route_for(self._routes, self.client if self.on_cluster else None, args, options)
        slot: Any = self._sched.router.slot(args) if self.on_cluster else None  # type: ignore[attr-defined]
        if slot is LOOKUP:
            if route == "dedicated":  # a connection of its own: no place to keep
                slot = await self._slot(args)
            else:  # the server finds its keys while it holds its place
                finish = finisher(self._sched.callbacks, args, options)
                return await self.run(looked_up(args, options, finish, self.policy, self.limits))
        if route == "dedicated":
            cmd = Command(tuple(args), options, parse=True)
            return await self.dedicated(one_command(cmd, slot, self.policy))
        if might_exceed(args):  # a value of 1 MB or more: its size is checked first
            cmd = Command(tuple(args), options, parse=True)
            return await self.run(sized_command(cmd, slot, self.policy, self.limits))
        finish = finisher(self._sched.callbacks, args, options)
        recover = command_recover(args, slot, self.policy, finish, options)
        return await self.call(args, slot=slot, finish=finish, recover=recover)

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
            link = self._links[q.node] = AioLink(self, q)
        link.kick()

    def _pack_many(self, batch: Sequence[Sequence[Any]]) -> bytes:
        packer = self._packer
        if packer is None:  # closed: a call's next round trip fails, it is not queued
            raise _closed()
        return packer.many(batch)

    async def _start(self) -> None:
        """Bind to the running loop and (a cluster) read the slot map, once: the first
        callers all wait for the same start, and go on in the order they came."""
        if self._closed:
            raise _closed()
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
        queued, waiting for a place or between round trips get ConnectionFailed; those
        written get OutcomeUnknown."""
        self._closed = True
        self._packer = None  # type: ignore[assignment]  # the next call finds it closed
        for link in list(self._links.values()):
            queued = [e for e in link.q.entries if not e.call.cancelled]
            link.q.entries.clear()
            self._sched.lost(
                queued,
                _closed,
            )
            conn = link.conn
            if conn is not None:
                link._lost(conn, rex.ConnectionError("the auto-pipeline was closed"))
        self._links.clear()

    async def __aenter__(self) -> AsyncAutoPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
